/* SPDX-License-Identifier: MIT */
/*
 * ab_loop - cudaMalloc+cudaFree pairs in one process that switches between tracing modes, for
 * bench/ab.py (its docstring and bench/README.md say how to read it).
 *
 *   ab_loop flat|deep PAIRS BLOCKS SEED MODES
 *
 * MODES is a comma list of: full (vramtrace records everything), armed (live set only), raw
 * (the same loop calling the runtime's unhooked aliases, bench/null_cudart.c: this process,
 * untraced). Each block runs one interval of PAIRS pairs per mode, in an order shuffled per
 * block, plus one empty interval. An interval is
 *
 *     request START (full) or ARM (armed, raw)  -- the collector drains what came before
 *     t0 = CLOCK_PROCESS_CPUTIME_ID
 *     PAIRS pairs
 *     request ARM                              -- drains and flushes this interval's events
 *     t1
 *
 * so t1 - t0 is everything the process spent on those pairs, the collector's encoding,
 * compression and write included; the empty interval is the request's own cost, which ab.py
 * subtracts. One line per interval: "interval block=B mode=M pairs=N proc_ns=P thread_ns=T
 * wall_ns=W" (thread and wall: the loop alone, without the closing request). flat makes its
 * pairs from one call site; deep from the bottom of a 40-frame
 * chain. Both warm up through the same call site first, so the stack cache is filled.
 */
#define _GNU_SOURCE
#define VRT_CTL_CLIENT
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vramtrace/control.h"

#define NOINLINE __attribute__((noinline, used))
#define DEEP_FRAMES 40

struct runtime {
	cudaError_t (*malloc)(void **, size_t);
	cudaError_t (*free)(void *);
};

enum mode { FULL, ARMED, RAW, EMPTY, N_MODES };
static const char *const mode_names[N_MODES] = { "full", "armed", "raw", "empty" };

static struct runtime hooked = { cudaMalloc, cudaFree }, raw;
static const struct runtime *rt;
static volatile int sink;

static uint64_t now(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One call site for every mode: the same return address whether rt is hooked or raw. */
NOINLINE static void pair(void)
{
	void *p;
	if (rt->malloc(&p, 4096) || rt->free(p)) {
		fprintf(stderr, "ab_loop: cudaMalloc/cudaFree failed\n");
		exit(3);
	}
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

NOINLINE static void loop(bool deep, long n)
{
	for (long i = 0; i < n; i++) {
		if (deep)
			chain(DEEP_FRAMES);
		else
			pair();
	}
}

static void request(uint16_t type)
{
	struct vrt_ctl_msg reply;
	int rc = vrt_ctl_request((int)getpid(), type, NULL, &reply, 30000);
	if (rc || reply.status) {
		fprintf(stderr, "ab_loop: control request %u failed (%d/%d): is vramtrace loaded with its control "
			"socket?\n", type, rc, reply.status);
		exit(3);
	}
}

static unsigned long long rng;

static unsigned next_random(unsigned n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)((rng >> 33) % n);
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: ab_loop flat|deep PAIRS BLOCKS SEED full,armed,raw\n");
		return 2;
	}
	bool deep = !strcmp(argv[1], "deep");
	long pairs = atol(argv[2]);
	int blocks = atoi(argv[3]);
	rng = strtoull(argv[4], NULL, 10);
	int modes[N_MODES], n_modes = 0;
	for (int m = 0; m < EMPTY; m++)
		if (strstr(argv[5], mode_names[m]))
			modes[n_modes++] = m;
	modes[n_modes++] = EMPTY;
	*(void **)&raw.malloc = dlsym(RTLD_DEFAULT, "vrt_bench_raw_malloc");
	*(void **)&raw.free = dlsym(RTLD_DEFAULT, "vrt_bench_raw_free");
	if (strstr(argv[5], "raw") && (!raw.malloc || !raw.free)) {
		fprintf(stderr, "ab_loop: mode raw needs bench/null_cudart.c's runtime (LD_LIBRARY_PATH=build/bench)\n");
		return 2;
	}
	int (*enabled)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "vramtrace_enabled");
	if (!enabled || !enabled()) {
		fprintf(stderr, "ab_loop: run it under vramtrace (LD_PRELOAD=libvramtrace.so)\n");
		return 2;
	}
	if (cudaSetDevice(0))
		return 3;
	/* Warm-up in full mode through the timed call site; START again drains it, which fills the
	 * thread's stack cache, and the raw runtime's lazy state is set up too. */
	rt = &hooked;
	loop(deep, 2000); /* the trace file is opened by the first event, before START can answer */
	request(VRT_CTL_START);
	if (raw.malloc) {
		rt = &raw;
		loop(deep, 2000);
	}
	for (int b = 0; b < blocks; b++) {
		for (int i = n_modes - 1; i > 0; i--) {
			int j = (int)next_random((unsigned)i + 1), t = modes[i];
			modes[i] = modes[j];
			modes[j] = t;
		}
		for (int i = 0; i < n_modes; i++) {
			int m = modes[i];
			rt = m == RAW ? &raw : &hooked;
			request(m == FULL ? VRT_CTL_START : VRT_CTL_ARM);
			uint64_t w0 = now(CLOCK_MONOTONIC), t0 = now(CLOCK_THREAD_CPUTIME_ID);
			uint64_t p0 = now(CLOCK_PROCESS_CPUTIME_ID);
			long n = m == EMPTY ? 0 : pairs;
			loop(deep, n);
			uint64_t t1 = now(CLOCK_THREAD_CPUTIME_ID), w1 = now(CLOCK_MONOTONIC);
			request(VRT_CTL_ARM);
			uint64_t p1 = now(CLOCK_PROCESS_CPUTIME_ID);
			printf("interval block=%d mode=%s pairs=%ld proc_ns=%llu thread_ns=%llu wall_ns=%llu\n", b,
			       mode_names[m], n, (unsigned long long)(p1 - p0), (unsigned long long)(t1 - t0),
			       (unsigned long long)(w1 - w0));
		}
	}
	return 0;
}
