/* SPDX-License-Identifier: MIT */
/*
 * The 64-bit name of a captured stack (native return addresses, then Python frame ids), which
 * the thread's stack cache maps to the id the collector interned: two different stacks would
 * have to collide in 64 bits to be confused, so it must mix every frame, its position and the
 * split between native and Python frames. Two frames per step through a 64x64->128-bit multiply
 * folded to 64 bits (wyhash's mum): one multiply's latency per two frames, where the chained
 * per-frame mix it replaced cost ~3x that (the hash was 15% of a 46-frame event, bench/README.md).
 *
 * A step's product is 0 only when one of its operands is: the first is a frame xor a constant
 * no frame can equal (the constants are non-canonical addresses; Python ids carry a tag in the
 * top 16 bits that differs from every constant's); the second is the next frame xor the
 * running state, which meet with probability 2^-64, a collision's. Header-only for the unit test.
 */
#ifndef VRAMTRACE_STACK_HASH_H
#define VRAMTRACE_STACK_HASH_H

#include <stdint.h>

#define VRT_HASH_K0 0xa0761d6478bd642full
#define VRT_HASH_K1 0xe7037ed1a0b428dbull
#define VRT_HASH_K2 0x8ebc6af09c88c6e3ull
#define VRT_HASH_K3 0x589965cc75374cc3ull
#define VRT_HASH_PY_TAG 0x5079000000000000ull

static inline uint64_t vrt_hash_mum(uint64_t a, uint64_t b)
{
	__uint128_t r = (__uint128_t)a * b;
	return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t vrt_hash_frames_inline(const uint64_t *native, int n_native, const uint32_t *python,
					      int n_python)
{
	uint64_t lengths = (uint64_t)(uint32_t)n_native << 32 | (uint32_t)n_python;
	uint64_t h = vrt_hash_mum(lengths ^ VRT_HASH_K0, VRT_HASH_K1);
	int i = 0;
	for (; i + 1 < n_native; i += 2)
		h = vrt_hash_mum(native[i] ^ VRT_HASH_K1, native[i + 1] ^ h);
	if (i < n_native)
		h = vrt_hash_mum(native[i] ^ VRT_HASH_K1, VRT_HASH_K2 ^ h);
	for (i = 0; i + 1 < n_python; i += 2)
		h = vrt_hash_mum((VRT_HASH_PY_TAG | python[i]) ^ VRT_HASH_K2, (VRT_HASH_PY_TAG | python[i + 1]) ^ h);
	if (i < n_python)
		h = vrt_hash_mum((VRT_HASH_PY_TAG | python[i]) ^ VRT_HASH_K2, VRT_HASH_K3 ^ h);
	h = vrt_hash_mum(h ^ VRT_HASH_K3, lengths ^ VRT_HASH_K1);
	return h ? h : 1; /* 0 marks an empty cache slot */
}

#endif
