/* SPDX-License-Identifier: MIT */
/*
 * Chunk discovery never trusts more than it checks: a chunk counts only if its header crc
 * holds, and its payload only if the payload crc and zstd's own checksum hold. The log is read
 * front to back until the first bad header (the cut-off point of a killed process). The ring is
 * scanned in full, resynchronising on 8-byte boundaries after an overwritten region, and the
 * chunks found are ordered by sequence number.
 */
#define _GNU_SOURCE
#include "trace_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "vramtrace/error.h"

/* Writers hand out ids in order; an id far beyond what was defined so far is corruption, and
 * must not make the reader allocate for it. */
#define MAX_ID_JUMP (1u << 20)

static uint64_t align8(uint64_t v) { return (v + 7) & ~7ull; }

static int header_check(struct vrt_trace *t)
{
	if (t->size < VRT_FILE_HEADER_SIZE)
		return t->size >= VRT_FILE_MAGIC_LEN && !memcmp(t->map, VRT_FILE_MAGIC, VRT_FILE_MAGIC_LEN)
			       ? VRT_E_TRUNCATED
			       : VRT_E_MAGIC;
	memcpy(&t->hdr, t->map, sizeof(t->hdr));
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

/*
 * Gives back the pages of a range read once (a chunk's payload, checksummed or decompressed):
 * the mapping is read-only and private, so a later read faults them in again from the page
 * cache. Without this a command's resident memory grows with the trace it reads.
 */
static void release_pages(const struct vrt_trace *t, uint64_t off, uint64_t len)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t start = (off + page - 1) & ~(page - 1), end = (off + len) & ~(page - 1);
	if (end > start)
		madvise((void *)(t->map + start), end - start, MADV_DONTNEED);
}

/* While scanning: gives back what lies behind off, every few MiB. */
static void release_behind(const struct vrt_trace *t, uint64_t *released, uint64_t off)
{
	if (off > *released + (8u << 20)) {
		release_pages(t, *released, off - *released);
		*released = off;
	}
}

/* A valid chunk header at off (absolute) that fits in [off, limit)? */
static bool chunk_at(const struct vrt_trace *t, uint64_t off, uint64_t limit, struct vrt_chunk_ref *out)
{
	struct vrt_chunk_header ch;
	if (off + sizeof(ch) > limit || off + sizeof(ch) > t->size)
		return false;
	memcpy(&ch, t->map + off, sizeof(ch));
	if (ch.magic != VRT_CHUNK_MAGIC || ch.header_crc != vrt_crc32c(0, &ch, offsetof(struct vrt_chunk_header, header_crc)))
		return false;
	if (!ch.type || ch.type >= VRT_CHUNK_TYPE_LAST || ch.raw_size > VRT_CHUNK_MAX_RAW || !ch.seq)
		return false;
	if (ch.type != VRT_CHUNK_PADDING && off + sizeof(ch) + ch.stored_size > limit)
		return false;
	*out = (struct vrt_chunk_ref){ off, ch.seq, ch.stored_size, ch.raw_size, ch.type };
	return true;
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
	return 0;
}

static int scan_log(struct vrt_trace *t, uint64_t from, size_t *cap)
{
	uint64_t off = from, released = from;
	struct vrt_chunk_ref c;
	while (chunk_at(t, off, t->size, &c) && c.type != VRT_CHUNK_PADDING) {
		int rc = add_chunk(t, &c, cap);
		if (rc)
			return rc;
		off += align8(sizeof(struct vrt_chunk_header) + c.stored);
		release_behind(t, &released, off);
	}
	if (off < t->size && off + sizeof(struct vrt_chunk_header) <= t->size) {
		/* Bytes remain that are not a valid chunk: a crash mid-write or damage. */
		bool zeros = true;
		for (uint64_t i = off; i < t->size && i < off + 64 && zeros; i++)
			zeros = t->map[i] == 0;
		t->truncated = !zeros;
	} else if (off < t->size) {
		t->truncated = true;
	}
	return 0;
}

static int scan_ring(struct vrt_trace *t, size_t *cap)
{
	uint64_t base = t->hdr.ring_offset, end = base + t->hdr.ring_size;
	if (end > t->size)
		end = t->size; /* the ring had not filled when the file was written */
	struct vrt_chunk_ref c;
	uint64_t released = base;
	for (uint64_t off = base; off < end; release_behind(t, &released, off)) {
		if (!chunk_at(t, off, end, &c)) {
			off += 8;
			t->garbage_bytes += 8;
			continue;
		}
		int rc = add_chunk(t, &c, cap); /* padding too: its sequence number counts */
		if (rc)
			return rc;
		if (c.type == VRT_CHUNK_PADDING)
			break; /* it reaches the ring's end */
		off += align8(sizeof(struct vrt_chunk_header) + c.stored);
	}
	return 0;
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

/* A chunk is usable when its payload checksum holds and it declares a codec and size that can
 * be decoded; the others are dropped here, counted, and reported by every command. */
static bool payload_ok(const struct vrt_trace *t, const struct vrt_chunk_ref *c)
{
	struct vrt_chunk_header ch;
	memcpy(&ch, t->map + c->offset, sizeof(ch));
	const uint8_t *payload = t->map + c->offset + sizeof(ch);
	if (c->offset + sizeof(ch) + c->stored > t->size)
		return false;
	bool crc_ok = ch.payload_crc == vrt_crc32c(0, payload, c->stored);
	release_pages(t, c->offset + sizeof(ch), c->stored);
	if (!crc_ok)
		return false;
	if (ch.codec == VRT_CODEC_NONE)
		return c->raw == c->stored;
	if (ch.codec != VRT_CODEC_ZSTD)
		return false;
	unsigned long long declared = ZSTD_getFrameContentSize(payload, c->stored);
	return declared == c->raw;
}

static void drop_damaged(struct vrt_trace *t)
{
	size_t k = 0;
	for (size_t i = 0; i < t->n_chunks; i++) {
		if (payload_ok(t, &t->chunks[i]))
			t->chunks[k++] = t->chunks[i];
		else
			t->corrupt_chunks++;
	}
	t->n_chunks = k;
}

static int find_chunks(struct vrt_trace *t)
{
	size_t cap = 0;
	int rc = t->hdr.ring_size ? scan_ring(t, &cap) : scan_log(t, t->hdr.log_offset, &cap);
	if (!rc && t->hdr.ring_size && t->size > t->hdr.log_offset)
		rc = scan_log(t, t->hdr.log_offset, &cap);
	if (rc)
		return rc;
	order_chunks(t);
	/* The first chunk ever written is number 1: gone means the ring overwrote the start. Found
	 * but damaged is not gone: the replay still starts at the beginning, without that chunk. */
	t->history_lost = t->n_chunks && t->chunks[0].seq != 1;
	drop_damaged(t);
	return 0;
}

int vrt_trace_chunk(struct vrt_trace *t, size_t i, const uint8_t **data, size_t *len)
{
	const struct vrt_chunk_ref *c = &t->chunks[i];
	const uint8_t *payload = t->map + c->offset + sizeof(struct vrt_chunk_header);
	struct vrt_chunk_header ch;
	memcpy(&ch, t->map + c->offset, sizeof(ch));
	if (c->offset + sizeof(ch) + c->stored > t->size)
		return VRT_E_TRUNCATED;
	if (ch.payload_crc != vrt_crc32c(0, payload, c->stored))
		return VRT_E_CORRUPT;
	if (ch.codec == VRT_CODEC_NONE) {
		if (c->raw != c->stored)
			return VRT_E_CORRUPT;
		*data = payload;
		*len = c->stored;
		return 0;
	}
	if (ch.codec != VRT_CODEC_ZSTD)
		return VRT_E_DECOMPRESS;
	if (c->raw > t->raw_cap) {
		uint8_t *n = realloc(t->raw, c->raw);
		if (!n)
			return VRT_E_NOMEM;
		t->raw = n;
		t->raw_cap = c->raw;
	}
	size_t got = ZSTD_decompressDCtx(t->dctx, t->raw, c->raw, payload, c->stored);
	release_pages(t, c->offset + sizeof(ch), c->stored);
	if (ZSTD_isError(got) || got != c->raw)
		return VRT_E_DECOMPRESS;
	*data = t->raw;
	*len = got;
	return 0;
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

/* Capacities are tracked in the n_* fields as "slots available" while loading. */
struct table_caps {
	size_t strings, modules, pycodes, pyframes, nodes, threads, info;
};

static int load_record(struct vrt_trace *t, struct table_caps *cap, const struct vrt_record *r)
{
	struct vrt_tables *tb = &t->tables;
	size_t id = (size_t)r->id;
	size_t defined = r->op == VRT_OP_STRING ? tb->n_strings : r->op == VRT_OP_MODULE ? tb->n_modules
		       : r->op == VRT_OP_PYCODE ? tb->n_pycodes : r->op == VRT_OP_PYFRAME ? tb->n_pyframes
		       : r->op == VRT_OP_STACK ? tb->n_nodes : r->op == VRT_OP_THREAD_INFO ? tb->n_threads : 0;
	if (r->op != VRT_OP_SYMBOL && r->op != VRT_OP_INFO && r->id > defined + MAX_ID_JUMP)
		return VRT_E_RANGE;
	switch (r->op) {
	case VRT_OP_STRING: {
		size_t old = cap->strings;
		if (!grow((void **)&tb->strings, &cap->strings, id + 1, sizeof(char *)))
			return VRT_E_NOMEM;
		size_t tmp = old;
		if (!grow((void **)&tb->string_lens, &tmp, cap->strings, sizeof(uint32_t)))
			return VRT_E_NOMEM;
		char *s = malloc(r->bytes_len + 1);
		if (!s)
			return VRT_E_NOMEM;
		memcpy(s, r->bytes, r->bytes_len);
		s[r->bytes_len] = 0;
		free(tb->strings[id]);
		tb->strings[id] = s;
		tb->string_lens[id] = r->bytes_len;
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
	for (size_t i = 0; i < t->n_chunks; i++) {
		if (t->chunks[i].type != VRT_CHUNK_TABLES)
			continue;
		const uint8_t *p, *end;
		size_t len;
		int rc = vrt_trace_chunk(t, i, &p, &len);
		if (rc) {
			t->corrupt_chunks++;
			continue;
		}
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
	t->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (t->fd < 0)
		return errno == ENOENT ? VRT_E_NOENT : errno == EACCES ? VRT_E_PERM : VRT_E_IO;
	struct stat st;
	int rc = VRT_E_IO;
	if (fstat(t->fd, &st) || !S_ISREG(st.st_mode))
		goto fail;
	t->size = (uint64_t)st.st_size;
	if (!t->size) {
		rc = VRT_E_MAGIC;
		goto fail;
	}
	t->map = mmap(NULL, t->size, PROT_READ, MAP_PRIVATE, t->fd, 0);
	if (t->map == MAP_FAILED) {
		t->map = NULL;
		goto fail;
	}
	madvise((void *)t->map, t->size, MADV_SEQUENTIAL);
	t->dctx = ZSTD_createDCtx();
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
	free(t->chunks);
	free(t->raw);
	if (t->dctx)
		ZSTD_freeDCtx(t->dctx);
	if (t->map)
		munmap((void *)t->map, t->size);
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
