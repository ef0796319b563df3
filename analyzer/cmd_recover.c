/* SPDX-License-Identifier: MIT */
/*
 * vramtrace recover TRACE: appends to a killed process's trace the events its threads had
 * published but the collector had not written yet, read from TRACE.rings (include/vramtrace/
 * rings.h; docs/trace-format.md, "The rings sidecar"), then removes the sidecar.
 *
 * Per slot, the events from its durable tail to its head are taken (the pending tail instead,
 * when the EVENTS chunk it waited for is in the file: the kill came between that write and the
 * tail's move), merged across slots by timestamp as the collector does, and turned into records
 * as the collector would: stacks the collector had interned keep their ids when the file
 * defines them; frames captured with the event are interned anew (a Python frame the file does
 * not describe becomes a labelled frame, native frames first seen there stay unsymbolized);
 * threads the file does not name get a THREAD_INFO. They go in uncompressed chunks where the
 * writer would have put them next (a wrapped ring goes round again; one full before its first
 * wrap takes nothing: the writer would first copy every definition into the log), and the state
 * block counts them.
 *
 * The trace is written in place (it is the process's own file; copying a 256 MiB ring to write
 * a few chunks would be worse), opened O_NOFOLLOW, and only if it is a regular file of the
 * caller's with one link: never through a link planted at its name.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "recover.h"
#include "buf.h"
#include "trace_reader.h"
#include "vramtrace/error.h"
#include "vramtrace/record.h"
#include "vramtrace/rings.h"

#define EVENTS_PART_BYTES (1u << 20)

struct event_ref {
	uint64_t ts;
	uint32_t slot, seq; /* seq: order within the slot, for a stable merge */
	const struct vrt_rings_raw *r;
	uint32_t thread;
};

/* Definitions made by the recovery: strings, stack nodes (deduplicated), stacks by hash. */
struct defs {
	const struct vrt_trace *t;
	struct vrt_buf tables;
	struct vrt_delta tdelta;
	uint64_t next_string, next_node;
	char **strings;
	size_t n_strings, cap_strings;
	uint64_t *node_keys; /* open addressing: parent, kind, value -> id */
	uint32_t *node_ids;
	size_t node_cap;
	uint64_t *hash_keys; /* stack hash -> id, for cache hits on stacks recovered here */
	uint32_t *hash_ids;
	size_t hash_cap;
	bool failed;
	uint64_t unknown_stacks, undescribed_python;
};

static void emit_table(struct defs *d, const struct vrt_record *r)
{
	if (!vrt_buf_put_record(&d->tables, r, &d->tdelta))
		d->failed = true;
}

static uint32_t string_id(struct defs *d, const char *s)
{
	for (size_t i = 0; i < d->n_strings; i++)
		if (!strcmp(d->strings[i], s))
			return (uint32_t)(d->next_string - d->n_strings + i);
	if (d->n_strings == d->cap_strings) {
		size_t cap = d->cap_strings ? 2 * d->cap_strings : 16;
		char **n = realloc(d->strings, cap * sizeof(*n));
		if (!n) {
			d->failed = true;
			return 0;
		}
		d->strings = n;
		d->cap_strings = cap;
	}
	char *copy = strdup(s);
	if (!copy) {
		d->failed = true;
		return 0;
	}
	d->strings[d->n_strings++] = copy;
	uint64_t id = d->next_string++;
	struct vrt_record r = { .op = VRT_OP_STRING, .id = id, .bytes = (const uint8_t *)s, .bytes_len = strlen(s) };
	emit_table(d, &r);
	return (uint32_t)id;
}

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t h = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull;
	return (h ^ c * 0x94d049bb133111ebull) * 0x9e3779b97f4a7c15ull;
}

/* A tiny map u64 -> u32 (0 = empty key never used: keys are made nonzero by the callers). */
static bool map_put(uint64_t **keys, uint32_t **ids, size_t *cap, size_t *used, uint64_t key, uint32_t id)
{
	if ((*used + 1) * 2 > *cap) {
		size_t ncap = *cap ? *cap * 2 : 1024;
		uint64_t *nk = calloc(ncap, sizeof(*nk));
		uint32_t *ni = calloc(ncap, sizeof(*ni));
		if (!nk || !ni) {
			free(nk);
			free(ni);
			return false;
		}
		for (size_t i = 0; i < *cap; i++) {
			if (!(*keys)[i])
				continue;
			size_t j = ((*keys)[i] >> 7) & (ncap - 1);
			while (nk[j])
				j = (j + 1) & (ncap - 1);
			nk[j] = (*keys)[i];
			ni[j] = (*ids)[i];
		}
		free(*keys);
		free(*ids);
		*keys = nk;
		*ids = ni;
		*cap = ncap;
	}
	size_t j = (key >> 7) & (*cap - 1);
	while ((*keys)[j] && (*keys)[j] != key)
		j = (j + 1) & (*cap - 1);
	if (!(*keys)[j])
		(*used)++;
	(*keys)[j] = key;
	(*ids)[j] = id;
	return true;
}

static uint32_t map_get(const uint64_t *keys, const uint32_t *ids, size_t cap, uint64_t key)
{
	if (!cap)
		return 0;
	for (size_t j = (key >> 7) & (cap - 1); keys[j]; j = (j + 1) & (cap - 1))
		if (keys[j] == key)
			return ids[j];
	return 0;
}

static size_t node_used, hash_used;

/* Nodes are deduplicated by a 64-bit mix of their fields (a collision merges two frames: the
 * chance is negligible for the few thousand nodes a recovery makes). */
static uint32_t node(struct defs *d, uint32_t parent, uint8_t kind, uint64_t value)
{
	uint64_t key = mix(parent, kind, value) | 1;
	uint32_t id = map_get(d->node_keys, d->node_ids, d->node_cap, key);
	if (id)
		return id;
	id = (uint32_t)d->next_node++;
	if (!map_put(&d->node_keys, &d->node_ids, &d->node_cap, &node_used, key, id)) {
		d->failed = true;
		return 0;
	}
	struct vrt_record r = { .op = VRT_OP_STACK, .id = id, .id2 = parent, .aux2 = kind, .aux = value };
	emit_table(d, &r);
	return id;
}

/* As the collector's intern_frames: Python frames outermost first, then native ones. */
static uint32_t intern_frames(struct defs *d, const struct vrt_rings_raw *r)
{
	const uint64_t *native = (const uint64_t *)(r + 1);
	const uint32_t *python = (const uint32_t *)(native + r->n_native);
	uint32_t n = 0;
	for (int i = r->n_python - 1; i >= 0; i--) {
		uint32_t f = python[i];
		if (f == VRT_RINGS_PY_EVAL_BOUNDARY)
			n = node(d, n, VRT_FRAME_EVAL, 0);
		else if (f < d->t->tables.n_pyframes)
			n = node(d, n, VRT_FRAME_PYTHON, f);
		else { /* interned by the thread after the collector's last write: no name in the file */
			d->undescribed_python++;
			n = node(d, n, VRT_FRAME_LABEL, string_id(d, "[Python frame not described before the kill]"));
		}
	}
	for (int i = r->n_native - 1; i >= 0; i--)
		n = node(d, n, VRT_FRAME_NATIVE, native[i]);
	return n;
}

static uint32_t resolve_stack(struct defs *d, const struct vrt_rings_raw *r)
{
	if (r->flags & VRT_RINGS_RAW_FRAMES) {
		uint32_t id = intern_frames(d, r);
		if (id && r->stack_hash &&
		    !map_put(&d->hash_keys, &d->hash_ids, &d->hash_cap, &hash_used, r->stack_hash | 1, id))
			d->failed = true;
		return id;
	}
	if (!r->stack_id)
		return 0;
	if (vrt_stack_valid(d->t, r->stack_id))
		return r->stack_id;
	/* Interned by the collector after its last write: the same frames came with an earlier event. */
	uint32_t id = r->stack_hash ? map_get(d->hash_keys, d->hash_ids, d->hash_cap, r->stack_hash | 1) : 0;
	if (!id)
		d->unknown_stacks++;
	return id;
}

/* ---- reading the sidecar ------------------------------------------------------------------ */

struct slot_data {
	uint8_t *ring;
	uint64_t head, start, capacity;
	uint32_t index;
	int32_t tid;
};

static uint64_t get64(const uint8_t *p, size_t off)
{
	uint64_t v;
	memcpy(&v, p + off, 8);
	return v;
}

static uint32_t get32(const uint8_t *p, size_t off)
{
	uint32_t v;
	memcpy(&v, p + off, 4);
	return v;
}

static bool events_chunk_at_or_after(const struct vrt_trace *t, uint64_t seq)
{
	for (size_t i = 0; i < t->n_chunks; i++)
		if (t->chunks[i].type == VRT_CHUNK_EVENTS && t->chunks[i].seq >= seq)
			return true;
	return false;
}

/* One slot's header and ring; false when it holds nothing to recover (or nothing sane). */
static bool read_slot(int fd, const struct vrt_rings_header *h, uint32_t i, const struct vrt_trace *t,
		      struct slot_data *s)
{
	uint8_t sh[256];
	off_t at = (off_t)(VRT_RINGS_HEADER_SIZE + (uint64_t)i * h->slot_size);
	if (pread(fd, sh, sizeof(sh), at) != (ssize_t)sizeof(sh))
		return false;
	s->head = get64(sh, VRT_RINGS_OFF_HEAD);
	uint64_t tail = get64(sh, VRT_RINGS_OFF_TAIL), pending = get64(sh, VRT_RINGS_OFF_PENDING_TAIL);
	uint64_t pending_seq = get64(sh, VRT_RINGS_OFF_PENDING_SEQ);
	s->capacity = get64(sh, VRT_RINGS_OFF_CAPACITY);
	s->index = get32(sh, VRT_RINGS_OFF_INDEX);
	s->tid = (int32_t)get32(sh, VRT_RINGS_OFF_TID);
	s->start = tail;
	if (pending_seq && pending > tail && pending <= s->head && events_chunk_at_or_after(t, pending_seq))
		s->start = pending; /* killed between that chunk's write and the tail's move */
	if (s->capacity != h->capacity || s->head <= s->start || s->head - s->start > s->capacity)
		return false;
	s->ring = malloc(s->capacity);
	if (!s->ring || pread(fd, s->ring, s->capacity, at + h->slot_header) != (ssize_t)s->capacity) {
		free(s->ring);
		s->ring = NULL;
		return false;
	}
	return true;
}

/* The records of one slot from start to head; returns how many were appended to *refs, or -1
 * when a record does not check (the rest of that slot is skipped and counted damaged). */
static long slot_records(struct slot_data *s, uint32_t slot, struct event_ref **refs, size_t *n, size_t *cap,
			 uint64_t *damaged)
{
	long count = 0;
	for (uint64_t pos = s->start; pos < s->head;) {
		uint64_t off = pos & (s->capacity - 1);
		const struct vrt_rings_raw *r = (const struct vrt_rings_raw *)(s->ring + off);
		if (s->capacity - off < sizeof(*r) || r->op == 0) {
			pos += s->capacity - off;
			continue;
		}
		size_t need = sizeof(*r) + (size_t)r->n_native * 8 + (size_t)r->n_python * 4;
		if (r->len < need || r->len % 8 || r->len > s->capacity - off || r->len > s->head - pos) {
			(*damaged)++;
			return count;
		}
		if (*n == *cap) {
			size_t ncap = *cap ? *cap * 2 : 1024;
			struct event_ref *nr = realloc(*refs, ncap * sizeof(*nr));
			if (!nr)
				return -1;
			*refs = nr;
			*cap = ncap;
		}
		(*refs)[(*n)++] = (struct event_ref){ r->ts_ns, slot, (uint32_t)count, r, s->index };
		count++;
		pos += r->len;
	}
	return count;
}

static int by_time(const void *a, const void *b)
{
	const struct event_ref *x = a, *y = b;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* ---- records, as the collector makes them (preload/collector.c, process) ------------------- */

static uint64_t ts_units(const struct vrt_file_header *fh, uint64_t ns)
{
	uint64_t t0 = fh->start_monotonic_ns, unit = fh->ts_unit_ns ? fh->ts_unit_ns : 1000;
	return ns > t0 ? (ns - t0) / unit : 0;
}

/* false for what the collector rebuilds from state a recovery does not have. */
static bool to_record(struct defs *d, const struct vrt_file_header *fh, const struct vrt_rings_raw *raw,
		      struct vrt_record *r)
{
	switch (raw->op) {
	case VRT_OP_INFO: case VRT_OP_OWNER: case VRT_OP_WALK: case VRT_OP_OOM_LIMITS: case VRT_OP_EXITING:
		return false;
	default:
		break;
	}
	if (raw->api == VRT_API_TORCH_SNAPSHOT)
		return false;
	*r = (struct vrt_record){ .op = raw->op, .ts = ts_units(fh, raw->ts_ns),
				  .addr = raw->addr, .size = raw->size, .aux = raw->aux, .aux2 = raw->aux2,
				  .stream = raw->stream, .api = raw->api, .device = raw->device, .kind = raw->kind,
				  .result = raw->result };
	r->stack = resolve_stack(d, raw);
	if (raw->op == VRT_OP_LOST) {
		r->id = raw->size;
	} else if (raw->op == VRT_OP_MARK || raw->op == VRT_OP_PHASE_ENTER || raw->op == VRT_OP_PHASE_EXIT) {
		size_t skip = sizeof(*raw) + (size_t)raw->n_native * 8 + (size_t)raw->n_python * 4;
		char label[1024] = "";
		if (raw->len > skip) {
			size_t n = strnlen((const char *)raw + skip, raw->len - skip);
			snprintf(label, sizeof(label), "%.*s", (int)n, (const char *)raw + skip);
		}
		r->id = string_id(d, label);
	}
	return true;
}

/* ---- writing ------------------------------------------------------------------------------ */

struct placement {
	int fd;
	struct vrt_file_header hdr;
	uint64_t seq;      /* the last chunk's */
	uint64_t log_end;  /* where log chunks go */
	uint64_t ring_head; /* ring-relative, where ring chunks go */
	uint64_t laps;
	bool ring, wrapped;
	uint64_t ring_tail_after; /* first chunk at or after ring_head + what we write (wrapped ring) */
};

static uint64_t span_of(uint64_t stored) { return (32 + stored + VRT_CHUNK_ALIGN - 1) & ~(uint64_t)(VRT_CHUNK_ALIGN - 1); }

/* Where the writer would put its next chunks: after the last one written (the state block may
 * lag the file by one chunk: the kill can come between a chunk and its state). */
static void find_place(const struct vrt_trace *t, struct placement *p)
{
	p->hdr = t->hdr;
	const struct vrt_file_state *s = &t->hdr.state;
	p->seq = s->last_chunk_seq > t->seq_found ? s->last_chunk_seq : t->seq_found;
	p->ring = t->hdr.ring_size != 0;
	p->wrapped = s->ring_laps > 0;
	p->laps = s->ring_laps;
	p->log_end = s->log_end;
	p->ring_head = s->ring_head;
	uint64_t best = 0;
	for (size_t i = 0; i < t->n_chunks; i++) {
		const struct vrt_chunk_ref *c = &t->chunks[i];
		bool in_ring = p->ring && c->offset >= t->hdr.ring_offset && c->offset < t->hdr.ring_offset + t->hdr.ring_size;
		uint64_t end = c->offset + span_of(c->stored);
		if (in_ring && c->seq >= best) {
			best = c->seq;
			p->ring_head = end - t->hdr.ring_offset;
		}
		if (!in_ring && end > p->log_end)
			p->log_end = end;
	}
	if (p->ring && !p->wrapped)
		p->log_end = t->hdr.ring_offset + p->ring_head;
}

static int put_at(int fd, const struct vrt_chunk_header *ch, const uint8_t *payload, uint32_t len, uint64_t at)
{
	uint64_t span = span_of(len);
	uint8_t pad[8] = { 0 };
	if (pwrite(fd, ch, sizeof(*ch), (off_t)at) != (ssize_t)sizeof(*ch) ||
	    (len && pwrite(fd, payload, len, (off_t)(at + sizeof(*ch))) != (ssize_t)len) ||
	    (span > sizeof(*ch) + len &&
	     pwrite(fd, pad, span - sizeof(*ch) - len, (off_t)(at + sizeof(*ch) + len)) != (ssize_t)(span - sizeof(*ch) - len)))
		return VRT_E_IO;
	return 0;
}

/* A wrapped ring goes round again as the writer would: a padding chunk to its end, then 0. */
static int wrap_ring(struct placement *p)
{
	uint64_t rest = p->hdr.ring_size - p->ring_head;
	if (rest >= sizeof(struct vrt_chunk_header)) {
		struct vrt_chunk_header ch;
		vrt_chunk_header_fill(&ch, VRT_CHUNK_PADDING, VRT_CODEC_NONE, 0, 0, ++p->seq, NULL);
		int rc = put_at(p->fd, &ch, NULL, 0, p->hdr.ring_offset + p->ring_head);
		if (rc)
			return rc;
	}
	p->ring_head = 0;
	p->laps++;
	p->ring_tail_after = 0;
	return 0;
}

static int write_chunk(struct placement *p, const struct vrt_trace *t, uint8_t type, const uint8_t *payload,
		       uint32_t len)
{
	struct vrt_chunk_header ch;
	uint64_t span = span_of(len);
	bool to_ring = p->ring && !(type == VRT_CHUNK_TABLES && p->wrapped);
	if (to_ring && span > p->hdr.ring_size / 4)
		return VRT_E_SIZE;
	/* Before the first wrap the writer copies every definition into the log: a recovery does
	 * not, so a ring that is full before its first wrap takes nothing more. */
	if (to_ring && p->ring_head + span > p->hdr.ring_size) {
		int rc = p->wrapped ? wrap_ring(p) : VRT_E_SIZE;
		if (rc)
			return rc;
	}
	vrt_chunk_header_fill(&ch, type, VRT_CODEC_NONE, len, len, ++p->seq, payload);
	uint64_t at = to_ring ? p->hdr.ring_offset + p->ring_head : p->log_end;
	int rc = put_at(p->fd, &ch, payload, len, at);
	if (rc)
		return rc;
	if (to_ring) {
		p->ring_head += span;
		if (!p->wrapped)
			p->log_end = p->hdr.ring_offset + p->ring_head;
		else { /* what we overwrote is gone: the oldest chunk is the first one after us */
			p->ring_tail_after = 0;
			for (size_t i = 0; i < t->n_chunks; i++) {
				uint64_t off = t->chunks[i].offset - p->hdr.ring_offset;
				bool in_ring = t->chunks[i].offset >= p->hdr.ring_offset && off < p->hdr.ring_size;
				if (in_ring && off >= p->ring_head && (!p->ring_tail_after || off < p->ring_tail_after))
					p->ring_tail_after = off;
			}
		}
	} else {
		p->log_end += span;
	}
	return 0;
}

static int write_tables(struct placement *p, const struct vrt_trace *t, struct defs *d)
{
	int rc = write_chunk(p, t, VRT_CHUNK_TABLES, d->tables.data, (uint32_t)d->tables.len);
	if (!rc) {
		d->tables.len = 0;
		d->tdelta = (struct vrt_delta){ 0, 0 };
	}
	return rc;
}

/* One EVENTS chunk, after the definitions its records use. */
static int put_events_part(struct placement *p, const struct vrt_trace *t, struct defs *d, struct vrt_buf *b)
{
	int rc = d->tables.len ? write_tables(p, t, d) : 0;
	if (!rc)
		rc = write_chunk(p, t, VRT_CHUNK_EVENTS, b->data, (uint32_t)b->len);
	b->len = 0;
	return rc;
}

/* Encodes the events (THREAD records between threads, a fresh delta per part) and writes them
 * in parts of at most EVENTS_PART_BYTES. */
static int write_events(struct placement *p, const struct vrt_trace *t, struct defs *d, const struct event_ref *refs,
			size_t n, uint64_t *written, uint64_t *skipped)
{
	struct vrt_buf b = { 0 };
	struct vrt_delta delta = { 0, 0 };
	uint32_t thread = 0;
	int rc = 0;
	/* a ring takes chunks of at most a quarter of it, as the writer's (vrt_writer_max_raw) */
	size_t part = p->ring && p->hdr.ring_size / 8 < EVENTS_PART_BYTES ? p->hdr.ring_size / 8 : EVENTS_PART_BYTES;
	for (size_t i = 0; i < n && !rc; i++) {
		struct vrt_record r;
		if (!to_record(d, &p->hdr, refs[i].r, &r)) {
			(*skipped)++;
			continue;
		}
		struct vrt_record tr = { .op = VRT_OP_THREAD, .id = refs[i].thread };
		if ((refs[i].thread != thread && !vrt_buf_put_record(&b, &tr, &delta)) || !vrt_buf_put_record(&b, &r, &delta)) {
			vrt_buf_free(&b);
			return VRT_E_NOMEM;
		}
		thread = refs[i].thread;
		(*written)++;
		if (b.len >= part) {
			rc = put_events_part(p, t, d, &b);
			delta = (struct vrt_delta){ 0, 0 };
			thread = 0;
		}
	}
	if (!rc && b.len)
		rc = put_events_part(p, t, d, &b);
	if (!rc && d->tables.len)
		rc = write_tables(p, t, d);
	vrt_buf_free(&b);
	return d->failed ? VRT_E_NOMEM : rc;
}

/*
 * Events in the file that its state block does not count yet: the state is written at the end
 * of a drain, after the drain's EVENTS chunks, so a kill between a chunk (and its tails' move:
 * the rings no longer hold its events) and the state leaves that chunk's events uncounted.
 * They are the event records of the EVENTS chunks numbered after the state's last chunk.
 */
static uint64_t events_after_state(struct vrt_trace *t)
{
	uint64_t n = 0;
	for (size_t i = 0; t->state_valid && i < t->n_chunks; i++) {
		if (t->chunks[i].type != VRT_CHUNK_EVENTS || t->chunks[i].seq <= t->hdr.state.last_chunk_seq)
			continue;
		const uint8_t *p, *end;
		size_t len;
		if (vrt_trace_chunk(t, i, &p, &len))
			continue; /* damaged: its events are not in the file either */
		struct vrt_delta d = { 0, 0 };
		for (end = p + len; p < end;) {
			struct vrt_record r;
			if (vrt_record_decode(&p, end, &r, &d))
				break;
			n += r.op != VRT_OP_THREAD;
		}
	}
	return n;
}

/* added: events the state block comes to count (recovered ones, and those it had not counted) */
static int write_state(struct placement *p, uint64_t added, uint64_t last_ts, int end_signal)
{
	struct vrt_file_state s = p->hdr.state;
	s.generation++;
	s.last_chunk_seq = p->seq;
	s.log_end = p->log_end;
	if (p->ring) {
		s.ring_head = p->ring_head;
		if (p->wrapped && p->ring_tail_after)
			s.ring_tail = p->ring_tail_after;
		s.ring_laps = p->laps;
	}
	s.events_written += added;
	if (s.end_reason == VRT_END_RUNNING && last_ts > s.end_ts)
		s.end_ts = last_ts; /* the last sign of life */
	if (s.end_reason == VRT_END_RUNNING && end_signal > 0) { /* else: "never closed", as it was */
		s.end_reason = VRT_END_KILLED;
		s.end_detail = end_signal;
	}
	s.crc = vrt_crc32c(0, &s, offsetof(struct vrt_file_state, crc));
	return pwrite(p->fd, &s, sizeof(s), VRT_STATE_OFFSET) == (ssize_t)sizeof(s) ? 0 : VRT_E_IO;
}

/* ---- the whole ---------------------------------------------------------------------------- */

static int open_trace_for_update(const char *path)
{
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	if (fd < 0) {
		vrt_fail(0, "cannot open %s for writing: %s", vrt_escape(path), strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_nlink != 1 || (st.st_uid != geteuid() && geteuid())) {
		close(fd);
		vrt_fail(0, "%s is not a trace file of yours with one link: not writing to it", vrt_escape(path));
		return -1;
	}
	return fd;
}

static int read_rings_header(const char *rings, int *fd_out, struct vrt_rings_header *h)
{
	int fd = open(rings, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	if (fd < 0)
		return VRT_E_NOENT;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) ||
	    memcmp(h->magic, VRT_RINGS_MAGIC, 8) || h->version != VRT_RINGS_VERSION ||
	    h->raw_layout != VRT_RINGS_RAW_LAYOUT || h->n_slots > VRT_RINGS_MAX_SLOTS || !h->capacity ||
	    (h->capacity & (h->capacity - 1)) || h->capacity > (1ull << 30) || h->slot_header < 256 ||
	    h->slot_size != h->slot_header + h->capacity) {
		close(fd);
		return VRT_E_CORRUPT;
	}
	*fd_out = fd;
	return 0;
}

int vrt_recover(const char *path, int end_signal, int signal_pid, struct vrt_recovery *out)
{
	memset(out, 0, sizeof(*out));
	char rings[4096 + 8];
	snprintf(rings, sizeof(rings), "%s%s", path, VRT_RINGS_SUFFIX);
	struct vrt_rings_header h;
	int rfd = -1;
	int rc = read_rings_header(rings, &rfd, &h);
	if (rc == VRT_E_NOENT) {
		vrt_fail(0, "%s has no %s beside it: nothing to recover", vrt_escape(path), VRT_RINGS_SUFFIX);
		return vrt_exit_code(rc);
	}
	if (rc) {
		vrt_fail(0, "%s is not a rings file this vramtrace reads", vrt_escape(rings));
		return vrt_exit_code(rc);
	}
	if (h.pid > 0 && (!kill(h.pid, 0) || errno == EPERM)) {
		close(rfd);
		vrt_fail(0, "%s: process %d is still running (its trace is still being written): nothing to recover",
			 vrt_escape(path), (int)h.pid);
		return vrt_exit_code(VRT_E_ARG);
	}
	if (signal_pid && h.pid != signal_pid)
		end_signal = 0; /* another process's end: not known */
	struct vrt_trace t;
	if ((rc = vrt_trace_open(&t, path))) {
		close(rfd);
		return vrt_fail(rc, "cannot read %s", vrt_escape(path));
	}
	struct slot_data *slots = calloc(VRT_RINGS_MAX_SLOTS, sizeof(*slots));
	if (!slots) {
		close(rfd);
		vrt_trace_close(&t);
		return vrt_fail(VRT_E_NOMEM, "recover %s", vrt_escape(path));
	}
	struct event_ref *refs = NULL;
	size_t n = 0, cap = 0;
	uint32_t taken = h.next_slot < h.n_slots ? h.next_slot : h.n_slots;
	for (uint32_t i = 0; i < taken; i++) {
		slots[i].ring = NULL;
		if (!h.in_use[i] || !read_slot(rfd, &h, i, &t, &slots[i]))
			continue;
		out->threads++;
		if (slot_records(&slots[i], i, &refs, &n, &cap, &out->damaged) < 0) {
			rc = VRT_E_NOMEM;
			break;
		}
	}
	close(rfd);
	if (n) /* refs is NULL when no slot held an event, and qsort must get an array */
		qsort(refs, n, sizeof(*refs), by_time);
	struct defs d = { .t = &t, .next_string = t.tables.n_strings ? t.tables.n_strings : 1,
			  .next_node = t.tables.n_nodes ? t.tables.n_nodes : 1 };
	node_used = hash_used = 0;
	for (uint32_t i = 0; i < taken; i++) { /* threads the file does not name yet (side buffers share one) */
		const struct slot_data *s = &slots[i];
		uint32_t ix = s->index;
		if (!s->ring || (ix < t.tables.n_threads && t.tables.threads[ix].tid))
			continue;
		bool seen = false;
		for (uint32_t j = 0; j < i && !seen; j++)
			seen = slots[j].ring && slots[j].index == ix;
		if (seen)
			continue;
		struct vrt_record r = { .op = VRT_OP_THREAD_INFO, .id = ix, .aux = (uint64_t)(uint32_t)s->tid,
					.id2 = string_id(&d, "?") };
		emit_table(&d, &r);
	}
	struct placement p = { .fd = -1 };
	find_place(&t, &p);
	if (!rc && (p.fd = open_trace_for_update(path)) < 0)
		rc = VRT_E_PERM;
	else if (!rc) {
		char what[128];
		snprintf(what, sizeof(what), "%zu events from %u thread buffers", n, out->threads);
		struct vrt_record info = { .op = VRT_OP_INFO, .id = string_id(&d, "recovered"), .id2 = string_id(&d, what) };
		emit_table(&d, &info);
		uint64_t uncounted = events_after_state(&t);
		rc = write_events(&p, &t, &d, refs, n, &out->events, &out->skipped);
		if (!rc)
			rc = write_state(&p, out->events + uncounted, n ? ts_units(&t.hdr, refs[n - 1].ts) : 0, end_signal);
		if (rc)
			vrt_fail(rc, "cannot write the recovered events to %s", vrt_escape(path));
	}
	out->unknown_stacks = d.unknown_stacks;
	out->undescribed_python = d.undescribed_python;
	if (p.fd >= 0)
		close(p.fd);
	for (uint32_t i = 0; i < taken; i++)
		free(slots[i].ring);
	free(slots);
	for (size_t i = 0; i < d.n_strings; i++)
		free(d.strings[i]);
	free(d.strings);
	vrt_buf_free(&d.tables);
	free(d.node_keys);
	free(d.node_ids);
	free(d.hash_keys);
	free(d.hash_ids);
	free(refs);
	vrt_trace_close(&t);
	if (rc)
		return vrt_exit_code(rc == VRT_E_PERM ? VRT_E_PERM : rc);
	if (unlink(rings)) {
		vrt_fail(0, "recovered, but cannot remove %s: %s", vrt_escape(rings), strerror(errno));
		return vrt_exit_code(VRT_E_IO);
	}
	return 0;
}

void vrt_recovery_say(const char *path, const struct vrt_recovery *r)
{
	if (!r->events && !r->skipped && !r->damaged) {
		fprintf(stderr, "vramtrace: %s already held every event its threads had published (its sidecar is "
				"removed)\n", vrt_escape(path));
		return;
	}
	fprintf(stderr, "vramtrace: recovered %llu events from %u thread buffers into %s", (unsigned long long)r->events,
		r->threads, vrt_escape(path));
	const char *sep = " (";
	const struct {
		uint64_t n;
		const char *what;
	} notes[] = {
		{ r->skipped, "not rebuilt (retention findings, facts)" },
		{ r->damaged, "thread buffers damaged part of the way" },
		{ r->unknown_stacks, "events without a known stack" },
		{ r->undescribed_python, "Python frames the trace never named" },
	};
	for (size_t i = 0; i < sizeof(notes) / sizeof(notes[0]); i++)
		if (notes[i].n) {
			fprintf(stderr, "%s%llu %s", sep, (unsigned long long)notes[i].n, notes[i].what);
			sep = "; ";
		}
	fputs(*sep == ';' ? ")\n" : "\n", stderr);
}

int vrt_cmd_recover(int argc, char **argv)
{
	const char *path = NULL;
	bool quiet = false;
	for (int i = 1; i < argc; i++) {
		if (vrt_is_help(argv[i]))
			return vrt_print_help("recover");
		if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet"))
			quiet = true;
		else if (argv[i][0] == '-' || path)
			return vrt_usage("recover", "unexpected argument '%s'", vrt_escape(argv[i]));
		else
			path = argv[i];
	}
	if (!path)
		return vrt_usage("recover", "no trace given: vramtrace recover TRACE");
	struct vrt_recovery r;
	int rc = vrt_recover(path, 0, 0, &r);
	if (!rc && !quiet)
		vrt_recovery_say(path, &r);
	return rc;
}
