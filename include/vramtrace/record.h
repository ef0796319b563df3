/* SPDX-License-Identifier: MIT */
/*
 * Record codec shared by the writer (preload) and the reader (analyzer): LEB128 varints and the
 * generic, layout-driven encoding of one record (see format.h, VRT_RECORD_LAYOUTS); encoding and
 * decoding also have a straight-line path for the hot event ops.
 * Header-only so both sides compile the exact same code.
 */
#ifndef VRAMTRACE_RECORD_H
#define VRAMTRACE_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vramtrace/error.h"
#include "vramtrace/format.h"

/* One decoded record. Fields an op does not carry are left 0. */
struct vrt_record {
	uint8_t op;
	uint64_t ts;
	uint64_t addr;
	uint64_t size;
	uint64_t aux;
	uint64_t aux2;
	uint64_t stream;
	uint64_t id;
	uint64_t id2;
	uint32_t api;
	int32_t device;
	uint32_t kind;
	uint32_t stack;
	uint32_t stack2;
	int32_t result;
	uint32_t bytes_len;
	const uint8_t *bytes; /* points into the decoded chunk; valid until the next chunk */
};

/* Delta state of one chunk. Reset to zero at every chunk start. */
struct vrt_delta {
	uint64_t ts;
	uint64_t addr;
};

/* Longest encoded record without its 'B' payload: opcode + 11 fields of 10 bytes. */
#define VRT_RECORD_MAX_FIXED 128u

static inline const char *vrt_record_layout(unsigned op)
{
	switch (op) {
#define VRT_LAYOUT_CASE(o, layout) \
	case o:                    \
		return layout;
		VRT_RECORD_LAYOUTS(VRT_LAYOUT_CASE)
#undef VRT_LAYOUT_CASE
	default:
		return NULL;
	}
}

static inline uint64_t vrt_zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t vrt_unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

static inline uint8_t *vrt_put_uvarint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* Returns bytes consumed, or 0 when the input ends early or the varint exceeds 64 bits. */
static inline size_t vrt_get_uvarint(const uint8_t *p, const uint8_t *end, uint64_t *out)
{
	uint64_t v = 0;
	for (unsigned shift = 0, i = 0; p + i < end && shift < 64; shift += 7, i++) {
		uint8_t b = p[i];
		if (shift == 63 && b > 1)
			return 0;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return i + 1;
		}
	}
	return 0;
}

/*
 * The layout interpreter behind vrt_record_encode, for every op: encodes r into p (which must
 * hold VRT_RECORD_MAX_FIXED + r->bytes_len bytes). Returns the end of the encoded record.
 */
static inline uint8_t *vrt_record_encode_generic(uint8_t *p, const struct vrt_record *r, struct vrt_delta *d)
{
	const char *layout = vrt_record_layout(r->op);
	*p++ = r->op;
	for (; layout && *layout; layout++) {
		switch (*layout) {
		case VRT_FC_TS: p = vrt_put_uvarint(p, vrt_zigzag((int64_t)(r->ts - d->ts))); d->ts = r->ts; break;
		case VRT_FC_ADDR: p = vrt_put_uvarint(p, vrt_zigzag((int64_t)(r->addr - d->addr))); d->addr = r->addr; break;
		case VRT_FC_ADDR_ABS: p = vrt_put_uvarint(p, r->addr); break;
		case VRT_FC_SIZE: p = vrt_put_uvarint(p, r->size); break;
		case VRT_FC_AUX: p = vrt_put_uvarint(p, r->aux); break;
		case VRT_FC_AUX2: p = vrt_put_uvarint(p, r->aux2); break;
		case VRT_FC_API: p = vrt_put_uvarint(p, r->api); break;
		case VRT_FC_DEVICE: p = vrt_put_uvarint(p, vrt_zigzag(r->device)); break;
		case VRT_FC_KIND: p = vrt_put_uvarint(p, r->kind); break;
		case VRT_FC_STREAM: p = vrt_put_uvarint(p, r->stream); break;
		case VRT_FC_STACK: p = vrt_put_uvarint(p, r->stack); break;
		case VRT_FC_STACK2: p = vrt_put_uvarint(p, r->stack2); break;
		case VRT_FC_RESULT: p = vrt_put_uvarint(p, vrt_zigzag(r->result)); break;
		case VRT_FC_ID: p = vrt_put_uvarint(p, r->id); break;
		case VRT_FC_ID2: p = vrt_put_uvarint(p, r->id2); break;
		case VRT_FC_BYTES:
			p = vrt_put_uvarint(p, r->bytes_len);
			if (r->bytes_len)
				memcpy(p, r->bytes, r->bytes_len);
			p += r->bytes_len;
			break;
		}
	}
	return p;
}

/* The ops vrt_record_encode_hot writes, as a mask of 1 << op. */
#define VRT_RECORD_HOT_ENCODE_OPS                                                                       \
	(1ull << VRT_OP_ALLOC | 1ull << VRT_OP_SEED | 1ull << VRT_OP_FREE | 1ull << VRT_OP_BLOCK_ALLOC | \
	 1ull << VRT_OP_BLOCK_FREE | 1ull << VRT_OP_BLOCK_SIZE)

static inline bool vrt_record_encode_is_hot(unsigned op) { return op < 64 && (VRT_RECORD_HOT_ENCODE_OPS >> op & 1); }

/* The opcode and t p d, which every hot op begins with. */
static inline uint8_t *vrt_record_encode_hot_head(uint8_t *p, const struct vrt_record *r, struct vrt_delta *d)
{
	*p++ = r->op;
	p = vrt_put_uvarint(p, vrt_zigzag((int64_t)(r->ts - d->ts)));
	d->ts = r->ts;
	p = vrt_put_uvarint(p, r->api);
	return vrt_put_uvarint(p, vrt_zigzag(r->device));
}

/* a s */
static inline uint8_t *vrt_record_encode_hot_place(uint8_t *p, const struct vrt_record *r, struct vrt_delta *d)
{
	p = vrt_put_uvarint(p, vrt_zigzag((int64_t)(r->addr - d->addr)));
	d->addr = r->addr;
	return vrt_put_uvarint(p, r->size);
}

/*
 * Straight-line encoding of the ops that make up nearly every event chunk, one layout per case
 * (format.h, VRT_RECORD_LAYOUTS): for those ops (vrt_record_encode_is_hot), the very bytes and
 * delta state of vrt_record_encode_generic; any other op is written as its opcode alone.
 * tests/unit/test_encode_hot.c holds the two equal.
 */
static inline uint8_t *vrt_record_encode_hot(uint8_t *p, const struct vrt_record *r, struct vrt_delta *d)
{
	switch (r->op) {
	case VRT_OP_ALLOC: /* t p d k a s x q S */
	case VRT_OP_SEED:
		p = vrt_record_encode_hot_head(p, r, d);
		p = vrt_put_uvarint(p, r->kind);
		p = vrt_record_encode_hot_place(p, r, d);
		p = vrt_put_uvarint(p, r->aux);
		p = vrt_put_uvarint(p, r->stream);
		return vrt_put_uvarint(p, r->stack);
	case VRT_OP_FREE: /* t p d k a s q S T */
		p = vrt_record_encode_hot_head(p, r, d);
		p = vrt_put_uvarint(p, r->kind);
		p = vrt_record_encode_hot_place(p, r, d);
		p = vrt_put_uvarint(p, r->stream);
		p = vrt_put_uvarint(p, r->stack);
		return vrt_put_uvarint(p, r->stack2);
	case VRT_OP_BLOCK_ALLOC: /* t p d a s x q S */
		p = vrt_record_encode_hot_head(p, r, d);
		p = vrt_record_encode_hot_place(p, r, d);
		p = vrt_put_uvarint(p, r->aux);
		p = vrt_put_uvarint(p, r->stream);
		return vrt_put_uvarint(p, r->stack);
	case VRT_OP_BLOCK_FREE: /* t p d a s q S T */
		p = vrt_record_encode_hot_head(p, r, d);
		p = vrt_record_encode_hot_place(p, r, d);
		p = vrt_put_uvarint(p, r->stream);
		p = vrt_put_uvarint(p, r->stack);
		return vrt_put_uvarint(p, r->stack2);
	case VRT_OP_BLOCK_SIZE: /* t p d a s */
		p = vrt_record_encode_hot_head(p, r, d);
		return vrt_record_encode_hot_place(p, r, d);
	}
	*p++ = r->op;
	return p;
}

/* A THREAD record, "i": what vrt_record_encode writes for { .op = VRT_OP_THREAD, .id = thread }. */
static inline uint8_t *vrt_record_encode_thread(uint8_t *p, uint32_t thread)
{
	*p++ = VRT_OP_THREAD;
	return vrt_put_uvarint(p, thread);
}

/*
 * Encodes r into p (which must hold VRT_RECORD_MAX_FIXED + r->bytes_len bytes).
 * Returns the end of the encoded record.
 */
static inline uint8_t *vrt_record_encode(uint8_t *p, const struct vrt_record *r, struct vrt_delta *d)
{
	if (vrt_record_encode_is_hot(r->op))
		return vrt_record_encode_hot(p, r, d);
	return vrt_record_encode_generic(p, r, d);
}

static inline bool vrt_fits_u32(uint64_t v) { return v <= UINT32_MAX; }
static inline bool vrt_fits_i32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

/*
 * The layout interpreter behind vrt_record_decode, for every op. Decodes one record starting at
 * *pp. On success advances *pp and returns 0; otherwise returns VRT_E_RECORD (unknown opcode,
 * truncated field, or a value out of its field's range).
 */
static inline int vrt_record_decode_generic(const uint8_t **pp, const uint8_t *end, struct vrt_record *r,
					    struct vrt_delta *d)
{
	const uint8_t *p = *pp;
	if (p >= end)
		return VRT_E_RECORD;
	memset(r, 0, sizeof(*r));
	r->op = *p++;
	const char *layout = vrt_record_layout(r->op);
	if (!layout)
		return VRT_E_RECORD;
	for (; *layout; layout++) {
		uint64_t v;
		size_t n = vrt_get_uvarint(p, end, &v);
		if (!n)
			return VRT_E_RECORD;
		p += n;
		switch (*layout) {
		case VRT_FC_TS: d->ts += (uint64_t)vrt_unzigzag(v); r->ts = d->ts; break;
		case VRT_FC_ADDR: d->addr += (uint64_t)vrt_unzigzag(v); r->addr = d->addr; break;
		case VRT_FC_ADDR_ABS: r->addr = v; break;
		case VRT_FC_SIZE: r->size = v; break;
		case VRT_FC_AUX: r->aux = v; break;
		case VRT_FC_AUX2: r->aux2 = v; break;
		case VRT_FC_API:
			if (v >= VRT_API_LAST)
				return VRT_E_RECORD;
			r->api = (uint32_t)v;
			break;
		case VRT_FC_DEVICE:
			if (!vrt_fits_i32(vrt_unzigzag(v)))
				return VRT_E_RECORD;
			r->device = (int32_t)vrt_unzigzag(v);
			break;
		case VRT_FC_KIND:
			if (v >= VRT_KIND_LAST)
				return VRT_E_RECORD;
			r->kind = (uint32_t)v;
			break;
		case VRT_FC_STREAM: r->stream = v; break;
		case VRT_FC_STACK:
		case VRT_FC_STACK2:
			if (!vrt_fits_u32(v))
				return VRT_E_RECORD;
			*(*layout == VRT_FC_STACK ? &r->stack : &r->stack2) = (uint32_t)v;
			break;
		case VRT_FC_RESULT:
			if (!vrt_fits_i32(vrt_unzigzag(v)))
				return VRT_E_RECORD;
			r->result = (int32_t)vrt_unzigzag(v);
			break;
		case VRT_FC_ID: r->id = v; break;
		case VRT_FC_ID2: r->id2 = v; break;
		case VRT_FC_BYTES:
			if (v > (uint64_t)(end - p))
				return VRT_E_RECORD;
			r->bytes_len = (uint32_t)v;
			r->bytes = p;
			p += v;
			break;
		default:
			return VRT_E_RECORD;
		}
	}
	*pp = p;
	return 0;
}

/* Input that vrt_record_decode_hot reads without bounds checks: the opcode and 9 varints of at
 * most 10 bytes, the longest hot layout. */
#define VRT_RECORD_HOT_MIN_INPUT (1u + 9u * 10u)

/*
 * vrt_get_uvarint for input known to hold 10 more bytes. Returns the end of the varint, or NULL
 * where vrt_get_uvarint returns 0 (the value exceeds 64 bits).
 */
static inline const uint8_t *vrt_get_uvarint_unchecked(const uint8_t *p, uint64_t *out)
{
	uint64_t b = *p++;
	if (b < 0x80) {
		*out = b;
		return p;
	}
	uint64_t v = b & 0x7f;
	for (unsigned shift = 7; shift < 63; shift += 7) {
		b = *p++;
		v |= (b & 0x7f) << shift;
		if (b < 0x80) {
			*out = v;
			return p;
		}
	}
	b = *p++;
	if (b > 1)
		return NULL;
	*out = v | b << 63;
	return p;
}

/*
 * vrt_get_uvarint_unchecked without a branch per byte, for the fields whose length varies from
 * record to record (addresses, sizes), where the loop's exit is mispredicted: one 8-byte load,
 * the first byte without a continuation bit found from the high bits, the 7-bit groups packed
 * with shifts. Values of 9 and 10 bytes take the loop.
 */
static inline const uint8_t *vrt_get_uvarint_wide(const uint8_t *p, uint64_t *out)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	uint64_t w;
	memcpy(&w, p, 8);
	uint64_t stops = ~w & 0x8080808080808080ull;
	if (__builtin_expect(!stops, 0))
		return vrt_get_uvarint_unchecked(p, out);
	unsigned bits = (unsigned)__builtin_ctzll(stops) + 1; /* 8 x the varint's length */
	uint64_t x = w & (~0ull >> (64 - bits)) & 0x7f7f7f7f7f7f7f7full;
	/* Each step halves the number of groups: 7-bit groups in bytes, 14 in 16-bit lanes, 28 in
	 * 32-bit lanes, then one value of up to 56 bits. */
	x = (x & 0x00ff00ff00ff00ffull) | ((x >> 8) & 0x00ff00ff00ff00ffull) << 7;
	x = (x & 0x0000ffff0000ffffull) | ((x >> 16) & 0x0000ffff0000ffffull) << 14;
	x = (x & 0x00000000ffffffffull) | (x >> 32) << 28;
	*out = x;
	return p + bits / 8;
#else
	return vrt_get_uvarint_unchecked(p, out);
#endif
}

/*
 * Straight-line decoding of the ops that make up nearly every event chunk, whose layouts are
 *   ALLOC, SEED   t p d k a s x q S
 *   FREE          t p d k a s q S T
 *   BLOCK_ALLOC   t p d a s x q S
 *   BLOCK_FREE    t p d a s q S T
 * (format.h, VRT_RECORD_LAYOUTS). Returns true with the same record, cursor and delta state as
 * vrt_record_decode_generic; false, having changed nothing, for any other op, input shorter than
 * VRT_RECORD_HOT_MIN_INPUT, or a record the generic decoder rejects, so that the caller can run
 * the generic decoder and get its verdict. tests/unit/test_decode_hot.c holds the two equal.
 */
static inline bool vrt_record_decode_hot(const uint8_t **pp, const uint8_t *end, struct vrt_record *r,
					 struct vrt_delta *d)
{
	const uint8_t *p = *pp;
	if (end - p < (ptrdiff_t)VRT_RECORD_HOT_MIN_INPUT)
		return false;
	uint8_t op = *p++;
	uint64_t ts, api, dev, kind = 0, addr, size, aux = 0, stream, stack, stack2 = 0;
#define VRT_HOT_FIELD_WITH(get, v)       \
	do {                             \
		if (!(p = get(p, &(v)))) \
			return false;    \
	} while (0)
#define VRT_HOT_FIELD(v) VRT_HOT_FIELD_WITH(vrt_get_uvarint_unchecked, v)
#define VRT_HOT_FIELD_WIDE(v) VRT_HOT_FIELD_WITH(vrt_get_uvarint_wide, v)
	/* One layout per case: which fields an op has is decided once, not at each field. */
	switch (op) {
	case VRT_OP_ALLOC:
	case VRT_OP_SEED:
		VRT_HOT_FIELD(ts);
		VRT_HOT_FIELD(api);
		VRT_HOT_FIELD(dev);
		VRT_HOT_FIELD(kind);
		VRT_HOT_FIELD_WIDE(addr);
		VRT_HOT_FIELD_WIDE(size);
		VRT_HOT_FIELD(aux);
		VRT_HOT_FIELD(stream);
		VRT_HOT_FIELD(stack);
		break;
	case VRT_OP_FREE:
		VRT_HOT_FIELD(ts);
		VRT_HOT_FIELD(api);
		VRT_HOT_FIELD(dev);
		VRT_HOT_FIELD(kind);
		VRT_HOT_FIELD_WIDE(addr);
		VRT_HOT_FIELD_WIDE(size);
		VRT_HOT_FIELD(stream);
		VRT_HOT_FIELD(stack);
		VRT_HOT_FIELD(stack2);
		break;
	case VRT_OP_BLOCK_ALLOC:
		VRT_HOT_FIELD(ts);
		VRT_HOT_FIELD(api);
		VRT_HOT_FIELD(dev);
		VRT_HOT_FIELD_WIDE(addr);
		VRT_HOT_FIELD_WIDE(size);
		VRT_HOT_FIELD(aux);
		VRT_HOT_FIELD(stream);
		VRT_HOT_FIELD(stack);
		break;
	case VRT_OP_BLOCK_FREE:
		VRT_HOT_FIELD(ts);
		VRT_HOT_FIELD(api);
		VRT_HOT_FIELD(dev);
		VRT_HOT_FIELD_WIDE(addr);
		VRT_HOT_FIELD_WIDE(size);
		VRT_HOT_FIELD(stream);
		VRT_HOT_FIELD(stack);
		VRT_HOT_FIELD(stack2);
		break;
	default:
		return false;
	}
#undef VRT_HOT_FIELD_WIDE
#undef VRT_HOT_FIELD
#undef VRT_HOT_FIELD_WITH
	int64_t device = vrt_unzigzag(dev);
	if (api >= VRT_API_LAST || !vrt_fits_i32(device) || kind >= VRT_KIND_LAST || !vrt_fits_u32(stack | stack2))
		return false;
	d->ts += (uint64_t)vrt_unzigzag(ts);
	d->addr += (uint64_t)vrt_unzigzag(addr);
	/* Field by field: a struct assignment zeroes the whole record first (rep stos, slower). */
	r->op = op;
	r->ts = d->ts;
	r->addr = d->addr;
	r->size = size;
	r->aux = aux;
	r->aux2 = 0;
	r->stream = stream;
	r->id = 0;
	r->id2 = 0;
	r->api = (uint32_t)api;
	r->device = (int32_t)device;
	r->kind = (uint32_t)kind;
	r->stack = (uint32_t)stack;
	r->stack2 = (uint32_t)stack2;
	r->result = 0;
	r->bytes_len = 0;
	r->bytes = NULL;
	*pp = p;
	return true;
}

/*
 * Decodes one record starting at *pp. On success advances *pp and returns 0; otherwise returns
 * VRT_E_RECORD (unknown opcode, truncated field, or a value out of its field's range).
 */
static inline int vrt_record_decode(const uint8_t **pp, const uint8_t *end, struct vrt_record *r,
				    struct vrt_delta *d)
{
	if (vrt_record_decode_hot(pp, end, r, d))
		return 0;
	return vrt_record_decode_generic(pp, end, r, d);
}

/* crc32c (Castagnoli). The SSE4.2 instruction does 8 bytes a cycle; the bitwise loop is the
 * portable fallback. Same result either way. */
static inline uint32_t vrt_crc32c_sw(uint32_t crc, const uint8_t *p, size_t len)
{
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
	}
	return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static inline uint32_t vrt_crc32c_hw(uint32_t crc, const uint8_t *p,
									   size_t len)
{
	uint64_t c = crc;
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
	}
	crc = (uint32_t)c;
	for (; len; p++, len--)
		crc = __builtin_ia32_crc32qi(crc, *p);
	return crc;
}
#endif

static inline uint32_t vrt_crc32c(uint32_t crc, const void *data, size_t len)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("sse4.2"))
		return ~vrt_crc32c_hw(~crc, (const uint8_t *)data, len);
#endif
	return ~vrt_crc32c_sw(~crc, (const uint8_t *)data, len);
}

/* A chunk's header for its payload (stored bytes as they are in the file, raw_len decoded), its
 * checksums included: the writer's and the recovery's chunks are made the same way. */
static inline void vrt_chunk_header_fill(struct vrt_chunk_header *ch, uint8_t type, uint8_t codec, uint32_t stored,
					 uint32_t raw_len, uint64_t seq, const void *payload)
{
	memset(ch, 0, sizeof(*ch));
	ch->magic = VRT_CHUNK_MAGIC;
	ch->type = type;
	ch->codec = codec;
	ch->stored_size = stored;
	ch->raw_size = raw_len;
	ch->seq = seq;
	ch->payload_crc = vrt_crc32c(0, payload, stored);
	ch->header_crc = vrt_crc32c(0, ch, offsetof(struct vrt_chunk_header, header_crc));
}

#endif /* VRAMTRACE_RECORD_H */
