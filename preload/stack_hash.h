/* SPDX-License-Identifier: MIT */
/*
 * The 64-bit name of a captured stack (native return addresses, then Python frames: each a key
 * made of what the walk read, or a tagged interned id), which the thread's stack cache maps to
 * the id the collector interned: two different stacks would have to collide in 64 bits to be
 * confused, so it must mix every frame, its position and the split between native and Python
 * frames. The native part and the Python part are made apart (a walk keeps either part of its
 * last stack) and joined with both lengths at the end. Two frames per step through a 64x64->128-bit multiply
 * folded to 64 bits (wyhash's mum): one multiply's latency per two frames, where the chained
 * per-frame mix it replaced cost ~3x that (the hash was 15% of a 46-frame event, bench/README.md).
 *
 * A step's product is 0 only when one of its operands is: the first is a frame xor a constant
 * no frame can equal (the constants are non-canonical addresses; Python ids carry a tag in the
 * top 16 bits that differs from every constant's; a Python key is itself a product, equal to a
 * constant with probability 2^-64); the second is the next frame xor the
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

/* The native frames' part: their number, then two frames a step. */
static inline uint64_t vrt_hash_native(const uint64_t *native, int n_native)
{
	uint64_t h = vrt_hash_mum((uint64_t)(uint32_t)n_native ^ VRT_HASH_K0, VRT_HASH_K1);
	int i = 0;
	for (; i + 1 < n_native; i += 2)
		h = vrt_hash_mum(native[i] ^ VRT_HASH_K1, native[i + 1] ^ h);
	if (i < n_native)
		h = vrt_hash_mum(native[i] ^ VRT_HASH_K1, VRT_HASH_K2 ^ h);
	return h;
}

/* The Python part, a key at a time as a walk finds them (two keys a step), apart from the
 * native part so that a walk may keep its state frame by frame and start again from any. */
struct vrt_hash_stream {
	uint64_t h, pending;
	int n;
};

static inline struct vrt_hash_stream vrt_hash_stream_begin(void) { return (struct vrt_hash_stream){ VRT_HASH_K0, 0, 0 }; }

static inline void vrt_hash_stream_add(struct vrt_hash_stream *s, uint64_t key)
{
	if (s->n++ & 1)
		s->h = vrt_hash_mum(s->pending ^ VRT_HASH_K2, key ^ s->h);
	else
		s->pending = key;
}

/* The whole stack's name: the native part, the Python part, both lengths. */
static inline uint64_t vrt_hash_stream_end(const struct vrt_hash_stream *s, uint64_t native_part, int n_native)
{
	uint64_t lengths = (uint64_t)(uint32_t)n_native << 32 | (uint32_t)s->n;
	uint64_t h = s->n & 1 ? vrt_hash_mum(s->pending ^ VRT_HASH_K2, VRT_HASH_K3 ^ s->h) : s->h;
	h = vrt_hash_mum(h ^ VRT_HASH_K3, native_part ^ VRT_HASH_K0);
	h = vrt_hash_mum(h ^ VRT_HASH_K1, lengths ^ VRT_HASH_K2);
	return h ? h : 1; /* 0 marks an empty cache slot */
}

/* A Python frame's key as the hot path sees it before interning: its code object's address
 * and the instruction offset (the walk adds the count of code objects that died, which tells a
 * reused address apart: python.c). Interned frames (ids) are keyed VRT_HASH_PY_TAG | id instead. */
static inline uint64_t vrt_hash_pyframe(uint64_t code, int32_t lasti)
{
	return vrt_hash_mum(code ^ VRT_HASH_K3, (uint64_t)(uint32_t)lasti ^ VRT_HASH_K1);
}

/* A whole stack of interned frames (a phase entry's, the unit test's). */
static inline uint64_t vrt_hash_frames_inline(const uint64_t *native, int n_native, const uint32_t *python,
					      int n_python)
{
	struct vrt_hash_stream s = vrt_hash_stream_begin();
	for (int i = 0; i < n_python; i++)
		vrt_hash_stream_add(&s, VRT_HASH_PY_TAG | python[i]);
	return vrt_hash_stream_end(&s, vrt_hash_native(native, n_native), n_native);
}

#endif
