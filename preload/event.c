/* SPDX-License-Identifier: MIT */
/* The hooks' one path into the trace: guard, capture, copy into the thread's buffer. */
#include <string.h>

#include "hooks.h"
#include "internal.h"

__thread struct vrt_tls vrt_tls VRT_TLS;

/* Tokens (vrt_enter): the busy state to restore, plus one so that 0 means "do not record". */
#define TOKEN_NESTED 0x100

/* A signal handler's hook (enum vrt_busy): busy is what it interrupted, kept in the token. */
static int enter_nested(int busy, int state)
{
	vrt_tls.nested++;
	vrt_tls.busy = state | (busy & (VRT_BUSY_EMITTING | VRT_BUSY_DEFERRING) ? VRT_BUSY_DEFERRING : 0);
	return (busy + 1) | TOKEN_NESTED;
}

static int enter(int state)
{
	int st = atomic_load_explicit(&vrt_state, memory_order_acquire);
	/* Before our constructor ran: start now, unless this thread is inside vramtrace (the
	 * constructor itself, or its collector: starting from there would wait on itself). */
	if (VRT_UNLIKELY(st != VRT_STATE_READY) && (st != VRT_STATE_UNINIT || vrt_tls.busy || !vrt_start_early()))
		return 0;
	int busy = vrt_tls.busy;
	if (VRT_LIKELY(!busy)) {
		vrt_tls.busy = state;
		return 1;
	}
	if ((busy & VRT_BUSY_STATE) == VRT_BUSY_SELF)
		return 0;
	if ((busy & VRT_BUSY_EMITTING) || state == VRT_BUSY_RUNTIME)
		return enter_nested(busy, state);
	return 0; /* a driver call made by the real call under way */
}

/* Kept out of line so the compiler cannot hoist the TLS access above the state check. */
__attribute__((noinline)) int vrt_enter(void) { return enter(VRT_BUSY_HOOK); }

__attribute__((noinline)) int vrt_enter_runtime(void) { return enter(VRT_BUSY_RUNTIME); }

__attribute__((noinline)) void vrt_leave(int token)
{
	if (VRT_UNLIKELY(token & TOKEN_NESTED))
		vrt_tls.nested--;
	vrt_tls.busy = (token & 0xff) - 1;
}

static size_t raw_length(int n_native, int n_python, size_t label)
{
	size_t len = sizeof(struct vrt_raw) + (size_t)n_native * 8 + (size_t)n_python * 4 + label;
	return (len + 7) & ~(size_t)7;
}

static void fill_header(struct vrt_raw *r, const struct vrt_event *ev, size_t len)
{
	r->len = (uint16_t)len;
	r->op = ev->op;
	r->kind = ev->kind;
	r->api = ev->api;
	r->device = ev->device;
	r->result = ev->result;
	r->flags = 0;
	r->n_native = 0;
	r->n_python = 0;
	r->stack_id = 0;
	r->stack_hash = 0;
	r->ts_ns = ev->ts_ns ? ev->ts_ns : vrt_now_ns();
	r->addr = ev->addr;
	r->size = ev->size;
	r->aux = ev->aux;
	r->aux2 = ev->aux2;
	r->stream = ev->stream;
}

/* Reports events this thread dropped while its buffer was full, before the next one. */
static void flush_lost(struct vrt_tbuf *b)
{
	uint32_t dropped = b->lost;
	struct vrt_raw *r = vrt_tbuf_reserve(b, sizeof(struct vrt_raw));
	if (!r) {
		b->lost = dropped; /* still full: the report waits; failing to make it loses no event */
		return;
	}
	struct vrt_event lost = { .op = VRT_OP_LOST, .size = b->lost };
	fill_header(r, &lost, sizeof(struct vrt_raw));
	b->lost = 0;
	vrt_tbuf_publish(b, r);
}

/* Returns the time the event was stamped with (0: it could not be published, and is counted lost). */
static uint64_t emit_into(struct vrt_tbuf *b, const struct vrt_event *ev, bool with_stack)
{
	if (VRT_UNLIKELY(atomic_load_explicit(&vrt_tls.missed, memory_order_relaxed)))
		b->lost += atomic_exchange_explicit(&vrt_tls.missed, 0, memory_order_relaxed);
	if (VRT_UNLIKELY(b->lost))
		flush_lost(b);
	struct vrt_capture cap;
	cap.n_native = cap.native_first = cap.n_python = cap.n_pyraw = 0;
	cap.hash = 0;
	uint32_t stack_id = 0;
	bool stacks = vrt_cfg.stack_depth || vrt_cfg.python;
	if (with_stack && stacks && atomic_load_explicit(&vrt_mode, memory_order_relaxed) == VRT_MODE_FULL) {
		vrt_stack_capture(&cap);
		if (cap.n_native || cap.n_pyraw)
			stack_id = vrt_stack_cache_lookup(b, cap.hash);
		if (!stack_id && !vrt_stack_intern_python(&cap))
			cap.hash = 0; /* published without its Python frames: not under the stack's name */
	}
	bool frames = (cap.n_native || cap.n_python) && !stack_id;
	size_t len = frames ? raw_length(cap.n_native, cap.n_python, 0) : sizeof(struct vrt_raw);
	struct vrt_raw *r = vrt_tbuf_reserve(b, len);
	if (VRT_UNLIKELY(!r))
		return 0;
	fill_header(r, ev, len);
	r->stack_id = stack_id;
	r->stack_hash = cap.hash;
	if (frames) {
		uint8_t *p = (uint8_t *)(r + 1);
		r->flags = VRT_RAW_HAS_FRAMES;
		r->n_native = (uint8_t)cap.n_native;
		r->n_python = (uint8_t)cap.n_python;
		memcpy(p, cap.native + cap.native_first, (size_t)cap.n_native * 8);
		memcpy(p + (size_t)cap.n_native * 8, cap.python, (size_t)cap.n_python * 4);
	}
	uint64_t ts = r->ts_ns;
	vrt_tbuf_publish(b, r);
	return ts;
}

/*
 * The first side buffer after the thread's buffer b that no level of this thread is writing,
 * marked: a signal handler's level while an interrupted one may be mid-write (enum vrt_busy).
 * NULL (counted lost by the caller) only without memory for a new one.
 */
static struct vrt_tbuf *side_begin(struct vrt_tbuf *b)
{
	for (;;) {
		struct vrt_tbuf *s = atomic_load_explicit(&b->side, memory_order_acquire);
		if (!s && !(s = vrt_tbuf_add_side(b)))
			return NULL;
		if (!s->writing) {
			s->writing = true;
			atomic_signal_fence(memory_order_seq_cst); /* marked before anything is reserved */
			return s;
		}
		b = s;
	}
}

static void side_end(struct vrt_tbuf *s)
{
	atomic_signal_fence(memory_order_seq_cst); /* published before the mark goes */
	s->writing = false;
}

static uint64_t emit_side(const struct vrt_event *ev)
{
	struct vrt_tbuf *b = vrt_tbuf_self(), *s;
	if (VRT_UNLIKELY(!b))
		return 0; /* counted (vrt_tbuf_unbuffered) */
	if (VRT_UNLIKELY(!(s = side_begin(b)))) {
		atomic_fetch_add_explicit(&vrt_tls.missed, 1, memory_order_relaxed);
		return 0;
	}
	uint64_t ts = emit_into(s, ev, false);
	side_end(s);
	return ts;
}

int vrt_emitting_begin(void)
{
	int busy = vrt_tls.busy;
	vrt_tls.busy = busy | VRT_BUSY_EMITTING;
	atomic_signal_fence(memory_order_seq_cst); /* set before anything it guards is touched */
	return busy;
}

void vrt_emitting_end(int busy)
{
	atomic_signal_fence(memory_order_seq_cst); /* what it guards is done before it is cleared */
	vrt_tls.busy = busy;
}

uint64_t vrt_emit(const struct vrt_event *ev, bool with_stack)
{
	if (VRT_UNLIKELY(vrt_tls.busy & VRT_BUSY_DEFERRING))
		return emit_side(ev);
	int busy = vrt_emitting_begin();
	struct vrt_tbuf *b = vrt_tbuf_self();
	uint64_t ts = VRT_LIKELY(b) ? emit_into(b, ev, with_stack) : 0;
	vrt_emitting_end(busy);
	return ts;
}

static void emit_label(struct vrt_tbuf *b, uint8_t op, const char *label, bool with_stack)
{
	if (!b || !label)
		return;
	size_t n = strnlen(label, 255);
	with_stack = with_stack && op == VRT_OP_PHASE_ENTER && atomic_load(&vrt_mode) == VRT_MODE_FULL;
	struct vrt_capture cap;
	cap.n_native = cap.native_first = cap.n_python = cap.n_pyraw = 0;
	cap.hash = 0;
	uint32_t stack_id = 0;
	if (with_stack) {
		/* Python frames only: the native part of a phase entry is the interpreter. */
		cap.n_python = vrt_python_capture(cap.python, vrt_cfg.python_depth);
		cap.hash = vrt_hash_frames(NULL, 0, cap.python, cap.n_python);
		stack_id = vrt_stack_cache_lookup(b, cap.hash);
	}
	int n_python = stack_id ? 0 : cap.n_python;
	size_t len = raw_length(0, n_python, n + 1);
	struct vrt_raw *r = vrt_tbuf_reserve(b, len);
	if (!r)
		return;
	struct vrt_event ev = { .op = op, .api = VRT_API_USER_API };
	fill_header(r, &ev, len);
	r->flags = VRT_RAW_LABEL | (n_python ? VRT_RAW_HAS_FRAMES : 0);
	r->n_python = (uint8_t)n_python;
	r->stack_id = stack_id;
	r->stack_hash = cap.hash;
	uint8_t *p = (uint8_t *)(r + 1);
	memcpy(p, cap.python, (size_t)n_python * 4);
	memcpy(p + (size_t)n_python * 4, label, n);
	p[(size_t)n_python * 4 + n] = 0;
	vrt_tbuf_publish(b, r);
}

void vrt_emit_label(uint8_t op, const char *label)
{
	if (VRT_UNLIKELY(vrt_tls.busy & VRT_BUSY_DEFERRING)) {
		struct vrt_tbuf *b = vrt_tbuf_self(), *s;
		if (!b)
			return;
		if (!(s = side_begin(b))) {
			atomic_fetch_add_explicit(&vrt_tls.missed, 1, memory_order_relaxed);
			return;
		}
		emit_label(s, op, label, false);
		side_end(s);
		return;
	}
	int busy = vrt_emitting_begin();
	emit_label(vrt_tbuf_self(), op, label, true);
	vrt_emitting_end(busy);
}

/* A record with a text payload and no stack (retention findings): len bytes of text, cut to
 * VRT_TEXT_MAX, then a NUL. */
static void emit_text(struct vrt_tbuf *b, const struct vrt_event *ev, const char *text, size_t len)
{
	if (!b)
		return;
	len = len < VRT_TEXT_MAX ? len : VRT_TEXT_MAX;
	size_t raw_len = raw_length(0, 0, len + 1);
	struct vrt_raw *r = vrt_tbuf_reserve(b, raw_len);
	if (!r)
		return;
	fill_header(r, ev, raw_len);
	r->flags = VRT_RAW_LABEL;
	uint8_t *p = (uint8_t *)(r + 1);
	memcpy(p, text, len);
	p[len] = 0;
	vrt_tbuf_publish(b, r);
}

void vrt_emit_text(const struct vrt_event *ev, const char *text, size_t len)
{
	if (!text)
		text = "", len = 0;
	if (VRT_UNLIKELY(vrt_tls.busy & VRT_BUSY_DEFERRING)) {
		struct vrt_tbuf *b = vrt_tbuf_self(), *s;
		if (!b)
			return;
		if (!(s = side_begin(b))) {
			atomic_fetch_add_explicit(&vrt_tls.missed, 1, memory_order_relaxed);
			return;
		}
		emit_text(s, ev, text, len);
		side_end(s);
		return;
	}
	int busy = vrt_emitting_begin();
	emit_text(vrt_tbuf_self(), ev, text, len);
	vrt_emitting_end(busy);
}

/* ---- helpers for the hook bodies -------------------------------------------------------- */

static void device_memory_info(uint64_t *free_bytes, uint64_t *total_bytes)
{
	/* Looked up once; hooks on several threads may race to do it (atomic: the same answer). */
	static _Atomic(void *) mem_get_info_fn;
	void *fn = atomic_load_explicit(&mem_get_info_fn, memory_order_relaxed);
	if (!fn) {
		fn = vrt_driver_fn("cuMemGetInfo", 3020);
		atomic_store_explicit(&mem_get_info_fn, fn, memory_order_relaxed);
	}
	int (*mem_get_info)(size_t *, size_t *) = (int (*)(size_t *, size_t *))fn;
	size_t f = 0, t = 0;
	if (mem_get_info && mem_get_info(&f, &t) != 0)
		f = t = 0;
	*free_bytes = f;
	*total_bytes = t;
}

void vrt_record_alloc(uint16_t api, int result, bool out_of_memory, uint8_t op, uint8_t kind, int device,
		      uint64_t addr, uint64_t size, uint64_t aux, uint64_t stream)
{
	struct vrt_event ev = { .op = op, .kind = kind, .api = api, .device = (int16_t)device, .addr = addr,
				.size = size, .aux = aux, .stream = stream };
	if (result == 0) {
		uint64_t ts = vrt_emit(&ev, true);
		/* PyTorch's allocator makes its first segment right after its init: attach then. */
		if (vrt_cfg.torch && kind == VRT_KIND_DEVICE)
			vrt_torch_maybe_attach(ts ? ts : vrt_now_ns());
		return;
	}
	ev.op = VRT_OP_FAILED;
	ev.result = result;
	ev.addr = 0;
	vrt_emit(&ev, true);
	if (!out_of_memory)
		return;
	struct vrt_event oom = ev;
	oom.op = VRT_OP_OOM;
	device_memory_info(&oom.aux, &oom.aux2);
	vrt_emit(&oom, true);
	vrt_collector_wake();
}

void vrt_record_release(uint8_t op, uint16_t api, uint64_t ts_before, uint64_t addr, uint64_t size, uint64_t aux)
{
	struct vrt_event ev = { .op = op, .api = api, .device = -1, .ts_ns = ts_before, .addr = addr, .size = size,
				.stream = aux };
	vrt_emit(&ev, vrt_cfg.free_stacks);
}

void vrt_record_capture(uint8_t op, uint16_t api, int device, uint64_t stream, int result)
{
	struct vrt_event ev = { .op = op, .api = api, .device = (int16_t)device, .stream = stream, .result = result };
	vrt_emit(&ev, op == VRT_OP_CAPTURE_BEGIN); /* where the capture began names the graph */
}
