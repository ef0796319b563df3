/* SPDX-License-Identifier: MIT */
/*
 * The record codec (include/vramtrace/record.h): varints and zigzag at their limits, a round trip
 * of every opcode's layout with extreme values (0, the maxima, negative deltas), every proper
 * prefix of every encoded record rejected without reading past it (run under ASan: each prefix
 * sits in a heap block of exactly its size), and out-of-range fields rejected.
 */
#include <stdlib.h>
#include <string.h>

#include "vramtrace/record.h"
#include "vt.h"

static const uint8_t all_ops[] = {
#define VT_OP(o, layout) o,
	VRT_RECORD_LAYOUTS(VT_OP)
#undef VT_OP
};
#define N_OPS (sizeof(all_ops) / sizeof(all_ops[0]))

/* ---- varints ------------------------------------------------------------------------------ */

static void test_uvarint_limits(void)
{
	static const struct {
		uint64_t v;
		size_t len;
	} cases[] = { { 0, 1 }, { 1, 1 }, { 127, 1 }, { 128, 2 }, { 16383, 2 }, { 16384, 3 }, { UINT32_MAX, 5 },
		      { (1ull << 56) - 1, 8 }, { 1ull << 56, 9 }, { (1ull << 63) - 1, 9 }, { 1ull << 63, 10 },
		      { UINT64_MAX, 10 } };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t buf[16];
		size_t n = (size_t)(vrt_put_uvarint(buf, cases[i].v) - buf);
		VT_EQ(n, cases[i].len);
		uint64_t got = 12345;
		VT_EQ(vrt_get_uvarint(buf, buf + n, &got), n);
		VT_EQ(got, cases[i].v);
		for (size_t k = 0; k < n; k++) /* every prefix is incomplete */
			VT_EQ(vrt_get_uvarint(buf, buf + k, &got), 0);
	}
	/* The tenth byte carries bit 63 only. */
	uint8_t ten[10];
	memset(ten, 0xff, 9);
	ten[9] = 0x01;
	uint64_t v;
	VT_EQ(vrt_get_uvarint(ten, ten + 10, &v), 10);
	VT_EQ(v, UINT64_MAX);
	ten[9] = 0x02;
	VT_EQ(vrt_get_uvarint(ten, ten + 10, &v), 0);
	ten[9] = 0x81; /* a continuation past 64 bits */
	VT_EQ(vrt_get_uvarint(ten, ten + 10, &v), 0);
	/* Eleven bytes are never a varint. */
	uint8_t eleven[11];
	memset(eleven, 0x80, 10);
	eleven[10] = 0;
	VT_EQ(vrt_get_uvarint(eleven, eleven + 11, &v), 0);
	/* Longer-than-needed encodings are accepted (writers never make them). */
	const uint8_t padded[] = { 0x80, 0x80, 0x00 };
	VT_EQ(vrt_get_uvarint(padded, padded + 3, &v), 3);
	VT_EQ(v, 0);
}

static void test_zigzag_limits(void)
{
	static const int64_t vals[] = { 0, -1, 1, -2, 2, INT32_MIN, INT32_MAX, INT64_MIN, INT64_MAX, INT64_MIN + 1 };
	static const uint64_t zz[] = { 0, 1, 2, 3, 4, 0xffffffffull, 0xfffffffeull, UINT64_MAX, UINT64_MAX - 1,
				       UINT64_MAX - 2 };
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		VT_EQ(vrt_zigzag(vals[i]), zz[i]);
		VT_EQ(vrt_unzigzag(zz[i]), vals[i]);
	}
}

/* ---- records ------------------------------------------------------------------------------ */

/* The record as decoding should give it back: fields the layout does not carry are 0. */
static struct vrt_record expected_of(const struct vrt_record *in)
{
	struct vrt_record e = { .op = in->op };
	for (const char *l = vrt_record_layout(in->op); l && *l; l++) {
		switch (*l) {
		case VRT_FC_TS: e.ts = in->ts; break;
		case VRT_FC_ADDR: case VRT_FC_ADDR_ABS: e.addr = in->addr; break;
		case VRT_FC_SIZE: e.size = in->size; break;
		case VRT_FC_AUX: e.aux = in->aux; break;
		case VRT_FC_AUX2: e.aux2 = in->aux2; break;
		case VRT_FC_API: e.api = in->api; break;
		case VRT_FC_DEVICE: e.device = in->device; break;
		case VRT_FC_KIND: e.kind = in->kind; break;
		case VRT_FC_STREAM: e.stream = in->stream; break;
		case VRT_FC_STACK: e.stack = in->stack; break;
		case VRT_FC_STACK2: e.stack2 = in->stack2; break;
		case VRT_FC_RESULT: e.result = in->result; break;
		case VRT_FC_ID: e.id = in->id; break;
		case VRT_FC_ID2: e.id2 = in->id2; break;
		case VRT_FC_BYTES: e.bytes = in->bytes; e.bytes_len = in->bytes_len; break;
		}
	}
	return e;
}

static void check_same(const struct vrt_record *got, const struct vrt_record *want)
{
	VT_EQ(got->op, want->op);
	VT_EQ(got->ts, want->ts);
	VT_EQ(got->addr, want->addr);
	VT_EQ(got->size, want->size);
	VT_EQ(got->aux, want->aux);
	VT_EQ(got->aux2, want->aux2);
	VT_EQ(got->stream, want->stream);
	VT_EQ(got->id, want->id);
	VT_EQ(got->id2, want->id2);
	VT_EQ(got->api, want->api);
	VT_EQ(got->device, want->device);
	VT_EQ(got->kind, want->kind);
	VT_EQ(got->stack, want->stack);
	VT_EQ(got->stack2, want->stack2);
	VT_EQ(got->result, want->result);
	VT_EQ(got->bytes_len, want->bytes_len);
	if (got->bytes_len == want->bytes_len && want->bytes_len)
		VT_CHECK(got->bytes && !memcmp(got->bytes, want->bytes, want->bytes_len));
}

static uint8_t payload[300];

/* Value profiles: 0 zeros, 1 maxima, 2 minima after maxima (negative deltas), 3..: random. */
static struct vrt_record make(uint8_t op, int profile, uint64_t *rng)
{
	struct vrt_record r = { .op = op };
	switch (profile) {
	case 0:
		break;
	case 1:
		r = (struct vrt_record){ op, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX,
					 UINT64_MAX, UINT64_MAX, VRT_API_LAST - 1, INT32_MAX, VRT_KIND_LAST - 1,
					 UINT32_MAX, UINT32_MAX, INT32_MAX, sizeof(payload), payload };
		break;
	case 2:
		r = (struct vrt_record){ op, 0, 0, 1, 0, 0, 0, 1, 0, 0, INT32_MIN, 0, 1, 0, INT32_MIN, 1, payload };
		break;
	default:
		r = (struct vrt_record){ op,
					 vt_rand(rng) >> (vt_rand(rng) & 63),
					 vt_rand(rng) >> (vt_rand(rng) & 63),
					 vt_rand(rng) >> (vt_rand(rng) & 63),
					 vt_rand(rng) >> (vt_rand(rng) & 63),
					 vt_rand(rng) >> (vt_rand(rng) & 63),
					 vt_rand(rng) >> (vt_rand(rng) & 63),
					 vt_rand(rng) >> (vt_rand(rng) & 63),
					 vt_rand(rng) >> (vt_rand(rng) & 63),
					 (uint32_t)(vt_rand(rng) % VRT_API_LAST),
					 (int32_t)(uint32_t)vt_rand(rng),
					 (uint32_t)(vt_rand(rng) % VRT_KIND_LAST),
					 (uint32_t)vt_rand(rng),
					 (uint32_t)vt_rand(rng),
					 (int32_t)(uint32_t)vt_rand(rng),
					 (uint32_t)(vt_rand(rng) % 40),
					 payload };
	}
	return r;
}

#define N_PROFILES 12

static void test_round_trip_every_layout(void)
{
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7 + 1);
	uint64_t rng = 1;
	size_t n = N_OPS * N_PROFILES;
	struct vrt_record *in = calloc(n, sizeof(*in));
	uint8_t *buf = malloc(n * (VRT_RECORD_MAX_FIXED + sizeof(payload)));
	VT_REQUIRE(in && buf);
	/* One stream of records sharing the delta state, as in a chunk: every op follows every
	 * profile, so t and a see +max, -max and random differences. */
	struct vrt_delta enc = { 0, 0 };
	uint8_t *p = buf;
	size_t k = 0;
	for (int prof = 0; prof < N_PROFILES; prof++)
		for (size_t o = 0; o < N_OPS; o++) {
			in[k] = make(all_ops[o], prof, &rng);
			uint8_t *end = vrt_record_encode(p, &in[k], &enc);
			size_t fixed = (size_t)(end - p) - (strchr(vrt_record_layout(all_ops[o]), 'B') ? in[k].bytes_len : 0);
			VT_CHECKF(fixed <= VRT_RECORD_MAX_FIXED, "op %u: %zu bytes without B", all_ops[o], fixed);
			p = end;
			k++;
		}
	struct vrt_delta dec = { 0, 0 };
	const uint8_t *q = buf;
	for (size_t i = 0; i < n; i++) {
		struct vrt_record got;
		int rc = vrt_record_decode(&q, p, &got, &dec);
		VT_CHECKF(rc == 0, "record %zu (op %u, profile %zu): %d", i, in[i].op, i / N_OPS, rc);
		if (rc)
			break;
		struct vrt_record want = expected_of(&in[i]);
		check_same(&got, &want);
	}
	VT_CHECK(q == p);
	free(in);
	free(buf);
}

/* The maximum-length encoding of each op: every varint takes 10 bytes. */
static void test_longest_records_fit(void)
{
	for (size_t o = 0; o < N_OPS; o++) {
		struct vrt_record r = { .op = all_ops[o], .ts = 1ull << 63, .addr = 1ull << 63, .size = UINT64_MAX,
					.aux = UINT64_MAX, .aux2 = UINT64_MAX, .stream = UINT64_MAX, .id = UINT64_MAX,
					.id2 = UINT64_MAX, .api = VRT_API_LAST - 1, .device = INT32_MIN, .kind = 3,
					.stack = UINT32_MAX, .stack2 = UINT32_MAX, .result = INT32_MIN };
		uint8_t buf[VRT_RECORD_MAX_FIXED];
		struct vrt_delta d = { 0, 0 };
		size_t len = (size_t)(vrt_record_encode(buf, &r, &d) - buf);
		VT_CHECKF(len <= VRT_RECORD_MAX_FIXED, "op %u: %zu", all_ops[o], len);
	}
}

/* Every proper prefix of every record fails cleanly and reads nothing past its end. */
static void test_truncated_records(void)
{
	uint64_t rng = 99;
	unsigned long prefixes = 0;
	for (int prof = 0; prof < 6; prof++)
		for (size_t o = 0; o < N_OPS; o++) {
			struct vrt_record r = make(all_ops[o], prof, &rng);
			if (r.bytes_len > 40)
				r.bytes_len = 40;
			uint8_t full[VRT_RECORD_MAX_FIXED + 64];
			struct vrt_delta d = { 0, 0 };
			size_t len = (size_t)(vrt_record_encode(full, &r, &d) - full);
			for (size_t k = 0; k < len; k++) {
				uint8_t *copy = malloc(k ? k : 1); /* exactly k bytes: ASan sees any overread */
				VT_REQUIRE(copy);
				memcpy(copy, full, k);
				const uint8_t *pp = copy;
				struct vrt_record out;
				struct vrt_delta dd = { 0, 0 };
				int rc = vrt_record_decode(&pp, copy + k, &out, &dd);
				VT_CHECKF(rc == VRT_E_RECORD, "op %u prefix %zu/%zu: rc %d", all_ops[o], k, len, rc);
				VT_CHECKF(pp == copy, "op %u prefix %zu: the cursor moved on failure", all_ops[o], k);
				free(copy);
				prefixes++;
			}
			uint8_t *exact = malloc(len);
			VT_REQUIRE(exact);
			memcpy(exact, full, len);
			const uint8_t *pp = exact;
			struct vrt_record out;
			struct vrt_delta dd = { 0, 0 };
			VT_EQ(vrt_record_decode(&pp, exact + len, &out, &dd), 0);
			VT_CHECK(pp == exact + len);
			free(exact);
		}
	VT_CHECK(prefixes > 1000);
}

static int decode_bytes(const uint8_t *b, size_t n)
{
	uint8_t *copy = malloc(n ? n : 1);
	if (!copy)
		return -1000;
	memcpy(copy, b, n);
	const uint8_t *p = copy;
	struct vrt_record r;
	struct vrt_delta d = { 0, 0 };
	int rc = vrt_record_decode(&p, copy + n, &r, &d);
	if (!rc && p != copy + n)
		rc = -2000; /* decoded, but not all of it */
	free(copy);
	return rc;
}

static void test_out_of_range_fields(void)
{
	uint8_t b[64], *p;
	/* api: 127 is the largest; 128 is malformed. */
	p = b;
	*p++ = VRT_OP_BLOCK_SIZE;
	p = vrt_put_uvarint(p, 0);   /* t */
	p = vrt_put_uvarint(p, 127); /* p */
	uint8_t *api_at = p - 1;
	p = vrt_put_uvarint(p, 0); /* d */
	p = vrt_put_uvarint(p, 0); /* a */
	p = vrt_put_uvarint(p, 0); /* s */
	VT_EQ(decode_bytes(b, (size_t)(p - b)), 0);
	size_t tail = (size_t)(p - api_at - 1);
	memmove(api_at + 2, api_at + 1, tail);
	vrt_put_uvarint(api_at, 128);
	VT_EQ(decode_bytes(b, (size_t)(p - b) + 1), VRT_E_RECORD);

	/* kind: 3 is the largest. */
	struct vrt_record r = { .op = VRT_OP_ALLOC, .kind = VRT_KIND_LAST - 1 };
	struct vrt_delta d = { 0, 0 };
	VT_EQ(decode_bytes(b, (size_t)(vrt_record_encode(b, &r, &d) - b)), 0);
	r.kind = VRT_KIND_LAST;
	d = (struct vrt_delta){ 0, 0 };
	VT_EQ(decode_bytes(b, (size_t)(vrt_record_encode(b, &r, &d) - b)), VRT_E_RECORD);

	/* device and result must fit i32; stacks must fit u32. */
	static const struct {
		uint8_t op;
		char field;
		uint64_t value;
		int want;
	} cases[] = {
		{ VRT_OP_CONTEXT, 'd', 0xfffffffeull, 0 },      /* zigzag of INT32_MAX */
		{ VRT_OP_CONTEXT, 'd', 0xffffffffull, 0 },      /* INT32_MIN */
		{ VRT_OP_CONTEXT, 'd', 0x100000000ull, VRT_E_RECORD }, /* INT32_MAX + 1 */
		{ VRT_OP_CONTEXT, 'd', 0x100000001ull, VRT_E_RECORD }, /* INT32_MIN - 1 */
		{ VRT_OP_FAILED, 'r', 0xffffffffull, 0 },
		{ VRT_OP_FAILED, 'r', UINT64_MAX, VRT_E_RECORD },
		{ VRT_OP_PHASE_ENTER, 'S', UINT32_MAX, 0 },
		{ VRT_OP_PHASE_ENTER, 'S', 1ull << 32, VRT_E_RECORD },
		{ VRT_OP_FREE, 'T', UINT32_MAX, 0 },
		{ VRT_OP_FREE, 'T', 1ull << 32, VRT_E_RECORD },
		{ VRT_OP_FREE, 'k', 4, VRT_E_RECORD },
		{ VRT_OP_ALLOC, 'p', VRT_API_LAST, VRT_E_RECORD },
		{ VRT_OP_ALLOC, 'p', UINT64_MAX, VRT_E_RECORD },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		p = b;
		*p++ = cases[i].op;
		for (const char *l = vrt_record_layout(cases[i].op); *l; l++)
			p = vrt_put_uvarint(p, *l == cases[i].field ? cases[i].value : 0);
		VT_CHECKF(decode_bytes(b, (size_t)(p - b)) == cases[i].want, "case %zu: op %u field %c value %#llx", i,
			  cases[i].op, cases[i].field, (unsigned long long)cases[i].value);
	}

	/* B: the length must not exceed what is left, however large. */
	static const uint64_t lens[] = { 4, 5, 1ull << 32, 1ull << 40, UINT64_MAX };
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		p = b;
		*p++ = VRT_OP_STRING;
		p = vrt_put_uvarint(p, 1);
		p = vrt_put_uvarint(p, lens[i]);
		memcpy(p, "abcd", 4);
		p += 4;
		VT_CHECKF(decode_bytes(b, (size_t)(p - b)) == (lens[i] == 4 ? 0 : VRT_E_RECORD), "B length %llu",
			  (unsigned long long)lens[i]);
	}
}

static void test_unknown_opcodes(void)
{
	for (unsigned op = 0; op < 256; op++) {
		bool known = false;
		for (size_t o = 0; o < N_OPS; o++)
			known |= all_ops[o] == op;
		uint8_t b[VRT_RECORD_MAX_FIXED] = { (uint8_t)op }; /* followed by zeros: every field 0 */
		const uint8_t *p = b;
		struct vrt_record r;
		struct vrt_delta d = { 0, 0 };
		int rc = vrt_record_decode(&p, b + sizeof(b), &r, &d);
		VT_CHECKF(known ? rc == 0 : rc == VRT_E_RECORD, "opcode %u: rc %d", op, rc);
		VT_CHECKF(known == (vrt_record_layout(op) != NULL), "opcode %u", op);
	}
	/* Empty input. */
	const uint8_t *p = payload;
	struct vrt_record r;
	struct vrt_delta d = { 0, 0 };
	VT_EQ(vrt_record_decode(&p, payload, &r, &d), VRT_E_RECORD);
}

/* Deltas wrap modulo 2^64 in both directions and reset per chunk (a fresh vrt_delta). */
static void test_delta_extremes(void)
{
	static const uint64_t seq[] = { 0, UINT64_MAX, 0, 1ull << 63, (1ull << 63) - 1, 5, 3, UINT64_MAX - 1, 1 };
	uint8_t buf[512], *p = buf;
	struct vrt_delta enc = { 0, 0 };
	for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		struct vrt_record r = { .op = VRT_OP_UNMAP, .ts = seq[i], .addr = ~seq[i] };
		p = vrt_record_encode(p, &r, &enc);
	}
	const uint8_t *q = buf;
	struct vrt_delta dec = { 0, 0 };
	for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		struct vrt_record r;
		VT_REQUIRE(vrt_record_decode(&q, p, &r, &dec) == 0);
		VT_EQ(r.ts, seq[i]);
		VT_EQ(r.addr, ~seq[i]);
	}
	/* 'A' leaves the delta state alone: an absolute address between two deltas. */
	p = buf;
	enc = (struct vrt_delta){ 0, 0 };
	struct vrt_record a1 = { .op = VRT_OP_UNMAP, .ts = 10, .addr = 1000 };
	struct vrt_record sym = { .op = VRT_OP_SYMBOL, .addr = 0xdeadbeef };
	struct vrt_record a2 = { .op = VRT_OP_UNMAP, .ts = 11, .addr = 900 };
	p = vrt_record_encode(p, &a1, &enc);
	p = vrt_record_encode(p, &sym, &enc);
	p = vrt_record_encode(p, &a2, &enc);
	VT_EQ(enc.addr, 900);
	q = buf;
	dec = (struct vrt_delta){ 0, 0 };
	struct vrt_record r;
	VT_REQUIRE(vrt_record_decode(&q, p, &r, &dec) == 0 && r.addr == 1000);
	VT_REQUIRE(vrt_record_decode(&q, p, &r, &dec) == 0);
	VT_EQ(r.addr, 0xdeadbeef);
	VT_EQ(dec.addr, 1000);
	VT_REQUIRE(vrt_record_decode(&q, p, &r, &dec) == 0);
	VT_EQ(r.addr, 900);
	VT_EQ(r.ts, 11);
}

int main(void)
{
	VT_RUN(test_uvarint_limits);
	VT_RUN(test_zigzag_limits);
	VT_RUN(test_round_trip_every_layout);
	VT_RUN(test_longest_records_fit);
	VT_RUN(test_truncated_records);
	VT_RUN(test_out_of_range_fields);
	VT_RUN(test_unknown_opcodes);
	VT_RUN(test_delta_extremes);
	return vt_summary();
}
