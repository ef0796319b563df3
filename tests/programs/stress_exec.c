/*
 * stress_exec.c - a chain of images: the program execs itself N times.
 *
 *   stress_exec N [fail-first]
 *
 * Image k (N, N-1, ..., 0 counts down) allocates (k + 1) MiB from image_site and keeps it,
 * prints "image k pid=P bytes=B" and, while k > 0, execs "stress_exec k-1" (through
 * /proc/self/exe, with execl, execlp or execle by k mod 3) right away: the allocation is the last thing before exec, so a trace that
 * holds it has recorded everything. Image 0 returns 0. All images have the same pid.
 *
 * With fail-first, image N first execs a path that does not exist; the call fails, and the
 * image allocates 512 KiB more from after_failed_exec_site (printing "after-failed-exec
 * bytes=B", B its total) before it goes on with the chain.
 */
#define _GNU_SOURCE /* environ */
#include <cuda_runtime_api.h>
#include <string.h>
#include <unistd.h>

#include "prog.h"

SITE void image_site(size_t size)
{
	void *p;
	CHECK(cudaMalloc(&p, size));
}

SITE void after_failed_exec_site(size_t size)
{
	void *p;
	CHECK(cudaMalloc(&p, size));
}

static void exec_nothing(size_t held)
{
	execl("/nonexistent/vramtrace-stress-exec", "nothing", (char *)NULL);
	after_failed_exec_site(512 * 1024);
	printf("after-failed-exec bytes=%zu\n", held + 512 * 1024);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	int k = argc > 1 ? atoi(argv[1]) : 3;
	if (k < 0 || k > 100) {
		fprintf(stderr, "usage: stress_exec N (0..100)\n");
		return 2;
	}
	CHECK(cudaSetDevice(0));
	size_t size = (size_t)(k + 1) * MiB;
	image_site(size);
	printf("image %d pid=%d bytes=%zu\n", k, (int)getpid(), size);
	fflush(stdout);
	if (argc > 2 && !strcmp(argv[2], "fail-first"))
		exec_nothing(size);
	if (k == 0)
		return 0;
	char next[16];
	snprintf(next, sizeof(next), "%d", k - 1);
	/* Each of the execl forms in turn (they build argv from their arguments). */
	if (k % 3 == 0)
		execl("/proc/self/exe", argv[0], next, (char *)NULL);
	else if (k % 3 == 1)
		execlp("/proc/self/exe", argv[0], next, (char *)NULL);
	else
		execle("/proc/self/exe", argv[0], next, (char *)NULL, environ);
	perror("exec");
	return 3;
}
