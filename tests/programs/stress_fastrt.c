/*
 * stress_fastrt.c - libstress_fastrt.so: a cudaMalloc/cudaFree that cost almost nothing, for the
 * flight-recorder tests. Preloaded after libvramtrace.so (LD_PRELOAD=libvramtrace.so:
 * libstress_fastrt.so), it is what vramtrace's hooks call as "the real" cudaMalloc/cudaFree, so
 * the hooks, thread buffers, collector and ring writer do all their usual work while the runtime
 * double's mmap per allocation (5-10 us a pair) is skipped: a ring wraps twenty times in
 * seconds. Everything else (cudaSetDevice, cudaGetDevice, ...) still comes from the double.
 * Addresses are never touched and never repeat: a counter scrambled by a bijection on 38 bits
 * (xor-shifts and odd multipliers), times 512, above 0x100000000000. Consecutive allocations
 * land far apart, so each event carries a few more bytes into the trace and the ring fills in
 * fewer events.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef int cudaError_t;

static _Atomic uint64_t counter;

cudaError_t cudaMalloc(void **p, size_t size)
{
	(void)size;
	if (!p)
		return 1; /* cudaErrorInvalidValue */
	uint64_t n = atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
	const uint64_t mask = (1ull << 38) - 1;
	uint64_t slot = n & mask;
	slot = (slot ^ (slot >> 19)) * 0x9e3779b97f4a7c15ull & mask;
	slot = (slot ^ (slot >> 17)) * 0xbf58476d1ce4e5b9ull & mask;
	slot ^= slot >> 19;
	*p = (void *)(uintptr_t)(0x100000000000ull + (slot << 9));
	return 0;
}

cudaError_t cudaFree(void *p)
{
	(void)p;
	return 0;
}
