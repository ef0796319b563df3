/* SPDX-License-Identifier: MIT */
/*
 * gen_torch_trace: writes a synthetic trace of a PyTorch-like training loop, fast, for scale tests
 * (tests/e2e/test_html.py). No GPU, no preload: the records go straight through the writer
 * library (format/trace_writer.c) and the shared record codec (include/vramtrace/record.h).
 *
 *     gen_torch_trace OUT.vrt EVENTS [--oom] [--layers N] [--leak-every K]
 *
 * Each step (~1000 events) is a phase "train_step": forward allocates activation tensors from a
 * dozen model sites in each of 40 layers (--layers), backward frees them and allocates
 * gradients (the previous step's are freed first), the optimizer makes temporaries, and one
 * site leaks a tensor every 10 steps (--leak-every). The caching allocator's segments (cudaMalloc) grow to cover the
 * tensors and are never returned; a pinned host buffer stands for a data loader. A mark
 * "epoch" every 100 steps. With --oom, the run
 * ends in a PyTorch out-of-memory error. Stops after about EVENTS event records.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trace_writer.h"
#include "vramtrace/record.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define CHUNK_RAW (1u << 20)

/* ---- tables ---------------------------------------------------------------------------- */

static uint8_t tables[1 << 20];
static size_t tables_len;
static uint32_t n_strings = 1, n_codes = 1, n_frames = 1, n_nodes = 1;

struct node { uint32_t parent, kind; uint64_t value; };
static struct node nodes[4096];

static void put_table(const struct vrt_record *r)
{
	struct vrt_delta d = { 0, 0 };
	tables_len = (size_t)(vrt_record_encode(tables + tables_len, r, &d) - tables);
}

/* Interned, as the preload does: one id per text (leaks finds a phase by its name). */
static const char *texts[4096];

static uint32_t string(const char *s)
{
	for (uint32_t i = 1; i < n_strings; i++)
		if (!strcmp(texts[i], s))
			return i;
	texts[n_strings] = s;
	struct vrt_record r = { .op = VRT_OP_STRING, .id = n_strings, .bytes = (const uint8_t *)s,
				.bytes_len = (uint32_t)strlen(s) };
	put_table(&r);
	return n_strings++;
}

/* A Python frame: a code object (file, function) at a line. */
static uint32_t pyframe(const char *file, const char *function, int line)
{
	struct vrt_record code = { .op = VRT_OP_PYCODE, .id = n_codes, .id2 = string(file), .aux = string(function),
				   .aux2 = (uint64_t)line };
	put_table(&code);
	struct vrt_record f = { .op = VRT_OP_PYFRAME, .id = n_frames, .id2 = n_codes++, .aux = 0, .aux2 = (uint64_t)line };
	put_table(&f);
	return n_frames++;
}

static uint32_t node(uint32_t parent, uint32_t kind, uint64_t value)
{
	for (uint32_t i = 1; i < n_nodes; i++)
		if (nodes[i].parent == parent && nodes[i].kind == kind && nodes[i].value == value)
			return i;
	nodes[n_nodes] = (struct node){ parent, kind, value };
	struct vrt_record r = { .op = VRT_OP_STACK, .id = n_nodes, .id2 = parent, .aux2 = kind, .aux = value };
	put_table(&r);
	return n_nodes++;
}

/* A stack from Python frames, outermost first. */
static uint32_t stack(int n, const uint32_t *frames)
{
	uint32_t id = 0;
	for (int i = 0; i < n; i++)
		id = node(id, VRT_FRAME_PYTHON, frames[i]);
	return id;
}

static void info(const char *key, const char *value)
{
	struct vrt_record r = { .op = VRT_OP_INFO, .id = string(key), .id2 = string(value) };
	put_table(&r);
}

/* ---- the program's sites ------------------------------------------------------------------ */

#define N_FORWARD 12
#define N_GRADS 6
#define MAX_LAYERS 400

static int layers = 40, leak_every = 10;

static uint32_t st_forward[N_FORWARD], st_grad[N_GRADS], st_optim, st_leak, st_segment, st_pinned, st_params,
	st_oom;
static uint32_t name_step, name_epoch;

static void define_sites(void)
{
	uint32_t mod = pyframe("train.py", "<module>", 120), mainf = pyframe("train.py", "main", 104);
	uint32_t loop = pyframe("train.py", "train", 77), step = pyframe("train.py", "train_step", 51);
	uint32_t fwd = pyframe("model.py", "Transformer.forward", 88);
	static const char *const layers[N_FORWARD] = { "Embedding.forward", "Attention.qkv", "Attention.scores",
		"Attention.softmax", "Attention.out", "MLP.up", "MLP.gelu", "MLP.down", "LayerNorm.forward",
		"Residual.add", "Head.logits", "CrossEntropy.forward" };
	for (int i = 0; i < N_FORWARD; i++) {
		uint32_t call = pyframe("torch/nn/modules/module.py", "Module._call_impl", 1527);
		uint32_t f[] = { mod, mainf, loop, step, fwd, call, pyframe("model.py", layers[i], 20 + 7 * i) };
		st_forward[i] = stack(7, f);
	}
	uint32_t bwd = pyframe("train.py", "train_step", 53);
	uint32_t autograd = pyframe("torch/autograd/__init__.py", "backward", 251);
	for (int i = 0; i < N_GRADS; i++) {
		uint32_t f[] = { mod, mainf, loop, bwd, autograd, pyframe("torch/autograd/graph.py", "AccumulateGrad", 744 + i) };
		st_grad[i] = stack(6, f);
	}
	uint32_t opt = pyframe("train.py", "train_step", 55);
	uint32_t f_opt[] = { mod, mainf, loop, opt, pyframe("torch/optim/adam.py", "Adam.step", 166),
			     pyframe("torch/optim/adam.py", "_multi_tensor_adam", 512) };
	st_optim = stack(6, f_opt);
	uint32_t f_leak[] = { mod, mainf, loop, pyframe("train.py", "train", 81),
			      pyframe("metrics.py", "History.record", 14) };
	st_leak = stack(5, f_leak);
	uint32_t f_params[] = { mod, mainf, pyframe("train.py", "main", 98),
				pyframe("torch/nn/modules/module.py", "Module._apply", 833) };
	st_params = stack(4, f_params);
	uint32_t f_seg[] = { mod, mainf, loop, step, pyframe("c10/cuda/CUDACachingAllocator.cpp", "CUDACachingAllocator::malloc", 1004) };
	st_segment = stack(5, f_seg);
	uint32_t f_pin[] = { mod, mainf, pyframe("data.py", "PinnedLoader.__init__", 33) };
	st_pinned = stack(3, f_pin);
	uint32_t f_oom[] = { mod, mainf, loop, step, fwd, pyframe("model.py", "Attention.scores", 41) };
	st_oom = stack(6, f_oom);
	name_step = string("train_step");
	name_epoch = string("epoch");
	info("cmdline", "python train.py --synthetic");
	struct vrt_record th = { .op = VRT_OP_THREAD_INFO, .id = 1, .aux = 4242, .id2 = string("MainThread") };
	put_table(&th);
}

/* ---- events ------------------------------------------------------------------------------- */

struct out {
	struct vrt_writer *w;
	uint8_t buf[CHUNK_RAW + 512];
	size_t len;
	struct vrt_delta d;
	uint64_t events, ts;
};

static void flush(struct out *o)
{
	if (!o->len)
		return;
	if (vrt_writer_put(o->w, VRT_CHUNK_EVENTS, o->buf, o->len) < 0) {
		fprintf(stderr, "gen_torch_trace: write failed\n");
		exit(1);
	}
	o->len = 0;
	o->d = (struct vrt_delta){ 0, 0 };
}

static void emit(struct out *o, struct vrt_record *r)
{
	if (o->len + VRT_RECORD_MAX_FIXED > CHUNK_RAW)
		flush(o);
	if (!o->len) {
		struct vrt_record th = { .op = VRT_OP_THREAD, .id = 1 };
		o->len = (size_t)(vrt_record_encode(o->buf, &th, &o->d) - o->buf);
	}
	o->ts += 3 + (o->events % 7);
	r->ts = o->ts;
	o->len = (size_t)(vrt_record_encode(o->buf + o->len, r, &o->d) - o->buf);
	o->events++;
}

static uint64_t next_addr = 0x7f0000000000ull;
static uint64_t reserved, in_blocks;

static void block(struct out *o, bool alloc, uint64_t addr, uint64_t size, uint32_t st)
{
	if (alloc && in_blocks + size > reserved) { /* the caching allocator grows a segment first */
		uint64_t seg = (size + 20 * MiB - 1) / (20 * MiB) * (20 * MiB);
		struct vrt_record s = { .op = VRT_OP_ALLOC, .api = VRT_API_CUDA_MALLOC, .device = 0, .kind = VRT_KIND_DEVICE,
					.addr = 0x600000000000ull + reserved, .size = seg, .stack = st_segment };
		emit(o, &s);
		reserved += seg;
	}
	struct vrt_record r = { .op = alloc ? VRT_OP_BLOCK_ALLOC : VRT_OP_BLOCK_FREE, .api = VRT_API_TORCH_BLOCK,
				.device = 0, .addr = addr, .size = size, .aux = size };
	if (alloc)
		r.stack = st;
	else
		r.stack2 = st;
	emit(o, &r);
	in_blocks = alloc ? in_blocks + size : in_blocks - size;
}

static void phase(struct out *o, uint32_t op, uint32_t name)
{
	struct vrt_record r = { .op = (uint8_t)op, .id = name };
	emit(o, &r);
}

struct live { uint64_t addr, size; uint32_t stack; };

static void run(struct out *o, uint64_t target, bool oom)
{
	static struct live acts[N_FORWARD * MAX_LAYERS];
	struct live grads[N_GRADS];
	int n_grads = 0;
	struct vrt_record pin = { .op = VRT_OP_ALLOC, .api = VRT_API_CUDA_HOST_ALLOC, .device = -1,
				  .kind = VRT_KIND_HOST_PINNED, .addr = 0x500000000000ull, .size = 256 * MiB, .stack = st_pinned };
	emit(o, &pin);
	block(o, true, next_addr += 4 * MiB, 1536 * MiB, st_params);
	for (uint64_t step = 0; o->events < target; step++) {
		phase(o, VRT_OP_PHASE_ENTER, name_step);
		int n_acts = 0;
		for (int layer = 0; layer < layers; layer++)
			for (int i = 0; i < N_FORWARD; i++) {
				uint64_t size = (uint64_t)(1 + (i * 7 + layer * 3 + step % 5) % 13) * MiB / 2;
				acts[n_acts] = (struct live){ next_addr += 128 * MiB, size, st_forward[i] };
				block(o, true, acts[n_acts].addr, size, st_forward[i]);
				n_acts++;
			}
		for (int i = 0; i < n_grads; i++) /* zero_grad(set_to_none=True) */
			block(o, false, grads[i].addr, grads[i].size, grads[i].stack);
		n_grads = 0;
		while (n_acts > 0) {
			n_acts--;
			block(o, false, acts[n_acts].addr, acts[n_acts].size, acts[n_acts].stack);
			if (n_acts % (N_FORWARD * layers / N_GRADS) == 0 && n_grads < N_GRADS) {
				grads[n_grads] = (struct live){ next_addr += 128 * MiB, 64 * MiB * (1 + n_grads % 3), st_grad[n_grads] };
				block(o, true, grads[n_grads].addr, grads[n_grads].size, st_grad[n_grads]);
				n_grads++;
			}
		}
		for (int i = 0; i < 4; i++) {
			uint64_t a = next_addr += 128 * MiB;
			block(o, true, a, 96 * MiB, st_optim);
			block(o, false, a, 96 * MiB, st_optim);
		}
		if (step % (uint64_t)leak_every == 0) /* never freed */
			block(o, true, next_addr += 128 * MiB, 6 * MiB, st_leak);
		phase(o, VRT_OP_PHASE_EXIT, name_step);
		if (step % 100 == 99) {
			struct vrt_record m = { .op = VRT_OP_MARK, .id = name_epoch };
			emit(o, &m);
		}
	}
	if (oom) {
		phase(o, VRT_OP_PHASE_ENTER, name_step);
		struct vrt_record r = { .op = VRT_OP_OOM, .api = VRT_API_TORCH_OOM, .device = 0, .kind = VRT_KIND_DEVICE,
					.size = 40ull << 30, .aux = 3ull << 30, .aux2 = 80ull << 30, .result = 2,
					.stack = st_oom };
		emit(o, &r);
		phase(o, VRT_OP_PHASE_EXIT, name_step);
	}
}

int main(int argc, char **argv)
{
	bool oom = false, bad = argc < 3;
	for (int i = 3; i < argc && !bad; i++) {
		if (!strcmp(argv[i], "--oom"))
			oom = true;
		else if (!strcmp(argv[i], "--layers") && i + 1 < argc)
			layers = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--leak-every") && i + 1 < argc)
			leak_every = atoi(argv[++i]);
		else
			bad = true;
	}
	if (bad || layers < 1 || layers > MAX_LAYERS || leak_every < 1) {
		fprintf(stderr, "usage: gen_torch_trace OUT.vrt EVENTS [--oom] [--layers 1..%d] [--leak-every K]\n",
			MAX_LAYERS);
		return 2;
	}
	uint64_t target = strtoull(argv[2], NULL, 10);
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct vrt_writer_options opt = { .fd = fd, .ts_unit_ns = 1000, .pid = 4242, .ppid = 1, .rank = -1,
					  .local_rank = -1, .world_size = -1, .zstd_level = 1,
					  .start_realtime_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec };
	static struct out o;
	if (vrt_writer_open(&o.w, &opt)) {
		fprintf(stderr, "gen_torch_trace: cannot start the trace\n");
		return 1;
	}
	define_sites();
	if (vrt_writer_put(o.w, VRT_CHUNK_TABLES, tables, tables_len) < 0)
		return 1;
	o.ts = 500000; /* half a second of start-up before the first event */
	run(&o, target, oom);
	flush(&o);
	vrt_writer_count_events(o.w, o.events, 0);
	vrt_writer_set_end(o.w, VRT_END_EXIT, 0, o.ts + 1000);
	vrt_writer_close(o.w);
	printf("%llu events\n", (unsigned long long)o.events);
	return 0;
}
