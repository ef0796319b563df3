/* SPDX-License-Identifier: MIT */
/*
 * Chunk placement. Keep-everything mode appends every chunk to the log. Ring mode first fills
 * the ring region like a log (tables and events interleaved); at the first wrap it writes one
 * consolidated TABLES chunk at log_offset (just past the ring), and from then on events and
 * checkpoints cycle through the ring while new tables append to the log. The state block in the
 * header is rewritten after every chunk, so a reader of a killed process finds every chunk that
 * reached the page cache.
 */
#include "trace_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "vramtrace/error.h"
#include "vramtrace/record.h"

/* Event chunks are ~11-15 bytes a record before zstd; levels 3, 1, -1 and -5 cost 172, 161, 151
 * and 149 instructions an event (callgrind, the training-like loop of bench/hotpath) for 0.68,
 * 0.70, 0.94 and 2.47 bytes an event: below 1 the cost hardly falls while the size grows fast. */
#define DEFAULT_ZSTD_LEVEL 1
#define RING_SEGMENTS 8u
#define MIN_RING_BYTES (1u << 20)

struct ring_slot {
	uint64_t offset; /* ring-relative */
	uint64_t span;   /* header + payload, aligned */
};

struct vrt_writer {
	int fd;
	struct vrt_file_header hdr;
	ZSTD_CCtx *zc;
	uint8_t *zbuf;
	size_t zbuf_cap;
	int zstd_level;
	vrt_tables_dump_fn dump_tables;
	void *dump_ctx;
	uint64_t seq;
	uint64_t log_end;   /* absolute */
	bool wrapped;
	uint64_t segment;   /* ring segment of the last chunk placed */
	/* Chunks currently in the ring, oldest first (a circular deque). */
	struct ring_slot *slots;
	size_t slots_cap, slots_head, slots_len;
};

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (!n)
				errno = EIO; /* the caller reports errno */
			return VRT_E_IO;
		}
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int vrt_trace_create(const char *path, char *chosen, size_t chosen_len)
{
	char name[4096];
	size_t len = strlen(path), stem = len > 4 && !strcmp(path + len - 4, ".vrt") ? len - 4 : len;
	for (int attempt = 0; attempt < 100; attempt++) {
		/* The suffix goes before the extension: a directory's traces are its *.vrt files. */
		int n = attempt ? snprintf(name, sizeof(name), "%.*s.%d%s", (int)stem, path, attempt, path + stem)
				: snprintf(name, sizeof(name), "%s", path);
		if (n < 0 || (size_t)n >= sizeof(name))
			return VRT_E_ARG;
		int fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0) {
			if (chosen)
				snprintf(chosen, chosen_len, "%s", name);
			return fd;
		}
		if (errno != EEXIST)
			return errno == EACCES || errno == EPERM ? VRT_E_PERM : VRT_E_IO;
	}
	return VRT_E_IO;
}

static void header_init(struct vrt_writer *w, const struct vrt_writer_options *o)
{
	struct vrt_file_header *h = &w->hdr;
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, VRT_FILE_MAGIC, VRT_FILE_MAGIC_LEN);
	h->version_major = VRT_FORMAT_MAJOR;
	h->version_minor = VRT_FORMAT_MINOR;
	h->header_size = VRT_FILE_HEADER_SIZE;
	h->flags = o->flags | (o->ring_bytes ? VRT_FILE_RING : 0);
	h->ts_unit_ns = o->ts_unit_ns ? o->ts_unit_ns : 1000;
	h->ring_offset = o->ring_bytes ? VRT_FILE_HEADER_SIZE : 0;
	h->ring_size = o->ring_bytes;
	h->log_offset = VRT_FILE_HEADER_SIZE + o->ring_bytes;
	h->start_realtime_ns = o->start_realtime_ns;
	h->start_monotonic_ns = o->start_monotonic_ns;
	h->pid = o->pid;
	h->ppid = o->ppid;
	h->rank = o->rank;
	h->local_rank = o->local_rank;
	h->world_size = o->world_size;
	gethostname(h->hostname, sizeof(h->hostname) - 1);
	h->header_crc = vrt_crc32c(0, h, offsetof(struct vrt_file_header, header_crc));
}

int vrt_writer_open(struct vrt_writer **out, const struct vrt_writer_options *o)
{
	if (o->fd < 0 || (o->ring_bytes && (o->ring_bytes < MIN_RING_BYTES || !o->dump_tables)))
		return VRT_E_ARG;
	struct vrt_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return VRT_E_NOMEM;
	w->fd = o->fd;
	w->zstd_level = o->zstd_level ? o->zstd_level : DEFAULT_ZSTD_LEVEL;
	w->dump_tables = o->dump_tables;
	w->dump_ctx = o->dump_ctx;
	w->zc = ZSTD_createCCtx();
	if (!w->zc) {
		free(w);
		return VRT_E_NOMEM;
	}
	ZSTD_CCtx_setParameter(w->zc, ZSTD_c_compressionLevel, w->zstd_level);
	ZSTD_CCtx_setParameter(w->zc, ZSTD_c_checksumFlag, 1);
	header_init(w, o);
	w->log_end = w->hdr.ring_size ? VRT_FILE_HEADER_SIZE : w->hdr.log_offset;
	int rc = pwrite_all(w->fd, &w->hdr, sizeof(w->hdr), 0);
	if (!rc)
		rc = vrt_writer_sync(w);
	if (rc) {
		ZSTD_freeCCtx(w->zc);
		free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int vrt_writer_sync(struct vrt_writer *w)
{
	struct vrt_file_state *s = &w->hdr.state;
	s->generation++;
	s->last_chunk_seq = w->seq;
	s->log_end = w->log_end;
	s->crc = vrt_crc32c(0, s, offsetof(struct vrt_file_state, crc));
	return pwrite_all(w->fd, s, sizeof(*s), VRT_STATE_OFFSET);
}

static uint64_t chunk_span(uint64_t stored)
{
	return align_up(sizeof(struct vrt_chunk_header) + stored, VRT_CHUNK_ALIGN);
}

/* Compresses raw into w->zbuf at offset at, keeping what is before it; returns the stored size
 * or a negative error. */
static long compress_payload(struct vrt_writer *w, size_t at, const void *raw, size_t raw_len)
{
	size_t need = at + ZSTD_compressBound(raw_len);
	if (need > w->zbuf_cap) {
		size_t cap = need > 2 * w->zbuf_cap ? need : 2 * w->zbuf_cap;
		uint8_t *nb = realloc(w->zbuf, cap);
		if (!nb)
			return VRT_E_NOMEM;
		w->zbuf = nb;
		w->zbuf_cap = cap;
	}
	size_t n = ZSTD_compress2(w->zc, w->zbuf + at, w->zbuf_cap - at, raw, raw_len);
	if (ZSTD_isError(n))
		return VRT_E_DECOMPRESS;
	return (long)n;
}

static int write_chunk_at(struct vrt_writer *w, uint64_t abs_off, enum vrt_chunk_type type, uint8_t codec,
			  const void *payload, uint32_t stored, uint32_t raw_len)
{
	struct vrt_chunk_header ch;
	vrt_chunk_header_fill(&ch, (uint8_t)type, codec, stored, raw_len, ++w->seq, payload);
	int rc = pwrite_all(w->fd, &ch, sizeof(ch), abs_off);
	if (!rc && stored)
		rc = pwrite_all(w->fd, payload, stored, abs_off + sizeof(ch));
	return rc;
}

static int slots_push(struct vrt_writer *w, uint64_t offset, uint64_t span)
{
	if (w->slots_len == w->slots_cap) {
		size_t ncap = w->slots_cap ? w->slots_cap * 2 : 256;
		struct ring_slot *ns = malloc(ncap * sizeof(*ns));
		if (!ns)
			return VRT_E_NOMEM;
		for (size_t i = 0; i < w->slots_len; i++)
			ns[i] = w->slots[(w->slots_head + i) % (w->slots_cap ? w->slots_cap : 1)];
		free(w->slots);
		w->slots = ns;
		w->slots_cap = ncap;
		w->slots_head = 0;
	}
	w->slots[(w->slots_head + w->slots_len) % w->slots_cap] = (struct ring_slot){ offset, span };
	w->slots_len++;
	return 0;
}

/* Drops ring chunks that [off, off+span) overwrites; they are the oldest ones after a wrap. */
static void slots_evict(struct vrt_writer *w, uint64_t off, uint64_t span)
{
	while (w->slots_len) {
		struct ring_slot *s = &w->slots[w->slots_head];
		if (s->offset + s->span <= off || s->offset >= off + span)
			break;
		w->slots_head = (w->slots_head + 1) % w->slots_cap;
		w->slots_len--;
	}
	w->hdr.state.ring_tail = w->slots_len ? w->slots[w->slots_head].offset : off;
}

static int append_log(struct vrt_writer *w, enum vrt_chunk_type type, uint8_t codec, const void *payload,
		      uint32_t stored, uint32_t raw_len)
{
	int rc = write_chunk_at(w, w->log_end, type, codec, payload, stored, raw_len);
	if (!rc)
		w->log_end += align_up(sizeof(struct vrt_chunk_header) + stored, VRT_CHUNK_ALIGN);
	return rc;
}

/* First wrap: copy every definition into the log so the ring may overwrite the originals.
 * Compresses into a buffer of its own: w->zbuf holds the chunk being placed. */
static int consolidate_tables(struct vrt_writer *w)
{
	uint8_t *raw = NULL;
	long len = w->dump_tables(w->dump_ctx, &raw);
	if (len < 0)
		return (int)len;
	size_t bound = ZSTD_compressBound((size_t)len);
	uint8_t *out = malloc(bound);
	int rc = VRT_E_NOMEM;
	if (out) {
		size_t n = ZSTD_compress2(w->zc, out, bound, raw, (size_t)len);
		rc = ZSTD_isError(n) ? VRT_E_DECOMPRESS
				     : append_log(w, VRT_CHUNK_TABLES, VRT_CODEC_ZSTD, out, (uint32_t)n, (uint32_t)len);
	}
	free(out);
	free(raw);
	return rc;
}

static int ring_place(struct vrt_writer *w, enum vrt_chunk_type type, const void *payload, uint32_t stored,
		      uint32_t raw_len, int *hint)
{
	struct vrt_file_state *s = &w->hdr.state;
	uint64_t span = chunk_span(stored);
	if (span > w->hdr.ring_size / 4)
		return VRT_E_SIZE;
	if (s->ring_head + span > w->hdr.ring_size) {
		if (!w->wrapped) {
			w->log_end = w->hdr.log_offset;
			int rc = consolidate_tables(w);
			if (rc)
				return rc;
			w->wrapped = true;
		}
		uint64_t rest = w->hdr.ring_size - s->ring_head;
		if (rest >= sizeof(struct vrt_chunk_header)) {
			slots_evict(w, s->ring_head, rest);
			int rc = write_chunk_at(w, w->hdr.ring_offset + s->ring_head, VRT_CHUNK_PADDING, VRT_CODEC_NONE,
						NULL, 0, 0);
			if (rc)
				return rc;
			/* the padding chunk's span reaches the ring end; readers skip to offset 0 */
		}
		s->ring_head = 0;
		s->ring_laps++;
	}
	slots_evict(w, s->ring_head, span);
	int rc = write_chunk_at(w, w->hdr.ring_offset + s->ring_head, type, VRT_CODEC_ZSTD, payload, stored, raw_len);
	if (rc)
		return rc;
	rc = slots_push(w, s->ring_head, span);
	if (rc)
		return rc;
	if (!s->ring_laps)
		w->log_end = w->hdr.ring_offset + s->ring_head + span;
	s->ring_head += span;
	uint64_t segment = s->ring_laps * RING_SEGMENTS + s->ring_head * RING_SEGMENTS / w->hdr.ring_size;
	/* A checkpoint (every part of one) never asks for another: each one follows a chunk of
	 * events or tables, so a ring that holds little but checkpoints still moves on. */
	if (segment != w->segment && type != VRT_CHUNK_CHECKPOINT)
		*hint = VRT_HINT_CHECKPOINT;
	w->segment = segment;
	return 0;
}

static bool to_log(const struct vrt_writer *w, enum vrt_chunk_type type)
{
	return !w->hdr.ring_size || (type == VRT_CHUNK_TABLES && w->wrapped);
}

/* Writes one compressed chunk where its type goes; returns 0, a hint or an error. */
static int place(struct vrt_writer *w, enum vrt_chunk_type type, const uint8_t *payload, uint32_t stored,
		 uint32_t raw_len)
{
	int hint = 0, rc;
	if (to_log(w, type))
		rc = append_log(w, type, VRT_CODEC_ZSTD, payload, stored, raw_len);
	else
		rc = ring_place(w, type, payload, stored, raw_len, &hint);
	if (!rc)
		rc = vrt_writer_sync(w);
	return rc ? rc : hint;
}

/* The smallest ring that takes a group of chunks spanning span bytes, the largest one max_span. */
static uint64_t ring_for(uint64_t span, uint64_t max_span)
{
	return 2 * span > 4 * max_span ? 2 * span : 4 * max_span;
}

static bool parts_valid(const size_t *ends, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((i && ends[i] < ends[i - 1]) || ends[i] - (i ? ends[i - 1] : 0) > VRT_CHUNK_MAX_RAW)
			return false;
	return n > 0;
}

size_t vrt_writer_max_raw(const struct vrt_writer *w)
{
	if (!w->hdr.ring_size)
		return VRT_CHUNK_MAX_RAW;
	uint64_t quarter = w->hdr.ring_size / 4 & ~(uint64_t)(VRT_CHUNK_ALIGN - 1);
	size_t room = (size_t)quarter - sizeof(struct vrt_chunk_header);
	size_t n = room; /* the bound grows by more than 1 per byte: this ends after a step or two */
	while (ZSTD_compressBound(n) > room)
		n -= ZSTD_compressBound(n) - room;
	return n < VRT_CHUNK_MAX_RAW ? n : VRT_CHUNK_MAX_RAW;
}

/* Compresses the parts into w->zbuf one after the other; stored[i] gets part i's size, *span
 * and *max_span the bytes they will take in the file. */
static int compress_parts(struct vrt_writer *w, const uint8_t *raw, const size_t *ends, size_t n, uint32_t *stored,
			  uint64_t *span, uint64_t *max_span)
{
	size_t used = 0;
	*span = *max_span = 0;
	for (size_t i = 0; i < n; i++) {
		size_t from = i ? ends[i - 1] : 0;
		long got = compress_payload(w, used, raw + from, ends[i] - from);
		if (got < 0)
			return (int)got;
		stored[i] = (uint32_t)got;
		used += (size_t)got;
		*span += chunk_span((uint64_t)got);
		if (chunk_span((uint64_t)got) > *max_span)
			*max_span = chunk_span((uint64_t)got);
	}
	return 0;
}

/*
 * Every part is compressed before any is written, so that a group the ring cannot take is
 * refused whole, leaving the ring as it was. Half the ring is the bound: the ring then holds a
 * whole group, the segment or so of events before the next group begins, and the padding of a
 * wrap.
 */
int vrt_writer_put_parts(struct vrt_writer *w, enum vrt_chunk_type type, const void *raw, const size_t *ends,
			 size_t n, uint64_t *ring_needed)
{
	if (!parts_valid(ends, n))
		return VRT_E_SIZE;
	uint32_t *stored = malloc(n * sizeof(*stored));
	if (!stored)
		return VRT_E_NOMEM;
	uint64_t span, max_span;
	int rc = compress_parts(w, raw, ends, n, stored, &span, &max_span), hint = 0;
	if (!rc && !to_log(w, type) && (span > w->hdr.ring_size / 2 || max_span > w->hdr.ring_size / 4)) {
		if (ring_needed)
			*ring_needed = ring_for(span, max_span);
		rc = VRT_E_SIZE;
	}
	for (size_t i = 0, at = 0; i < n && !rc; at += stored[i++]) {
		int placed = place(w, type, w->zbuf + at, stored[i], (uint32_t)(ends[i] - (i ? ends[i - 1] : 0)));
		if (placed < 0)
			rc = placed;
		else
			hint |= placed;
	}
	free(stored);
	return rc ? rc : hint;
}

int vrt_writer_put(struct vrt_writer *w, enum vrt_chunk_type type, const void *raw, size_t raw_len)
{
	return vrt_writer_put_parts(w, type, raw, &raw_len, 1, NULL);
}

void vrt_writer_count_events(struct vrt_writer *w, uint64_t written, uint64_t lost)
{
	w->hdr.state.events_written = written;
	w->hdr.state.events_lost = lost;
}

void vrt_writer_set_end(struct vrt_writer *w, uint32_t reason, int32_t detail, uint64_t end_ts)
{
	w->hdr.state.end_reason = reason;
	w->hdr.state.end_detail = detail;
	w->hdr.state.end_ts = end_ts;
}

uint64_t vrt_writer_events_written(const struct vrt_writer *w) { return w->hdr.state.events_written; }

int vrt_writer_fd(const struct vrt_writer *w) { return w->fd; }

uint64_t vrt_writer_next_seq(const struct vrt_writer *w) { return w->seq + 1; }

uint64_t vrt_writer_file_bytes(const struct vrt_writer *w)
{
	uint64_t ring_end = w->hdr.ring_size ? w->hdr.log_offset : 0;
	return w->log_end > ring_end ? w->log_end : ring_end;
}

void vrt_writer_close(struct vrt_writer *w)
{
	if (!w)
		return;
	vrt_writer_sync(w);
	close(w->fd);
	ZSTD_freeCCtx(w->zc);
	free(w->zbuf);
	free(w->slots);
	free(w);
}
