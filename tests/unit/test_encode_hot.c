/* SPDX-License-Identifier: MIT */
/*
 * The straight-line encoder for the hot event ops (record.h, vrt_record_encode_hot) against the
 * layout interpreter (vrt_record_encode_generic): for records of every op with values at every
 * magnitude and at the edges of their fields, one by one and in long streams that carry the
 * chunk's delta state, vrt_record_encode must write the very bytes the interpreter writes and
 * leave the same delta state; the hot ops must take the straight-line path. So must a THREAD
 * record written by vrt_record_encode_thread.
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

static const uint8_t hot_ops[] = { VRT_OP_ALLOC,       VRT_OP_SEED,       VRT_OP_FREE,
				   VRT_OP_BLOCK_ALLOC, VRT_OP_BLOCK_FREE, VRT_OP_BLOCK_SIZE };
#define N_HOT (sizeof(hot_ops) / sizeof(hot_ops[0]))

static uint8_t payload[200];

/* Values at every magnitude, whatever the field's range: the encoder checks nothing. */
static uint64_t any(uint64_t *rng) { return vt_rand(rng) >> (vt_rand(rng) & 63); }

static struct vrt_record random_record(uint8_t op, uint64_t *rng)
{
	return (struct vrt_record){ .op = op, .ts = any(rng), .addr = any(rng), .size = any(rng), .aux = any(rng),
				    .aux2 = any(rng), .stream = any(rng), .id = any(rng), .id2 = any(rng),
				    .api = (uint32_t)any(rng), .device = (int32_t)any(rng), .kind = (uint32_t)any(rng),
				    .stack = (uint32_t)any(rng), .stack2 = (uint32_t)any(rng),
				    .result = (int32_t)any(rng), .bytes_len = (uint32_t)(vt_rand(rng) % sizeof(payload)),
				    .bytes = payload };
}

/* Encodes r both ways from *d; checks bytes, length and delta state agree, moves *d on. */
static void encode_both(const struct vrt_record *r, struct vrt_delta *d)
{
	uint8_t g[VRT_RECORD_MAX_FIXED + sizeof(payload)], f[sizeof(g)];
	memset(g, 0xa5, sizeof(g));
	memset(f, 0xa5, sizeof(f));
	struct vrt_delta gd = *d, fd = *d;
	size_t glen = (size_t)(vrt_record_encode_generic(g, r, &gd) - g);
	size_t flen = (size_t)(vrt_record_encode(f, r, &fd) - f);
	VT_CHECKF(flen == glen && !memcmp(f, g, glen), "op %u: %zu bytes, generic %zu, or they differ", r->op, flen,
		  glen);
	VT_CHECKF(!memcmp(f + flen, g + glen, sizeof(g) - glen), "op %u: wrote past its record", r->op);
	VT_CHECKF(fd.ts == gd.ts && fd.addr == gd.addr, "op %u: delta state differs", r->op);
	*d = gd;
}

static void test_hot_ops_take_the_straight_line(void)
{
	for (unsigned op = 0; op < 256; op++)
		VT_CHECKF(vrt_record_encode_is_hot(op) == (memchr(hot_ops, (int)op, N_HOT) != NULL), "op %u", op);
	uint64_t rng = 5;
	for (size_t o = 0; o < N_HOT; o++)
		for (int k = 0; k < 2000; k++) {
			struct vrt_record r = random_record(hot_ops[o], &rng);
			struct vrt_delta gd = { any(&rng), any(&rng) }, fd = gd;
			uint8_t g[VRT_RECORD_MAX_FIXED], f[VRT_RECORD_MAX_FIXED];
			size_t glen = (size_t)(vrt_record_encode_generic(g, &r, &gd) - g);
			size_t flen = (size_t)(vrt_record_encode_hot(f, &r, &fd) - f);
			VT_CHECKF(flen == glen && !memcmp(f, g, glen), "op %u: bytes differ", r.op);
			VT_CHECKF(fd.ts == gd.ts && fd.addr == gd.addr, "op %u: delta state differs", r.op);
		}
}

#define STREAM_RECORDS 20000

/* All ops mixed, then the hot ops alone (the usual event chunk), in streams whose deltas carry
 * from record to record. */
static void test_random_streams(void)
{
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 13 + 5);
	uint64_t rng = 7;
	for (int round = 0; round < 2; round++) {
		struct vrt_delta d = { 0, 0 };
		for (size_t i = 0; i < STREAM_RECORDS; i++) {
			struct vrt_record r = random_record(round ? hot_ops[vt_rand(&rng) % N_HOT] : all_ops[vt_rand(&rng) % N_OPS],
							    &rng);
			if (vt_rand(&rng) & 1) { /* nearby, as in a real chunk: deltas of a byte or two */
				r.ts = d.ts + vt_rand(&rng) % 300;
				r.addr = d.addr + (vt_rand(&rng) % 600) - 300;
			}
			encode_both(&r, &d);
		}
	}
}

/* Every field of every hot op at the edges of what it can hold. */
static void test_edges(void)
{
	static const uint64_t edges[] = { 0, 1, 63, 64, 127, 128, 16383, 16384, 0x7fffffffull, 0x80000000ull,
					  0xffffffffull, 0x100000000ull, INT64_MAX, (uint64_t)INT64_MIN, UINT64_MAX };
	enum { N_EDGES = sizeof(edges) / sizeof(edges[0]) };
	unsigned long cases = 0;
	for (size_t o = 0; o < N_HOT; o++)
		for (size_t a = 0; a < N_EDGES; a++)
			for (size_t b = 0; b < N_EDGES; b++) {
				uint64_t x = edges[a], y = edges[b];
				struct vrt_record r = { .op = hot_ops[o], .ts = x, .addr = y, .size = x, .aux = y,
							.stream = x, .api = (uint32_t)y, .device = (int32_t)x,
							.kind = (uint32_t)y, .stack = (uint32_t)x, .stack2 = (uint32_t)y };
				struct vrt_delta d = { y, x };
				encode_both(&r, &d);
				cases++;
			}
	VT_CHECK(cases == N_HOT * N_EDGES * N_EDGES);
}

static void test_thread_records(void)
{
	static const uint32_t threads[] = { 0, 1, 127, 128, 300, 16384, 0x7fffffffu, UINT32_MAX };
	for (size_t i = 0; i < sizeof(threads) / sizeof(threads[0]); i++) {
		struct vrt_record r = { .op = VRT_OP_THREAD, .id = threads[i] };
		struct vrt_delta d = { 3, 4 };
		uint8_t g[VRT_RECORD_MAX_FIXED], f[VRT_RECORD_MAX_FIXED];
		size_t glen = (size_t)(vrt_record_encode_generic(g, &r, &d) - g);
		size_t flen = (size_t)(vrt_record_encode_thread(f, threads[i]) - f);
		VT_CHECKF(flen == glen && !memcmp(f, g, glen), "thread %u: bytes differ", threads[i]);
		VT_CHECK(d.ts == 3 && d.addr == 4);
	}
}

int main(void)
{
	VT_RUN(test_thread_records);
	VT_RUN(test_hot_ops_take_the_straight_line);
	VT_RUN(test_random_streams);
	VT_RUN(test_edges);
	return vt_summary();
}
