/*
 * stress_threads.c - THREADS threads (default 64) allocate and free concurrently through the
 * shared runtime for SECONDS seconds (default 2), then stop and report exactly what they did.
 *
 *   stress_threads [THREADS [SECONDS]]
 *
 * Each thread owns SLOTS slots and walks a private pseudo-random sequence: an empty slot gets a
 * cudaMalloc (from small_site or big_site, a size unique to the thread and the step), a full one
 * gets a cudaFree. When the time is up every thread stops at once (one shared flag); what is
 * still in its slots stays allocated, so addresses are reused across threads all run long while
 * every thread's events are in flight.
 *
 * Output (one line, for tests/e2e/test_stress.py):
 *   stress_threads: threads=T allocs=A frees=F held_bytes=B held_count=N small_bytes=S big_bytes=G
 * where A and F are the successful cudaMalloc / cudaFree calls, B the bytes still allocated (N of
 * them), S and G the part of B allocated by small_site and big_site.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "prog.h"

#define MAX_THREADS 256
#define SLOTS 16

struct worker {
	pthread_t thread;
	int index;
	uint64_t allocs, frees;
	void *slot[SLOTS];
	size_t size[SLOTS];
	int big[SLOTS];
};

static struct worker workers[MAX_THREADS];
static atomic_int stop;
static pthread_barrier_t start;

SITE void *small_site(size_t size)
{
	void *p;
	CHECK(cudaMalloc(&p, size));
	return p;
}

SITE void *big_site(size_t size)
{
	void *p;
	CHECK(cudaMalloc(&p, size));
	return p;
}

SITE void free_site(void *p) { CHECK(cudaFree(p)); }

static uint64_t next_random(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(w->index + 1);
	CHECK(cudaSetDevice(0));
	pthread_barrier_wait(&start);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		uint64_t r = next_random(&seed);
		int k = (int)(r % SLOTS);
		if (w->slot[k]) {
			free_site(w->slot[k]);
			w->slot[k] = NULL;
			w->frees++;
			continue;
		}
		/* Sizes are multiples of 256, distinct per thread: 4 KiB.. (small) or 1 MiB.. (big). */
		int big = (r >> 8) % 8 == 0;
		size_t size = (big ? 1 * MiB : 4 * KiB) + ((size_t)w->index * 64 + (r >> 16) % 64) * 256;
		w->slot[k] = big ? big_site(size) : small_site(size);
		w->size[k] = size;
		w->big[k] = big;
		w->allocs++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 64;
	double seconds = argc > 2 ? atof(argv[2]) : 2.0;
	if (threads < 1 || threads > MAX_THREADS || seconds <= 0) {
		fprintf(stderr, "usage: stress_threads [THREADS (1..%d) [SECONDS]]\n", MAX_THREADS);
		return 2;
	}
	CHECK(cudaSetDevice(0));
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++) {
		workers[i].index = i;
		CHECK(pthread_create(&workers[i].thread, NULL, work, &workers[i]));
	}
	pthread_barrier_wait(&start);
	struct timespec ts = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
	while (nanosleep(&ts, &ts))
		;
	atomic_store(&stop, 1);
	uint64_t allocs = 0, frees = 0, held = 0, count = 0, small = 0, bigb = 0;
	for (int i = 0; i < threads; i++) {
		CHECK(pthread_join(workers[i].thread, NULL));
		allocs += workers[i].allocs;
		frees += workers[i].frees;
		for (int k = 0; k < SLOTS; k++)
			if (workers[i].slot[k]) {
				held += workers[i].size[k];
				count++;
				*(workers[i].big[k] ? &bigb : &small) += workers[i].size[k];
			}
	}
	printf("stress_threads: threads=%d allocs=%llu frees=%llu held_bytes=%llu held_count=%llu small_bytes=%llu "
	       "big_bytes=%llu\n",
	       threads, (unsigned long long)allocs, (unsigned long long)frees, (unsigned long long)held,
	       (unsigned long long)count, (unsigned long long)small, (unsigned long long)bigb);
	return 0;
}
