/* SPDX-License-Identifier: MIT */
/*
 * null_cudart - a CUDA runtime that costs almost nothing, built as bench/libcudart.so.13.
 *
 * The test double (tests/doubles) makes every cudaMalloc a mutex, a calloc and an mmap, and
 * every cudaFree a munmap: 5-9 µs a pair on a small VM, with run-to-run noise of a few hundred
 * nanoseconds, which hides a 100 ns hook. Run with LD_LIBRARY_PATH pointing here (it wins over
 * the benchmark's RUNPATH to the double) and "untraced" is ~10 ns a pair, so what vramtrace
 * adds can be read to a few nanoseconds. Only what bench/hotpath calls exists; addresses come
 * from a per-thread free list over a fake address range and are never touched.
 */
#include <stddef.h>
#include <stdint.h>

typedef int cudaError_t;
#define EXPORT __attribute__((visibility("default")))

#define TLS __attribute__((tls_model("initial-exec")))
static __thread int device TLS;
static __thread uintptr_t next_addr TLS, free_list[64] TLS;
static __thread int n_free TLS;

EXPORT cudaError_t cudaSetDevice(int d)
{
	device = d;
	return 0;
}

EXPORT cudaError_t cudaGetDevice(int *d)
{
	*d = device;
	return 0;
}

static inline cudaError_t null_malloc(void **p, size_t size)
{
	if (!p)
		return 1;
	if (!next_addr)
		next_addr = (uintptr_t)0x7e0000000000ull + ((uintptr_t)&device & 0xffffff000ull) * 4096;
	if (n_free) {
		*p = (void *)free_list[--n_free];
		return 0;
	}
	*p = (void *)next_addr;
	next_addr += (size + 511) & ~(size_t)511;
	return 0;
}

static inline cudaError_t null_free(void *p)
{
	if (p && n_free < 64)
		free_list[n_free++] = (uintptr_t)p;
	return 0;
}

EXPORT cudaError_t cudaMalloc(void **p, size_t size) { return null_malloc(p, size); }
EXPORT cudaError_t cudaFree(void *p) { return null_free(p); }

/* The same two under names vramtrace does not hook: bench/ab_loop.c's and ab.py's "raw" mode,
 * the untraced reference inside a traced process. */
EXPORT cudaError_t vrt_bench_raw_malloc(void **p, size_t size) { return null_malloc(p, size); }
EXPORT cudaError_t vrt_bench_raw_free(void *p) { return null_free(p); }
