/*
 * mt_alloc.c - THREADS threads allocate and free concurrently through the shared runtime, so
 * addresses are reused across threads while events from all of them are in flight. Each thread
 * makes ITERATIONS cudaMalloc/cudaFree pairs of a size of its own, then keeps one allocation
 * from thread_leak_site: (index + 1) * 4096 bytes.
 *
 * `mt_alloc lockstep`: the threads go in rounds, each making one pair and then waiting for the
 * others, so that their events interleave however the threads are scheduled.
 *
 * Expected: 8 live allocations, 36 * 4096 = 147456 bytes, all from thread_leak_site; exactly
 * THREADS * (ITERATIONS + 1) allocation and THREADS * ITERATIONS free records; none lost. The
 * last line says so: "allocs=A frees=F held_bytes=B held_count=N".
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "prog.h"

#define THREADS 8
#define ITERATIONS 1000

static pthread_barrier_t start, round_done;
static int lockstep;

SITE void thread_churn_site(int index)
{
	void *p;
	CHECK(cudaMalloc(&p, 65536 + (size_t)index * 512));
	CHECK(cudaFree(p));
}

SITE void thread_leak_site(int index)
{
	void *p;
	CHECK(cudaMalloc(&p, (size_t)(index + 1) * 4096));
}

static void *worker(void *arg)
{
	int index = (int)(intptr_t)arg;
	CHECK(cudaSetDevice(0));
	pthread_barrier_wait(&start);
	for (int i = 0; i < ITERATIONS; i++) {
		thread_churn_site(index);
		if (lockstep)
			pthread_barrier_wait(&round_done);
	}
	thread_leak_site(index);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t threads[THREADS];
	lockstep = argc > 1 && !strcmp(argv[1], "lockstep");
	CHECK(cudaSetDevice(0));
	pthread_barrier_init(&start, NULL, THREADS);
	pthread_barrier_init(&round_done, NULL, THREADS);
	for (int i = 0; i < THREADS; i++)
		CHECK(pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i));
	for (int i = 0; i < THREADS; i++)
		CHECK(pthread_join(threads[i], NULL));
	printf("mt_alloc: %d threads x %d done allocs=%d frees=%d held_bytes=%d held_count=%d\n", THREADS, ITERATIONS,
	       THREADS * (ITERATIONS + 1), THREADS * ITERATIONS, 4096 * THREADS * (THREADS + 1) / 2, THREADS);
	return 0;
}
