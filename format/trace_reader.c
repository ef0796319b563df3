/* SPDX-License-Identifier: MIT */
/*
 * Chunk discovery never trusts more than it checks: a chunk counts only if its header crc
 * holds, and its payload only if the payload crc holds and it decodes to its raw size. The log
 * is read front to back until the first bad header (the cut-off point of a killed process).
 * The ring is scanned in full, resynchronising on 8-byte boundaries after an overwritten region,
 * and the chunks found are ordered by sequence number.
 */
#define _GNU_SOURCE
#include "trace_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "vramtrace/error.h"
#include "vramtrace/utf8.h"

static uint64_t align8(uint64_t v) { return (v + 7) & ~7ull; }

/* The file is read with pread, never mapped: a file that shrinks under the reader gives a short
 * read (VRT_E_CHANGED), not SIGBUS. Everything read lies below t->size, the size at open. pread
 * moves no file offset, so both of the reader's threads read through the one descriptor. */
static int pread_all(int fd, uint64_t off, void *buf, size_t len)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return VRT_E_IO;
		if (n == 0)
			return VRT_E_CHANGED;
		done += (size_t)n;
	}
	return 0;
}

static int read_at(struct vrt_trace *t, uint64_t off, void *buf, size_t len)
{
	int rc = pread_all(t->fd, off, buf, len);
	if (rc == VRT_E_CHANGED)
		t->changed = true;
	return rc;
}

static int header_check(struct vrt_trace *t)
{
	uint8_t magic[VRT_FILE_MAGIC_LEN];
	if (t->size < VRT_FILE_HEADER_SIZE) {
		bool ours = t->size >= VRT_FILE_MAGIC_LEN && !read_at(t, 0, magic, sizeof(magic)) &&
			    !memcmp(magic, VRT_FILE_MAGIC, VRT_FILE_MAGIC_LEN);
		return ours ? VRT_E_TRUNCATED : VRT_E_MAGIC;
	}
	int rc = read_at(t, 0, &t->hdr, sizeof(t->hdr));
	if (rc)
		return rc;
	const struct vrt_file_header *h = &t->hdr;
	if (memcmp(h->magic, VRT_FILE_MAGIC, VRT_FILE_MAGIC_LEN))
		return VRT_E_MAGIC;
	if (h->version_major != VRT_FORMAT_MAJOR)
		return VRT_E_VERSION;
	if (h->header_crc != vrt_crc32c(0, h, offsetof(struct vrt_file_header, header_crc)))
		return VRT_E_CORRUPT;
	if (h->header_size != VRT_FILE_HEADER_SIZE || !h->ts_unit_ns)
		return VRT_E_CORRUPT;
	if (h->ring_size && (h->ring_offset != VRT_FILE_HEADER_SIZE || h->ring_size > (1ull << 48) ||
			     h->log_offset != h->ring_offset + h->ring_size))
		return VRT_E_CORRUPT;
	if (!h->ring_size && h->log_offset != VRT_FILE_HEADER_SIZE)
		return VRT_E_CORRUPT;
	const struct vrt_file_state *s = &h->state;
	t->state_valid = s->crc == vrt_crc32c(0, s, offsetof(struct vrt_file_state, crc));
	return 0;
}

/* A valid chunk header in hdr (read from off) whose payload fits in [off, limit)? */
static bool header_valid(const void *hdr, uint64_t off, uint64_t limit, struct vrt_chunk_ref *out)
{
	struct vrt_chunk_header ch;
	memcpy(&ch, hdr, sizeof(ch));
	if (ch.magic != VRT_CHUNK_MAGIC || ch.header_crc != vrt_crc32c(0, &ch, offsetof(struct vrt_chunk_header, header_crc)))
		return false;
	if (!ch.type || ch.type >= VRT_CHUNK_TYPE_LAST || ch.raw_size > VRT_CHUNK_MAX_RAW || !ch.seq)
		return false;
	if (ch.type != VRT_CHUNK_PADDING && off + sizeof(ch) + ch.stored_size > limit)
		return false;
	*out = (struct vrt_chunk_ref){ off, ch.seq, ch.stored_size, ch.raw_size, ch.type };
	return true;
}

static bool chunk_at(struct vrt_trace *t, uint64_t off, uint64_t limit, struct vrt_chunk_ref *out)
{
	uint8_t hdr[sizeof(struct vrt_chunk_header)];
	if (off + sizeof(hdr) > limit || off + sizeof(hdr) > t->size || read_at(t, off, hdr, sizeof(hdr)))
		return false;
	return header_valid(hdr, off, limit, out);
}

static uint64_t chunk_end(const struct vrt_chunk_ref *c)
{
	return c->offset + align8(sizeof(struct vrt_chunk_header) + (c->type == VRT_CHUNK_PADDING ? 0 : c->stored));
}

static int add_chunk(struct vrt_trace *t, const struct vrt_chunk_ref *c, size_t *cap)
{
	if (t->n_chunks == *cap) {
		size_t ncap = *cap ? *cap * 2 : 256;
		struct vrt_chunk_ref *n = realloc(t->chunks, ncap * sizeof(*n));
		if (!n)
			return VRT_E_NOMEM;
		t->chunks = n;
		*cap = ncap;
	}
	t->chunks[t->n_chunks++] = *c;
	if (c->seq > t->seq_found)
		t->seq_found = c->seq;
	return 0;
}

/* Walks the log from `from`; returns where the walk stopped (the end of its last chunk). */
static int scan_log(struct vrt_trace *t, uint64_t from, size_t *cap, uint64_t *stopped)
{
	uint64_t off = from;
	struct vrt_chunk_ref c;
	while (chunk_at(t, off, t->size, &c) && c.type != VRT_CHUNK_PADDING) {
		int rc = add_chunk(t, &c, cap);
		if (rc)
			return rc;
		off = chunk_end(&c);
	}
	*stopped = off;
	if (off < t->size && off + sizeof(struct vrt_chunk_header) <= t->size) {
		/* Bytes remain that are not a valid chunk: a crash mid-write or damage. */
		uint8_t tail[64];
		size_t n = t->size - off < sizeof(tail) ? (size_t)(t->size - off) : sizeof(tail);
		bool zeros = true;
		if (read_at(t, off, tail, n))
			return t->changed ? VRT_E_CHANGED : VRT_E_IO;
		for (size_t i = 0; i < n && zeros; i++)
			zeros = tail[i] == 0;
		t->truncated = !zeros;
	} else if (off < t->size) {
		t->truncated = true;
	}
	return 0;
}

/* The ring scan reads the file a window at a time and skips holes (SEEK_DATA): a sparse ring
 * costs what it stores, not what its header claims. */
#define SCAN_WINDOW (1u << 20)

struct window {
	uint8_t *buf;
	uint64_t base, len;
};

static int window_at(struct vrt_trace *t, struct window *w, uint64_t off, uint64_t limit)
{
	if (off >= w->base && off + sizeof(struct vrt_chunk_header) <= w->base + w->len)
		return 0;
	uint64_t n = limit - off < SCAN_WINDOW ? limit - off : SCAN_WINDOW;
	w->base = off;
	w->len = 0;
	int rc = read_at(t, off, w->buf, (size_t)n);
	if (!rc)
		w->len = n;
	return rc;
}

/* The next offset at or after off that lies in data (not a hole), 8-aligned; limit if none. */
static uint64_t next_data(const struct vrt_trace *t, uint64_t off, uint64_t limit, uint64_t *data_end)
{
	off_t d = lseek(t->fd, (off_t)off, SEEK_DATA);
	if (d < 0) {
		if (errno == ENXIO)
			return limit; /* nothing but holes up to the end of the file */
		*data_end = limit; /* no SEEK_DATA here: everything is data */
		return off;
	}
	uint64_t at = align8((uint64_t)d);
	off_t h = lseek(t->fd, (off_t)at, SEEK_HOLE);
	*data_end = h < 0 || (uint64_t)h > limit ? limit : (uint64_t)h;
	return at < limit ? at : limit;
}

static int scan_ring(struct vrt_trace *t, size_t *cap, uint64_t *ring_end_found)
{
	uint64_t base = t->hdr.ring_offset, end = base + t->hdr.ring_size;
	if (end > t->size)
		end = t->size; /* the ring had not filled when the file was written */
	struct window w = { malloc(SCAN_WINDOW), 0, 0 };
	if (!w.buf)
		return VRT_E_NOMEM;
	uint64_t data_end = base;
	int rc = 0;
	for (uint64_t off = base; off + sizeof(struct vrt_chunk_header) <= end && !rc;) {
		if (off >= data_end) {
			uint64_t at = next_data(t, off, end, &data_end);
			t->garbage_bytes += at - off;
			off = at;
			continue;
		}
		if ((rc = window_at(t, &w, off, end)))
			break;
		struct vrt_chunk_ref c;
		if (header_valid(w.buf + (off - w.base), off, end, &c)) {
			rc = add_chunk(t, &c, cap); /* padding too: its sequence number counts */
			if (c.type == VRT_CHUNK_PADDING)
				break; /* it reaches the ring's end */
			if (chunk_end(&c) > *ring_end_found)
				*ring_end_found = chunk_end(&c);
			off = chunk_end(&c);
			continue;
		}
		/* Overwritten remains: on to the next 8-aligned place that starts with the magic. */
		uint64_t stop = w.base + w.len < data_end ? w.base + w.len : data_end, next = off + 8;
		uint32_t magic = VRT_CHUNK_MAGIC;
		while (next + 4 <= stop && memcmp(w.buf + (next - w.base), &magic, 4))
			next += 8;
		t->garbage_bytes += next - off;
		off = next;
	}
	free(w.buf);
	return rc;
}

static int cmp_seq(const void *a, const void *b)
{
	const struct vrt_chunk_ref *x = a, *y = b;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static bool in_ring(const struct vrt_trace *t, const struct vrt_chunk_ref *c)
{
	return t->hdr.ring_size && c->offset < t->hdr.log_offset;
}

/*
 * Sorts by seq and drops what the ring holds from earlier laps. Sequence numbers have no gaps
 * when written, so the retained history is the unbroken run of numbers that ends at the newest
 * chunk; an intact chunk from before that run (two laps back, near the ring's end) is stale.
 * Definitions in the log are never stale.
 */
static void order_chunks(struct vrt_trace *t)
{
	if (!t->n_chunks)
		return;
	qsort(t->chunks, t->n_chunks, sizeof(*t->chunks), cmp_seq);
	size_t w = 0;
	for (size_t i = 0; i < t->n_chunks; i++)
		if (!w || t->chunks[w - 1].seq != t->chunks[i].seq)
			t->chunks[w++] = t->chunks[i];
	t->n_chunks = w;
	uint64_t run_start = t->chunks[w - 1].seq;
	for (size_t i = w - 1; i > 0 && t->chunks[i - 1].seq + 1 == t->chunks[i].seq; i--)
		run_start = t->chunks[i - 1].seq;
	size_t k = 0;
	for (size_t i = 0; i < w; i++) {
		const struct vrt_chunk_ref *c = &t->chunks[i];
		if (c->type == VRT_CHUNK_PADDING || (in_ring(t, c) && c->seq < run_start))
			continue;
		t->chunks[k++] = *c;
	}
	t->n_chunks = k;
}

/* A payload no valid chunk has: larger than any zstd frame of VRT_CHUNK_MAX_RAW bytes. */
static bool stored_plausible(const struct vrt_chunk_ref *c)
{
	return c->stored <= ZSTD_compressBound(VRT_CHUNK_MAX_RAW);
}

/* Reads chunk c's header and payload (into b->stored) from fd. */
static int read_payload(int fd, const struct vrt_chunk_ref *c, struct vrt_chunk_buffers *b, struct vrt_chunk_header *ch)
{
	if (!stored_plausible(c))
		return VRT_E_CORRUPT;
	if (c->stored > b->stored_cap) {
		uint8_t *n = realloc(b->stored, c->stored);
		if (!n)
			return VRT_E_NOMEM;
		b->stored = n;
		b->stored_cap = c->stored;
	}
	int rc = pread_all(fd, c->offset, ch, sizeof(*ch));
	if (!rc && c->stored)
		rc = pread_all(fd, c->offset + sizeof(*ch), b->stored, c->stored);
	return rc;
}

/* A chunk is usable when its payload checksum holds and it declares a codec and size that can
 * be decoded; the others are dropped here, counted, and reported by every command. */
static int payload_ok(struct vrt_trace *t, const struct vrt_chunk_ref *c, bool *ok)
{
	struct vrt_chunk_header ch;
	*ok = false;
	int rc = read_payload(t->fd, c, &t->buf, &ch);
	if (rc == VRT_E_CHANGED)
		t->changed = true;
	if (rc)
		return rc == VRT_E_CORRUPT ? 0 : rc;
	if (ch.payload_crc != vrt_crc32c(0, t->buf.stored, c->stored))
		return 0;
	if (ch.codec == VRT_CODEC_NONE)
		*ok = c->raw == c->stored;
	else if (ch.codec == VRT_CODEC_ZSTD)
		*ok = ZSTD_getFrameContentSize(t->buf.stored, c->stored) == c->raw;
	return 0;
}

static int drop_damaged(struct vrt_trace *t)
{
	size_t k = 0;
	for (size_t i = 0; i < t->n_chunks; i++) {
		bool ok;
		int rc = payload_ok(t, &t->chunks[i], &ok);
		if (rc)
			return rc;
		if (ok) {
			t->chunks[k++] = t->chunks[i];
			continue;
		}
		t->corrupt_chunks++;
		if (t->chunks[i].type == VRT_CHUNK_TABLES)
			t->tables_damaged_raw += t->chunks[i].raw;
	}
	t->n_chunks = k;
	return 0;
}

/*
 * Whether the file holds what its state block says was written: the chunk numbered
 * last_chunk_seq, and chunks up to log_end (keep-all, or a ring before its first wrap: the
 * ring's last chunk; after a wrap: the log's). A file that holds more is fine (the state block
 * is rewritten after each chunk, so it can be one behind); less means the end was cut off. A
 * trace whose writing failed numbered the chunk it could not write.
 */
static void check_state(struct vrt_trace *t, uint64_t ring_end_found, uint64_t log_stopped)
{
	const struct vrt_file_state *s = &t->hdr.state;
	if (!t->state_valid)
		return;
	bool ring_log = t->hdr.ring_size && s->ring_laps == 0;
	t->end_found = ring_log ? ring_end_found : log_stopped;
	uint64_t seq_written = s->last_chunk_seq - (s->end_reason == VRT_END_WRITE_FAILED && s->last_chunk_seq);
	t->cut_short = t->seq_found < seq_written || t->end_found < s->log_end;
}

static int find_chunks(struct vrt_trace *t)
{
	size_t cap = 0;
	uint64_t ring_end = t->hdr.ring_offset, log_stopped = t->hdr.log_offset;
	int rc = t->hdr.ring_size ? scan_ring(t, &cap, &ring_end) : scan_log(t, t->hdr.log_offset, &cap, &log_stopped);
	if (!rc && t->hdr.ring_size && t->size > t->hdr.log_offset)
		rc = scan_log(t, t->hdr.log_offset, &cap, &log_stopped);
	if (rc)
		return rc;
	check_state(t, ring_end, log_stopped);
	order_chunks(t);
	/* The first chunk ever written is number 1: gone means the ring overwrote the start. Found
	 * but damaged is not gone: the replay still starts at the beginning, without that chunk. */
	t->history_lost = t->n_chunks && t->chunks[0].seq != 1;
	return drop_damaged(t);
}

/*
 * A decompression context that leaves zstd's frame checksum unchecked: payload_crc, checked on
 * the same bytes just before they are decoded, covers the whole frame, and the frame's XXH64 over
 * its output costs ~2% of a replay (bench/NOTES.md). An older libzstd, without the parameter or
 * refusing it, checks the checksum as before.
 */
static ZSTD_DCtx *new_dctx(void)
{
	ZSTD_DCtx *d = ZSTD_createDCtx();
#ifdef ZSTD_d_forceIgnoreChecksum
	if (d)
		ZSTD_DCtx_setParameter(d, ZSTD_d_forceIgnoreChecksum, ZSTD_d_ignoreChecksum);
#endif
	return d;
}

/*
 * Decodes chunk c from fd into b with dctx: the one way a chunk is decoded, on either of the
 * reader's threads (it touches nothing else). VRT_E_CHANGED when the chunk is no longer what the
 * scan found (the file was rewritten since), which the caller notes in the trace.
 */
static int decode_chunk(int fd, void *dctx, const struct vrt_chunk_ref *c, struct vrt_chunk_buffers *b,
			const uint8_t **data, size_t *len)
{
	struct vrt_chunk_header ch;
	int rc = read_payload(fd, c, b, &ch);
	if (rc)
		return rc;
	/* Every chunk here passed its checks when the file was opened. */
	if (ch.seq != c->seq || ch.stored_size != c->stored || ch.raw_size != c->raw ||
	    ch.payload_crc != vrt_crc32c(0, b->stored, c->stored))
		return VRT_E_CHANGED;
	if (ch.codec == VRT_CODEC_NONE) {
		*data = b->stored;
		*len = c->stored;
		return 0;
	}
	if (c->raw > b->raw_cap) {
		uint8_t *n = realloc(b->raw, c->raw);
		if (!n)
			return VRT_E_NOMEM;
		b->raw = n;
		b->raw_cap = c->raw;
	}
	size_t got = ZSTD_decompressDCtx(dctx, b->raw, c->raw, b->stored, c->stored);
	if (ZSTD_isError(got) || got != c->raw)
		return VRT_E_DECOMPRESS;
	*data = b->raw;
	*len = got;
	return 0;
}

/* ---- the second thread: one chunk decoded ahead ------------------------------------------ */

/*
 * The reader asks (requested, with ref), the thread decodes into its own buffers and says so
 * (done, with rc, data and len), the reader takes the result by swapping buffers with the trace.
 * Concurrency: everything below `lock` is guarded by it; the thread uses `buf` and `dctx` only
 * between taking a request and marking it done, the reader only while no request is under way.
 * The thread reads the trace's tables and end mark, which are written before the first request
 * (at open, and by the command's set-up) and never while a pass runs.
 */
struct vrt_chunk_ahead {
	pthread_t thread;
	int fd;
	void *dctx;
	pthread_mutex_t lock;
	pthread_cond_t wake; /* to the thread: a request, or stop */
	pthread_cond_t done_cond; /* to the reader: the request is done */
	bool requested, done, stop;
	size_t index;
	struct vrt_chunk_ref ref;
	const struct vrt_trace *trace; /* whose tables the records are checked against */
	int rc;
	const uint8_t *data;
	size_t len;
	struct vrt_chunk_buffers buf;
};

static void records_free(struct vrt_chunk_records *rs)
{
	free(rs->recs);
	free(rs->threads);
}

/*
 * Decodes a replayed chunk's first records into b's record arrays, on the second thread: the
 * replay takes them with the chunk. Left not valid (the replay decodes them) without the memory.
 */
static void decode_records(const struct vrt_trace *t, const struct vrt_chunk_ref *c, struct vrt_chunk_buffers *b,
			   const uint8_t *data, size_t len)
{
	struct vrt_chunk_records *rs = &b->records;
	rs->valid = false;
	if (c->type != VRT_CHUNK_EVENTS && c->type != VRT_CHUNK_CHECKPOINT)
		return;
	if (!rs->recs) {
		rs->recs = malloc(VRT_AHEAD_RECORDS * sizeof(*rs->recs));
		rs->threads = malloc(VRT_AHEAD_RECORDS * sizeof(*rs->threads));
	}
	if (!rs->recs || !rs->threads)
		return;
	/* An empty chunk's data may be NULL: no offset is added to it. */
	rs->rest = (struct vrt_records_cursor){ .p = data, .end = len ? data + len : data, .chunk_type = c->type };
	rs->n = vrt_records_decode(t, &rs->rest, rs->recs, rs->threads, VRT_AHEAD_RECORDS, &rs->verdict);
	rs->valid = true;
}

static void *ahead_main(void *arg)
{
	struct vrt_chunk_ahead *a = arg;
	pthread_mutex_lock(&a->lock);
	for (;;) {
		while (!a->stop && !(a->requested && !a->done))
			pthread_cond_wait(&a->wake, &a->lock);
		if (a->stop)
			break;
		struct vrt_chunk_ref ref = a->ref;
		const struct vrt_trace *trace = a->trace;
		pthread_mutex_unlock(&a->lock);
		const uint8_t *data = NULL;
		size_t len = 0;
		int rc = decode_chunk(a->fd, a->dctx, &ref, &a->buf, &data, &len);
		a->buf.records.valid = false;
		if (!rc)
			decode_records(trace, &ref, &a->buf, data, len);
		pthread_mutex_lock(&a->lock);
		a->rc = rc;
		a->data = data;
		a->len = len;
		a->done = true;
		pthread_cond_signal(&a->done_cond);
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

static void ahead_free(struct vrt_chunk_ahead *a)
{
	free(a->buf.raw);
	free(a->buf.stored);
	records_free(&a->buf.records);
	if (a->dctx)
		ZSTD_freeDCtx(a->dctx);
	free(a);
}

/* The thread, started with every signal blocked (they are the main thread's to take); NULL if
 * it cannot be. */
static struct vrt_chunk_ahead *ahead_start(struct vrt_trace *t)
{
	struct vrt_chunk_ahead *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->fd = t->fd;
	a->dctx = new_dctx();
	if (!a->dctx || pthread_mutex_init(&a->lock, NULL)) {
		ahead_free(a);
		return NULL;
	}
	pthread_cond_init(&a->wake, NULL);
	pthread_cond_init(&a->done_cond, NULL);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&a->thread, NULL, ahead_main, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		pthread_cond_destroy(&a->wake);
		pthread_cond_destroy(&a->done_cond);
		pthread_mutex_destroy(&a->lock);
		ahead_free(a);
		return NULL;
	}
	return a;
}

static void ahead_stop(struct vrt_chunk_ahead *a)
{
	pthread_mutex_lock(&a->lock);
	a->stop = true;
	pthread_cond_signal(&a->wake);
	pthread_mutex_unlock(&a->lock);
	pthread_join(a->thread, NULL);
	pthread_cond_destroy(&a->wake);
	pthread_cond_destroy(&a->done_cond);
	pthread_mutex_destroy(&a->lock);
	ahead_free(a);
}

void vrt_trace_chunk_ahead(struct vrt_trace *t, size_t i)
{
	if (i >= t->n_chunks || t->ahead_off)
		return;
	if (!t->ahead && !(t->ahead = ahead_start(t))) {
		t->ahead_off = true;
		return;
	}
	struct vrt_chunk_ahead *a = t->ahead;
	pthread_mutex_lock(&a->lock);
	while (a->requested && !a->done) /* one nobody took (a pass that stopped early) */
		pthread_cond_wait(&a->done_cond, &a->lock);
	a->requested = true;
	a->done = false;
	a->index = i;
	a->ref = t->chunks[i];
	a->trace = t;
	pthread_cond_signal(&a->wake);
	pthread_mutex_unlock(&a->lock);
}

/* Chunk i as the thread decoded it, if it was asked for: true with *rc its result. */
static bool ahead_take(struct vrt_trace *t, size_t i, const uint8_t **data, size_t *len, int *rc)
{
	struct vrt_chunk_ahead *a = t->ahead;
	if (!a)
		return false;
	pthread_mutex_lock(&a->lock);
	bool asked = a->requested && a->index == i;
	if (asked) {
		while (!a->done)
			pthread_cond_wait(&a->done_cond, &a->lock);
		struct vrt_chunk_buffers mine = t->buf;
		t->buf = a->buf; /* the data lies in what were the thread's buffers */
		a->buf = mine;
		*rc = a->rc;
		*data = a->data;
		*len = a->len;
		a->requested = false;
	}
	pthread_mutex_unlock(&a->lock);
	return asked;
}

int vrt_trace_chunk(struct vrt_trace *t, size_t i, const uint8_t **data, size_t *len)
{
	int rc;
	if (!ahead_take(t, i, data, len, &rc)) {
		t->buf.records.valid = false;
		rc = decode_chunk(t->fd, t->dctx, &t->chunks[i], &t->buf, data, len);
	}
	if (rc == VRT_E_CHANGED)
		t->changed = true;
	return rc;
}

const struct vrt_chunk_records *vrt_trace_chunk_records(const struct vrt_trace *t)
{
	return t->buf.records.valid ? &t->buf.records : NULL;
}

bool vrt_trace_changed(struct vrt_trace *t)
{
	struct stat st;
	if (!t->changed && t->fd >= 0 && !fstat(t->fd, &st) && (uint64_t)st.st_size < t->size)
		t->changed = true;
	return t->changed;
}

/* ---- tables ----------------------------------------------------------------------------- */

static bool grow(void **arr, size_t *n, size_t want, size_t elem)
{
	if (want <= *n)
		return true;
	size_t cap = *n ? *n : 64;
	while (cap < want)
		cap *= 2;
	void *p = realloc(*arr, cap * elem);
	if (!p)
		return false;
	memset((char *)p + *n * elem, 0, (cap - *n) * elem);
	*arr = p;
	*n = cap;
	return true;
}

static size_t symbol_slot(const struct vrt_tables *tb, uint64_t addr)
{
	uint64_t h = addr * 0x9e3779b97f4a7c15ull;
	return (size_t)(h ^ (h >> 29)) & (tb->symbols_cap - 1);
}

static int put_symbol(struct vrt_tables *tb, const struct vrt_symbol_def *s)
{
	if ((tb->n_symbols + 1) * 2 > tb->symbols_cap) {
		size_t old_cap = tb->symbols_cap;
		struct vrt_symbol_def *old = tb->symbols;
		tb->symbols_cap = old_cap ? old_cap * 2 : 4096;
		tb->symbols = calloc(tb->symbols_cap, sizeof(*tb->symbols));
		if (!tb->symbols)
			return VRT_E_NOMEM;
		tb->n_symbols = 0;
		for (size_t i = 0; i < old_cap; i++)
			if (old[i].addr)
				put_symbol(tb, &old[i]);
		free(old);
	}
	size_t i = symbol_slot(tb, s->addr);
	while (tb->symbols[i].addr && tb->symbols[i].addr != s->addr)
		i = (i + 1) & (tb->symbols_cap - 1);
	if (!tb->symbols[i].addr)
		tb->n_symbols++;
	tb->symbols[i] = *s;
	return 0;
}

/* ---- strings as shown ---------------------------------------------------------------- */

size_t vrt_text_unit(const uint8_t *p, size_t n, bool *escape)
{
	uint32_t cp;
	size_t len = vrt_utf8_decode(p, n, &cp);
	*escape = !len || vrt_utf8_escaped(cp);
	return len ? len : 1;
}

/*
 * A string from the trace as every report shows it: C0 and C1 controls, DEL, bidi controls and
 * bytes that are not UTF-8 written as \xNN, and cut at VRT_STRING_SHOWN bytes with a marker.
 * Traces come from other people; a function name must not set a terminal's title or clear it,
 * nor carry megabytes into every output.
 */
static char *display_string(const uint8_t *p, size_t n, uint32_t *len_out)
{
	char out[VRT_STRING_SHOWN + 1], marker[64];
	size_t mlen = (size_t)snprintf(marker, sizeof(marker), "...[cut: %zu bytes in all]", n), o = 0;
	for (size_t i = 0; i < n;) {
		bool escape;
		size_t step = vrt_text_unit(p + i, n - i, &escape);
		size_t need = escape ? 4 * step : step;
		bool last = i + step >= n;
		if (o + need > VRT_STRING_SHOWN - mlen && !(last && o + need <= VRT_STRING_SHOWN)) {
			memcpy(out + o, marker, mlen); /* o <= VRT_STRING_SHOWN - mlen here */
			o += mlen;
			break;
		}
		for (size_t k = 0; k < step; k++) {
			if (escape)
				o += (size_t)snprintf(out + o, sizeof(out) - o, "\\x%02x", p[i + k]);
			else
				out[o++] = (char)p[i + k];
		}
		i += step;
	}
	out[o] = 0;
	char *copy = malloc(o + 1);
	if (copy)
		memcpy(copy, out, o + 1);
	*len_out = (uint32_t)o;
	return copy;
}

/* ---- definitions ------------------------------------------------------------------------ */

enum { T_STRING, T_MODULE, T_PYCODE, T_PYFRAME, T_STACK, T_THREAD, T_TABLES };

/* While loading: room in each array ("slots available"), and definitions read per table. */
struct table_caps {
	size_t strings, modules, pycodes, pyframes, nodes, threads, info;
	uint64_t defined[T_TABLES];
	uint64_t unread_raw; /* raw bytes of the TABLES chunks after the one being read */
};

static int table_of(uint8_t op)
{
	switch (op) {
	case VRT_OP_STRING: return T_STRING;
	case VRT_OP_MODULE: return T_MODULE;
	case VRT_OP_PYCODE: return T_PYCODE;
	case VRT_OP_PYFRAME: return T_PYFRAME;
	case VRT_OP_STACK: return T_STACK;
	case VRT_OP_THREAD_INFO: return T_THREAD;
	}
	return -1;
}

/*
 * Ids are dense: an id runs at most VRT_ID_SLACK ahead of the definitions of its table read so
 * far, and of what TABLES chunks skipped as damaged or still to be read could define (a
 * definition takes at least 3 bytes). Those to be read count because a wrapped ring's surviving
 * first-lap chunks come before its consolidated chunk, which repeats what the overwritten ones
 * defined. Every table is an array indexed by id, so its memory is proportional to the
 * definitions the file holds, whatever ids it names.
 */
static bool id_plausible(const struct vrt_trace *t, const struct table_caps *cap, int table, uint64_t id)
{
	uint64_t bound = cap->defined[table] + VRT_ID_SLACK + (t->tables_damaged_raw + cap->unread_raw) / 3;
	return id <= bound;
}

static int load_record(struct vrt_trace *t, struct table_caps *cap, const struct vrt_record *r)
{
	struct vrt_tables *tb = &t->tables;
	size_t id = (size_t)r->id;
	int table = table_of(r->op);
	if (table >= 0) {
		if (!id_plausible(t, cap, table, r->id))
			return VRT_E_RANGE;
		cap->defined[table]++;
	}
	switch (r->op) {
	case VRT_OP_STRING: {
		size_t old = cap->strings;
		if (!grow((void **)&tb->strings, &cap->strings, id + 1, sizeof(char *)))
			return VRT_E_NOMEM;
		size_t tmp = old;
		if (!grow((void **)&tb->string_lens, &tmp, cap->strings, sizeof(uint32_t)))
			return VRT_E_NOMEM;
		uint32_t len;
		char *s = display_string(r->bytes, r->bytes_len, &len);
		if (!s)
			return VRT_E_NOMEM;
		free(tb->strings[id]);
		tb->strings[id] = s;
		tb->string_lens[id] = len;
		tb->n_strings = id + 1 > tb->n_strings ? id + 1 : tb->n_strings;
		return 0;
	}
	case VRT_OP_MODULE:
		if (!grow((void **)&tb->modules, &cap->modules, id + 1, sizeof(struct vrt_module)))
			return VRT_E_NOMEM;
		tb->modules[id] = (struct vrt_module){ (uint32_t)r->id2, r->addr, r->size, { 0 },
						       r->bytes_len > 20 ? 20 : r->bytes_len };
		memcpy(tb->modules[id].build_id, r->bytes, tb->modules[id].build_id_len);
		tb->n_modules = id + 1 > tb->n_modules ? id + 1 : tb->n_modules;
		return 0;
	case VRT_OP_SYMBOL: {
		struct vrt_symbol_def s = { r->addr, (uint32_t)r->id, (uint32_t)r->id2, r->aux };
		return r->addr ? put_symbol(tb, &s) : 0;
	}
	case VRT_OP_PYCODE:
		if (!grow((void **)&tb->pycodes, &cap->pycodes, id + 1, sizeof(struct vrt_pycode_def)))
			return VRT_E_NOMEM;
		tb->pycodes[id] = (struct vrt_pycode_def){ (uint32_t)r->id2, (uint32_t)r->aux, (uint32_t)r->aux2 };
		tb->n_pycodes = id + 1 > tb->n_pycodes ? id + 1 : tb->n_pycodes;
		return 0;
	case VRT_OP_PYFRAME:
		if (!grow((void **)&tb->pyframes, &cap->pyframes, id + 1, sizeof(struct vrt_pyframe_def)))
			return VRT_E_NOMEM;
		tb->pyframes[id] = (struct vrt_pyframe_def){ (uint32_t)r->id2, (int32_t)(uint32_t)r->aux,
							    (int32_t)(uint32_t)r->aux2 };
		tb->n_pyframes = id + 1 > tb->n_pyframes ? id + 1 : tb->n_pyframes;
		return 0;
	case VRT_OP_STACK:
		if (!id || r->id2 >= id || r->aux2 > VRT_FRAME_EVAL)
			return VRT_E_RANGE; /* parents precede children; the root (0) is implicit */
		if (!grow((void **)&tb->nodes, &cap->nodes, id + 1, sizeof(struct vrt_stack_node)))
			return VRT_E_NOMEM;
		tb->nodes[id] = (struct vrt_stack_node){ (uint32_t)r->id2, (uint8_t)r->aux2, r->aux };
		tb->n_nodes = id + 1 > tb->n_nodes ? id + 1 : tb->n_nodes;
		return 0;
	case VRT_OP_THREAD_INFO:
		if (!grow((void **)&tb->threads, &cap->threads, id + 1, sizeof(struct vrt_thread_def)))
			return VRT_E_NOMEM;
		tb->threads[id] = (struct vrt_thread_def){ (uint32_t)r->id2, r->aux };
		tb->n_threads = id + 1 > tb->n_threads ? id + 1 : tb->n_threads;
		return 0;
	case VRT_OP_INFO: {
		size_t c = cap->info, c2 = cap->info;
		if (!grow((void **)&tb->info_keys, &c, tb->n_info + 1, sizeof(uint32_t)) ||
		    !grow((void **)&tb->info_values, &c2, tb->n_info + 1, sizeof(uint32_t)))
			return VRT_E_NOMEM;
		cap->info = c;
		tb->info_keys[tb->n_info] = (uint32_t)r->id;
		tb->info_values[tb->n_info++] = (uint32_t)r->id2;
		return 0;
	}
	}
	return VRT_E_RECORD;
}

static int load_tables(struct vrt_trace *t)
{
	struct table_caps cap = { 0 };
	for (size_t i = 0; i < t->n_chunks; i++)
		if (t->chunks[i].type == VRT_CHUNK_TABLES)
			cap.unread_raw += t->chunks[i].raw;
	for (size_t i = 0; i < t->n_chunks; i++) {
		if (t->chunks[i].type != VRT_CHUNK_TABLES)
			continue;
		cap.unread_raw -= t->chunks[i].raw;
		const uint8_t *p, *end;
		size_t len;
		int rc = vrt_trace_chunk(t, i, &p, &len);
		if (rc == VRT_E_DECOMPRESS) {
			t->corrupt_chunks++;
			t->tables_damaged_raw += t->chunks[i].raw;
			continue;
		}
		if (rc)
			return rc;
		if (!len)
			continue;
		end = p + len;
		struct vrt_delta d = { 0, 0 };
		while (p < end) {
			struct vrt_record r;
			rc = vrt_record_decode(&p, end, &r, &d);
			if (!rc)
				rc = load_record(t, &cap, &r);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* What one CHECKPOINT chunk holds of its checkpoint. */
struct cp_part {
	bool begins, ends;  /* it holds the CP_BEGIN (first), the CP_END (last) */
	uint64_t items;     /* CP_LIVE records */
	uint64_t declared;  /* CP_END's count */
};

static int cp_part_read(struct vrt_trace *t, size_t i, struct cp_part *part)
{
	const uint8_t *p, *end;
	size_t len;
	int rc = vrt_trace_chunk(t, i, &p, &len);
	if (rc)
		return rc;
	*part = (struct cp_part){ 0 };
	if (!len)
		return 0; /* holds nothing: neither begins nor ends a checkpoint */
	end = p + len;
	struct vrt_delta d = { 0, 0 };
	for (bool first = true; p < end;) {
		struct vrt_record r;
		if ((rc = vrt_record_decode(&p, end, &r, &d)))
			return rc;
		if (r.op == VRT_OP_THREAD)
			continue;
		if (part->ends || (!first && r.op == VRT_OP_CP_BEGIN))
			return VRT_E_RECORD; /* a second checkpoint in one chunk */
		part->begins |= first && r.op == VRT_OP_CP_BEGIN;
		part->items += r.op == VRT_OP_CP_LIVE;
		part->ends = r.op == VRT_OP_CP_END;
		part->declared = part->ends ? r.id : 0;
		first = false;
	}
	return 0;
}

/*
 * Whether chunk i begins a checkpoint that the file holds whole: its parts are the CHECKPOINT
 * chunks that follow it (TABLES chunks of the log may come between, in sequence order), the
 * last one holds CP_END, and together they hold as many items as CP_END says. A checkpoint
 * whose beginning the ring overwrote, one cut short by a crash, and one with a damaged part
 * are not whole.
 */
static bool checkpoint_whole(struct vrt_trace *t, size_t i)
{
	uint64_t items = 0;
	for (size_t j = i; j < t->n_chunks; j++) {
		uint8_t type = t->chunks[j].type;
		if (type == VRT_CHUNK_TABLES && j > i)
			continue;
		struct cp_part part;
		if (type != VRT_CHUNK_CHECKPOINT || cp_part_read(t, j, &part) || part.begins != (j == i))
			return false;
		items += part.items;
		if (part.ends)
			return items == part.declared;
	}
	return false;
}

/* With lost history, replay starts at the oldest whole checkpoint; without one, nowhere. */
static size_t find_replay_start(struct vrt_trace *t)
{
	if (!t->history_lost)
		return 0;
	for (size_t i = 0; i < t->n_chunks; i++)
		if (t->chunks[i].type == VRT_CHUNK_CHECKPOINT && checkpoint_whole(t, i))
			return i;
	return t->n_chunks;
}

int vrt_trace_open(struct vrt_trace *t, const char *path)
{
	static uint64_t opened;
	memset(t, 0, sizeof(*t));
	t->serial = ++opened;
	snprintf(t->path, sizeof(t->path), "%s", path);
	/* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below. */
	t->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (t->fd < 0)
		return errno == ENOENT ? VRT_E_NOENT : errno == EACCES ? VRT_E_PERM : VRT_E_IO;
	struct stat st;
	int rc = VRT_E_IO;
	if (fstat(t->fd, &st))
		goto fail;
	if (!S_ISREG(st.st_mode)) {
		rc = VRT_E_NOT_FILE;
		goto fail;
	}
	t->size = (uint64_t)st.st_size;
	if (!t->size) {
		rc = VRT_E_MAGIC;
		goto fail;
	}
	posix_fadvise(t->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	t->dctx = new_dctx();
	if (!t->dctx) {
		rc = VRT_E_NOMEM;
		goto fail;
	}
	if ((rc = header_check(t)) || (rc = find_chunks(t)) || (rc = load_tables(t)))
		goto fail;
	t->replay_from = find_replay_start(t);
	return 0;
fail:
	vrt_trace_close(t);
	return rc;
}

void vrt_trace_close(struct vrt_trace *t)
{
	struct vrt_tables *tb = &t->tables;
	for (size_t i = 0; i < tb->n_strings; i++)
		free(tb->strings[i]);
	free(tb->strings);
	free(tb->string_lens);
	free(tb->modules);
	free(tb->symbols);
	free(tb->pycodes);
	free(tb->pyframes);
	free(tb->nodes);
	free(tb->threads);
	free(tb->info_keys);
	free(tb->info_values);
	if (t->ahead)
		ahead_stop(t->ahead);
	free(t->chunks);
	free(t->buf.raw);
	free(t->buf.stored);
	records_free(&t->buf.records);
	if (t->dctx)
		ZSTD_freeDCtx(t->dctx);
	if (t->fd >= 0)
		close(t->fd);
	memset(t, 0, sizeof(*t));
	t->fd = -1;
}

const char *vrt_string(const struct vrt_trace *t, uint64_t id)
{
	return id && id < t->tables.n_strings && t->tables.strings[id] ? t->tables.strings[id] : "";
}

const struct vrt_symbol_def *vrt_symbol(const struct vrt_trace *t, uint64_t addr)
{
	const struct vrt_tables *tb = &t->tables;
	if (!tb->symbols_cap || !addr)
		return NULL;
	for (size_t i = symbol_slot(tb, addr);; i = (i + 1) & (tb->symbols_cap - 1)) {
		if (!tb->symbols[i].addr)
			return NULL;
		if (tb->symbols[i].addr == addr)
			return &tb->symbols[i];
	}
}

const char *vrt_info(const struct vrt_trace *t, const char *key)
{
	for (size_t i = t->tables.n_info; i-- > 0;)
		if (!strcmp(vrt_string(t, t->tables.info_keys[i]), key))
			return vrt_string(t, t->tables.info_values[i]);
	return NULL;
}

const char *vrt_end_sentence(uint32_t reason)
{
	switch (reason) {
	case VRT_END_RUNNING: return "the trace was not closed: the process is still running, or was killed (SIGKILL, OOM killer)";
	case VRT_END_DETACHED: return "tracing was stopped (attach --stop) while the process went on";
	case VRT_END_DISABLED: return "tracing disabled itself after an internal error; the process went on";
	case VRT_END_WRITE_FAILED: return "the process went on untraced: writing the trace failed";
	case VRT_END_EXEC: return "the process was replaced by exec";
	case VRT_END_EXIT: case VRT_END_SIGNAL: case VRT_END_KILLED: break;
	default: return "how the process ended is unknown";
	}
	static char line[64];
	snprintf(line, sizeof(line), "the process %s", vrt_end_reason_text(reason));
	return line;
}

const char *vrt_end_reason_text(uint32_t reason)
{
	switch (reason) {
	case VRT_END_RUNNING: return "not closed: still running, or killed (SIGKILL, OOM killer)";
	case VRT_END_EXIT: return "exited normally";
	case VRT_END_SIGNAL: return "died from a signal";
	case VRT_END_KILLED: return "killed by a signal";
	case VRT_END_DISABLED: return "tracing disabled itself after an internal error";
	case VRT_END_EXEC: return "replaced by exec";
	case VRT_END_DETACHED: return "tracing stopped (attach --stop)";
	case VRT_END_WRITE_FAILED: return "continued untraced: writing the trace failed";
	}
	return "unknown";
}
