/*
 * stress_lossless.c - THREADS threads (default 64) each make OPS (default 20000) random
 * allocations and frees through three APIs at once: cudaMalloc/cudaFree,
 * cudaMallocAsync/cudaFreeAsync and cudaHostAlloc/cudaFreeHost. The number of calls is fixed,
 * not timed, so what the program did is the same on any machine; only vramtrace's load on it is
 * not. Counted with the program's own atomics, after every call returned.
 *
 *   stress_lossless [THREADS [OPS]]
 *
 * Output (one line, for tests/e2e/test_stress.py):
 *   stress_lossless: threads=T malloc=A free=F async=B free_async=G host=H free_host=K
 *   device_bytes=D host_bytes=P
 * where the six counts are successful calls of each function and D, P the device and pinned
 * host bytes still allocated at the end (nothing is freed after the last operation).
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "prog.h"

#define MAX_THREADS 256
#define SLOTS 16

enum api { MALLOC, ASYNC, HOST, APIS };

static atomic_ullong allocs[APIS], frees[APIS], device_bytes, host_bytes;
static pthread_barrier_t start;
static long ops;

static uint64_t next_random(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

SITE void *lossless_alloc(enum api api, size_t size)
{
	void *p = NULL;
	if (api == MALLOC)
		CHECK(cudaMalloc(&p, size));
	else if (api == ASYNC)
		CHECK(cudaMallocAsync(&p, size, 0));
	else
		CHECK(cudaHostAlloc(&p, size, cudaHostAllocDefault));
	return p;
}

SITE void lossless_free(enum api api, void *p)
{
	if (api == MALLOC)
		CHECK(cudaFree(p));
	else if (api == ASYNC)
		CHECK(cudaFreeAsync(p, 0));
	else
		CHECK(cudaFreeHost(p));
}

static void *work(void *arg)
{
	int index = (int)(intptr_t)arg;
	uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(index + 1);
	void *slot[SLOTS] = { 0 };
	size_t size[SLOTS] = { 0 };
	enum api used[SLOTS] = { 0 };
	CHECK(cudaSetDevice(0));
	pthread_barrier_wait(&start);
	for (long i = 0; i < ops; i++) {
		uint64_t r = next_random(&seed);
		int k = (int)(r % SLOTS);
		if (slot[k]) {
			lossless_free(used[k], slot[k]);
			atomic_fetch_add(&frees[used[k]], 1);
			atomic_fetch_sub(used[k] == HOST ? &host_bytes : &device_bytes, size[k]);
			slot[k] = NULL;
			continue;
		}
		used[k] = (enum api)((r >> 8) % APIS);
		size[k] = 4 * KiB + ((size_t)index * 64 + (r >> 16) % 64) * 256;
		slot[k] = lossless_alloc(used[k], size[k]);
		atomic_fetch_add(&allocs[used[k]], 1);
		atomic_fetch_add(used[k] == HOST ? &host_bytes : &device_bytes, size[k]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 64;
	ops = argc > 2 ? atol(argv[2]) : 20000;
	if (threads < 1 || threads > MAX_THREADS || ops < 1) {
		fprintf(stderr, "usage: stress_lossless [THREADS (1..%d) [OPS]]\n", MAX_THREADS);
		return 2;
	}
	CHECK(cudaSetDevice(0));
	pthread_t tid[MAX_THREADS];
	pthread_barrier_init(&start, NULL, (unsigned)threads);
	for (int i = 0; i < threads; i++)
		CHECK(pthread_create(&tid[i], NULL, work, (void *)(intptr_t)i));
	for (int i = 0; i < threads; i++)
		CHECK(pthread_join(tid[i], NULL));
	printf("stress_lossless: threads=%d malloc=%llu free=%llu async=%llu free_async=%llu host=%llu free_host=%llu "
	       "device_bytes=%llu host_bytes=%llu\n",
	       threads, allocs[MALLOC], frees[MALLOC], allocs[ASYNC], frees[ASYNC], allocs[HOST], frees[HOST],
	       (unsigned long long)device_bytes, (unsigned long long)host_bytes);
	return 0;
}
