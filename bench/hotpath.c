/* SPDX-License-Identifier: MIT */
/*
 * hotpath - the cost of one cudaMalloc + cudaFree pair, the way the preload sees it.
 *
 *   hotpath flat|deep|train|cold|ops THREADS PAIRS [SIZE]
 *
 * flat   each thread makes PAIRS cudaMalloc(SIZE) + cudaFree pairs from one call site;
 * deep   the same from the bottom of a 40-frame native call chain (one fixed chain, so the
 *        preload's per-thread stack cache hits after the first pair, as in a real loop);
 * train  a training-like step loop for the trace-size measurement: each step makes ~1000
 *        events (500 allocations, 500 frees) from 12 sites of different sizes and depths,
 *        holding a small working set and a few long-lived buffers. PAIRS = steps.
 * cold   a pair at the bottom of a 40-frame chain of 40 distinct functions, two call sites
 *        each, taken along one of 64 paths in turn (64 stacks, 80 return addresses), after
 *        touching 4 MiB between pairs: the caches hold nothing of the preload's when its hook
 *        runs, as in a real framework's step, which runs much code between two allocations.
 *        The touching costs the same untraced; subtract, or read pair_ns: the time inside
 *        the pairs alone (wall, one thread).
 * ops    cold's caches, and a framework's stack shape: the pair at the bottom of 6 distinct
 *        "allocator" functions, under one of 8 "operators" (3 distinct functions each,
 *        of their own frame sizes, so the allocator's frames sit at another depth under each),
 *        under one 16-frame outer chain, the operator picked in a fixed pseudo-random order.
 *        Prints pair_ns too.
 *
 * Linked against the CUDA runtime test double (tests/doubles), so "untraced" includes the
 * double's own cost (a mutex, an mmap and a munmap per pair). Prints one line of key=value:
 *   pairs       pairs made over all threads
 *   wall_ns     wall time of the timed loop (first thread started to last thread done)
 *   cpu_ns      CPU time of the worker threads only (CLOCK_THREAD_CPUTIME_ID, summed): the
 *               hooks' own cost, whatever the collector thread does on another core
 *   user_ns     the user-mode part of cpu_ns (getrusage RUSAGE_THREAD; the kernel's split is
 *               statistical, so it is kept for reference only)
 *   proc_cpu_ns CPU time of the whole process from the start of the loop until 150 ms after
 *               its end when traced (the collector's next drain): worker threads + collector
 *   faults      minor page faults of the worker threads during the loop
 *
 *   hotpath faults    prints the CPU cost of one first-touch page fault (fault_ns=…)
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, used))
#define DEEP_FRAMES 40

static int threads, mode;
static long pairs;
static size_t size = 4096;
static pthread_barrier_t start_line;
static uint64_t thread_cpu[256], thread_faults[256], thread_user[256], wall_start[256], wall_end[256];
static volatile int sink;

enum { FLAT, DEEP, TRAIN, COLD, OPS_MODE };

static uint64_t now(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void check(cudaError_t rc, const char *what)
{
	if (rc != cudaSuccess) {
		fprintf(stderr, "hotpath: %s failed: %d\n", what, (int)rc);
		exit(3);
	}
}

NOINLINE static void pair(void)
{
	void *p;
	check(cudaMalloc(&p, size), "cudaMalloc");
	check(cudaFree(p), "cudaFree");
}

/* A real frame per level: the add after the call keeps it from becoming a tail call. */
NOINLINE static int chain(int depth)
{
	if (depth == 0) {
		pair();
		return sink;
	}
	return chain(depth - 1) + 1;
}

/* ---- cold: 40 distinct frames along 64 paths, caches evicted between pairs ----------------- */

#define COLD_PATHS 64
#define COLD_EVICT (4u << 20)

static unsigned char *evict_buf;

/* Level L calls level L + 1 from one of two call sites, picked by the path's bit L % 6 (a
 * different combination of them per path); the add after each call keeps it a real frame. */
#define COLD_LEVEL(l, next)                                       \
	NOINLINE static int cold##l(unsigned path)                \
	{                                                         \
		if (path >> ((l) % 6) & 1)                        \
			return next(path) + 1;                    \
		return next(path) * 3 + (int)(path & 1);          \
	}
static uint64_t cold_pair_ns; /* time inside the pairs themselves (one thread) */

NOINLINE static int cold40(unsigned path)
{
	uint64_t t0 = now(CLOCK_MONOTONIC);
	pair();
	cold_pair_ns += now(CLOCK_MONOTONIC) - t0;
	return (int)path + sink;
}
#define COLD_CHAIN(X) X(39, cold40) X(38, cold39) X(37, cold38) X(36, cold37) X(35, cold36) X(34, cold35) \
	X(33, cold34) X(32, cold33) X(31, cold32) X(30, cold31) X(29, cold30) X(28, cold29) X(27, cold28)      \
	X(26, cold27) X(25, cold26) X(24, cold25) X(23, cold24) X(22, cold23) X(21, cold22) X(20, cold21)      \
	X(19, cold20) X(18, cold19) X(17, cold18) X(16, cold17) X(15, cold16) X(14, cold15) X(13, cold14)      \
	X(12, cold13) X(11, cold12) X(10, cold11) X(9, cold10) X(8, cold9) X(7, cold8) X(6, cold7)            \
	X(5, cold6) X(4, cold5) X(3, cold4) X(2, cold3) X(1, cold2) X(0, cold1)
COLD_CHAIN(COLD_LEVEL)

NOINLINE static void cold_pair(long i)
{
	for (size_t at = 0; at < COLD_EVICT; at += 64)
		evict_buf[at]++;
	/* 37 is odd: every path once in 64 pairs, and each pair's path differs from the last one's
	 * in several bits (levels) */
	sink += cold0((unsigned)(i * 37 % COLD_PATHS));
}

/* ---- ops: one allocator's frames under operators of other depths ------------------------- */

#define OPS 8

NOINLINE static int alloc5(int x)
{
	uint64_t t0 = now(CLOCK_MONOTONIC);
	pair();
	cold_pair_ns += now(CLOCK_MONOTONIC) - t0;
	return x + sink;
}
#define ALLOC_LEVEL(l, next) \
	NOINLINE static int alloc##l(int x) { return next(x + (l)) + 1; }
ALLOC_LEVEL(4, alloc5) ALLOC_LEVEL(3, alloc4) ALLOC_LEVEL(2, alloc3) ALLOC_LEVEL(1, alloc2) ALLOC_LEVEL(0, alloc1)

/* Operator k's level l: a frame of its own size, so what it calls sits at its own depth. */
#define OP_LEVEL(k, l, next)                                 \
	NOINLINE static int op##k##_##l(int x)               \
	{                                                    \
		volatile char pad[16 + 48 * ((k) * 3 + (l))]; \
		pad[0] = (char)x;                            \
		return next(x) + pad[0];                     \
	}
#define OPERATOR(k) OP_LEVEL(k, 2, alloc0) OP_LEVEL(k, 1, op##k##_2) OP_LEVEL(k, 0, op##k##_1)
OPERATOR(0) OPERATOR(1) OPERATOR(2) OPERATOR(3) OPERATOR(4) OPERATOR(5) OPERATOR(6) OPERATOR(7)

NOINLINE static int ops_dispatch(int k)
{
	static int (*const ops[OPS])(int) = { op0_0, op1_0, op2_0, op3_0, op4_0, op5_0, op6_0, op7_0 };
	return ops[k](k) + 1;
}

NOINLINE static int ops_outer(int depth, int k)
{
	volatile char pad[64];
	pad[0] = (char)depth;
	return (depth ? ops_outer(depth - 1, k) : ops_dispatch(k)) + pad[0];
}

NOINLINE static void ops_pair(void)
{
	for (size_t at = 0; at < COLD_EVICT; at += 64)
		evict_buf[at]++;
	/* a fixed pseudo-random order (xorshift32): an operator comes back after a few others, or
	 * after many */
	static uint32_t x = 2463534242u;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	sink += ops_outer(15, (int)(x % OPS));
}

/* ---- train: a steady step loop from a dozen sites ---------------------------------------- */

#define SITES 12
#define WORKING 64

static void *working[WORKING];
static int n_working;

NOINLINE static void *site_alloc(int site, size_t bytes)
{
	void *p;
	check(cudaMalloc(&p, bytes), "cudaMalloc");
	(void)site;
	return p;
}

/* Sites reach cudaMalloc through call chains of different depths, like layers of a model. */
NOINLINE static void *via(int site, int depth, size_t bytes)
{
	if (depth <= 0)
		return site_alloc(site, bytes);
	void *p = via(site, depth - 1, bytes);
	sink += depth;
	return p;
}

NOINLINE static void *s0(size_t b) { return via(0, 3, b); }
NOINLINE static void *s1(size_t b) { return via(1, 5, b); }
NOINLINE static void *s2(size_t b) { return via(2, 7, b); }
NOINLINE static void *s3(size_t b) { return via(3, 9, b); }
NOINLINE static void *s4(size_t b) { return via(4, 11, b); }
NOINLINE static void *s5(size_t b) { return via(5, 13, b); }
NOINLINE static void *s6(size_t b) { return via(6, 4, b); }
NOINLINE static void *s7(size_t b) { return via(7, 6, b); }
NOINLINE static void *s8(size_t b) { return via(8, 8, b); }
NOINLINE static void *s9(size_t b) { return via(9, 10, b); }
NOINLINE static void *s10(size_t b) { return via(10, 12, b); }
NOINLINE static void *s11(size_t b) { return via(11, 14, b); }

static void *(*const sites[SITES])(size_t) = { s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11 };
static const size_t site_bytes[SITES] = { 4096, 8192, 65536, 12288, 1 << 20, 2 << 20,
					  16384, 32768, 4096, 131072, 262144, 524288 };

static void drop(int i)
{
	check(cudaFree(working[i]), "cudaFree");
	working[i] = working[--n_working];
}

NOINLINE static void train_step(long step)
{
	/* forward: 250 allocations kept until "backward"; backward: frees them in reverse while
	 * making 250 short-lived gradients. 1000 events a step, same sequence every step. */
	static void *acts[250];
	for (int i = 0; i < 250; i++)
		acts[i] = sites[i % SITES](site_bytes[i % SITES] + (size_t)(i % 3) * 4096);
	for (int i = 249; i >= 0; i--) {
		void *g = sites[(i + 5) % SITES](site_bytes[(i + 5) % SITES]);
		check(cudaFree(acts[i]), "cudaFree");
		if (n_working == WORKING)
			drop((int)(step % WORKING));
		working[n_working++] = g;
		if (i % 2)
			drop(n_working - 1);
	}
	while (n_working > 8)
		drop(n_working - 1);
}

/* The timed loop. Called twice from one call site (warm-up, then timed), so both calls have
 * the same stack and the warm-up fills the preload's stack cache for the timed one. */
NOINLINE static void loop(long n)
{
	for (long i = 0; i < n; i++) {
		if (mode == FLAT)
			pair();
		else if (mode == DEEP)
			chain(DEEP_FRAMES);
		else if (mode == COLD)
			cold_pair(i);
		else if (mode == OPS_MODE)
			ops_pair();
		else
			train_step(i);
	}
}

static void *worker(void *arg)
{
	int index = (int)(intptr_t)arg;
	check(cudaSetDevice(0), "cudaSetDevice");
	struct rusage r0, r1;
	uint64_t t0 = 0;
	/* Opaque trip count: a constant 2 lets the compiler peel the loop into two call sites
	 * of loop(), and then the two calls have different stacks. */
	static volatile int rounds = 2;
	for (int timed = 0; timed < rounds; timed++) {
		if (timed) {
			/* The collector fills a thread's stack cache when it drains (every
			 * VRAMTRACE_FLUSH_MS, 100 ms); until then every event from a new call site
			 * carries its frames. Measure the steady state, after that. */
			struct timespec nap = { 0, 150000000 };
			nanosleep(&nap, NULL);
			pthread_barrier_wait(&start_line);
			getrusage(RUSAGE_THREAD, &r0);
			wall_start[index] = now(CLOCK_MONOTONIC);
			cold_pair_ns = 0;
			t0 = now(CLOCK_THREAD_CPUTIME_ID);
		}
		loop(timed ? pairs : (mode == TRAIN ? 1 : mode == COLD ? 2 * COLD_PATHS : mode == OPS_MODE ? 8 * OPS : 2)); /* warm-up: lazy init, buffer, stack cache */
	}
	thread_cpu[index] = now(CLOCK_THREAD_CPUTIME_ID) - t0;
	wall_end[index] = now(CLOCK_MONOTONIC);
	getrusage(RUSAGE_THREAD, &r1);
	thread_faults[index] = (uint64_t)(r1.ru_minflt - r0.ru_minflt);
	thread_user[index] = (uint64_t)((r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) * 1000000000ll +
					(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) * 1000ll);
	return NULL;
}

/* CPU time of one first-touch page fault: a traced run writes its thread ring once around
 * before reusing it, which a long-running process pays once (bench/prefault.c removes that
 * from the measurement; this shows what it would have cost). */
static int calibrate_faults(void)
{
	size_t bytes = 64u << 20, pages = bytes / 4096;
	uint64_t best = ~0ull;
	for (int rep = 0; rep < 3; rep++) {
		char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return 3;
		madvise(m, bytes, MADV_NOHUGEPAGE);
		uint64_t t0 = now(CLOCK_THREAD_CPUTIME_ID);
		for (size_t i = 0; i < pages; i++)
			m[i * 4096] = 1;
		uint64_t t = now(CLOCK_THREAD_CPUTIME_ID) - t0;
		best = t < best ? t : best;
		munmap(m, bytes);
	}
	printf("mode=faults fault_ns=%.1f\n", (double)best / (double)pages);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "faults"))
		return calibrate_faults();
	if (argc < 4) {
		fprintf(stderr, "usage: hotpath flat|deep|train|cold|ops THREADS PAIRS [SIZE]\n");
		return 2;
	}
	mode = !strcmp(argv[1], "deep") ? DEEP : !strcmp(argv[1], "train") ? TRAIN : !strcmp(argv[1], "cold") ? COLD
	       : !strcmp(argv[1], "ops") ? OPS_MODE : FLAT;
	threads = atoi(argv[2]);
	pairs = atol(argv[3]);
	if (argc > 4)
		size = (size_t)atol(argv[4]);
	if (threads < 1 || threads > 256 || pairs < 1 || (mode == TRAIN && threads != 1)) {
		fprintf(stderr, "hotpath: bad arguments (train runs on one thread)\n");
		return 2;
	}
	bool evicting = mode == COLD || mode == OPS_MODE;
	if (evicting && threads != 1) {
		fprintf(stderr, "hotpath: cold and ops run on one thread\n");
		return 2;
	}
	if (evicting && !(evict_buf = calloc(COLD_EVICT, 1)))
		return 3;
	pthread_t t[256];
	pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i))
			return 3;
	pthread_barrier_wait(&start_line);
	uint64_t p0 = now(CLOCK_PROCESS_CPUTIME_ID);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	const char *preload = getenv("LD_PRELOAD");
	if (preload && strstr(preload, "libvramtrace")) {
		struct timespec nap = { 0, 150000000 }; /* the collector catches up: its CPU counts */
		nanosleep(&nap, NULL);
	}
	uint64_t proc = now(CLOCK_PROCESS_CPUTIME_ID) - p0;
	uint64_t cpu = 0, user = 0, faults = 0, first = ~0ull, last = 0;
	for (int i = 0; i < threads; i++) {
		cpu += thread_cpu[i];
		user += thread_user[i];
		faults += thread_faults[i];
		first = wall_start[i] < first ? wall_start[i] : first;
		last = wall_end[i] > last ? wall_end[i] : last;
	}
	uint64_t wall = last - first;
	long total = pairs * threads * (mode == TRAIN ? 500 : 1);
	printf("mode=%s threads=%d pairs=%ld wall_ns=%llu cpu_ns=%llu user_ns=%llu proc_cpu_ns=%llu faults=%llu\n",
	       argv[1], threads, total, (unsigned long long)wall, (unsigned long long)cpu, (unsigned long long)user,
	       (unsigned long long)proc, (unsigned long long)faults);
	if (evicting)
		printf("pair_ns=%.1f\n", (double)cold_pair_ns / (double)pairs);
	return 0;
}
