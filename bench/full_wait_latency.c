/* SPDX-License-Identifier: MIT */
/*
 * full_wait_latency - how long a thread waits when its buffer is full (issue 22, item 5).
 *
 *   full_wait_latency THREADS PAIRS
 *
 * THREADS threads each make PAIRS cudaMalloc(4 KiB) + cudaFree pairs as fast as they can,
 * through the runtime test double: far more events than one collector drains on two cores, so
 * under vramtrace the thread buffers fill and the threads wait for room (preload/tbuf.c) instead
 * of dropping. Every pair is timed on the wall clock (CLOCK_MONOTONIC); prints one line:
 *   pairs=N max_ns=… p99_ns=… p999_ns=… over_1ms=… over_16ms=… wall_ns=…
 * The quantiles are upper bounds of power-of-two buckets. Run it untraced, traced with the
 * defaults and traced with VRAMTRACE_FULL_WAIT_MS=0 (drop at once): the difference is the wait
 * (bench/NOTES.md, "Full buffers").
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_THREADS 256
#define BUCKETS 40

static long pairs;
static pthread_barrier_t start_line;
static _Atomic uint64_t histogram[BUCKETS], worst;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *work(void *arg)
{
	(void)arg;
	uint64_t local[BUCKETS] = { 0 }, local_worst = 0;
	pthread_barrier_wait(&start_line);
	for (long i = 0; i < pairs; i++) {
		void *p = NULL;
		uint64_t t0 = now_ns();
		if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) {
			fprintf(stderr, "full_wait_latency: a CUDA call failed\n");
			exit(1);
		}
		uint64_t d = now_ns() - t0;
		local_worst = d > local_worst ? d : local_worst;
		local[d ? 64 - __builtin_clzll(d) < BUCKETS ? 64 - __builtin_clzll(d) : BUCKETS - 1 : 0]++;
	}
	for (int b = 0; b < BUCKETS; b++)
		atomic_fetch_add(&histogram[b], local[b]);
	uint64_t w = atomic_load(&worst);
	while (local_worst > w && !atomic_compare_exchange_weak(&worst, &w, local_worst))
		;
	return NULL;
}

/* The upper bound of the bucket where the q-th fraction of the pairs is reached. */
static uint64_t quantile(double q, uint64_t total)
{
	uint64_t seen = 0;
	for (int b = 0; b < BUCKETS; b++)
		if ((seen += histogram[b]) >= (uint64_t)(q * (double)total))
			return b ? 1ull << b : 1;
	return 1ull << (BUCKETS - 1);
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 64;
	pairs = argc > 2 ? atol(argv[2]) : 20000;
	if (argc > 3 || threads < 1 || threads > MAX_THREADS || pairs < 1) {
		fprintf(stderr, "usage: full_wait_latency THREADS (1..%d) PAIRS\n", MAX_THREADS);
		return 2;
	}
	pthread_t tid[MAX_THREADS];
	pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, work, NULL)) {
			fprintf(stderr, "full_wait_latency: cannot start thread %d\n", i);
			return 1;
		}
	uint64_t t0 = now_ns();
	pthread_barrier_wait(&start_line);
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	uint64_t wall = now_ns() - t0, total = (uint64_t)threads * (uint64_t)pairs, slow1 = 0, slow10 = 0;
	for (int b = 0; b < BUCKETS; b++) {
		slow1 += b > 20 ? histogram[b] : 0;  /* bucket b holds [2^(b-1), 2^b) ns: > ~1 ms */
		slow10 += b > 24 ? histogram[b] : 0; /* > ~16 ms */
	}
	printf("pairs=%llu max_ns=%llu p99_ns=%llu p999_ns=%llu over_1ms=%llu over_16ms=%llu wall_ns=%llu\n",
	       (unsigned long long)total, (unsigned long long)worst, (unsigned long long)quantile(0.99, total),
	       (unsigned long long)quantile(0.999, total), (unsigned long long)slow1, (unsigned long long)slow10,
	       (unsigned long long)wall);
	return 0;
}
