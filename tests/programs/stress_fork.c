/*
 * stress_fork.c - forks while other threads are inside CUDA calls.
 *
 *   stress_fork THREADS CHILDREN [SNAPSHOT]
 *
 * THREADS threads churn cudaMalloc/cudaFree (churn_site) without pause; meanwhile the main thread
 * forks CHILDREN children one after another. Child i allocates (i + 1) * 64 KiB from child_site,
 * keeps it, prints "child i pid=P bytes=B" and exits normally (its destructors run). The parent
 * waits for each child before forking the next, then stops the threads, keeps one 1 MiB
 * allocation from parent_site and prints
 *   stress_fork: children=C parent_pid=P churn_allocs=A churn_frees=A parent_bytes=1048576
 * A child that hangs (a lock held by a thread that does not exist in the child) hangs the
 * program: the test runs it with a time limit.
 * With SNAPSHOT (an absolute path), the parent first has vramtrace write everything it holds
 * (vramtrace_snapshot: a synchronous drain and flush), so the parent's trace already describes
 * the program's modules when the children are forked.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vramtrace/vramtrace.h>

#include "prog.h"

#define MAX_THREADS 64

static atomic_int stop;
static atomic_ullong churned;

SITE void churn_site(int index)
{
	void *p;
	CHECK(cudaMalloc(&p, 4096 + (size_t)index * 256));
	CHECK(cudaFree(p));
}

SITE void child_site(size_t size)
{
	void *p;
	CHECK(cudaMalloc(&p, size));
}

SITE void parent_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
}

static void *churn(void *arg)
{
	int index = (int)(intptr_t)arg;
	CHECK(cudaSetDevice(0));
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		churn_site(index);
		atomic_fetch_add_explicit(&churned, 1, memory_order_relaxed);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 8;
	int children = argc > 2 ? atoi(argv[2]) : 20;
	if (threads < 1 || threads > MAX_THREADS || children < 1) {
		fprintf(stderr, "usage: stress_fork THREADS (1..%d) CHILDREN\n", MAX_THREADS);
		return 2;
	}
	CHECK(cudaSetDevice(0));
	pthread_t t[MAX_THREADS];
	for (int i = 0; i < threads; i++)
		CHECK(pthread_create(&t[i], NULL, churn, (void *)(intptr_t)i));
	/* Let every thread get going before the first fork. */
	while (atomic_load(&churned) < (unsigned long long)threads * 10)
		sched_yield();
	if (argc > 3 && vramtrace_snapshot && vramtrace_snapshot(argv[3])) {
		fprintf(stderr, "vramtrace_snapshot(%s) failed\n", argv[3]);
		return 3;
	}
	fflush(stdout);
	for (int i = 0; i < children; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 3;
		}
		if (pid == 0) {
			size_t size = (size_t)(i + 1) * 64 * KiB;
			child_site(size);
			printf("child %d pid=%d bytes=%zu\n", i, (int)getpid(), size);
			exit(0);
		}
		int status;
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "child %d: status %#x\n", i, status);
			return 3;
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < threads; i++)
		CHECK(pthread_join(t[i], NULL));
	parent_site();
	unsigned long long n = atomic_load(&churned);
	printf("stress_fork: children=%d parent_pid=%d churn_allocs=%llu churn_frees=%llu parent_bytes=%zu\n", children,
	       (int)getpid(), n, n, (size_t)MiB);
	return 0;
}
