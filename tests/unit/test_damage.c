/* SPDX-License-Identifier: MIT */
/*
 * Damaged traces: a file cut at every chunk boundary and inside every chunk is read up to its
 * last complete chunk; single bit flips in the file header, the state block, chunk headers and
 * payloads are rejected (the file, the state block or that one chunk), never accepted and never
 * a crash. Real files in $TMPDIR, written by the real writer, read by the real reader.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "tracecheck.h"

static uint8_t *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st))
		return NULL;
	uint8_t *b = malloc((size_t)st.st_size + 1);
	if (b && pread(fd, b, (size_t)st.st_size, 0) != st.st_size) {
		free(b);
		b = NULL;
	}
	close(fd);
	*len = (size_t)st.st_size;
	return b;
}

static int spit(const char *path, const uint8_t *b, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -1;
	ssize_t n = len ? pwrite(fd, b, len, 0) : 0;
	close(fd);
	return n == (ssize_t)len ? 0 : -1;
}

/* A small keep-all trace: tables, events, checkpoints; about a dozen chunks. */
static void make_trace(struct vt_gen *g, const char *name, uint64_t ring)
{
	char path[4200];
	vt_path(path, sizeof(path), name);
	if (vt_gen_open(g, path, ring, 5)) {
		fprintf(stderr, "cannot create %s\n", path);
		exit(2);
	}
	for (int i = 0; i < 6; i++) {
		vt_gen_events(g, 20 + 30 * (size_t)i);
		if (i == 2)
			vt_gen_checkpoint(g, VRT_CP_SNAPSHOT);
	}
	vt_gen_checkpoint(g, VRT_CP_EXIT);
	vt_gen_close(g);
}

static uint64_t payload_end(const struct vt_chunk *c, const uint8_t *file)
{
	struct vrt_chunk_header h;
	memcpy(&h, file + c->offset, sizeof(h));
	return c->offset + sizeof(h) + h.stored_size;
}

/* Opens path and replays everything; returns the open status, fills what was seen. */
struct seen {
	size_t chunks;
	bool truncated;
	uint64_t corrupt, bad_chunks, events;
	int replay_error;
	bool state_valid;
};

static int read_all(const char *path, struct seen *s)
{
	memset(s, 0, sizeof(*s));
	struct vrt_trace t;
	int rc = vrt_trace_open(&t, path);
	if (rc)
		return rc;
	s->chunks = t.n_chunks;
	s->truncated = t.truncated;
	s->corrupt = t.corrupt_chunks;
	s->state_valid = t.state_valid;
	struct vrt_model m;
	if (vrt_model_init(&m) == 0) {
		struct vrt_replay rp;
		struct vrt_record r;
		vrt_replay_begin(&rp, &t);
		while (vrt_replay_next(&rp, &r)) {
			vrt_model_apply(&m, &r, NULL);
			s->events += r.op < VRT_OP_STRING;
		}
		s->bad_chunks = rp.bad_chunks;
		s->replay_error = rp.error;
		vrt_model_free(&m);
	}
	vrt_trace_close(&t);
	return 0;
}

static void truncations(const struct vt_gen *g, const char *label)
{
	size_t len;
	uint8_t *file = slurp(g->path, &len);
	VT_REQUIRE(file);
	char cut_path[4200];
	vt_path(cut_path, sizeof(cut_path), "cut.vrt");
	size_t n_exp = vt_gen_expected_chunks(g, NULL, 0);
	const struct vt_chunk **exp = calloc(n_exp + 1, sizeof(*exp));
	vt_gen_expected_chunks(g, exp, n_exp);

	/* Inside the file header: not a trace, or a truncated one. */
	static const size_t small[] = { 0, 1, 7, 8, 9, 84, 512, 640, 4095 };
	for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
		VT_REQUIRE(spit(cut_path, file, small[i]) == 0);
		struct seen s;
		int rc = read_all(cut_path, &s);
		VT_CHECKF(rc == (small[i] < VRT_FILE_MAGIC_LEN ? VRT_E_MAGIC : VRT_E_TRUNCATED), "%s: cut at %zu: %s",
			  label, small[i], vrt_strerror(rc));
	}

	/* At and inside every chunk. */
	unsigned long cuts = 0;
	for (size_t i = 0; i < n_exp; i++) {
		uint64_t start = exp[i]->offset, end = payload_end(exp[i], file);
		uint64_t points[] = { start, start + 1, start + 8, start + 16, start + 31, start + 32,
				      start + 32 + (end - start - 32) / 2, end - 1, end };
		for (size_t k = 0; k < sizeof(points) / sizeof(points[0]); k++) {
			uint64_t cut = points[k];
			if (cut > len || cut < start || (k && cut == start))
				continue;
			VT_REQUIRE(spit(cut_path, file, cut) == 0);
			size_t complete = 0;
			for (size_t j = 0; j < n_exp; j++)
				complete += payload_end(exp[j], file) <= cut;
			struct seen s;
			int rc = read_all(cut_path, &s);
			cuts++;
			VT_CHECKF(rc == 0, "%s: cut at %llu: %s", label, (unsigned long long)cut, vrt_strerror(rc));
			VT_CHECKF(s.chunks == complete, "%s: cut at %llu (chunk %zu + %llu): %zu chunks, %zu complete", label,
				  (unsigned long long)cut, i, (unsigned long long)(cut - start), s.chunks, complete);
			VT_CHECKF(!s.corrupt && !s.bad_chunks && !s.replay_error, "%s: cut at %llu: corrupt %llu bad %llu error %d",
				  label, (unsigned long long)cut, (unsigned long long)s.corrupt,
				  (unsigned long long)s.bad_chunks, s.replay_error);
			if (!g->ring_bytes) {
				bool partial = cut != start && cut != end;
				VT_CHECKF(s.truncated == partial, "%s: cut at %llu: truncated %d, expected %d", label,
					  (unsigned long long)cut, s.truncated, partial);
			}
		}
	}
	VT_CHECK(cuts > 5 * n_exp);
	free(exp);
	free(file);
	unlink(cut_path);
}

static void test_truncated_keep_all(void)
{
	struct vt_gen g;
	make_trace(&g, "trunc-keep.vrt", 0);
	VT_REQUIRE(g.error == 0);
	vt_check_trace(&g, "the intact keep-all trace");
	truncations(&g, "keep-all");
	vt_gen_free(&g);
}

/* A ring that has not wrapped, cut short: a killed process's file. */
static void test_truncated_ring(void)
{
	struct vt_gen g;
	make_trace(&g, "trunc-ring.vrt", 1u << 20);
	VT_REQUIRE(g.error == 0);
	vt_check_trace(&g, "the intact ring trace");
	truncations(&g, "ring");
	vt_gen_free(&g);
}

/* Flips one bit of the file at off, reads it, flips it back. */
static int flip_and_read(int fd, const char *path, uint64_t off, int bit, struct seen *s)
{
	uint8_t b;
	if (pread(fd, &b, 1, (off_t)off) != 1)
		return -1000;
	uint8_t f = (uint8_t)(b ^ (1u << bit));
	if (pwrite(fd, &f, 1, (off_t)off) != 1)
		return -1000;
	int rc = read_all(path, s);
	if (pwrite(fd, &b, 1, (off_t)off) != 1)
		return -1000;
	return rc;
}

static void test_bit_flips(void)
{
	struct vt_gen g;
	make_trace(&g, "flips.vrt", 0);
	VT_REQUIRE(g.error == 0);
	size_t len;
	uint8_t *file = slurp(g.path, &len);
	VT_REQUIRE(file);
	char path[4200];
	vt_path(path, sizeof(path), "flipped.vrt");
	VT_REQUIRE(spit(path, file, len) == 0);
	int fd = open(path, O_RDWR);
	VT_REQUIRE(fd >= 0);
	size_t n_exp = vt_gen_expected_chunks(&g, NULL, 0);
	const struct vt_chunk **exp = calloc(n_exp + 1, sizeof(*exp));
	vt_gen_expected_chunks(&g, exp, n_exp);
	struct seen s;
	VT_REQUIRE(read_all(path, &s) == 0 && s.chunks == n_exp && s.state_valid);
	uint64_t all_events = s.events;

	/* The checked part of the file header: the file is refused. */
	for (uint64_t off = 0; off < offsetof(struct vrt_file_header, header_crc) + 4; off++)
		for (int bit = 0; bit < 8; bit++) {
			int rc = flip_and_read(fd, path, off, bit, &s);
			int want = off < 8 ? VRT_E_MAGIC : off < 10 ? VRT_E_VERSION : VRT_E_CORRUPT;
			VT_CHECKF(rc == want, "header byte %llu bit %d: %s, expected %s", (unsigned long long)off, bit,
				  vrt_strerror(rc), vrt_strerror(want));
		}
	/* The state block: ignored as damaged, the chunks are all read. */
	for (uint64_t off = VRT_STATE_OFFSET; off < VRT_STATE_OFFSET + sizeof(struct vrt_file_state); off++)
		for (int bit = 0; bit < 8; bit += 3) {
			int rc = flip_and_read(fd, path, off, bit, &s);
			VT_CHECKF(rc == 0 && !s.state_valid && s.chunks == n_exp && s.events == all_events,
				  "state byte %llu bit %d: rc %d valid %d chunks %zu", (unsigned long long)off, bit, rc,
				  s.state_valid, s.chunks);
		}
	/* Chunk headers: that chunk is not taken. The keep-all log ends there (reported as a cut). */
	for (size_t i = 0; i < n_exp; i++)
		for (uint64_t off = exp[i]->offset; off < exp[i]->offset + sizeof(struct vrt_chunk_header); off++)
			for (int bit = 0; bit < 8; bit++) {
				int rc = flip_and_read(fd, path, off, bit, &s);
				VT_CHECKF(rc == 0 && s.chunks == i && s.truncated && !s.replay_error,
					  "chunk %zu header byte %llu bit %d: rc %d, %zu chunks, truncated %d, error %d", i,
					  (unsigned long long)(off - exp[i]->offset), bit, rc, s.chunks, s.truncated,
					  s.replay_error);
			}
	/* Payloads: that chunk is dropped at open as damaged (and reported), every other one is read. */
	unsigned long flips = 0;
	for (size_t i = 0; i < n_exp; i++) {
		uint64_t start = exp[i]->offset + sizeof(struct vrt_chunk_header), end = payload_end(exp[i], file);
		for (uint64_t off = start; off < end; off += 1 + (end - start) / 97) {
			int bit = (int)(off % 8);
			int rc = flip_and_read(fd, path, off, bit, &s);
			flips++;
			bool tables = exp[i]->type == VRT_CHUNK_TABLES;
			VT_CHECKF(rc == 0 && s.chunks == n_exp - 1 && s.corrupt == 1 && s.bad_chunks == 0,
				  "chunk %zu (type %u) payload byte %llu bit %d: rc %d chunks %zu corrupt %llu bad %llu", i,
				  exp[i]->type, (unsigned long long)(off - start), bit, rc, s.chunks,
				  (unsigned long long)s.corrupt, (unsigned long long)s.bad_chunks);
			VT_CHECKF(tables || s.events == all_events - exp[i]->n_events || exp[i]->type == VRT_CHUNK_CHECKPOINT,
				  "chunk %zu: %llu events replayed, expected %llu", i, (unsigned long long)s.events,
				  (unsigned long long)(all_events - exp[i]->n_events));
		}
	}
	VT_CHECK(flips > 50);
	close(fd);
	free(exp);
	free(file);
	vt_gen_free(&g);
}

/*
 * Payload damage that keeps the checksums right (a writer bug, or a crafted file): the chunk
 * decodes as far as it can and the replay stops with a clear error, not a crash. Whatever
 * happens to the damaged chunk, every chunk before it is read in full; a damaged chunk that is
 * noticed and skipped costs its own events and no other; only a TABLES chunk fails the open.
 */
static void test_consistent_garbage_payload(void)
{
	struct vt_gen g;
	make_trace(&g, "garbage.vrt", 0);
	VT_REQUIRE(g.error == 0);
	size_t len;
	uint8_t *file = slurp(g.path, &len);
	VT_REQUIRE(file);
	char path[4200];
	vt_path(path, sizeof(path), "garbage2.vrt");
	size_t n_exp = vt_gen_expected_chunks(&g, NULL, 0);
	const struct vt_chunk **exp = calloc(n_exp + 1, sizeof(*exp));
	vt_gen_expected_chunks(&g, exp, n_exp);
	uint64_t rng = 77, all_events = 0, skipped = 0, refused = 0;
	for (size_t i = 0; i < n_exp; i++)
		all_events += exp[i]->type == VRT_CHUNK_EVENTS ? exp[i]->n_events : 0;
	for (size_t i = 0, before = 0; i < n_exp; before += exp[i]->type == VRT_CHUNK_EVENTS ? exp[i]->n_events : 0, i++)
		for (int round = 0; round < 20; round++) {
			uint8_t *copy = malloc(len);
			VT_REQUIRE(copy);
			memcpy(copy, file, len);
			struct vrt_chunk_header h;
			memcpy(&h, copy + exp[i]->offset, sizeof(h));
			uint8_t *payload = copy + exp[i]->offset + sizeof(h);
			for (int k = 0; k < 1 + round; k++)
				payload[vt_rand(&rng) % h.stored_size] ^= (uint8_t)(1 + vt_rand(&rng) % 255);
			h.payload_crc = vrt_crc32c(0, payload, h.stored_size);
			h.header_crc = vrt_crc32c(0, &h, offsetof(struct vrt_chunk_header, header_crc)); /* covers payload_crc */
			memcpy(copy + exp[i]->offset, &h, sizeof(h));
			VT_REQUIRE(spit(path, copy, len) == 0);
			struct seen s;
			int rc = read_all(path, &s);
			/* Either zstd notices (skipped chunk), or the records are refused, or a TABLES chunk
			 * fails the whole open with a bad-trace error. */
			VT_CHECKF(rc == 0 || rc == VRT_E_RECORD || rc == VRT_E_RANGE, "chunk %zu round %d: %s", i, round,
				  vrt_strerror(rc));
			VT_CHECKF(rc == 0 || exp[i]->type == VRT_CHUNK_TABLES, "chunk %zu (type %u) round %d: the open failed: %s",
				  i, exp[i]->type, round, vrt_strerror(rc));
			if (rc == 0) {
				VT_CHECKF(s.chunks == n_exp || (s.chunks == n_exp - 1 && s.corrupt == 1),
					  "chunk %zu round %d: %zu chunks found (%llu dropped as damaged), %zu written", i, round,
					  s.chunks, (unsigned long long)s.corrupt, n_exp);
				VT_CHECKF(s.replay_error == 0 || s.replay_error == VRT_E_RECORD || s.replay_error == VRT_E_RANGE,
					  "chunk %zu round %d: replay error %s", i, round, vrt_strerror(s.replay_error));
				VT_CHECKF(s.events >= before, "chunk %zu round %d: %llu events replayed, the %zu before it lost", i,
					  round, (unsigned long long)s.events, before);
				bool noticed = s.corrupt + s.bad_chunks == 1 && !s.replay_error;
				uint64_t own = exp[i]->type == VRT_CHUNK_EVENTS ? exp[i]->n_events : 0;
				VT_CHECKF(!noticed || exp[i]->type == VRT_CHUNK_TABLES || s.events == all_events - own,
					  "chunk %zu (type %u) round %d skipped: %llu events replayed, expected %llu", i,
					  exp[i]->type, round, (unsigned long long)s.events, (unsigned long long)(all_events - own));
				skipped += noticed;
				refused += s.replay_error != 0;
			}
			free(copy);
		}
	/* both outcomes happen in these 20 rounds per chunk, or the checks above checked little */
	VT_CHECKF(skipped > 0 && refused > 0, "%llu skipped, %llu refused", (unsigned long long)skipped,
		  (unsigned long long)refused);
	free(exp);
	free(file);
	vt_gen_free(&g);
}

int main(void)
{
	VT_RUN(test_truncated_keep_all);
	VT_RUN(test_truncated_ring);
	VT_RUN(test_bit_flips);
	VT_RUN(test_consistent_garbage_payload);
	vt_tmpdir_done();
	return vt_summary();
}
