/* SPDX-License-Identifier: MIT */
/*
 * Writer -> file -> reader round trips through real files in $TMPDIR: keep-all mode (and the
 * records the reader's second thread decodes with a chunk), a ring
 * that never wraps, and a ring wrapped 20 times and checked after every few chunks (as a
 * reader of a killed process would see it) and at the end. Checkpoints cut into several chunks:
 * in a ring that overwrites their first parts, cut short by a crash, placed by
 * vrt_writer_put_parts exactly as by one put per part, and refused whole when larger than half
 * the ring.
 *
 * Known failures (format 1.0 code, reported to the lead):
 *  - format/trace_writer.c: at the first wrap consolidate_tables() compresses into w->zbuf, which
 *    still holds the chunk being placed (use after free when it reallocates): the first chunk
 *    after the wrap does not decompress ("right after a wrap ... does not decompress").
 *  - format/trace_reader.c scan_ring: chunks of an older lap that survive intact past the
 *    current write position, once the padding that hid them is overwritten, are accepted
 *    ("accepted chunk ... stale: overwritten by a later lap"); see docs/trace-format.md,
 *    "Stale chunks". Visible once the writer bug is fixed.
 */
#include <fcntl.h>

#include "tracecheck.h"
#include "same_record.h"

static void test_keep_all(void)
{
	char path[4200];
	vt_path(path, sizeof(path), "keep-all.vrt");
	struct vt_gen g;
	VT_REQUIRE(vt_gen_open(&g, path, 0, 1) == 0);
	for (int i = 0; i < 40; i++) {
		vt_gen_events(&g, 1 + (size_t)(i * 37 % 500));
		if (i % 7 == 3)
			vt_gen_checkpoint(&g, VRT_CP_SNAPSHOT);
		if (i % 10 == 0)
			vt_check_trace(&g, "keep-all, running");
	}
	vt_gen_checkpoint(&g, VRT_CP_EXIT);
	vt_gen_close(&g);
	VT_EQ(g.error, 0);
	vt_check_trace(&g, "keep-all, closed");

	struct vrt_trace t;
	VT_REQUIRE(vrt_trace_open(&t, path) == 0);
	VT_CHECK(t.state_valid);
	VT_EQ(t.hdr.state.end_reason, VRT_END_EXIT);
	VT_EQ(t.hdr.state.events_written, g.n_ev);
	VT_EQ(t.hdr.state.last_chunk_seq, g.chunks[g.n_chunks - 1].seq);
	VT_EQ(t.hdr.ring_size, 0);
	VT_EQ(t.hdr.log_offset, VRT_FILE_HEADER_SIZE);
	VT_EQ(t.hdr.state.log_end, (t.size + 7) & ~7ull); /* the last chunk's alignment bytes are not written */
	VT_CHECK(!t.history_lost);
	vrt_trace_close(&t);
	vt_gen_free(&g);
}

/* Chunk i's records as the second thread decoded them with it: those the replay's own decoding
 * gives, and where it stopped. */
static void check_records_ahead(struct vrt_trace *t, size_t i, struct vrt_record *mine, uint32_t *threads)
{
	const uint8_t *data;
	size_t len;
	vrt_trace_chunk_ahead(t, i);
	VT_REQUIRE(vrt_trace_chunk(t, i, &data, &len) == 0);
	const struct vrt_chunk_records *rs = vrt_trace_chunk_records(t);
	VT_REQUIRE(rs != NULL);
	struct vrt_records_cursor c = { .p = data, .end = data + len, .chunk_type = t->chunks[i].type };
	int verdict;
	uint32_t n = vrt_records_decode(t, &c, mine, threads, VRT_AHEAD_RECORDS, &verdict);
	VT_EQ(rs->n, n);
	VT_EQ(rs->verdict, verdict);
	VT_CHECK(rs->rest.p == c.p && rs->rest.end == c.end && rs->rest.thread == c.thread);
	for (uint32_t k = 0; k < n; k++)
		VT_CHECK(same_record(&rs->recs[k], &mine[k]) && rs->threads[k] == threads[k]);
}

/* The reader's second thread decodes a replayed chunk's records with it; a chunk decoded here
 * (not asked for ahead) has none. */
static void test_records_decoded_ahead(void)
{
	char path[4200];
	vt_path(path, sizeof(path), "ahead.vrt");
	struct vt_gen g;
	VT_REQUIRE(vt_gen_open(&g, path, 0, 5) == 0);
	for (int i = 0; i < 12; i++)
		vt_gen_events(&g, 400 + (size_t)i * 50);
	vt_gen_checkpoint(&g, VRT_CP_EXIT);
	vt_gen_close(&g);
	VT_EQ(g.error, 0);
	struct vrt_trace t;
	VT_REQUIRE(vrt_trace_open(&t, path) == 0);
	struct vrt_record *mine = malloc(VRT_AHEAD_RECORDS * sizeof(*mine));
	uint32_t *threads = malloc(VRT_AHEAD_RECORDS * sizeof(*threads));
	VT_REQUIRE(mine && threads);
	size_t replayed = 0;
	for (size_t i = t.replay_from; i < t.n_chunks; i++) {
		if (t.chunks[i].type != VRT_CHUNK_EVENTS && t.chunks[i].type != VRT_CHUNK_CHECKPOINT)
			continue;
		check_records_ahead(&t, i, mine, threads);
		replayed++;
		const uint8_t *data;
		size_t len;
		VT_REQUIRE(vrt_trace_chunk(&t, i, &data, &len) == 0);
		VT_CHECK(vrt_trace_chunk_records(&t) == NULL);
	}
	VT_CHECK(replayed > 2);
	free(mine);
	free(threads);
	vrt_trace_close(&t);
	vt_gen_free(&g);
	unlink(path);
}

static void test_ring_without_wrap(void)
{
	char path[4200];
	vt_path(path, sizeof(path), "ring-nowrap.vrt");
	struct vt_gen g;
	VT_REQUIRE(vt_gen_open(&g, path, 1u << 20, 2) == 0);
	for (int i = 0; i < 10; i++)
		vt_gen_events(&g, 200);
	vt_gen_close(&g);
	VT_EQ(g.error, 0);
	vt_check_trace(&g, "ring, no wrap");
	struct vrt_trace t;
	VT_REQUIRE(vrt_trace_open(&t, path) == 0);
	VT_EQ(t.hdr.state.ring_laps, 0);
	VT_CHECK(t.hdr.flags & VRT_FILE_RING);
	VT_CHECK(t.size < t.hdr.log_offset); /* nothing in the log yet */
	vrt_trace_close(&t);
	vt_gen_free(&g);
}

static uint64_t laps_of(const struct vt_gen *g)
{
	struct vrt_file_state s;
	if (pread(g->rfd, &s, sizeof(s), VRT_STATE_OFFSET) != (ssize_t)sizeof(s))
		return 0;
	return s.ring_laps;
}

static void ring_wrapped(uint64_t seed, uint64_t ring, unsigned laps, size_t max_events, unsigned check_every)
{
	char path[4200], name[64], what[128];
	snprintf(name, sizeof(name), "ring-%llu.vrt", (unsigned long long)seed);
	vt_path(path, sizeof(path), name);
	struct vt_gen g;
	VT_REQUIRE(vt_gen_open(&g, path, ring, seed) == 0);
	uint32_t early = vt_gen_string(&g, "defined in the first lap only");
	uint64_t rng = seed;
	unsigned puts = 0;
	while (laps_of(&g) < laps && !g.error) {
		/* Chunk sizes vary a lot, so the wrap points of successive laps differ. */
		size_t n = 1 + (size_t)(vt_rand(&rng) % (vt_rand(&rng) % 4 ? max_events / 8 : max_events));
		uint64_t lap = laps_of(&g);
		vt_gen_events(&g, n);
		/* As a reader of a killed process would see the file: after each wrap, and between. */
		if (++puts % check_every == 0 || laps_of(&g) != lap) {
			snprintf(what, sizeof(what), "ring seed %llu after %u puts, lap %llu", (unsigned long long)seed, puts,
				 (unsigned long long)laps_of(&g));
			vt_check_trace(&g, what);
		}
	}
	VT_EQ(g.error, 0);
	VT_CHECK(laps_of(&g) >= laps);
	vt_gen_checkpoint(&g, VRT_CP_EXIT);
	vt_gen_close(&g);
	snprintf(what, sizeof(what), "ring seed %llu, closed", (unsigned long long)seed);
	vt_check_trace(&g, what);

	struct vrt_trace t;
	VT_REQUIRE(vrt_trace_open(&t, path) == 0);
	VT_CHECK(t.history_lost);
	VT_CHECK(t.replay_from < t.n_chunks && t.chunks[t.replay_from].type == VRT_CHUNK_CHECKPOINT);
	/* The consolidated tables: at log_offset, written at the first wrap, and still effective. */
	bool consolidated = false;
	for (size_t i = 0; i < t.n_chunks; i++)
		consolidated |= t.chunks[i].offset == t.hdr.log_offset && t.chunks[i].type == VRT_CHUNK_TABLES;
	VT_CHECK(consolidated);
	VT_CHECK(!strcmp(vrt_string(&t, early), "defined in the first lap only"));
	VT_CHECK(t.state_valid && t.hdr.state.ring_laps >= laps);
	vrt_trace_close(&t);
	vt_gen_free(&g);
	unlink(path);
}

static void test_ring_wrapped_20x(void) { ring_wrapped(3, 1u << 20, 20, 3000, 61); }

/* Other seeds and chunk size mixes: small chunks (many per lap), large chunks (few per lap). */
static void test_ring_wrapped_small_chunks(void) { ring_wrapped(11, 1u << 20, 20, 300, 997); }
static void test_ring_wrapped_large_chunks(void) { ring_wrapped(12, 1u << 20, 20, 12000, 11); }

/* Checkpoints of many parts in a ring wrapped 12 times, checked as a killed process leaves it. */
static void test_ring_checkpoints_in_parts(void)
{
	char path[4200], what[128];
	vt_path(path, sizeof(path), "ring-parts.vrt");
	struct vt_gen g;
	VT_REQUIRE(vt_gen_open(&g, path, 1u << 20, 21) == 0);
	g.cp_part_bytes = 256; /* about eight items a part */
	uint64_t rng = 21;
	unsigned puts = 0, orphans = 0, split = 0;
	while (laps_of(&g) < 12 && !g.error) {
		vt_gen_events(&g, 1 + (size_t)(vt_rand(&rng) % 2000));
		if (vt_rand(&rng) % 8 == 0)
			vt_gen_checkpoint(&g, VRT_CP_SNAPSHOT);
		const struct vt_chunk *exp[4096];
		size_t n = vt_gen_expected_chunks(&g, exp, 4096);
		for (size_t i = 0; i < n && i < 4096; i++)
			if (exp[i]->type == VRT_CHUNK_CHECKPOINT) {
				orphans += exp[i]->cp_part > 0; /* its beginning was overwritten */
				break;
			}
		for (size_t i = 0; i < g.n_chunks; i++)
			split += g.chunks[i].cp_part > 0;
		if (++puts % 7 == 0) {
			snprintf(what, sizeof(what), "checkpoints in parts, put %u, lap %llu", puts,
				 (unsigned long long)laps_of(&g));
			vt_check_trace(&g, what);
		}
	}
	VT_EQ(g.error, 0);
	VT_CHECK(split > 0);
	VT_CHECKF(orphans > 0, "no check saw a checkpoint whose first part was overwritten");
	vt_gen_checkpoint(&g, VRT_CP_EXIT);
	vt_gen_close(&g);
	vt_check_trace(&g, "checkpoints in parts, closed");
	vt_gen_free(&g);
	unlink(path);
}

/* A process that dies while writing a checkpoint: replay starts at the one before it. */
static void test_checkpoint_cut_short(uint64_t ring, uint64_t seed)
{
	char path[4200], what[128];
	vt_path(path, sizeof(path), "cut.vrt");
	struct vt_gen g;
	VT_REQUIRE(vt_gen_open(&g, path, ring, seed) == 0);
	g.cp_part_bytes = 256;
	while ((ring ? laps_of(&g) < 3 : g.n_ev < 200000) && !g.error)
		vt_gen_events(&g, 1500);
	vt_gen_checkpoint(&g, VRT_CP_SNAPSHOT);
	vt_gen_events(&g, 300);
	VT_REQUIRE(g.n_live > 40); /* enough items for more than two parts */
	vt_gen_checkpoint_cut(&g, VRT_CP_EXIT, 2);
	snprintf(what, sizeof(what), "checkpoint cut short, ring %llu", (unsigned long long)ring);
	vt_check_trace(&g, what);
	struct vrt_trace t;
	VT_REQUIRE(vrt_trace_open(&t, path) == 0);
	uint64_t cut_first = g.chunks[g.n_chunks - 2].seq; /* the first of the cut checkpoint's two parts */
	VT_CHECK(!ring || (t.replay_from < t.n_chunks && t.chunks[t.replay_from].seq < cut_first));
	vrt_trace_close(&t);
	vt_gen_free(&g);
	unlink(path);
}

static void test_ring_checkpoint_cut_short(void) { test_checkpoint_cut_short(1u << 20, 31); }
static void test_keep_all_checkpoint_cut_short(void) { test_checkpoint_cut_short(0, 32); }

static long no_tables(void *ctx, uint8_t **out)
{
	(void)ctx;
	*out = malloc(16);
	if (!*out)
		return VRT_E_NOMEM;
	memset(*out, 0, 16);
	return 0;
}

static int open_writer(struct vrt_writer **w, const char *path, uint64_t ring)
{
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return VRT_E_IO;
	struct vrt_writer_options o = { .fd = fd, .ring_bytes = ring, .ts_unit_ns = 1000, .pid = 1, .ppid = 1,
					.rank = -1, .local_rank = -1, .world_size = -1, .start_monotonic_ns = 1,
					.zstd_level = 1, .dump_tables = no_tables };
	int rc = vrt_writer_open(w, &o);
	if (rc)
		close(fd);
	return rc;
}

/* Half random (incompressible), half a repeated pattern. */
static void fill(uint8_t *p, size_t n, uint64_t *rng)
{
	for (size_t i = 0; i < n; i++)
		p[i] = i % 64 < 32 ? (uint8_t)vt_rand(rng) : (uint8_t)(i / 64);
}

static bool same_file(const char *a, const char *b)
{
	char cmd[9000];
	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
	return system(cmd) == 0;
}

/* vrt_writer_put_parts writes the bytes that one vrt_writer_put per part writes, across wraps. */
static void test_put_parts_places_like_puts(void)
{
	char pa[4200], pb[4200];
	vt_path(pa, sizeof(pa), "parts-a.vrt");
	vt_path(pb, sizeof(pb), "parts-b.vrt");
	struct vrt_writer *a, *b;
	VT_REQUIRE(open_writer(&a, pa, 1u << 20) == 0);
	VT_REQUIRE(open_writer(&b, pb, 1u << 20) == 0);
	size_t cap = 4 * vrt_writer_max_raw(a);
	uint8_t *raw = malloc(cap);
	VT_REQUIRE(raw);
	uint64_t rng = 41;
	for (int round = 0; round < 120; round++) {
		size_t ev = 1 + (size_t)(vt_rand(&rng) % 60000);
		fill(raw, ev, &rng);
		VT_EQ(vrt_writer_put(a, VRT_CHUNK_EVENTS, raw, ev), vrt_writer_put(b, VRT_CHUNK_EVENTS, raw, ev));
		size_t ends[6], n = 1 + (size_t)(vt_rand(&rng) % 6), len = 0;
		for (size_t i = 0; i < n; i++)
			ends[i] = len += 1 + (size_t)(vt_rand(&rng) % 40000);
		fill(raw, len, &rng);
		int ra = vrt_writer_put_parts(a, VRT_CHUNK_CHECKPOINT, raw, ends, n, NULL), rb = 0;
		for (size_t i = 0; i < n && rb >= 0; i++) {
			size_t from = i ? ends[i - 1] : 0;
			int r = vrt_writer_put(b, VRT_CHUNK_CHECKPOINT, raw + from, ends[i] - from);
			rb = r < 0 ? r : rb | r;
		}
		VT_EQ(ra, rb);
	}
	struct vrt_file_state s;
	VT_REQUIRE(pread(vrt_writer_fd(a), &s, sizeof(s), VRT_STATE_OFFSET) == (ssize_t)sizeof(s));
	VT_CHECK(s.ring_laps >= 5);
	vrt_writer_close(a);
	vrt_writer_close(b);
	VT_CHECK(same_file(pa, pb));
	free(raw);
	unlink(pa);
	unlink(pb);
}

static uint64_t last_seq(struct vrt_writer *w)
{
	struct vrt_file_state s;
	return pread(vrt_writer_fd(w), &s, sizeof(s), VRT_STATE_OFFSET) == (ssize_t)sizeof(s) ? s.last_chunk_seq : 0;
}

/* Parts that together span more than half the ring are refused before any is written. */
static void test_put_parts_refuses_more_than_half_the_ring(void)
{
	char path[4200];
	vt_path(path, sizeof(path), "half.vrt");
	struct vrt_writer *w;
	VT_REQUIRE(open_writer(&w, path, 1u << 20) == 0);
	size_t max = vrt_writer_max_raw(w);
	VT_CHECK(max > 200000 && max < (1u << 18));
	uint8_t *raw = malloc(3 * max);
	VT_REQUIRE(raw);
	uint64_t rng = 51;
	for (size_t i = 0; i < 3 * max; i++)
		raw[i] = (uint8_t)vt_rand(&rng);
	/* One incompressible part of the largest size still makes one chunk. */
	VT_CHECK(vrt_writer_put(w, VRT_CHUNK_EVENTS, raw, max) >= 0);
	uint64_t seq = last_seq(w), need = 0;
	size_t three[3] = { max, 2 * max, 3 * max }, two[2] = { max, 2 * max }, big[1] = { (1u << 18) + 64 };
	VT_EQ(vrt_writer_put_parts(w, VRT_CHUNK_CHECKPOINT, raw, three, 3, &need), VRT_E_SIZE);
	VT_CHECKF(need >= 6 * max && need < (2u << 20), "ring needed %llu", (unsigned long long)need);
	VT_EQ(last_seq(w), seq);
	need = 0; /* one part over a quarter of the ring */
	VT_EQ(vrt_writer_put_parts(w, VRT_CHUNK_CHECKPOINT, raw, big, 1, &need), VRT_E_SIZE);
	VT_CHECKF(need >= 4 * big[0], "ring needed %llu", (unsigned long long)need);
	VT_EQ(last_seq(w), seq);
	VT_CHECK(vrt_writer_put_parts(w, VRT_CHUNK_CHECKPOINT, raw, two, 2, NULL) >= 0);
	VT_EQ(last_seq(w), seq + 2);
	vrt_writer_close(w);
	unlink(path);
	/* Keeping everything, there is no such bound. */
	VT_REQUIRE(open_writer(&w, path, 0) == 0);
	VT_EQ(vrt_writer_put_parts(w, VRT_CHUNK_CHECKPOINT, raw, three, 3, NULL), 0);
	VT_EQ(last_seq(w), 3);
	vrt_writer_close(w);
	free(raw);
	unlink(path);
}

int main(void)
{
	VT_RUN(test_keep_all);
	VT_RUN(test_records_decoded_ahead);
	VT_RUN(test_ring_without_wrap);
	VT_RUN(test_ring_wrapped_20x);
	VT_RUN(test_ring_wrapped_small_chunks);
	VT_RUN(test_ring_wrapped_large_chunks);
	VT_RUN(test_ring_checkpoints_in_parts);
	VT_RUN(test_ring_checkpoint_cut_short);
	VT_RUN(test_keep_all_checkpoint_cut_short);
	VT_RUN(test_put_parts_places_like_puts);
	VT_RUN(test_put_parts_refuses_more_than_half_the_ring);
	vt_tmpdir_done();
	return vt_summary();
}
