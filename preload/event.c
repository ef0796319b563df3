/* SPDX-License-Identifier: MIT */
/* The hooks' one path into the trace: guard, capture, copy into the thread's buffer. */
#include <string.h>

#include "hooks.h"
#include "internal.h"

__thread struct vrt_tls vrt_tls VRT_TLS;

/* A signal handler's hook (enum vrt_busy): it interrupted the state busy, restored by vrt_leave. */
static bool enter_nested(int busy, int state)
{
	if (VRT_UNLIKELY(vrt_tls.nested == VRT_MAX_NESTED)) {
		atomic_fetch_add_explicit(&vrt_tls.missed, 1, memory_order_relaxed);
		return false;
	}
	vrt_tls.outer[vrt_tls.nested++] = (uint8_t)busy;
	vrt_tls.busy = state | (busy & (VRT_BUSY_EMITTING | VRT_BUSY_DEFERRING) ? VRT_BUSY_DEFERRING : 0);
	return true;
}

static bool enter(int state)
{
	int st = atomic_load_explicit(&vrt_state, memory_order_acquire);
	if (VRT_UNLIKELY(st != VRT_STATE_READY) && (st != VRT_STATE_UNINIT || !vrt_start_early()))
		return false;
	int busy = vrt_tls.busy;
	if (VRT_LIKELY(!busy)) {
		vrt_tls.busy = state;
		return true;
	}
	if ((busy & VRT_BUSY_STATE) == VRT_BUSY_SELF)
		return false;
	if ((busy & VRT_BUSY_EMITTING) || state == VRT_BUSY_RUNTIME)
		return enter_nested(busy, state);
	return false; /* a driver call made by the real call under way */
}

/* Kept out of line so the compiler cannot hoist the TLS access above the state check. */
__attribute__((noinline)) bool vrt_enter(void) { return enter(VRT_BUSY_HOOK); }

__attribute__((noinline)) bool vrt_enter_runtime(void) { return enter(VRT_BUSY_RUNTIME); }

__attribute__((noinline)) void vrt_leave(void)
{
	vrt_tls.busy = VRT_UNLIKELY(vrt_tls.nested) ? vrt_tls.outer[--vrt_tls.nested] : VRT_BUSY_NO;
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

static void emit(const struct vrt_event *ev, bool with_stack)
{
	struct vrt_tbuf *b = vrt_tbuf_self();
	if (VRT_UNLIKELY(!b))
		return;
	if (VRT_UNLIKELY(atomic_load_explicit(&vrt_tls.missed, memory_order_relaxed)))
		b->lost += atomic_exchange_explicit(&vrt_tls.missed, 0, memory_order_relaxed);
	if (VRT_UNLIKELY(b->lost))
		flush_lost(b);
	struct vrt_capture cap;
	cap.n_native = cap.n_python = 0;
	uint32_t stack_id = 0;
	if (with_stack && atomic_load_explicit(&vrt_mode, memory_order_relaxed) == VRT_MODE_FULL) {
		vrt_stack_capture(&cap);
		stack_id = vrt_stack_cache_lookup(b, cap.hash);
	}
	bool frames = (cap.n_native || cap.n_python) && !stack_id;
	size_t len = frames ? raw_length(cap.n_native, cap.n_python, 0) : sizeof(struct vrt_raw);
	struct vrt_raw *r = vrt_tbuf_reserve(b, len);
	if (VRT_UNLIKELY(!r))
		return;
	fill_header(r, ev, len);
	r->stack_id = stack_id;
	r->stack_hash = cap.hash;
	if (frames) {
		uint8_t *p = (uint8_t *)(r + 1);
		r->flags = VRT_RAW_HAS_FRAMES;
		r->n_native = (uint8_t)cap.n_native;
		r->n_python = (uint8_t)cap.n_python;
		memcpy(p, cap.native, (size_t)cap.n_native * 8);
		memcpy(p + (size_t)cap.n_native * 8, cap.python, (size_t)cap.n_python * 4);
	}
	vrt_tbuf_publish(b, r);
}

/*
 * A signal handler's event while the buffer is mid-write: kept in a deferred slot (claimed
 * atomically: handlers nest) until the interrupted emit publishes it.
 */
static void defer(const struct vrt_event *ev)
{
	struct vrt_tbuf *b = vrt_tls.buf;
	uint32_t n = b ? atomic_fetch_add_explicit(&b->n_deferred, 1, memory_order_relaxed) : VRT_DEFERRED_SLOTS;
	if (n >= VRT_DEFERRED_SLOTS) {
		atomic_fetch_add_explicit(&vrt_tls.missed, 1, memory_order_relaxed);
		return;
	}
	b->deferred[n] = *ev;
	if (!ev->ts_ns)
		b->deferred[n].ts_ns = vrt_now_ns();
}

/* Publishes the deferred events, oldest first, while EMITTING. Copies them out before the slots
 * are released: a handler may claim slot 0 again as soon as they are. */
static void publish_deferred(struct vrt_tbuf *b)
{
	struct vrt_event copy[VRT_DEFERRED_SLOTS];
	uint32_t n = atomic_load_explicit(&b->n_deferred, memory_order_relaxed), kept;
	do {
		kept = n < VRT_DEFERRED_SLOTS ? n : VRT_DEFERRED_SLOTS;
		memcpy(copy, b->deferred, kept * sizeof(copy[0]));
	} while (!atomic_compare_exchange_weak_explicit(&b->n_deferred, &n, 0, memory_order_relaxed,
							memory_order_relaxed));
	for (uint32_t i = 0; i < kept; i++)
		emit(&copy[i], false);
}

int vrt_emitting_begin(void)
{
	int busy = vrt_tls.busy;
	vrt_tls.busy = busy | VRT_BUSY_EMITTING;
	atomic_signal_fence(memory_order_seq_cst); /* set before anything it guards is touched */
	return busy;
}

/*
 * Restores busy, then publishes what signal handlers deferred meanwhile. The check comes after
 * the restore: a handler that runs later records directly (and publishes these first), so none
 * is left in a slot until the thread's next event. Not when the restored state is itself
 * inside a write (an interrupted level publishes them).
 */
void vrt_emitting_end(int busy)
{
	for (;;) {
		atomic_signal_fence(memory_order_seq_cst);
		vrt_tls.busy = busy;
		atomic_signal_fence(memory_order_seq_cst);
		struct vrt_tbuf *b = vrt_tls.buf;
		if (VRT_LIKELY(!b || !atomic_load_explicit(&b->n_deferred, memory_order_relaxed)) ||
		    (busy & (VRT_BUSY_EMITTING | VRT_BUSY_DEFERRING)))
			return;
		vrt_emitting_begin();
		publish_deferred(b);
	}
}

void vrt_emit_deferred(void)
{
	struct vrt_tbuf *b = vrt_tls.buf;
	if (b && atomic_load_explicit(&b->n_deferred, memory_order_relaxed) && !vrt_tls.busy)
		vrt_emitting_end(vrt_emitting_begin());
}

void vrt_emit(const struct vrt_event *ev, bool with_stack)
{
	if (VRT_UNLIKELY(vrt_tls.busy & VRT_BUSY_DEFERRING)) {
		defer(ev);
		return;
	}
	int busy = vrt_emitting_begin();
	struct vrt_tbuf *b = vrt_tls.buf;
	if (VRT_UNLIKELY(b && atomic_load_explicit(&b->n_deferred, memory_order_relaxed)))
		publish_deferred(b); /* before ev: they happened first */
	emit(ev, with_stack);
	vrt_emitting_end(busy); /* and those that interrupted ev */
}

static void emit_label(uint8_t op, const char *label)
{
	struct vrt_tbuf *b = vrt_tbuf_self();
	if (!b || !label)
		return;
	size_t n = strnlen(label, 255);
	bool with_stack = op == VRT_OP_PHASE_ENTER && atomic_load(&vrt_mode) == VRT_MODE_FULL;
	struct vrt_capture cap;
	cap.n_native = cap.n_python = 0;
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
		atomic_fetch_add_explicit(&vrt_tls.missed, 1, memory_order_relaxed);
		return;
	}
	int busy = vrt_emitting_begin();
	emit_label(op, label);
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
		vrt_emit(&ev, true);
		/* PyTorch's allocator makes its first segment right after its init: attach then. */
		if (vrt_cfg.torch && kind == VRT_KIND_DEVICE)
			vrt_torch_maybe_attach();
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
