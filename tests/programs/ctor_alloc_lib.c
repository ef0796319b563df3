/*
 * ctor_alloc_lib.c - libctor_alloc_lib.so, a library the program ctor_alloc links: its
 * constructor allocates 1 MiB with cudaMalloc before main runs (lib_ctor_site), as libraries
 * that set up a CUDA workspace when loaded do.
 */
#include <cuda_runtime_api.h>

#include "prog.h"

SITE void lib_ctor_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
}

__attribute__((constructor)) static void at_load(void) { lib_ctor_site(); }

/* Referenced by the program, so the linker keeps it as a dependency. */
int ctor_alloc_lib_loaded(void) { return 1; }
