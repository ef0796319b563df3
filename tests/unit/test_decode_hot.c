/* SPDX-License-Identifier: MIT */
/*
 * The straight-line decoder for the hot event ops (record.h, vrt_record_decode_hot) against the
 * layout interpreter (vrt_record_decode_generic): on long streams of random records of every op,
 * on the same streams with bytes damaged, and on every field of every hot op set out of its
 * range, vrt_record_decode must give what the interpreter gives: return code, cursor, delta
 * state and every field. Both directions with the encoder: records decoded by the fast path
 * encode back to the very bytes they came from.
 */
#include <stdlib.h>
#include <string.h>

#include "vramtrace/record.h"
#include "same_record.h"
#include "vt.h"

static const uint8_t all_ops[] = {
#define VT_OP(o, layout) o,
	VRT_RECORD_LAYOUTS(VT_OP)
#undef VT_OP
};
#define N_OPS (sizeof(all_ops) / sizeof(all_ops[0]))

static const uint8_t hot_ops[] = { VRT_OP_ALLOC, VRT_OP_SEED, VRT_OP_FREE, VRT_OP_BLOCK_ALLOC, VRT_OP_BLOCK_FREE };
#define N_HOT (sizeof(hot_ops) / sizeof(hot_ops[0]))

static bool is_hot(uint8_t op) { return memchr(hot_ops, op, N_HOT) != NULL; }

static uint8_t payload[200];

/* Random values at every magnitude; api, kind, device and stacks within their ranges. */
static uint64_t any(uint64_t *rng) { return vt_rand(rng) >> (vt_rand(rng) & 63); }

static struct vrt_record random_record(uint8_t op, uint64_t *rng)
{
	return (struct vrt_record){ .op = op, .ts = any(rng), .addr = any(rng), .size = any(rng), .aux = any(rng),
				    .aux2 = any(rng), .stream = any(rng), .id = any(rng), .id2 = any(rng),
				    .api = (uint32_t)(vt_rand(rng) % VRT_API_LAST), .device = (int32_t)any(rng),
				    .kind = (uint32_t)(vt_rand(rng) % VRT_KIND_LAST), .stack = (uint32_t)any(rng),
				    .stack2 = (uint32_t)any(rng), .result = (int32_t)any(rng),
				    .bytes_len = (uint32_t)(vt_rand(rng) % sizeof(payload)), .bytes = payload };
}

struct outcome {
	int rc;
	const uint8_t *cursor;
	struct vrt_delta delta;
	struct vrt_record r;
};

/* Decodes at *at with both decoders from the same delta state; checks they agree, and moves *at
 * and *d on as the generic decoder did. Returns the return code. */
static int decode_both(const uint8_t **at, const uint8_t *end, struct vrt_delta *d, struct vrt_record *out)
{
	struct outcome g = { .cursor = *at, .delta = *d }, f = g;
	memset(&g.r, 0xa5, sizeof(g.r));
	memset(&f.r, 0x5a, sizeof(f.r));
	g.rc = vrt_record_decode_generic(&g.cursor, end, &g.r, &g.delta);
	f.rc = vrt_record_decode(&f.cursor, end, &f.r, &f.delta);
	VT_CHECKF(f.rc == g.rc, "op %u at %p: rc %d, generic %d", **at, (const void *)*at, f.rc, g.rc);
	VT_CHECKF(f.cursor == g.cursor, "op %u: cursor %td, generic %td", **at, f.cursor - *at, g.cursor - *at);
	VT_CHECKF(f.delta.ts == g.delta.ts && f.delta.addr == g.delta.addr, "op %u: delta state differs", **at);
	VT_CHECKF(g.rc || same_record(&f.r, &g.r), "op %u: fields differ", **at);
	*at = g.cursor;
	*d = g.delta;
	if (out)
		*out = g.r;
	return g.rc;
}

/* Encodes n random records (ops drawn from ops[]) into one chunk-like stream; returns its end. */
static uint8_t *random_stream(uint8_t *buf, size_t n, const uint8_t *ops, size_t n_ops, uint64_t *rng)
{
	struct vrt_delta enc = { 0, 0 };
	uint8_t *p = buf;
	for (size_t i = 0; i < n; i++) {
		struct vrt_record r = random_record(ops[vt_rand(rng) % n_ops], rng);
		p = vrt_record_encode(p, &r, &enc);
	}
	return p;
}

#define STREAM_RECORDS 20000

static void test_random_streams_every_op(void)
{
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 13 + 5);
	uint8_t *buf = malloc(STREAM_RECORDS * (VRT_RECORD_MAX_FIXED + sizeof(payload)));
	VT_REQUIRE(buf);
	uint64_t rng = 7;
	unsigned long hot_hits[256] = { 0 }, decoded = 0;
	/* All ops mixed, then the hot ops alone (the usual event chunk). */
	for (int round = 0; round < 2; round++) {
		uint8_t *end = round ? random_stream(buf, STREAM_RECORDS, hot_ops, N_HOT, &rng)
				     : random_stream(buf, STREAM_RECORDS, all_ops, N_OPS, &rng);
		const uint8_t *p = buf;
		struct vrt_delta d = { 0, 0 };
		while (p < end) {
			const uint8_t *at = p;
			struct vrt_delta before = d, scratch = d;
			struct vrt_record r;
			const uint8_t *q = p;
			if (vrt_record_decode_hot(&q, end, &r, &scratch))
				hot_hits[*at]++;
			VT_REQUIRE(decode_both(&p, end, &d, &r) == 0);
			decoded++;
			if (!is_hot(r.op))
				continue;
			/* Encoding what was decoded gives back the same bytes. */
			uint8_t again[VRT_RECORD_MAX_FIXED];
			size_t len = (size_t)(vrt_record_encode(again, &r, &before) - again);
			VT_CHECKF(len == (size_t)(p - at) && !memcmp(again, at, len), "op %u: re-encoding differs", r.op);
		}
	}
	VT_EQ(decoded, 2 * STREAM_RECORDS);
	for (size_t i = 0; i < N_HOT; i++) /* the fast path did the work, not the fallback */
		VT_CHECKF(hot_hits[hot_ops[i]] > STREAM_RECORDS / 20, "op %u: %lu fast decodes", hot_ops[i],
			  hot_hits[hot_ops[i]]);
	for (size_t i = 0; i < N_OPS; i++)
		VT_CHECKF(is_hot(all_ops[i]) || !hot_hits[all_ops[i]], "op %u went the fast way", all_ops[i]);
	free(buf);
}

/* Damaged streams: whatever the bytes, both decoders agree record by record until one fails,
 * and when started at arbitrary offsets. */
static void test_damaged_streams(void)
{
	enum { N = 400 };
	uint8_t *buf = malloc(N * (VRT_RECORD_MAX_FIXED + sizeof(payload)));
	VT_REQUIRE(buf);
	uint64_t rng = 11;
	static const uint8_t nasty[] = { 0x00, 0x01, 0x02, 0x7f, 0x80, 0x81, 0xfe, 0xff };
	unsigned long records = 0, failures = 0;
	for (int round = 0; round < 300; round++) {
		uint8_t *end = random_stream(buf, N, round & 1 ? hot_ops : all_ops, round & 1 ? N_HOT : N_OPS, &rng);
		size_t len = (size_t)(end - buf);
		for (int k = 0; k < 1 + round % 8; k++) {
			size_t at = vt_rand(&rng) % len;
			buf[at] = vt_rand(&rng) & 1 ? nasty[vt_rand(&rng) % sizeof(nasty)] : (uint8_t)vt_rand(&rng);
		}
		const uint8_t *p = buf;
		struct vrt_delta d = { 0, 0 };
		while (p < end && decode_both(&p, end, &d, NULL) == 0)
			records++;
		failures += p < end;
		for (int k = 0; k < 50; k++) {
			p = buf + vt_rand(&rng) % len;
			d = (struct vrt_delta){ vt_rand(&rng), vt_rand(&rng) };
			failures += decode_both(&p, end, &d, NULL) != 0;
		}
	}
	VT_CHECK(records > 10000 && failures > 1000); /* both outcomes were exercised */
	free(buf);
}

/* Every field of every hot op at the edges of its range, with room to spare and without. */
static void test_hot_fields_out_of_range(void)
{
	static const uint64_t edges[] = { 0, 1, 127, 128, VRT_API_LAST - 1, VRT_API_LAST, VRT_KIND_LAST - 1,
					  VRT_KIND_LAST, 0xfffffffeull, 0xffffffffull, 0x100000000ull,
					  0x100000001ull, UINT64_MAX - 1, UINT64_MAX };
	unsigned long cases = 0;
	for (size_t o = 0; o < N_HOT; o++) {
		const char *layout = vrt_record_layout(hot_ops[o]);
		for (size_t f = 0; layout[f]; f++)
			for (size_t e = 0; e < sizeof(edges) / sizeof(edges[0]) + 2; e++)
				for (int roomy = 0; roomy < 2; roomy++) {
					uint8_t b[2 * VRT_RECORD_HOT_MIN_INPUT + 16] = { 0 }, *p = b;
					*p++ = hot_ops[o];
					for (size_t i = 0; layout[i]; i++) {
						if (i != f) {
							p = vrt_put_uvarint(p, i * 3);
						} else if (e < sizeof(edges) / sizeof(edges[0])) {
							p = vrt_put_uvarint(p, edges[e]);
						} else { /* 10 bytes with bits past 64, or 11 bytes */
							memset(p, 0xff, 9);
							p[9] = e == sizeof(edges) / sizeof(edges[0]) ? 0x02 : 0x80;
							p[10] = 0;
							p += 11;
						}
					}
					const uint8_t *end = roomy ? b + sizeof(b) : p;
					uint8_t *exact = malloc((size_t)(end - b)); /* ASan sees any overread */
					VT_REQUIRE(exact);
					memcpy(exact, b, (size_t)(end - b));
					const uint8_t *q = exact;
					struct vrt_delta d = { 5, 9 };
					decode_both(&q, exact + (end - b), &d, NULL);
					free(exact);
					cases++;
				}
	}
	VT_CHECK(cases > 500);
}

/* A hot record at every distance from the end of its input: the fast path needs
 * VRT_RECORD_HOT_MIN_INPUT bytes, the generic one takes over below that. */
static void test_near_the_end(void)
{
	uint64_t rng = 3;
	for (size_t o = 0; o < N_HOT; o++)
		for (int k = 0; k < 20; k++) {
			struct vrt_record r = random_record(hot_ops[o], &rng);
			uint8_t rec[VRT_RECORD_MAX_FIXED];
			struct vrt_delta enc = { 0, 0 };
			size_t len = (size_t)(vrt_record_encode(rec, &r, &enc) - rec);
			for (size_t tail = 0; tail <= VRT_RECORD_HOT_MIN_INPUT + 1; tail++) {
				uint8_t *b = calloc(1, len + tail);
				VT_REQUIRE(b);
				memcpy(b, rec, len);
				const uint8_t *q = b;
				struct vrt_delta d = { 0, 0 };
				struct vrt_record got;
				VT_CHECK(decode_both(&q, b + len + tail, &d, &got) == 0);
				VT_CHECK(q == b + len && got.ts == r.ts && got.addr == r.addr && got.stack == r.stack);
				free(b);
			}
		}
}

/* Every prefix of a hot record whose every varint takes 10 bytes (zeros, padded), each in a heap
 * block of exactly its size: no decoder reads past the input (under ASan), and only the whole
 * record decodes. */
static void test_longest_prefixes(void)
{
	for (size_t o = 0; o < N_HOT; o++) {
		uint8_t rec[VRT_RECORD_MAX_FIXED], *p = rec;
		*p++ = hot_ops[o];
		for (size_t f = 0; vrt_record_layout(hot_ops[o])[f]; f++, p += 10) {
			memset(p, 0x80, 9);
			p[9] = 0;
		}
		size_t len = (size_t)(p - rec);
		for (size_t k = 1; k <= len; k++) {
			uint8_t *b = malloc(k);
			VT_REQUIRE(b);
			memcpy(b, rec, k);
			const uint8_t *q = b;
			struct vrt_delta d = { 0, 0 };
			VT_CHECKF((decode_both(&q, b + k, &d, NULL) == 0) == (k == len), "op %u: %zu of %zu bytes",
				  hot_ops[o], k, len);
			free(b);
		}
	}
}

int main(void)
{
	VT_RUN(test_random_streams_every_op);
	VT_RUN(test_damaged_streams);
	VT_RUN(test_hot_fields_out_of_range);
	VT_RUN(test_near_the_end);
	VT_RUN(test_longest_prefixes);
	return vt_summary();
}
