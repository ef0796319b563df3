/*
 * thread_churn.c - threads that live for one allocation each, one after another, as a server
 * that takes a thread per request makes them (tests/e2e/test_static_and_threads.py): every
 * thread's events must be written, however many threads end between two drains, and their
 * buffers given back.
 *
 *   thread_churn THREADS
 *
 * Each thread makes one cudaMalloc of 4096 bytes from churn_site and frees it. Prints
 * "thread_churn: threads=N".
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>

#include "prog.h"

SITE void churn_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 4096));
	CHECK(cudaFree(p));
}

static void *worker(void *arg)
{
	(void)arg;
	churn_site();
	return NULL;
}

int main(int argc, char **argv)
{
	long threads = argc > 1 ? atol(argv[1]) : 1000;
	CHECK(cudaSetDevice(0));
	for (long i = 0; i < threads; i++) {
		pthread_t t;
		CHECK(pthread_create(&t, NULL, worker, NULL));
		CHECK(pthread_join(t, NULL));
	}
	printf("thread_churn: threads=%ld\n", threads);
	return 0;
}
