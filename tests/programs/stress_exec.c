/*
 * stress_exec.c - a chain of images: the program execs itself N times.
 *
 *   stress_exec N
 *
 * Image k (N, N-1, ..., 0 counts down) allocates (k + 1) MiB from image_site and keeps it,
 * prints "image k pid=P bytes=B" and, while k > 0, execs "stress_exec k-1" (through
 * /proc/self/exe) right away: the allocation is the last thing before exec, so a trace that
 * holds it has recorded everything. Image 0 returns 0. All images have the same pid.
 */
#include <cuda_runtime_api.h>
#include <unistd.h>

#include "prog.h"

SITE void image_site(size_t size)
{
	void *p;
	CHECK(cudaMalloc(&p, size));
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
	if (k == 0)
		return 0;
	char next[16];
	snprintf(next, sizeof(next), "%d", k - 1);
	execl("/proc/self/exe", argv[0], next, (char *)NULL);
	perror("exec");
	return 3;
}
