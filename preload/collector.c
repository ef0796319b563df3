/* SPDX-License-Identifier: MIT */
/*
 * The collector thread: drains every thread's buffer in timestamp order, keeps the live set,
 * interns stacks and writes the trace (trace_output.c). It wakes every VRAMTRACE_FLUSH_MS, when a
 * buffer passes half full, on OOM, on a control connection, and at exit or on a fatal signal.
 *
 * Order across threads: a release is stamped before its real call and an allocation after its
 * real call returns, so for one address the free's timestamp is below the next allocation's.
 * Each drain merges the buffers by timestamp; an event that arrives in a later drain than a
 * newer event for the same address is recognised by its older timestamp (see apply_*).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "collector.h"

struct collector vrt_collector = { .wake_fd = -1, .control_fd = -1 };

void vrt_collector_wake(void)
{
	uint64_t one = 1;
	int fd = atomic_load_explicit(&vrt_collector.wake_fd, memory_order_relaxed);
	if (fd >= 0) {
		ssize_t ignored = write(fd, &one, sizeof(one));
		(void)ignored;
	}
}

bool vrt_collector_alive(void)
{
	struct collector *c = &vrt_collector;
	return atomic_load_explicit(&c->wake_fd, memory_order_relaxed) >= 0 && !atomic_load(&c->finished) &&
	       !atomic_load(&c->crash_done) && !atomic_load(&c->crash_signal);
}

/*
 * The trace file from the first event (issue 22, item 6): made when the process's first event
 * is about to be written, not at the collector's first drain, so that a process killed any time
 * after its first allocation returned leaves a trace with a valid header (its state block says
 * "running": not closed). The collector makes it (it owns the file); the asking thread waits,
 * once per process, at most FILE_WAIT_NS: a collector that cannot answer (blocked, stopped for a
 * fork) makes the file at its next drain, as before, and the process says that until then a kill
 * loses what it recorded. The bound is generous because a freshly forked child's collector on a
 * loaded machine (under a sanitizer, F32 in docs/RELIABILITY.md) took more than a second; a
 * collector that answers at all answers within milliseconds, so only a stuck one costs the wait.
 * 0: not asked, 1: asked, 2: answered.
 */
#define FILE_WAIT_NS 5000000000ull
static _Atomic int file_state;
static _Atomic bool file_late_said;

void vrt_collector_want_file(void)
{
	if (VRT_LIKELY(atomic_load_explicit(&file_state, memory_order_acquire) == 2))
		return;
	if (atomic_load(&vrt_mode) != VRT_MODE_FULL || vrt_tls.nested || !vrt_collector_alive())
		return;
	int expected = 0;
	atomic_compare_exchange_strong(&file_state, &expected, 1);
	vrt_collector_wake();
	uint64_t deadline = vrt_now_ns() + FILE_WAIT_NS;
	while (atomic_load_explicit(&file_state, memory_order_acquire) == 1 && vrt_collector_alive()) {
		uint64_t now = vrt_now_ns();
		if (now >= deadline) {
			if (!atomic_exchange(&file_late_said, true))
				vrt_log("the trace file was not made within %llu s of the first event; until the collector "
				        "makes it, a kill loses what this process recorded",
				        (unsigned long long)(FILE_WAIT_NS / 1000000000ull));
			return;
		}
		struct timespec left = { 0, 20000000 };
		syscall(SYS_futex, &file_state, FUTEX_WAIT, 1, &left, NULL, 0);
	}
}

bool vrt_collector_trace_begun(void)
{
	return atomic_load_explicit(&file_state, memory_order_acquire) != 0 ||
	       atomic_load_explicit(&vrt_output_opened, memory_order_acquire);
}

/* The collector's side: makes the file if asked (an error is the usual one line). */
static void answer_file_request(struct collector *c)
{
	if (VRT_LIKELY(atomic_load_explicit(&file_state, memory_order_acquire) != 1))
		return;
	if (atomic_load(&vrt_mode) == VRT_MODE_FULL && !vrt_output_ensure(c))
		vrt_output_flush(c); /* the process's description: what a trace killed now still says */
	atomic_store_explicit(&file_state, 2, memory_order_release);
	syscall(SYS_futex, &file_state, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ---- fork sections (internal.h, "Fork safety") -------------------------------------------- */

static _Atomic int fork_section; /* the collector's mark */
static int fork_section_depth;   /* whoever runs the collector's work: one thread at a time */

void vrt_collector_section_enter(void)
{
	if (!fork_section_depth++)
		vrt_fork_park(&fork_section);
}

void vrt_collector_section_leave(void)
{
	if (!--fork_section_depth)
		vrt_fork_section_leave(&fork_section);
}

bool vrt_collector_wait_parked(uint64_t deadline_ns) { return vrt_fork_wait_clear(&fork_section, deadline_ns); }

/* ---- stacks ----------------------------------------------------------------------------- */

static bool symbolized_insert(struct collector *c, uint64_t addr)
{
	if ((c->symbolized_used + 1) * 2 > c->symbolized_cap) {
		size_t cap = c->symbolized_cap ? c->symbolized_cap * 2 : 4096;
		uint64_t *set = calloc(cap, sizeof(*set));
		if (!set)
			return false;
		for (size_t i = 0; i < c->symbolized_cap; i++) {
			uint64_t a = c->symbolized[i];
			if (!a)
				continue;
			size_t j = (a * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
			while (set[j])
				j = (j + 1) & (cap - 1);
			set[j] = a;
		}
		free(c->symbolized);
		c->symbolized = set;
		c->symbolized_cap = cap;
	}
	size_t i = (addr * 0x9e3779b97f4a7c15ull >> 20) & (c->symbolized_cap - 1);
	for (; c->symbolized[i]; i = (i + 1) & (c->symbolized_cap - 1))
		if (c->symbolized[i] == addr)
			return false;
	c->symbolized[i] = addr;
	c->symbolized_used++;
	return true;
}

static void queue_symbol(struct collector *c, uint64_t addr)
{
	if (!symbolized_insert(c, addr))
		return;
	if (c->n_to_symbolize == c->cap_to_symbolize) {
		size_t cap = c->cap_to_symbolize ? c->cap_to_symbolize * 2 : 1024;
		uint64_t *q = realloc(c->to_symbolize, cap * sizeof(*q));
		if (!q)
			return;
		c->to_symbolize = q;
		c->cap_to_symbolize = cap;
	}
	c->to_symbolize[c->n_to_symbolize++] = addr;
}

/* Trie path: Python frames outermost first, then native frames outermost first; the leaf is
 * the innermost native frame. Readers walk leaf to root and get both lists innermost first. */
static uint32_t intern_frames(struct collector *c, const uint64_t *native, int n_native, const uint32_t *python,
			      int n_python)
{
	uint32_t node = 0;
	bool created;
	for (int i = n_python - 1; i >= 0; i--) {
		bool boundary = python[i] == VRT_PY_EVAL_BOUNDARY;
		node = vrt_intern_node(&c->intern, node, boundary ? VRT_FRAME_EVAL : VRT_FRAME_PYTHON,
				       boundary ? 0 : python[i], &created);
		if (!node)
			return 0;
	}
	for (int i = n_native - 1; i >= 0; i--) {
		node = vrt_intern_node(&c->intern, node, VRT_FRAME_NATIVE, native[i], &created);
		if (!node)
			return 0;
		if (created)
			queue_symbol(c, native[i]);
	}
	return node;
}

static uint32_t resolve_stack(struct collector *c, struct vrt_tbuf *b, const struct vrt_raw *r)
{
	if (r->stack_id || !(r->flags & VRT_RAW_HAS_FRAMES))
		return r->stack_id;
	const uint64_t *native = (const uint64_t *)(r + 1);
	const uint32_t *python = (const uint32_t *)(native + r->n_native);
	uint32_t id = intern_frames(c, native, r->n_native, python, r->n_python);
	if (id && r->stack_hash)
		vrt_stack_cache_fill(b, r->stack_hash, id);
	return id;
}

/* ---- phases ----------------------------------------------------------------------------- */

/* A phase's state by its name's string id: ids are dense, so an array by id finds it at once
 * however many names there are (NVTX ranges with a counter in their message make one a call). */
static struct phase_state *phase(struct collector *c, uint32_t name_id)
{
	if (name_id < c->cap_phase_index && c->phase_index[name_id])
		return &c->phases[c->phase_index[name_id] - 1];
	if (name_id >= c->cap_phase_index) {
		size_t cap = c->cap_phase_index ? c->cap_phase_index : 64;
		while (cap <= name_id)
			cap *= 2;
		uint32_t *index = realloc(c->phase_index, cap * sizeof(*index));
		if (!index)
			return NULL;
		memset(index + c->cap_phase_index, 0, (cap - c->cap_phase_index) * sizeof(*index));
		c->phase_index = index;
		c->cap_phase_index = cap;
	}
	if (c->n_phases == c->cap_phases) {
		size_t cap = c->cap_phases ? c->cap_phases * 2 : 16;
		struct phase_state *p = realloc(c->phases, cap * sizeof(*p));
		if (!p)
			return NULL;
		c->phases = p;
		c->cap_phases = cap;
	}
	c->phases[c->n_phases] = (struct phase_state){ name_id, 0, 0 };
	c->phase_index[name_id] = (uint32_t)++c->n_phases;
	return &c->phases[c->n_phases - 1];
}

/* ---- live set (format/live.c: the rules the analyzer replays) ------------------------------ */

/*
 * Releases that arrive after their address was given out again. A release is stamped before its
 * real call and published after it; in between, another thread may get the same address from
 * the driver and publish its allocation first, and a drain may fall between the two. That
 * birth then replaces an incarnation whose release is still on its way (the rules' "Birth").
 * The replaced incarnations wait here, so the late release is still written, with the size and
 * the allocating stack of what it freed.
 */
#define REPLACED_SLOTS 256u
static struct vrt_item replaced[REPLACED_SLOTS];
static size_t replaced_next;
/* A snapshot seed (torch_seed.c) the birth under way replaced: traced now, not from before. */
static struct vrt_item replaced_seed;
static bool seed_replaced;

static void on_live_end(void *ctx, const struct vrt_item *it, enum vrt_live_end why)
{
	(void)ctx;
	if (why != VRT_END_REPLACED)
		return;
	replaced[replaced_next++ % REPLACED_SLOTS] = *it;
	if (it->api == VRT_API_TORCH_SNAPSHOT && it->seeded && it->space == VRT_SPACE_ADDR) {
		replaced_seed = *it;
		seed_replaced = true;
	}
}

/*
 * Releases of addresses the live set did not hold (allocated before tracing, or not ours), kept
 * by address for the snapshot seeds (seed_from_snapshot): one that names a seeded address and is
 * newer than the snapshot ended what the snapshot saw. Direct-mapped: a collision forgets the
 * older entry, and then that seed is taken (as it would be without this table).
 */
#define UNKNOWN_RELEASE_SLOTS 4096u
static struct unknown_release {
	uint64_t addr, ts;
	uint8_t space;
} unknown_releases[UNKNOWN_RELEASE_SLOTS];

static struct unknown_release *unknown_release_slot(uint8_t space, uint64_t addr)
{
	uint64_t h = (addr ^ space) * 0x9e3779b97f4a7c15ull;
	return &unknown_releases[(h >> 40) & (UNKNOWN_RELEASE_SLOTS - 1)];
}

static void remember_unknown_release(uint8_t space, uint64_t addr, uint64_t ts)
{
	*unknown_release_slot(space, addr) = (struct unknown_release){ addr, ts, space };
}

static bool released_since(uint8_t space, uint64_t addr, uint64_t ts)
{
	const struct unknown_release *u = unknown_release_slot(space, addr);
	return u->space == space && u->addr == addr && u->ts >= ts;
}

/* Takes out the newest replaced incarnation of (space, addr) born by ts; false if none. */
static bool take_replaced(uint8_t space, uint64_t addr, uint64_t ts, struct vrt_item *out)
{
	for (size_t k = 0; k < REPLACED_SLOTS; k++) {
		struct vrt_item *e = &replaced[(replaced_next - 1 - k) % REPLACED_SLOTS];
		if (e->space == space && e->addr == addr && e->ts <= ts) {
			*out = *e;
			e->space = 0;
			return true;
		}
	}
	return false;
}

/* Something became live; a mapping is written with its handle's kind and device. */
static void apply_birth(struct collector *c, struct vrt_record *r)
{
	struct vrt_live_change ch;
	seed_replaced = false;
	vrt_live_apply(&c->live, r, &ch);
	if (seed_replaced)
		vrt_attach_seed_adjust(c, replaced_seed.device, (int64_t)replaced_seed.size, r->ts);
	if (ch.outcome == VRT_LIVE_BORN && r->op == VRT_OP_MAP) {
		r->kind = ch.item.kind;
		r->device = ch.item.device;
	}
}

/* Something ended: the record gets size and allocating stack from the live set. */
static void apply_death(struct collector *c, struct vrt_record *r)
{
	struct vrt_live_change ch;
	vrt_live_apply(&c->live, r, &ch);
	if (ch.outcome == VRT_LIVE_ENDED || ch.outcome == VRT_LIVE_DEREFERENCED) {
		r->stack2 = ch.item.stack;
		r->device = ch.item.device;
		r->kind = ch.item.kind;
		if (r->op != VRT_OP_UNMAP || r->size == 0 || r->size == ch.item.size)
			r->size = ch.item.size; /* an unmap's own size may cover more mappings */
		return;
	}
	/* Late: it ended an earlier incarnation, already replaced (see replaced[]), and the
	 * replacement may be gone too. Or unknown to us: allocated before tracing, or not ours.
	 * Still an event: write it, with what it freed when we know; readers see a late one is
	 * older than the live incarnation and leave that alone. */
	uint8_t space = vrt_space_of(r->op);
	struct vrt_item old;
	r->stack2 = 0;
	if (ch.outcome == VRT_LIVE_UNKNOWN)
		remember_unknown_release(space, r->addr, r->ts);
	if (take_replaced(space, r->addr, r->ts, &old)) {
		r->stack2 = old.stack;
		r->device = old.device;
		r->kind = old.kind;
		r->size = old.size;
	}
}

/* ---- one raw event ---------------------------------------------------------------------- */

/* The text after a record's frames: NUL-terminated inside the record (event.c). */
static void label_of(const struct vrt_raw *r, const char **label, size_t *len)
{
	size_t skip = sizeof(*r) + (size_t)r->n_native * 8 + (size_t)r->n_python * 4;
	const char *p = (const char *)r + skip;
	*label = p;
	*len = r->len > skip ? strnlen(p, r->len - skip) : 0;
}

/*
 * A segment or block PyTorch's allocator held at the attach (torch_seed.c), stamped when the
 * snapshot began. Never counted twice: one the live set holds was traced since the attach, one a
 * newer release named is gone already (a segment then still leaves the unattributed figure: it
 * was in it). A segment taken leaves it too (attach.c).
 */
static bool seed_from_snapshot(struct collector *c, const struct vrt_raw *raw, struct vrt_record *r)
{
	const char *label;
	size_t len;
	uint8_t space = vrt_space_of(r->op);
	label_of(raw, &label, &len);
	if (!(raw->flags & VRT_RAW_LABEL) || !len || atomic_load(&vrt_mode) != VRT_MODE_FULL ||
	    vrt_live_lookup(&c->live, space, r->addr, NULL))
		return false;
	bool gone = released_since(space, r->addr, r->ts);
	/* before the segment's own record, so that no reader sees its bytes twice */
	if (r->op == VRT_OP_SEED && !vrt_output_ensure(c))
		vrt_attach_seed_adjust(c, r->device, -(int64_t)r->size, r->ts);
	if (gone)
		return false;
	r->stack = vrt_output_label_stack(c, label);
	apply_birth(c, r);
	return true;
}

static void info_fields(struct collector *c, const struct vrt_raw *raw)
{
	const char *text;
	size_t len;
	label_of(raw, &text, &len);
	const char *sep = memchr(text, '\x1e', len);
	if (!sep)
		return;
	char key[128];
	snprintf(key, sizeof(key), "%.*s", (int)(sep - text), text);
	vrt_output_info(c, key, sep + 1); /* the text is NUL-terminated in the record */
}

/* OWNER, WALK and OOM_LIMITS come from the Python package through api.c; their fields travel in
 * the raw event's general slots (see vramtrace_record_* there). */
static void retention_fields(struct collector *c, const struct vrt_raw *raw, struct vrt_record *r)
{
	const char *text;
	size_t len;
	switch (raw->op) {
	case VRT_OP_OWNER:
		label_of(raw, &text, &len);
		r->id = len ? vrt_intern_string(&c->intern, text, len) : 0;
		r->id2 = raw->aux;
		r->aux = raw->aux2;
		r->aux2 = 0;
		break;
	case VRT_OP_WALK:
		r->id = raw->aux;
		r->id2 = raw->aux2;
		r->aux = raw->addr ? vrt_ts_units(c, raw->addr) : 0;
		r->aux2 = raw->stream;
		r->addr = r->stream = 0;
		break;
	case VRT_OP_EXITING:
		r->id = raw->aux;
		r->aux = 0;
		break;
	case VRT_OP_OOM_LIMITS:
		r->id = raw->addr;
		r->id2 = raw->stream;
		r->addr = r->stream = 0;
		break;
	}
}

/* Field by field: an initializer zeroes the whole record first (rep stos: tens of cycles). */
static void record_of(const struct collector *c, const struct vrt_raw *raw, struct vrt_record *r)
{
	r->op = raw->op;
	r->ts = vrt_ts_units(c, raw->ts_ns);
	r->addr = raw->addr;
	r->size = raw->size;
	r->aux = raw->aux;
	r->aux2 = raw->aux2;
	r->stream = raw->stream;
	r->id = 0;
	r->id2 = 0;
	r->api = raw->api;
	r->device = raw->device;
	r->kind = raw->kind;
	r->stack = 0;
	r->stack2 = 0;
	r->result = raw->result;
	r->bytes_len = 0;
	r->bytes = NULL;
}

static void process(struct collector *c, struct vrt_tbuf *b, const struct vrt_raw *raw)
{
	struct vrt_record r;
	record_of(c, raw, &r);
	bool full = atomic_load(&vrt_mode) == VRT_MODE_FULL;
	r.stack = full ? resolve_stack(c, b, raw) : 0;
	bool write = true;
	switch (raw->op) {
	case VRT_OP_ALLOC: case VRT_OP_SEED: case VRT_OP_PHYS_CREATE: case VRT_OP_MAP: case VRT_OP_VA_RESERVE:
	case VRT_OP_IMPORT: case VRT_OP_BLOCK_ALLOC:
		if (raw->api == VRT_API_TORCH_SNAPSHOT)
			write = seed_from_snapshot(c, raw, &r);
		else
			apply_birth(c, &r);
		break;
	case VRT_OP_FREE: case VRT_OP_PHYS_RELEASE: case VRT_OP_UNMAP: case VRT_OP_VA_FREE: case VRT_OP_IMPORT_CLOSE:
	case VRT_OP_BLOCK_FREE:
		apply_death(c, &r);
		break;
	case VRT_OP_BLOCK_SIZE: case VRT_OP_CONTEXT: /* a CONTEXT from the hooks is a reset (i = 0) */
		vrt_live_apply(&c->live, &r, NULL);
		break;
	case VRT_OP_LOST:
		r.id = raw->size;
		c->events_lost += raw->size;
		break;
	case VRT_OP_OWNER: case VRT_OP_WALK: case VRT_OP_OOM_LIMITS: case VRT_OP_EXITING:
		retention_fields(c, raw, &r);
		break;
	case VRT_OP_INFO: /* from vramtrace_record_info: "key\x1evalue", a fact for the tables */
		write = false;
		if (full && !vrt_output_ensure(c))
			info_fields(c, raw);
		break;
	case VRT_OP_MARK: case VRT_OP_PHASE_ENTER: case VRT_OP_PHASE_EXIT: {
		const char *label;
		size_t len;
		label_of(raw, &label, &len);
		r.id = vrt_intern_string(&c->intern, label, len);
		struct phase_state *ps = raw->op == VRT_OP_MARK ? NULL : phase(c, (uint32_t)r.id);
		if (ps && raw->op == VRT_OP_PHASE_ENTER) {
			ps->entered++;
			ps->depth++;
		} else if (ps && ps->depth > 0) {
			ps->depth--;
		}
		break;
	}
	}
	if (!write || !full)
		return;
	if (vrt_output_ensure(c))
		return;
	vrt_output_describe_thread(c, b, raw->ts_ns);
	vrt_output_event(c, b->index, &r);
	if (raw->op == VRT_OP_OOM) {
		uint64_t now = vrt_now_ns();
		if (now - c->last_oom_checkpoint_ns > 1000000000ull) { /* at most one a second */
			c->last_oom_checkpoint_ns = now;
			vrt_output_checkpoint(c, VRT_CP_OOM);
		}
	}
}

/* ---- draining --------------------------------------------------------------------------- */

struct cursor {
	struct vrt_tbuf *b;
	uint64_t pos, end;
	uint64_t ts; /* its next event's stamp, while it is in the drain's heap */
};

static const struct vrt_raw *peek(struct cursor *k)
{
	while (k->pos < k->end) {
		uint64_t off = k->pos & (k->b->capacity - 1);
		const struct vrt_raw *r = (const struct vrt_raw *)(k->b->data + off);
		if (r->op != 0)
			return r;
		k->pos += k->b->capacity - off; /* padding to the ring end */
	}
	return NULL;
}

/*
 * A drain's cursors: one for every buffer with events, however many threads came and went since
 * the last drain (a drain that took 512 left the rest to the next, and a process whose threads
 * are born and die faster than that lost their events at exit and kept their buffers mapped).
 * Mapped, not malloc'ed: a drain may run while a crashing thread holds malloc's lock.
 */
static struct cursor *cursors;
static int *heap; /* positions in cursors, a binary min-heap by (next stamp, position) */
static size_t cursors_cap, heap_cap; /* each array's own: one may grow while the other cannot */

/* Grows *array (a mapping of *cap elements of elem bytes, none while *cap is 0) to hold want. */
static bool grow_array(void **array, size_t *cap, size_t want, size_t elem)
{
	if (want <= *cap)
		return true;
	void *p = *cap ? mremap(*array, *cap * elem, want * elem, MREMAP_MAYMOVE)
		       : mmap(NULL, want * elem, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return false; /* the array is as it was: the next drain tries again */
	*array = p;
	*cap = want;
	return true;
}

static bool cursors_room(size_t n)
{
	size_t usable = cursors_cap < heap_cap ? cursors_cap : heap_cap;
	if (n < usable)
		return true;
	size_t want = usable ? usable * 2 : 512;
	return grow_array((void **)&cursors, &cursors_cap, want, sizeof(*cursors)) &&
	       grow_array((void **)&heap, &heap_cap, want, sizeof(*heap));
}

/*
 * A drain takes the events of all buffers in (timestamp, buffer) order: the next event is the
 * oldest one stamped by the horizon, the first buffer's on a tie. It goes in runs: the cursor
 * with that event, and how far it may go before another buffer's next event comes first (until:
 * it takes events stamped before it; the ones stamped at it too if it comes before the other
 * buffer). The cursors with an event stamped by the horizon are a heap, so that a run costs
 * O(log n) with n buffers, not O(n): many threads that each made a few events before they ended
 * would make a drain quadratic.
 */
static bool comes_first(int x, int y)
{
	return cursors[x].ts < cursors[y].ts || (cursors[x].ts == cursors[y].ts && x < y);
}

static void sift_down(int n, int i)
{
	for (;;) {
		int l = 2 * i + 1, r = l + 1, m = i;
		if (l < n && comes_first(heap[l], heap[m]))
			m = l;
		if (r < n && comes_first(heap[r], heap[m]))
			m = r;
		if (m == i)
			return;
		int t = heap[i];
		heap[i] = heap[m];
		heap[m] = t;
		i = m;
	}
}

/* The heap of the first n cursors whose next event is stamped by the horizon; returns its size. */
static int heap_of_cursors(int n, uint64_t horizon)
{
	int h = 0;
	for (int i = 0; i < n; i++) {
		const struct vrt_raw *r = peek(&cursors[i]);
		if (r && r->ts_ns <= horizon) {
			cursors[i].ts = r->ts_ns;
			heap[h++] = i;
		}
	}
	for (int i = h / 2 - 1; i >= 0; i--)
		sift_down(h, i);
	return h;
}

/* Where the run of the heap's first cursor ends: at the next cursor's event. */
static uint64_t run_until(int h, uint64_t horizon)
{
	int best = heap[0], second = h > 1 ? heap[1] : -1;
	if (h > 2 && comes_first(heap[2], heap[1]))
		second = heap[2];
	if (second < 0)
		return horizon + 1;
	return second < best ? cursors[second].ts : cursors[second].ts + 1;
}

/* Processes the cursor's events stamped before until (its first one is). */
static void take_run(struct collector *c, struct cursor *k, uint64_t until)
{
	const struct vrt_raw *r = peek(k);
	do {
		process(c, k->b, r);
		k->pos += r->len;
		k->b->read_pos = k->pos; /* an EVENTS chunk written from here on holds it */
	} while ((r = peek(k)) && r->ts_ns < until);
}

/* The thread now in vrt_collector_stop: blocked joining us, so its buffer is as still as a
 * dead thread's for the final drain. */
static _Atomic(struct vrt_tbuf *) stopping_buf;

/* A buffer no thread adds to any more, so its lost count is final: its thread is dead, or is
 * the one stopping us. */
static bool buffer_is_still(const struct vrt_tbuf *b)
{
	return atomic_load_explicit(&b->dead, memory_order_acquire) || b == atomic_load(&stopping_buf);
}

/*
 * A thread reports the events it dropped with its next event (event.c), so the drops just
 * before it ends would go unreported. Once a thread is dead (or is the one stopping us) and its
 * buffer drained, its count is final: report it for it, in its name.
 */
static void report_unflushed_losses(struct collector *c)
{
	for (struct vrt_tbuf *b = vrt_tbuf_list(); b; b = b->next) {
		if (!buffer_is_still(b) || !b->lost || atomic_load_explicit(&b->head, memory_order_acquire) != b->read_pos)
			continue;
		struct vrt_raw raw = { .len = sizeof(raw), .op = VRT_OP_LOST, .size = b->lost,
				       .ts_ns = vrt_now_ns() };
		b->lost = 0;
		process(c, b, &raw);
	}
}

/* Events no buffer could be mapped for (an address space limit): counted lost, in thread 0's
 * name, and said once; so is a buffer mapped smaller than asked. */
static void report_buffer_shortage(struct collector *c)
{
	static bool said_small, said_none;
	uint64_t small = atomic_load_explicit(&vrt_tbuf_smallest, memory_order_relaxed);
	if (small && !said_small) {
		said_small = true;
		vrt_log("VRAMTRACE_THREAD_BUFFER=%llu could not be mapped; a thread got %llu bytes",
			(unsigned long long)vrt_cfg.thread_buffer, (unsigned long long)small);
	}
	uint64_t none = atomic_exchange_explicit(&vrt_tbuf_unbuffered, 0, memory_order_relaxed);
	if (!none)
		return;
	if (!said_none) {
		said_none = true;
		vrt_log("no event buffer could be mapped for a thread; its events are counted lost");
	}
	static struct vrt_tbuf process_wide = { .index = 0 };
	process_wide.tid = vrt_pid;
	struct vrt_raw raw = { .len = sizeof(raw), .op = VRT_OP_LOST, .size = none, .ts_ns = vrt_now_ns() };
	process(c, &process_wide, &raw);
}

/*
 * Only events stamped before the horizon are taken; later ones wait for the next drain. Thread
 * A's allocation is published before A returns the pointer, so before thread B can free it; if
 * B's free is stamped before the horizon, A's allocation was published before the horizon too,
 * hence before any head is read below. So an allocation is never taken after a free of it.
 * A buffer is read from the collector's own position (read_pos), not from its tail: the tail
 * moves only once the chunk holding what was read is in the file (put_chunk; the flush below),
 * which changes what the threads may overwrite, not what a drain takes or in which order.
 */
void vrt_collector_drain(struct collector *c)
{
	int n = 0;
	uint64_t horizon = vrt_now_ns();
	atomic_thread_fence(memory_order_seq_cst);
	/* Without room for a cursor (no memory), the buffers left wait for a later drain. */
	for (struct vrt_tbuf *b = vrt_tbuf_list(); b && n < INT_MAX && cursors_room((size_t)n); b = b->next) {
		uint64_t head = atomic_load_explicit(&b->head, memory_order_acquire);
		if (head != b->read_pos)
			cursors[n++] = (struct cursor){ b, b->read_pos, head };
	}
	for (int h = heap_of_cursors(n, horizon); h > 0; sift_down(h, 0)) {
		struct cursor *best = &cursors[heap[0]];
		take_run(c, best, run_until(h, horizon));
		const struct vrt_raw *r = peek(best);
		if (r && r->ts_ns <= horizon)
			best->ts = r->ts_ns;
		else
			heap[0] = heap[--h];
	}
	for (int i = 0; i < n; i++)
		cursors[i].b->read_pos = cursors[i].pos;
	report_unflushed_losses(c);
	report_buffer_shortage(c);
	/* Written at once, then the space is the threads' again (struct vrt_tbuf, tail): a ring is
	 * never freed past what the file holds, and a drain still frees it up to its head. */
	vrt_output_flush(c);
	vrt_collector_section_enter(); /* a fork's prepare handler walks the list we unlink from */
	vrt_tbuf_reclaim_dead();
	vrt_collector_section_leave();
}

/* ---- the live set, asked for by the application ----------------------------------------- */

/*
 * One question at a time (queries are serialized by lifecycle_lock): the asking thread publishes
 * it and sleeps on done; the collector takes it with an exchange, so a question is answered at
 * most once, and the asker that gives up first takes it back with a compare-exchange. Whoever
 * wins owns the question: the asker may not return while the collector holds it.
 */
struct live_query {
	uint64_t born_after; /* ts units */
	struct vramtrace_live_item *out;
	size_t cap, n;
	_Atomic int done;
};

static _Atomic(struct live_query *) pending_query;

static bool queried_item(const struct vrt_item *e)
{
	bool buffer = e->space == VRT_SPACE_ADDR || e->space == VRT_SPACE_BLOCK || e->space == VRT_SPACE_MAP;
	return buffer && (e->kind == VRT_KIND_DEVICE || e->kind == VRT_KIND_HOST_PINNED || e->kind == VRT_KIND_MANAGED);
}

void vrt_collector_answer_query(struct collector *c)
{
	if (VRT_LIKELY(!atomic_load_explicit(&pending_query, memory_order_relaxed)))
		return;
	vrt_collector_drain(c); /* everything published before the question was asked */
	struct live_query *q = atomic_exchange(&pending_query, NULL);
	if (!q)
		return;
	size_t n = 0;
	for (size_t i = 0; i < c->live.used; i++) {
		struct vrt_item e;
		vrt_live_at(&c->live, i, &e);
		if (!queried_item(&e) || e.ts < q->born_after)
			continue;
		if (n < q->cap)
			q->out[n] = (struct vramtrace_live_item){
				.addr = e.addr, .size = e.size, .device = e.device, .kind = e.kind,
				.tensor = e.space == VRT_SPACE_BLOCK,
				.born_ns = c->t0_ns + e.ts * (uint64_t)vrt_cfg.ts_unit_ns };
		n++;
	}
	q->n = n;
	atomic_store_explicit(&q->done, 1, memory_order_release);
	syscall(SYS_futex, &q->done, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* ---- mode changes ----------------------------------------------------------------------- */

void vrt_collector_set_mode(struct collector *c, int mode, int cause)
{
	int old = atomic_exchange(&vrt_mode, mode);
	if (old == mode || mode != VRT_MODE_FULL)
		return;
	/* Entering full tracing: describe what is already alive, then record from here. */
	if (vrt_output_ensure(c))
		return;
	struct vrt_record r = { .op = VRT_OP_MODE, .ts = vrt_ts_units(c, vrt_now_ns()), .id = (uint64_t)mode,
				.id2 = (uint64_t)cause };
	vrt_output_event(c, 0, &r);
	vrt_output_checkpoint(c, VRT_CP_ATTACH);
}

/* ---- the thread ------------------------------------------------------------------------- */

static void wait_for_work(struct collector *c, int timeout_ms)
{
	struct pollfd fds[2] = { { c->wake_fd, POLLIN, 0 }, { c->control_fd, POLLIN, 0 } };
	int n = poll(fds, c->control_fd >= 0 ? 2 : 1, timeout_ms);
	if (n > 0 && (fds[0].revents & POLLIN)) {
		uint64_t v;
		ssize_t ignored = read(c->wake_fd, &v, sizeof(v));
		(void)ignored;
	}
	if (n > 0 && c->control_fd >= 0 && (fds[1].revents & POLLIN)) {
		vrt_collector_section_enter(); /* attach and detach walk the loaded objects */
		vrt_control_serve(c, c->control_fd);
		vrt_collector_section_leave();
	}
}

static void finish_crash(struct collector *c)
{
	int sig = atomic_load(&c->crash_signal);
	vrt_collector_drain(c);
	vrt_output_finish(c, VRT_END_SIGNAL, sig);
	atomic_store(&c->crash_done, 1);
	syscall(SYS_futex, &c->crash_done, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/*
 * After a failed exec, a new file continues the trace. The old file's definitions are written
 * again (encoded as intern.c does) under the same ids, so the threads' stack caches, the live
 * set and events already published stay valid; the file starts with the live set.
 */
static void redefine_all(struct collector *c)
{
	struct vrt_intern *in = &c->intern;
	struct vrt_buf *all = in->all;
	in->all = NULL; /* it holds them already */
	for (size_t id = 1; id < in->n_strings; id++) {
		struct vrt_record r = { .op = VRT_OP_STRING, .id = id, .bytes = (const uint8_t *)in->strings[id],
					.bytes_len = in->string_lens[id] };
		vrt_intern_emit(in, &r);
	}
	if (c->symbolized)
		memset(c->symbolized, 0, c->symbolized_cap * sizeof(*c->symbolized));
	c->symbolized_used = 0;
	for (size_t id = 1; id < in->n_nodes; id++) {
		const struct vrt_node *nd = &in->nodes[id];
		struct vrt_record r = { .op = VRT_OP_STACK, .id = id, .id2 = nd->parent, .aux2 = nd->kind,
					.aux = nd->value };
		vrt_intern_emit(in, &r);
		if (nd->kind == VRT_FRAME_NATIVE)
			queue_symbol(c, nd->value);
	}
	in->all = all;
	vrt_symbols_forget_reported();
	c->py_codes_done = c->py_frames_done = 0;
	if (c->threads_described)
		memset(c->threads_described, 0, c->cap_threads * sizeof(*c->threads_described));
}

static void reopen_file(struct collector *c)
{
	redefine_all(c);
	if (!vrt_output_ensure(c))
		vrt_output_checkpoint(c, VRT_CP_ATTACH);
}

/* An armed process that nobody attached to writes nothing; at its exit it says what its live
 * set held, so that "no trace" is not mistaken for "no allocation". A process image that made
 * no CUDA allocation (a shell or launcher the job runs through) and one that execs say nothing:
 * under a chain of them (a pyenv shim) the line came once per image. */
static void say_armed_at_exit(const struct collector *c)
{
	if (!c->live.events || c->end_reason == VRT_END_EXEC)
		return;
	uint64_t n = 0, bytes = 0;
	for (size_t i = 0; i < c->live.used; i++) {
		struct vrt_item e;
		vrt_live_at(&c->live, i, &e);
		if (vrt_item_counted(&e)) {
			n++;
			bytes += e.size;
		}
	}
	vrt_log("armed and never attached: %llu allocations (%llu bytes) were live at exit; no trace was written "
		"(`vramtrace attach %d` while it runs starts one)",
		(unsigned long long)n, (unsigned long long)bytes, (int)getpid());
}

/*
 * What the last drain left: records stamped after its horizon (a thread still allocating while
 * the process exits or execs). This file will not hold them: they are counted lost in it, in
 * their thread's name, rather than missing silently. They stay in the buffer: after an exec that
 * failed, the trace goes on in a new file, which takes them.
 */
static void report_leftovers(struct collector *c)
{
	for (struct vrt_tbuf *b = vrt_tbuf_list(); b; b = b->next) {
		struct cursor k = { b, b->read_pos, atomic_load_explicit(&b->head, memory_order_acquire) };
		uint64_t left = 0;
		for (const struct vrt_raw *r; (r = peek(&k)); k.pos += r->len)
			left += r->op == VRT_OP_LOST ? r->size : 1;
		/* And the drops a still thread had yet to report (report_unflushed_losses takes them
		 * only from a buffer drained to its head: the drain could not, its events are here). */
		if (buffer_is_still(b)) {
			left += b->lost;
			b->lost = 0;
		}
		if (!left)
			continue;
		struct vrt_raw raw = { .len = sizeof(raw), .op = VRT_OP_LOST, .size = left, .ts_ns = vrt_now_ns() };
		process(c, b, &raw);
	}
}

static void *collector_main(void *arg)
{
	struct collector *c = arg;
	vrt_tls.busy = 1; /* nothing this thread does is traced */
	prctl(PR_SET_NAME, "vramtrace");
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL); /* never steal the application's signals */
	if (c->reopen_file) {
		c->reopen_file = false;
		reopen_file(c);
	}
	while (!atomic_load(&c->stop)) {
		answer_file_request(c);
		wait_for_work(c, vrt_cfg.flush_ms);
		answer_file_request(c);
		if (atomic_load(&c->crash_signal)) {
			finish_crash(c);
			return NULL;
		}
		vrt_collector_drain(c);
		vrt_collector_answer_query(c);
		if (atomic_load(&vrt_state) == VRT_STATE_DISABLED && c->writer)
			vrt_output_finish(c, VRT_END_DISABLED, 0);
	}
	vrt_collector_drain(c);
	report_leftovers(c);
	c->closed_file = c->writer != NULL;
	if (!c->writer && !c->output_failed && atomic_load(&vrt_mode) == VRT_MODE_ARMED)
		say_armed_at_exit(c);
	vrt_output_finish(c, c->end_reason, c->end_detail);
	atomic_store(&c->finished, 1);
	syscall(SYS_futex, &c->finished, FUTEX_WAKE, 1, NULL, NULL, 0);
	return NULL;
}

static int collector_init(struct collector *c)
{
	c->t0_ns = vrt_now_ns();
	struct timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	c->t0_realtime_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
	atomic_store(&c->wake_fd, eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	if (c->wake_fd < 0 || vrt_live_init(&c->live) ||
	    vrt_intern_init(&c->intern, &c->pending_tables, c->writer || vrt_cfg.ring_bytes ? &c->all_tables : NULL))
		return -1;
	c->live.on_end = on_live_end;
	vrt_symbols_init();
	c->control_fd = vrt_cfg.control ? vrt_control_listen() : -1;
	return 0;
}

/* Starting, stopping and restarting the thread: one at a time (exit, exec, a forked child's
 * first event may race). Never taken by the collector itself. */
static pthread_mutex_t lifecycle_lock = PTHREAD_MUTEX_INITIALIZER;

static int spawn(struct collector *c)
{
	atomic_store(&c->stop, 0);
	atomic_store(&c->finished, 0);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 1u << 20);
	/* Created with every signal blocked, not blocking them as its first act: the application's
	 * process-directed signals go to any thread that does not block them, and its handlers must
	 * run on its own threads (a handler that calls CUDA on ours is neither traced nor in the
	 * right context). */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&c->thread, &attr, collector_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc)
		return -1;
	c->running = true;
	return 0;
}

int vrt_collector_start(void)
{
	struct collector *c = &vrt_collector;
	return collector_init(c) || spawn(c) ? -1 : 0;
}

/* The thread now stopping us: its buffer is as still as a dead thread's (see stopping_buf). */
static void request_stop(struct collector *c, int end_reason, int end_detail)
{
	c->end_reason = end_reason;
	c->end_detail = end_detail;
	atomic_store(&stopping_buf, vrt_tls.buf);
	atomic_store(&c->stop, 1);
	vrt_collector_wake();
}

void vrt_collector_stop(int end_reason, int end_detail)
{
	struct collector *c = &vrt_collector;
	pthread_mutex_lock(&lifecycle_lock);
	if (c->running) {
		request_stop(c, end_reason, end_detail);
		pthread_join(c->thread, NULL);
		c->running = false;
	}
	pthread_mutex_unlock(&lifecycle_lock);
}

void vrt_collector_crash_flush(int signo)
{
	struct collector *c = &vrt_collector;
	if (!c->running || pthread_equal(pthread_self(), c->thread))
		return;
	int expected = 0;
	if (!atomic_compare_exchange_strong(&c->crash_signal, &expected, signo))
		return;
	vrt_collector_wake();
	struct timespec limit = { 1, 0 }; /* the process is dying: wait at most a second */
	while (!atomic_load(&c->crash_done)) {
		long r = syscall(SYS_futex, &c->crash_done, FUTEX_WAIT, 0, &limit, NULL, 0);
		if (r && errno == ETIMEDOUT)
			break;
	}
}

/* Asking (see struct live_query). */
#define QUERY_WAIT_NS 5000000000ull

long vrt_collector_query_live(uint64_t born_after_ns, struct vramtrace_live_item *out, size_t cap)
{
	struct collector *c = &vrt_collector;
	pthread_mutex_lock(&lifecycle_lock);
	if (!c->running || atomic_load(&c->stop) || pthread_equal(pthread_self(), c->thread)) {
		pthread_mutex_unlock(&lifecycle_lock);
		return VRT_E_UNSUPPORTED;
	}
	struct live_query q = { .born_after = born_after_ns ? vrt_ts_units(c, born_after_ns) : 0, .out = out, .cap = cap };
	atomic_store(&pending_query, &q);
	vrt_collector_wake();
	uint64_t deadline = vrt_now_ns() + QUERY_WAIT_NS;
	while (!atomic_load_explicit(&q.done, memory_order_acquire)) {
		uint64_t now = vrt_now_ns();
		struct live_query *mine = &q;
		if (now >= deadline && atomic_compare_exchange_strong(&pending_query, &mine, NULL))
			break; /* taken back: the collector never saw it */
		struct timespec left = { 0, 50000000 };
		syscall(SYS_futex, &q.done, FUTEX_WAIT, 0, &left, NULL, 0);
	}
	pthread_mutex_unlock(&lifecycle_lock);
	return atomic_load(&q.done) ? (long)q.n : VRT_E_TIMEOUT;
}

/* ---- fork ------------------------------------------------------------------------------- */

static _Atomic int start_pending;

void vrt_collector_after_fork_child(void)
{
	/* The parent's collector thread does not exist here. Leak its state, start over with a new
	 * file (named by our pid), an empty live set (CUDA state does not survive fork), the same
	 * Python tables (this process still holds those code objects), every module described
	 * again. Only plain stores here; the thread starts with the first event. */
	struct collector *c = &vrt_collector;
	memset(c, 0, sizeof(*c));
	/* A fork waits for the collector's fork sections, not for a drain: the parent's drain may
	 * have been halfway through growing its cursors (cursors mapped, their count not yet set),
	 * which left this child's collector unable to drain at all. Its arrays start over. */
	cursors = NULL;
	heap = NULL;
	cursors_cap = heap_cap = 0;
	memset(replaced, 0, sizeof(replaced));
	replaced_next = 0;
	memset(unknown_releases, 0, sizeof(unknown_releases));
	atomic_store(&stopping_buf, NULL);
	atomic_store(&pending_query, NULL);
	atomic_store(&file_state, 0); /* the child's trace is a new file */
	atomic_store(&file_late_said, false);
	atomic_store(&vrt_output_opened, false);
	vrt_info_after_fork();
	atomic_store(&c->wake_fd, -1);
	c->control_fd = -1;
	fork_section_depth = 0;
	atomic_store(&fork_section, 0);
	lifecycle_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER; /* maybe held by a thread gone here */
	vrt_symbols_forget_reported();
	atomic_store(&start_pending, 1);
}

void vrt_collector_start_pending(void)
{
	if (VRT_LIKELY(!atomic_load_explicit(&start_pending, memory_order_relaxed)) || !atomic_exchange(&start_pending, 0))
		return;
	pthread_mutex_lock(&lifecycle_lock);
	bool failed = atomic_load(&vrt_state) == VRT_STATE_READY && vrt_collector_start();
	pthread_mutex_unlock(&lifecycle_lock);
	if (failed)
		vrt_disable("could not start the collector in a forked child");
}

/* ---- exec and _exit ---------------------------------------------------------------------- */

/* Bounded, like a crash flush: exec and _exit may be called where the collector cannot finish
 * (from a signal handler that interrupted the allocator the collector needs). */
#define EXEC_WAIT_S 5

static bool wait_finished(struct collector *c)
{
	struct timespec limit = { EXEC_WAIT_S, 0 };
	while (!atomic_load(&c->finished)) {
		long r = syscall(SYS_futex, &c->finished, FUTEX_WAIT, 0, &limit, NULL, 0);
		if (r && errno == ETIMEDOUT)
			return atomic_load(&c->finished);
	}
	return true;
}

/* The thread is told to stop but has not finished yet (close_now timed out): after a failed
 * exec it is waited for again before the trace goes on. Under lifecycle_lock. */
static bool stop_pending;

static void join_finished(struct collector *c)
{
	pthread_join(c->thread, NULL);
	c->running = false;
	stop_pending = false;
}

bool vrt_collector_close_now(int end_reason, int end_detail)
{
	struct collector *c = &vrt_collector;
	bool asked = false;
	/* try: the caller may be a signal handler that interrupted the lock's holder */
	if (pthread_mutex_trylock(&lifecycle_lock))
		return false;
	if (c->running && !stop_pending) {
		request_stop(c, end_reason, end_detail);
		asked = true;
		if (wait_finished(c))
			join_finished(c);
		else
			stop_pending = true;
	}
	pthread_mutex_unlock(&lifecycle_lock);
	return asked;
}

/* The exec failed: the process goes on, and so does its trace, in a new file. */
void vrt_collector_reopen_after_exec(void)
{
	struct collector *c = &vrt_collector;
	pthread_mutex_lock(&lifecycle_lock);
	if (stop_pending && wait_finished(c))
		join_finished(c);
	if (stop_pending) {
		pthread_mutex_unlock(&lifecycle_lock);
		vrt_disable("the collector did not finish before exec; the trace ends there");
		return;
	}
	if (!c->running && atomic_load(&vrt_state) == VRT_STATE_READY) {
		atomic_store(&stopping_buf, NULL);
		if (c->closed_file) { /* else: no file yet (armed, or nothing recorded), or a write error */
			c->output_failed = false;
			c->path[0] = 0;
			c->events_written = c->events_lost = 0;
			c->reopen_file = true;
		}
		if (spawn(c)) {
			pthread_mutex_unlock(&lifecycle_lock);
			vrt_disable("could not restart the collector after a failed exec");
			return;
		}
	}
	pthread_mutex_unlock(&lifecycle_lock);
}
