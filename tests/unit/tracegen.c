/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "tracegen.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vramtrace/error.h"

static uint64_t rnd(struct vt_gen *g)
{
	uint64_t x = g->rng ? g->rng : 0x9e3779b97f4a7c15ull;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	g->rng = x;
	return x * 0x2545f4914f6cdd1dull;
}

static void *grow(void *p, size_t *cap, size_t want, size_t elem)
{
	if (want <= *cap)
		return p;
	size_t n = *cap ? *cap : 64;
	while (n < want)
		n *= 2;
	void *q = realloc(p, n * elem);
	if (!q) {
		perror("tracegen");
		abort();
	}
	*cap = n;
	return q;
}

static void buf_encode(struct vt_buf *b, const struct vrt_record *r, struct vrt_delta *d)
{
	b->data = grow(b->data, &b->cap, b->len + VRT_RECORD_MAX_FIXED + r->bytes_len, 1);
	b->len = (size_t)(vrt_record_encode(b->data + b->len, r, d) - b->data);
}

static long dump_tables(void *ctx, uint8_t **out)
{
	struct vt_gen *g = ctx;
	*out = malloc(g->all.len ? g->all.len : 1);
	if (!*out)
		return VRT_E_NOMEM;
	memcpy(*out, g->all.data, g->all.len);
	return (long)g->all.len;
}

static void read_state(struct vt_gen *g, struct vrt_file_state *s)
{
	if (pread(g->rfd, s, sizeof(*s), VRT_STATE_OFFSET) != (ssize_t)sizeof(*s)) {
		perror("tracegen: state block");
		abort();
	}
}

static struct vt_chunk *add_chunk(struct vt_gen *g, uint64_t seq, uint8_t type, uint64_t offset, uint64_t span,
				  bool in_ring)
{
	g->chunks = grow(g->chunks, &g->cap_chunks, g->n_chunks + 1, sizeof(*g->chunks));
	struct vt_chunk *c = &g->chunks[g->n_chunks++];
	*c = (struct vt_chunk){ .seq = seq, .offset = offset, .span = span, .type = type, .in_ring = in_ring };
	return c;
}

/* Ring bytes [from, to) (ring-relative) were written: older ring chunks there are gone. */
static void overwrite(struct vt_gen *g, uint64_t from, uint64_t to, uint64_t below_seq)
{
	from += VRT_FILE_HEADER_SIZE;
	to += VRT_FILE_HEADER_SIZE;
	for (size_t i = 0; i < g->n_chunks; i++) {
		struct vt_chunk *c = &g->chunks[i];
		if (c->in_ring && c->seq < below_seq && c->offset < to && c->offset + c->span > from)
			c->overwritten = true;
	}
}

/* Writes one chunk and records where it (and what a wrap added) went. */
static struct vt_chunk *put(struct vt_gen *g, uint8_t type, struct vt_buf *b)
{
	if (g->error || !g->w)
		return NULL;
	struct vrt_file_state s0, s1;
	read_state(g, &s0);
	int rc = vrt_writer_put(g->w, (enum vrt_chunk_type)type, b->data, b->len);
	b->len = 0;
	if (rc < 0) {
		g->error = rc;
		return NULL;
	}
	if (rc == VRT_HINT_CHECKPOINT)
		g->want_checkpoint = true;
	read_state(g, &s1);
	uint64_t seq = s0.last_chunk_seq + 1;
	uint64_t ring = g->ring_bytes ? VRT_FILE_HEADER_SIZE : 0, log = VRT_FILE_HEADER_SIZE + g->ring_bytes;
	struct vt_chunk *c;
	if (!g->ring_bytes || (type == VRT_CHUNK_TABLES && s0.ring_laps)) {
		c = add_chunk(g, seq, type, s0.log_end, s1.log_end - s0.log_end, false);
	} else if (s1.ring_laps == s0.ring_laps) {
		c = add_chunk(g, seq, type, ring + s0.ring_head, s1.ring_head - s0.ring_head, true);
		overwrite(g, s0.ring_head, s1.ring_head, seq);
	} else {
		if (!s0.ring_laps) /* the first wrap: every definition, once, at the start of the log */
			add_chunk(g, seq++, VRT_CHUNK_TABLES, log, s1.log_end - log, false);
		if (g->ring_bytes - s0.ring_head >= sizeof(struct vrt_chunk_header)) {
			add_chunk(g, seq, VRT_CHUNK_PADDING, ring + s0.ring_head, g->ring_bytes - s0.ring_head, true);
			overwrite(g, s0.ring_head, g->ring_bytes, seq);
			seq++;
		}
		c = add_chunk(g, seq, type, ring, s1.ring_head, true);
		overwrite(g, 0, s1.ring_head, seq);
	}
	if (c->seq != s1.last_chunk_seq) {
		fprintf(stderr, "tracegen: expected chunk seq %llu, the state block says %llu\n",
			(unsigned long long)c->seq, (unsigned long long)s1.last_chunk_seq);
		abort();
	}
	return c;
}

int vt_gen_open(struct vt_gen *g, const char *path, uint64_t ring_bytes, uint64_t seed)
{
	memset(g, 0, sizeof(*g));
	snprintf(g->path, sizeof(g->path), "%s", path);
	g->ring_bytes = ring_bytes;
	g->rng = seed * 0x9e3779b97f4a7c15ull + 1;
	g->n_strings = 1;
	g->n_nodes = 1;
	g->strings = grow(NULL, &g->cap_strings, 1, sizeof(char *));
	g->strings[0] = NULL;
	g->nodes = grow(NULL, &g->cap_nodes, 1, sizeof(*g->nodes));
	g->nodes[0] = (struct vt_node){ 0, 0, 0 };
	g->ts = 1000;
	g->next_addr = 0x7f0000000000ull;
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return VRT_E_IO;
	g->rfd = open(path, O_RDONLY | O_CLOEXEC);
	struct vrt_writer_options o = { .fd = fd, .ring_bytes = ring_bytes, .ts_unit_ns = 1000, .pid = 4242,
					.ppid = 1, .rank = -1, .local_rank = -1, .world_size = -1,
					.start_realtime_ns = 1700000000000000000ull, .start_monotonic_ns = 1000000,
					.zstd_level = 1, .dump_tables = dump_tables, .dump_ctx = g };
	int rc = vrt_writer_open(&g->w, &o);
	if (rc) {
		close(fd);
		return rc;
	}
	struct vrt_record info = { .op = VRT_OP_INFO, .id = vt_gen_string(g, "cmdline"),
				   .id2 = vt_gen_string(g, "tracegen --test") };
	struct vrt_delta d = { 0, 0 };
	buf_encode(&g->pending, &info, &d);
	d = (struct vrt_delta){ 0, 0 };
	buf_encode(&g->all, &info, &d);
	return 0;
}

static void emit_table(struct vt_gen *g, const struct vrt_record *r)
{
	struct vrt_delta d = { 0, 0 };
	buf_encode(&g->pending, r, &d);
	d = (struct vrt_delta){ 0, 0 };
	buf_encode(&g->all, r, &d);
}

/* One open-addressing index for both kinds of definition: entries are id << 1 | is_node. */
static uint64_t hash_string(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

static uint64_t hash_node(uint32_t parent, uint8_t kind, uint64_t value)
{
	uint64_t h = (value * 0x9e3779b97f4a7c15ull) ^ (((uint64_t)parent << 3 | kind) * 0xc2b2ae3d27d4eb4full);
	return h ^ (h >> 31) ^ 1;
}

static bool index_same(const struct vt_gen *g, uint32_t entry, const char *s, const struct vt_node *nd)
{
	uint32_t id = entry >> 1;
	if (entry & 1)
		return nd && g->nodes[id].parent == nd->parent && g->nodes[id].kind == nd->kind &&
		       g->nodes[id].value == nd->value;
	return s && !strcmp(g->strings[id], s);
}

static uint32_t index_find(const struct vt_gen *g, uint64_t h, const char *s, const struct vt_node *nd)
{
	if (!g->index_cap)
		return 0;
	for (size_t i = h & (g->index_cap - 1); g->index[i]; i = (i + 1) & (g->index_cap - 1))
		if (index_same(g, g->index[i], s, nd))
			return g->index[i] >> 1;
	return 0;
}

static void index_put(struct vt_gen *g, uint64_t h, uint32_t entry);

static void index_rehash(struct vt_gen *g)
{
	uint32_t *old = g->index;
	size_t old_cap = g->index_cap;
	g->index_cap = old_cap ? old_cap * 2 : 4096;
	g->index = calloc(g->index_cap, sizeof(*g->index));
	g->index_used = 0;
	for (size_t i = 0; i < old_cap; i++) {
		uint32_t e = old[i];
		if (!e)
			continue;
		const struct vt_node *nd = &g->nodes[e >> 1];
		index_put(g, e & 1 ? hash_node(nd->parent, nd->kind, nd->value) : hash_string(g->strings[e >> 1]), e);
	}
	free(old);
}

static void index_put(struct vt_gen *g, uint64_t h, uint32_t entry)
{
	if ((g->index_used + 1) * 2 > g->index_cap)
		index_rehash(g);
	size_t i = h & (g->index_cap - 1);
	while (g->index[i])
		i = (i + 1) & (g->index_cap - 1);
	g->index[i] = entry;
	g->index_used++;
}

uint32_t vt_gen_string(struct vt_gen *g, const char *s)
{
	uint64_t h = hash_string(s);
	uint32_t found = index_find(g, h, s, NULL);
	if (found)
		return found;
	g->strings = grow(g->strings, &g->cap_strings, g->n_strings + 1, sizeof(char *));
	uint32_t id = (uint32_t)g->n_strings++;
	g->strings[id] = strdup(s);
	index_put(g, h, id << 1);
	struct vrt_record r = { .op = VRT_OP_STRING, .id = id, .bytes = (const uint8_t *)s,
				.bytes_len = (uint32_t)strlen(s) };
	emit_table(g, &r);
	return id;
}

uint32_t vt_gen_node(struct vt_gen *g, uint32_t parent, uint8_t kind, uint64_t value)
{
	struct vt_node key = { parent, kind, value };
	uint64_t h = hash_node(parent, kind, value);
	uint32_t found = index_find(g, h, NULL, &key);
	if (found)
		return found;
	g->nodes = grow(g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(*g->nodes));
	uint32_t id = (uint32_t)g->n_nodes++;
	g->nodes[id] = key;
	index_put(g, h, id << 1 | 1);
	struct vrt_record r = { .op = VRT_OP_STACK, .id = id, .id2 = parent, .aux2 = kind, .aux = value };
	emit_table(g, &r);
	if (kind == VRT_FRAME_NATIVE) {
		char name[64];
		snprintf(name, sizeof(name), "fn_%llx", (unsigned long long)value);
		struct vrt_record sym = { .op = VRT_OP_SYMBOL, .addr = value, .id = 1, .id2 = vt_gen_string(g, name),
					  .aux = value & 0xff };
		emit_table(g, &sym);
	}
	return id;
}

static uint32_t new_stack(struct vt_gen *g);

uint32_t vt_gen_random_stack(struct vt_gen *g)
{
	/* Mostly known call sites; now and then a new one (new nodes, new TABLES records). */
	size_t cap = sizeof(g->pool) / sizeof(g->pool[0]);
	if (g->n_pool < 16 || rnd(g) % 64 == 0) {
		uint32_t id = new_stack(g);
		if (g->n_pool < cap)
			g->pool[g->n_pool++] = id;
		else
			g->pool[rnd(g) % cap] = id;
		return id;
	}
	return g->pool[rnd(g) % g->n_pool];
}

static uint32_t new_stack(struct vt_gen *g)
{
	/* Few distinct frames, so paths share prefixes. */
	uint32_t node = 0;
	int py = (int)(rnd(g) % 3), native = 1 + (int)(rnd(g) % 5);
	if (py) {
		node = vt_gen_node(g, node, VRT_FRAME_EVAL, 0);
		for (int i = 0; i < py; i++) {
			uint32_t frame = (uint32_t)(rnd(g) % 6);
			if (frame >= 1) {
				char file[32];
				snprintf(file, sizeof(file), "mod%u.py", frame);
				struct vrt_record code = { .op = VRT_OP_PYCODE, .id = frame, .id2 = vt_gen_string(g, file),
							   .aux = vt_gen_string(g, file), .aux2 = frame * 10 };
				struct vrt_record pf = { .op = VRT_OP_PYFRAME, .id = frame, .id2 = frame, .aux = 2 * frame,
							 .aux2 = frame * 10 + 1 };
				if (g->n_nodes < 4000) { /* redefinitions are harmless; keep tables small */
					emit_table(g, &code);
					emit_table(g, &pf);
				}
			}
			node = vt_gen_node(g, node, VRT_FRAME_PYTHON, frame);
		}
	}
	for (int i = 0; i < native; i++)
		node = vt_gen_node(g, node, VRT_FRAME_NATIVE, 0x400000 + 0x10 * (rnd(g) % 24) + (uint64_t)i);
	return node;
}

static void live_add(struct vt_gen *g, const struct vrt_record *r)
{
	g->live = grow(g->live, &g->cap_live, g->n_live + 1, sizeof(*g->live));
	g->live[g->n_live++] = (struct vt_live){ r->addr, r->size, r->ts, r->stack, r->device, r->kind, r->api };
}

void vt_gen_event(struct vt_gen *g, uint32_t thread, const struct vrt_record *r)
{
	if (thread && thread != g->chunk_thread) {
		struct vrt_record t = { .op = VRT_OP_THREAD, .id = thread };
		buf_encode(&g->events, &t, &g->delta);
		g->chunk_thread = thread;
	}
	buf_encode(&g->events, r, &g->delta);
	g->ev = grow(g->ev, &g->cap_ev, g->n_ev + 1, sizeof(*g->ev));
	g->ev[g->n_ev++] = (struct vt_event){ *r, g->chunk_thread, 0 };
}

static void random_event(struct vt_gen *g, uint32_t thread)
{
	uint64_t dice = rnd(g) % 100;
	g->ts += rnd(g) % 50;
	struct vrt_record r = { 0 };
	if (dice < 45 || g->n_live < 4) {
		/* Addresses jump up and down: negative address deltas are common. */
		g->next_addr += 0x1000 * (1 + rnd(g) % 64);
		uint64_t addr = rnd(g) % 4 ? g->next_addr : 0x200000000ull + 0x100 * (rnd(g) % 100000);
		for (size_t i = 0; i < g->n_live; i++)
			if (g->live[i].addr == addr)
				addr = g->next_addr += 0x1000;
		r = (struct vrt_record){ .op = VRT_OP_ALLOC, .ts = g->ts, .api = VRT_API_CUDA_MALLOC,
					 .device = (int32_t)(rnd(g) % 3) - 1, .kind = (uint32_t)(rnd(g) % VRT_KIND_LAST),
					 .addr = addr, .size = 256 * (1 + rnd(g) % 100000), .aux = rnd(g) % 7,
					 .stream = rnd(g) % 3, .stack = vt_gen_random_stack(g) };
		live_add(g, &r);
	} else if (dice < 90) {
		size_t i = (size_t)(rnd(g) % g->n_live);
		struct vt_live *e = &g->live[i];
		r = (struct vrt_record){ .op = VRT_OP_FREE, .ts = g->ts, .api = VRT_API_CUDA_FREE, .device = e->device,
					 .kind = e->kind, .addr = e->addr, .size = e->size, .stack2 = e->stack };
		*e = g->live[--g->n_live];
	} else if (dice < 95) {
		char label[32];
		snprintf(label, sizeof(label), "mark %llu", (unsigned long long)(rnd(g) % 50));
		/* A timestamp from the past: negative time deltas (threads interleave). */
		r = (struct vrt_record){ .op = VRT_OP_MARK, .ts = g->ts - rnd(g) % 100, .id = vt_gen_string(g, label) };
	} else {
		r = (struct vrt_record){ .op = VRT_OP_FAILED, .ts = g->ts, .api = VRT_API_CU_MEM_ALLOC, .device = 0,
					 .size = UINT64_MAX - rnd(g) % 5, .result = 2, .stack = vt_gen_random_stack(g) };
	}
	vt_gen_event(g, thread, &r);
}

void vt_gen_flush(struct vt_gen *g)
{
	if (g->pending.len)
		put(g, VRT_CHUNK_TABLES, &g->pending);
	if (g->events.len) {
		size_t first = g->n_ev;
		while (first > 0 && !g->ev[first - 1].seq)
			first--;
		struct vt_chunk *c = put(g, VRT_CHUNK_EVENTS, &g->events);
		if (c) {
			c->first_event = first;
			c->n_events = g->n_ev - first;
			for (size_t i = first; i < g->n_ev; i++)
				g->ev[i].seq = c->seq;
		}
		g->delta = (struct vrt_delta){ 0, 0 };
		g->chunk_thread = 0;
	}
	if (g->want_checkpoint) {
		g->want_checkpoint = false;
		vt_gen_checkpoint(g, VRT_CP_PERIODIC);
	}
}

void vt_gen_events(struct vt_gen *g, size_t n)
{
	uint32_t thread = 1 + (uint32_t)(rnd(g) % 4);
	for (size_t i = 0; i < n; i++) {
		if (rnd(g) % 64 == 0)
			thread = 1 + (uint32_t)(rnd(g) % 4);
		random_event(g, thread);
	}
	vt_gen_flush(g);
}

/* A checkpoint's records, cut into parts of at most part_max bytes, each with its own delta state. */
struct cp_parts {
	struct vt_buf buf;
	struct vrt_delta delta;
	size_t part_max, part_start;
	size_t ends[4096];
	size_t n;
};

static void cp_add(struct cp_parts *cp, const struct vrt_record *r)
{
	if (cp->buf.len - cp->part_start + VRT_RECORD_MAX_FIXED > cp->part_max && cp->buf.len > cp->part_start &&
	    cp->n < sizeof(cp->ends) / sizeof(cp->ends[0]) - 1) {
		cp->ends[cp->n++] = cp->part_start = cp->buf.len;
		cp->delta = (struct vrt_delta){ 0, 0 };
	}
	buf_encode(&cp->buf, r, &cp->delta);
}

static void cp_encode(struct vt_gen *g, struct cp_parts *cp, uint32_t reason)
{
	struct vrt_record begin = { .op = VRT_OP_CP_BEGIN, .ts = g->ts, .id = reason, .aux = g->n_ev };
	cp_add(cp, &begin);
	for (size_t i = 0; i < g->n_live; i++) {
		const struct vt_live *e = &g->live[i];
		struct vrt_record r = { .op = VRT_OP_CP_LIVE, .id2 = VRT_OP_ALLOC, .ts = e->ts, .api = e->api,
					.device = e->device, .kind = e->kind, .addr = e->addr, .size = e->size,
					.stack = e->stack };
		cp_add(cp, &r);
	}
	struct vrt_record end = { .op = VRT_OP_CP_END, .id = g->n_live };
	cp_add(cp, &end);
	cp->ends[cp->n++] = cp->buf.len;
}

static void checkpoint(struct vt_gen *g, uint32_t reason, size_t max_parts)
{
	g->want_checkpoint = false;
	if (g->pending.len || g->events.len)
		vt_gen_flush(g);
	if (!g->w)
		return;
	struct cp_parts *cp = calloc(1, sizeof(*cp));
	cp->part_max = g->cp_part_bytes ? g->cp_part_bytes : vrt_writer_max_raw(g->w);
	cp_encode(g, cp, reason);
	if (g->pending.len) /* nothing above defines anything, but keep the rule: tables first */
		put(g, VRT_CHUNK_TABLES, &g->pending);
	/* One put per part (so that put() can tell where each went); the writer's
	 * vrt_writer_put_parts places them the same way (test_roundtrip.c checks it). */
	size_t n = cp->n < max_parts ? cp->n : max_parts;
	uint64_t first = 0;
	for (size_t i = 0; i < n; i++) {
		size_t from = i ? cp->ends[i - 1] : 0;
		struct vt_buf part = { cp->buf.data + from, cp->ends[i] - from, cp->ends[i] - from };
		struct vt_chunk *c = put(g, VRT_CHUNK_CHECKPOINT, &part);
		if (!c)
			break;
		first = i ? first : c->seq;
		c->cp_events = g->n_ev;
		c->cp_first = first;
		c->cp_part = (uint32_t)i;
		c->cp_parts = n == cp->n ? (uint32_t)n : 0;
	}
	free(cp->buf.data);
	free(cp);
	g->want_checkpoint = false; /* the tables put above may have asked: this one answers it */
}

void vt_gen_checkpoint(struct vt_gen *g, uint32_t reason) { checkpoint(g, reason, SIZE_MAX); }

void vt_gen_checkpoint_cut(struct vt_gen *g, uint32_t reason, size_t max_parts)
{
	checkpoint(g, reason, max_parts);
}

void vt_gen_close(struct vt_gen *g)
{
	if (!g->w)
		return;
	vt_gen_flush(g);
	vrt_writer_count_events(g->w, g->n_ev, 0);
	vrt_writer_set_end(g->w, VRT_END_EXIT, 0, g->ts);
	vrt_writer_close(g->w);
	g->w = NULL;
}

void vt_gen_free(struct vt_gen *g)
{
	vt_gen_close(g);
	if (g->rfd > 0)
		close(g->rfd);
	for (size_t i = 1; i < g->n_strings; i++)
		free(g->strings[i]);
	free(g->strings);
	free(g->nodes);
	free(g->ev);
	free(g->chunks);
	free(g->live);
	free(g->pending.data);
	free(g->all.data);
	free(g->events.data);
	free(g->index);
	memset(g, 0, sizeof(*g));
}

size_t vt_gen_expected_chunks(const struct vt_gen *g, const struct vt_chunk **out, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < g->n_chunks; i++) { /* chunks are recorded in seq order */
		const struct vt_chunk *c = &g->chunks[i];
		if (c->type == VRT_CHUNK_PADDING || c->overwritten)
			continue;
		if (n < max)
			out[n] = c;
		n++;
	}
	return n;
}

const struct vt_chunk *vt_gen_chunk_by_seq(const struct vt_gen *g, uint64_t seq)
{
	for (size_t i = 0; i < g->n_chunks; i++)
		if (g->chunks[i].seq == seq)
			return &g->chunks[i];
	return NULL;
}

int vt_set_hostname(const char *path, const char *name)
{
	char host[64] = { 0 };
	snprintf(host, sizeof(host), "%s", name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return VRT_E_IO;
	ssize_t n = pwrite(fd, host, sizeof(host), offsetof(struct vrt_file_header, hostname));
	close(fd);
	return n == (ssize_t)sizeof(host) ? 0 : VRT_E_IO;
}
