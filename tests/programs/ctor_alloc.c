/*
 * ctor_alloc.c - CUDA allocations before main: in the constructor of a library it links
 * (ctor_alloc_lib.c: 1 MiB) and in its own constructor (2 MiB, prog_ctor_site); then 4 MiB
 * from main (main_site). All are kept.
 *
 * Expected trace: device 0 device peak = live = 7 MiB, three sites.
 */
#include <cuda_runtime_api.h>

#include "prog.h"

int ctor_alloc_lib_loaded(void);

SITE void prog_ctor_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 2 * MiB));
}

__attribute__((constructor)) static void at_start(void) { prog_ctor_site(); }

SITE void main_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 4 * MiB));
}

int main(void)
{
	main_site();
	printf("ctor_alloc: done (library loaded: %d)\n", ctor_alloc_lib_loaded());
	return 0;
}
