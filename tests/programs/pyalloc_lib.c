/*
 * pyalloc_lib.c - libpyalloc_lib.so: what a Python extension (PyTorch's libc10_cuda, CuPy's
 * runtime module) is to a Python job. tests/programs/attach_grow.py calls these through ctypes,
 * and they call the runtime through their own GOT, which an attach patches (a function pointer
 * ctypes looked up itself before the attach would not be).
 */
#include <cuda_runtime_api.h>
#include <stddef.h>

#include "prog.h"

void *pyalloc(size_t n)
{
	void *p = NULL;
	return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}

int pyfree(void *p) { return (int)cudaFree(p); }

/* What cuBLAS's workspace set-up is to a Python job: a library frame that says what the
 * allocation is (the analyzer's rules read it). tests/programs/retain_shapes.py calls it. */
void *pyalloc_cublas_workspace(size_t n)
{
	void *p = NULL;
	return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}
