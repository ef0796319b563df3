/* SPDX-License-Identifier: MIT */
/*
 * gen_trace - writes a synthetic, training-like trace quickly, through the real writer
 * (format/trace_writer.c) and the real record codec (include/vramtrace/record.h), laid out
 * the way the preload's collector lays it out: one TABLES chunk with every definition first
 * (strings, a module, symbols, Python code and frames, the stack trie, threads), then EVENTS
 * chunks of ~1 MiB raw (THREAD records on thread switches, ALLOC/FREE with the deltas reset at
 * each chunk), PHASE_ENTER/PHASE_EXIT around every step, and the exit checkpoint.
 *
 *   gen_trace OUT EVENTS [--leak-every STEPS] [--seed N] [--step-events N] [--hold N]
 *
 * The workload: ~2000 long-lived allocations made first ("weights"), then steps of ~10k events
 * (--step-events) inside a "train_step" phase; each step allocates ~2500 activations and frees
 * them again, so a few thousand allocations are live at any time. 320 stacks (Python + native
 * frames sharing prefixes, ~30 frames each). Addresses come from a LIFO free list over a pool of
 * 2 MiB-aligned blocks, as a caching allocator would hand them out. 5% of events come from a
 * second thread (pinned host staging buffers). --leak-every K leaks one allocation every K
 * steps from its own site (for `vramtrace leaks`). --hold N first makes N more allocations that
 * stay live to the end (4 KiB apart, outside the pool), for the analyzer's memory per live
 * allocation; they count towards EVENTS. Keep-all layout (no ring).
 *
 * Prints: events=N bytes=B seconds=S
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trace_writer.h"
#include "vramtrace/error.h"
#include "vramtrace/record.h"

#define CHUNK_BYTES (1u << 20)
#define N_STACKS 320
#define N_FUNCS 240
#define N_PYCODES 60
#define POOL 65536
#define VRT_PY_EVAL_BOUNDARY_ 0xffffffffu /* preload/internal.h */

struct buf {
	uint8_t *data;
	size_t len, cap;
};

static void reserve(struct buf *b, size_t n)
{
	if (b->len + n <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 1 << 16;
	while (cap < b->len + n)
		cap *= 2;
	b->data = realloc(b->data, cap);
	if (!b->data) {
		perror("gen_trace");
		exit(1);
	}
	b->cap = cap;
}

static void put(struct buf *b, const struct vrt_record *r, struct vrt_delta *d)
{
	reserve(b, VRT_RECORD_MAX_FIXED + r->bytes_len);
	b->len = (size_t)(vrt_record_encode(b->data + b->len, r, d) - b->data);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

/* ---- tables ----------------------------------------------------------------------------- */

static struct buf tables;
static uint32_t n_strings = 1, n_nodes = 1;

static uint32_t string(const char *s)
{
	struct vrt_delta d = { 0, 0 };
	struct vrt_record r = { .op = VRT_OP_STRING, .id = n_strings, .bytes = (const uint8_t *)s,
				.bytes_len = (uint32_t)strlen(s) };
	put(&tables, &r, &d);
	return n_strings++;
}

/* Trie nodes, interned like the collector does (parent, kind, value) -> id. */
#define NODE_INDEX (1u << 16)
static struct {
	uint32_t parent, id;
	uint8_t kind;
	uint64_t value;
} node_index[NODE_INDEX];

static uint32_t node(uint32_t parent, uint8_t kind, uint64_t value)
{
	uint64_t h = (value * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)parent << 3 | kind) * 0xc2b2ae3d27d4eb4full;
	for (size_t i = (h ^ (h >> 29)) & (NODE_INDEX - 1);; i = (i + 1) & (NODE_INDEX - 1)) {
		if (!node_index[i].id) {
			node_index[i].parent = parent;
			node_index[i].kind = kind;
			node_index[i].value = value;
			node_index[i].id = n_nodes;
			struct vrt_delta d = { 0, 0 };
			struct vrt_record r = { .op = VRT_OP_STACK, .id = n_nodes, .id2 = parent, .aux2 = kind,
						.aux = value };
			put(&tables, &r, &d);
			return n_nodes++;
		}
		if (node_index[i].parent == parent && node_index[i].kind == kind && node_index[i].value == value)
			return node_index[i].id;
	}
}

#define MODULE_BASE 0x7f3a40000000ull
static uint64_t func_addr[N_FUNCS];
static uint32_t stacks[N_STACKS], leak_stack, phase_stack, host_stack;
static uint64_t stack_size[N_STACKS];

/* Python frames outermost first, then native outermost first; the leaf is the innermost native
 * frame (collector.c, intern_frames). */
static uint32_t make_stack(const uint32_t *py, int n_py, const int *native, int n_native)
{
	uint32_t n = 0;
	for (int i = 0; i < n_py; i++)
		n = node(n, py[i] == VRT_PY_EVAL_BOUNDARY_ ? VRT_FRAME_EVAL : VRT_FRAME_PYTHON,
			 py[i] == VRT_PY_EVAL_BOUNDARY_ ? 0 : py[i]);
	for (int i = 0; i < n_native; i++)
		n = node(n, VRT_FRAME_NATIVE, func_addr[native[i]] + 0x1b);
	return n;
}

static void build_tables(void)
{
	struct vrt_delta d = { 0, 0 };
	struct vrt_record r;
	/* process info, as emit_process_info writes it */
	const char *info[][2] = { { "cmdline", "python train.py --synthetic" }, { "exe", "/usr/bin/python3.11" },
				  { "vramtrace", "bench" }, { "stack_depth", "48" }, { "mode", "full" } };
	for (size_t i = 0; i < sizeof(info) / sizeof(info[0]); i++) {
		uint32_t k = string(info[i][0]), v = string(info[i][1]);
		r = (struct vrt_record){ .op = VRT_OP_INFO, .id = k, .id2 = v };
		put(&tables, &r, &d);
	}
	/* one module holding every native function, with symbols */
	uint8_t build_id[20];
	for (int i = 0; i < 20; i++)
		build_id[i] = (uint8_t)(i * 37);
	uint32_t path = string("/usr/lib/python3/site-packages/torch/lib/libtorch_cuda.so");
	r = (struct vrt_record){ .op = VRT_OP_MODULE, .id = 1, .id2 = path, .addr = MODULE_BASE, .size = 0x8000000,
				 .bytes = build_id, .bytes_len = 20 };
	put(&tables, &r, &d);
	char name[128];
	for (int i = 0; i < N_FUNCS; i++) {
		func_addr[i] = MODULE_BASE + 0x100000 + (uint64_t)i * 0x2340;
		snprintf(name, sizeof(name), "at::native::op_%d_kernel_impl(at::Tensor const&, c10::Scalar)", i);
		r = (struct vrt_record){ .op = VRT_OP_SYMBOL, .addr = func_addr[i] + 0x1b, .id = 1, .id2 = string(name),
					 .aux = 0x1b };
		put(&tables, &r, &d);
	}
	/* Python: code objects and one or two frames (lines) in each */
	uint32_t file = string("/home/user/model/train.py");
	for (int i = 0; i < N_PYCODES; i++) {
		snprintf(name, sizeof(name), "Block%d.forward", i);
		r = (struct vrt_record){ .op = VRT_OP_PYCODE, .id = (uint64_t)i, .id2 = file, .aux = string(name),
					 .aux2 = (uint64_t)(10 + i * 20) };
		put(&tables, &r, &d);
	}
	for (int i = 0; i < N_PYCODES * 2; i++) {
		r = (struct vrt_record){ .op = VRT_OP_PYFRAME, .id = (uint64_t)i, .id2 = (uint64_t)(i / 2),
					 .aux = (uint64_t)(i % 2) * 40 + 12, .aux2 = (uint64_t)(10 + (i / 2) * 20 + 3 + i % 2) };
		put(&tables, &r, &d);
	}
	/* 320 stacks: main -> train -> step -> layer L -> op O (Python, with eval boundaries),
	 * then ~8 interpreter frames, ~6 op frames, 4 allocator frames (native). */
	for (int s = 0; s < N_STACKS; s++) {
		int layer = s % 16, op = s / 16;
		uint32_t py[12];
		int n_py = 0;
		py[n_py++] = 0;
		py[n_py++] = VRT_PY_EVAL_BOUNDARY_;
		py[n_py++] = 2;
		py[n_py++] = 4;
		py[n_py++] = VRT_PY_EVAL_BOUNDARY_;
		py[n_py++] = (uint32_t)(10 + layer * 2);
		py[n_py++] = (uint32_t)(50 + (op % 20) * 2 + (layer & 1));
		py[n_py++] = VRT_PY_EVAL_BOUNDARY_;
		int nat[20], n_nat = 0;
		for (int k = 0; k < 8; k++)
			nat[n_nat++] = k; /* interpreter */
		for (int k = 0; k < 6; k++)
			nat[n_nat++] = 20 + (op * 7 + k * 3 + layer) % 200; /* the op */
		for (int k = 0; k < 4; k++)
			nat[n_nat++] = 230 + k; /* allocator */
		stacks[s] = make_stack(py, n_py, nat, n_nat);
		static const uint64_t sizes[] = { 512, 4096, 65536, 1 << 20, 3 << 20, 8 << 20, 24576, 1536 };
		stack_size[s] = sizes[(s * 7) % 8];
	}
	uint32_t py_leak[] = { 0, VRT_PY_EVAL_BOUNDARY_, 2, 6, VRT_PY_EVAL_BOUNDARY_ };
	int nat_leak[] = { 0, 1, 2, 3, 4, 5, 6, 7, 219, 218, 230, 231, 232, 233 };
	leak_stack = make_stack(py_leak, 5, nat_leak, 14);
	uint32_t py_phase[] = { 0, VRT_PY_EVAL_BOUNDARY_, 2 };
	phase_stack = make_stack(py_phase, 3, NULL, 0);
	int nat_host[] = { 0, 1, 2, 3, 4, 5, 6, 7, 210, 211, 212, 232, 233 };
	host_stack = make_stack(py_leak, 2, nat_host, 13);
	uint32_t t1 = string("python3"), t2 = string("pt_data_worker");
	r = (struct vrt_record){ .op = VRT_OP_THREAD_INFO, .id = 1, .aux = 4242, .id2 = t1 };
	put(&tables, &r, &d);
	r = (struct vrt_record){ .op = VRT_OP_THREAD_INFO, .id = 2, .aux = 4250, .id2 = t2 };
	put(&tables, &r, &d);
}

/* ---- events ----------------------------------------------------------------------------- */

static struct vrt_writer *w;
static struct buf events;
static struct vrt_delta delta;
static uint32_t chunk_thread;
static uint64_t n_events, ts;

static void check(int rc, const char *what)
{
	if (rc < 0) {
		fprintf(stderr, "gen_trace: %s: %s\n", what, vrt_strerror(rc));
		exit(1);
	}
}

static void flush_events(void)
{
	if (!events.len)
		return;
	check(vrt_writer_put(w, VRT_CHUNK_EVENTS, events.data, events.len), "write events");
	events.len = 0;
	delta = (struct vrt_delta){ 0, 0 };
	chunk_thread = 0;
	vrt_writer_count_events(w, n_events, 0);
}

/*
 * ALLOC and FREE, straight-line: byte for byte what vrt_record_encode writes for their layouts
 * ("tpdkasxqS", "tpdkasqST"), at a third of its cost. The first million events of every run
 * are encoded both ways and compared, so a layout change cannot slip past unnoticed.
 */
static uint8_t *encode_fast(uint8_t *p, const struct vrt_record *r, struct vrt_delta *d)
{
	*p++ = r->op;
	p = vrt_put_uvarint(p, vrt_zigzag((int64_t)(r->ts - d->ts)));
	d->ts = r->ts;
	p = vrt_put_uvarint(p, r->api);
	p = vrt_put_uvarint(p, vrt_zigzag(r->device));
	p = vrt_put_uvarint(p, r->kind);
	p = vrt_put_uvarint(p, vrt_zigzag((int64_t)(r->addr - d->addr)));
	d->addr = r->addr;
	p = vrt_put_uvarint(p, r->size);
	if (r->op == VRT_OP_ALLOC)
		p = vrt_put_uvarint(p, r->aux);
	p = vrt_put_uvarint(p, r->stream);
	p = vrt_put_uvarint(p, r->stack);
	if (r->op == VRT_OP_FREE)
		p = vrt_put_uvarint(p, r->stack2);
	return p;
}

static void event(uint32_t thread, struct vrt_record *r)
{
	reserve(&events, 2 * VRT_RECORD_MAX_FIXED);
	if (thread != chunk_thread) {
		struct vrt_record t = { .op = VRT_OP_THREAD, .id = thread };
		events.len = (size_t)(vrt_record_encode(events.data + events.len, &t, &delta) - events.data);
		chunk_thread = thread;
	}
	uint8_t *at = events.data + events.len, *end;
	if (r->op != VRT_OP_ALLOC && r->op != VRT_OP_FREE) {
		end = vrt_record_encode(at, r, &delta);
	} else if (n_events < 1000000) {
		uint8_t check[VRT_RECORD_MAX_FIXED];
		struct vrt_delta d2 = delta;
		uint8_t *check_end = vrt_record_encode(check, r, &d2);
		end = encode_fast(at, r, &delta);
		if (end - at != check_end - check || memcmp(at, check, (size_t)(end - at))) {
			fprintf(stderr, "gen_trace: fast encoder disagrees with record.h for op %u\n", r->op);
			exit(1);
		}
	} else {
		end = encode_fast(at, r, &delta);
	}
	events.len = (size_t)(end - events.data);
	n_events++;
	if (events.len >= CHUNK_BYTES)
		flush_events();
}

/* Live allocations: a slot per pool address. */
struct live {
	uint64_t size, ts;
	uint32_t stack;
	uint8_t kind, used;
	int16_t device;
};
static struct live live[POOL];
static uint32_t free_list[POOL], n_free;
static uint64_t pool_addr[POOL];

static uint64_t tick(void)
{
	ts += 1 + (rnd() % 3 == 0); /* µs: a real loop makes an event every 1-2 µs */
	return ts;
}

static int alloc(uint32_t thread, uint32_t stack, uint64_t size, uint8_t kind, int device)
{
	if (!n_free) {
		fprintf(stderr, "gen_trace: address pool exhausted\n");
		exit(1);
	}
	uint32_t slot = free_list[--n_free];
	live[slot] = (struct live){ size, tick(), stack, kind, 1, (int16_t)device };
	struct vrt_record r = { .op = VRT_OP_ALLOC, .ts = ts, .api = VRT_API_CUDA_MALLOC, .device = device,
				.kind = kind, .addr = pool_addr[slot], .size = size, .stack = stack };
	event(thread, &r);
	return (int)slot;
}

static void release(uint32_t thread, int slot)
{
	struct live *l = &live[slot];
	struct vrt_record r = { .op = VRT_OP_FREE, .ts = tick(), .api = VRT_API_CUDA_FREE, .device = l->device,
				.kind = l->kind, .addr = pool_addr[slot], .size = l->size, .stack2 = l->stack };
	event(thread, &r);
	l->used = 0;
	free_list[n_free++] = (uint32_t)slot;
}

static void phase(uint8_t op, uint32_t name)
{
	struct vrt_record r = { .op = op, .ts = tick(), .id = name, .stack = op == VRT_OP_PHASE_ENTER ? phase_stack : 0 };
	event(1, &r);
}

/* --hold: allocations that stay live, at addresses of their own. */
static uint64_t n_held;
static uint64_t held_addr(uint64_t i) { return 0x100000000000ull + i * 4096; }

static void hold(uint64_t n)
{
	for (; n_held < n; n_held++) {
		struct vrt_record r = { .op = VRT_OP_ALLOC, .ts = tick(), .api = VRT_API_CUDA_MALLOC,
					.kind = VRT_KIND_DEVICE, .addr = held_addr(n_held), .size = 4096,
					.stack = stacks[n_held % N_STACKS] };
		event(1, &r);
	}
}

/* The exit checkpoint, in parts of at most ~1 MiB of records like the collector's. */
static void checkpoint_part(struct buf *cp, struct vrt_delta *d, bool last)
{
	if (!last && cp->len < CHUNK_BYTES)
		return;
	check(vrt_writer_put(w, VRT_CHUNK_CHECKPOINT, cp->data, cp->len), "write checkpoint");
	cp->len = 0;
	*d = (struct vrt_delta){ 0, 0 };
}

static void checkpoint_exit(void)
{
	struct buf cp = { 0 };
	struct vrt_delta d = { 0, 0 };
	struct vrt_record r = { .op = VRT_OP_CP_BEGIN, .ts = ts, .id = VRT_CP_EXIT, .aux = n_events };
	put(&cp, &r, &d);
	uint64_t count = 0;
	for (int i = 0; i < POOL; i++) {
		if (!live[i].used)
			continue;
		r = (struct vrt_record){ .op = VRT_OP_CP_LIVE, .id2 = VRT_OP_ALLOC, .ts = live[i].ts,
					 .api = VRT_API_CUDA_MALLOC, .device = live[i].device, .kind = live[i].kind,
					 .addr = pool_addr[i], .size = live[i].size, .stack = live[i].stack };
		put(&cp, &r, &d);
		count++;
	}
	for (uint64_t i = 0; i < n_held; i++, count++) {
		r = (struct vrt_record){ .op = VRT_OP_CP_LIVE, .id2 = VRT_OP_ALLOC, .ts = 1, .api = VRT_API_CUDA_MALLOC,
					 .kind = VRT_KIND_DEVICE, .addr = held_addr(i), .size = 4096,
					 .stack = stacks[i % N_STACKS] };
		put(&cp, &r, &d);
		checkpoint_part(&cp, &d, false);
	}
	r = (struct vrt_record){ .op = VRT_OP_CP_END, .id = count };
	put(&cp, &r, &d);
	checkpoint_part(&cp, &d, true);
	free(cp.data);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: gen_trace OUT EVENTS [--leak-every STEPS] [--seed N] [--step-events N] [--hold N]\n");
		return 2;
	}
	const char *out = argv[1];
	uint64_t want = strtoull(argv[2], NULL, 10);
	long leak_every = 0, step_events = 10000;
	uint64_t held = 0;
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--leak-every"))
			leak_every = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			rng_state = strtoull(argv[i + 1], NULL, 10) * 0x9e3779b97f4a7c15ull | 1;
		else if (!strcmp(argv[i], "--step-events"))
			step_events = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--hold"))
			held = strtoull(argv[i + 1], NULL, 10);
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	unlink(out);
	int fd = vrt_trace_create(out, NULL, 0);
	check(fd, out);
	struct vrt_writer_options o = { .fd = fd, .ring_bytes = 0, .ts_unit_ns = 1000, .pid = (int32_t)getpid(),
					.ppid = (int32_t)getppid(), .rank = -1, .local_rank = -1, .world_size = -1,
					.start_realtime_ns = (uint64_t)time(NULL) * 1000000000ull };
	check(vrt_writer_open(&w, &o), "open");
	build_tables();
	uint32_t phase_name = string("train_step");
	check(vrt_writer_put(w, VRT_CHUNK_TABLES, tables.data, tables.len), "write tables");

	/* Address pool: 2 MiB-aligned segments carved into blocks, shuffled once. */
	for (uint32_t i = 0; i < POOL; i++) {
		pool_addr[i] = 0x7f0000000000ull + (uint64_t)(i / 16) * (32ull << 20) + (uint64_t)(i % 16) * (2ull << 20);
		free_list[i] = i;
	}
	for (uint32_t i = POOL - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rnd() % (i + 1)), t = free_list[i];
		free_list[i] = free_list[j];
		free_list[j] = t;
	}
	n_free = POOL;

	hold(held < want ? held : want);
	/* weights: long-lived */
	for (int i = 0; i < 2000 && n_events < want; i++)
		alloc(1, stacks[i % 40], stack_size[i % 40] * 4, VRT_KIND_DEVICE, 0);
	/* The step "program": a fixed sequence of allocations (site, size, temporary or kept
	 * until backward), drawn once; every step replays it with 2% of entries varied, so steps
	 * repeat like the iterations of a real training loop. */
	struct op {
		uint32_t site;
		uint8_t temp;
	};
	static struct op prog[8192];
	int n_prog = 0;
	uint64_t per_step = (uint64_t)(step_events > 100 ? step_events : 100);
	for (uint64_t ev = 0; ev + 4 < per_step && n_prog < 8192; n_prog++) {
		prog[n_prog].site = 40 + (uint32_t)(rnd() % (N_STACKS - 40));
		prog[n_prog].temp = (rnd() & 3) == 0;
		ev += 2;
	}
	static int acts[8192];
	int host[64], n_host = 0;
	long step = 0;
	while (n_events < want) {
		step++;
		phase(VRT_OP_PHASE_ENTER, phase_name);
		int n_acts = 0;
		/* forward: allocate activations; temporaries are freed right away */
		for (int k = 0; k < n_prog && n_events < want; k++) {
			struct op o = prog[k];
			if ((rnd() % 50) == 0) /* 2%: a different site this time */
				o.site = 40 + (uint32_t)(rnd() % (N_STACKS - 40));
			int slot = alloc(1, stacks[o.site], stack_size[o.site], VRT_KIND_DEVICE, 0);
			if (o.temp)
				release(1, slot);
			else
				acts[n_acts++] = slot;
			if (k % 400 == 0) { /* the data loader stages a batch in pinned memory */
				host[n_host++] = alloc(2, host_stack, 4 << 20, VRT_KIND_HOST_PINNED, -1);
				if (n_host > 4)
					release(2, host[--n_host]);
			}
		}
		/* backward: free activations in reverse */
		while (n_acts && n_events < want)
			release(1, acts[--n_acts]);
		if (leak_every && step % leak_every == 0 && n_events < want)
			alloc(1, leak_stack, 1 << 20, VRT_KIND_DEVICE, 0);
		if (n_events < want)
			phase(VRT_OP_PHASE_EXIT, phase_name);
	}
	flush_events();
	checkpoint_exit();
	vrt_writer_count_events(w, n_events, 0);
	vrt_writer_set_end(w, VRT_END_EXIT, 0, ts);
	uint64_t bytes = vrt_writer_file_bytes(w);
	vrt_writer_close(w);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("events=%llu bytes=%llu steps=%ld seconds=%.3f\n", (unsigned long long)n_events,
	       (unsigned long long)bytes, step, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	return 0;
}
