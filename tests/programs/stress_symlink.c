/*
 * stress_symlink.c - plants symlinks where its own trace is about to be created.
 *
 *   stress_symlink DIR TARGET
 *
 * Before its first CUDA call (vramtrace creates the trace at the first recorded event), the
 * program makes DIR/vramtrace.<pid>.vrt and DIR/vramtrace.<pid>.vrt.1 symlinks to TARGET, as
 * another user with write access to DIR could. Then it allocates 1 MiB from planted_site and
 * prints "planted pid=P". The preload must neither follow the links nor give up: it creates the
 * next free name, mode 0600.
 */
#include <cuda_runtime_api.h>
#include <unistd.h>

#include "prog.h"

SITE void planted_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: stress_symlink DIR TARGET\n");
		return 2;
	}
	char link[4096];
	snprintf(link, sizeof(link), "%s/vramtrace.%d.vrt", argv[1], (int)getpid());
	if (symlink(argv[2], link))
		return 3;
	snprintf(link, sizeof(link), "%s/vramtrace.%d.vrt.1", argv[1], (int)getpid());
	if (symlink(argv[2], link))
		return 3;
	CHECK(cudaSetDevice(0));
	planted_site();
	printf("planted pid=%d\n", (int)getpid());
	return 0;
}
