/* SPDX-License-Identifier: MIT */
/*
 * Checks a trace file read by the real reader (format/trace_reader.c, analyzer/model.c)
 * against what tracegen wrote. Header-only, for the unit tests.
 */
#ifndef VRT_TESTS_TRACECHECK_H
#define VRT_TESTS_TRACECHECK_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "trace_reader.h"
#include "tracegen.h"
#include "vt.h"

/* A scratch directory under $TMPDIR (or /tmp), removed by vt_tmpdir_done. */
static char vt_dir[4096];

static inline const char *vt_tmpdir(void)
{
	if (!vt_dir[0]) {
		const char *base = getenv("TMPDIR");
		snprintf(vt_dir, sizeof(vt_dir), "%s/vrt-unit-XXXXXX", base && *base ? base : "/tmp");
		if (!mkdtemp(vt_dir)) {
			perror("mkdtemp");
			exit(2);
		}
	}
	return vt_dir;
}

static inline void vt_tmpdir_done(void)
{
	if (!vt_dir[0] || getenv("VT_KEEP"))
		return;
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", vt_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", vt_dir);
}

static inline void vt_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", vt_tmpdir(), name);
	unlink(buf);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct vt_collect {
	uint64_t *addr;
	size_t n, cap;
	uint64_t bytes;
};

static void vt_collect_item(void *ctx, const struct vrt_item *it)
{
	struct vt_collect *c = ctx;
	if (it->space != VRT_SPACE_ADDR)
		return;
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 256;
		c->addr = realloc(c->addr, c->cap * sizeof(*c->addr));
	}
	c->addr[c->n++] = it->addr;
	c->bytes += it->size;
}

/* Whether exp[i] is the first part of a checkpoint whose every part survived. */
static inline bool vt_whole_checkpoint(const struct vt_chunk **exp, size_t n_exp, size_t i)
{
	const struct vt_chunk *c = exp[i];
	if (c->type != VRT_CHUNK_CHECKPOINT || c->cp_part || !c->cp_parts)
		return false;
	uint32_t parts = 0;
	for (size_t j = i; j < n_exp; j++)
		parts += exp[j]->type == VRT_CHUNK_CHECKPOINT && exp[j]->cp_first == c->seq;
	return parts == c->cp_parts;
}

/*
 * The full comparison: the chunks found are exactly the ones not overwritten (seq, offset,
 * type, seq order), lost history and the replay start are right, every definition is there,
 * the replayed events are exactly the written ones from the replay start on, and the model's
 * live set at the end is the generator's.
 */
static inline void vt_check_trace(const struct vt_gen *g, const char *what)
{
	struct vrt_trace t;
	int rc = vrt_trace_open(&t, g->path);
	VT_CHECKF(rc == 0, "%s: open: %s", what, vrt_strerror(rc));
	if (rc)
		return;
	size_t n_exp = vt_gen_expected_chunks(g, NULL, 0);
	const struct vt_chunk **exp = calloc(n_exp + 1, sizeof(*exp));
	vt_gen_expected_chunks(g, exp, n_exp);

	VT_CHECKF(t.n_chunks == n_exp, "%s: the reader found %zu chunks, %zu expected", what, t.n_chunks, n_exp);
	size_t shown = 0;
	for (size_t i = 0, j = 0; (i < t.n_chunks || j < n_exp) && shown < 8;) {
		const struct vrt_chunk_ref *c = i < t.n_chunks ? &t.chunks[i] : NULL;
		const struct vt_chunk *e = j < n_exp ? exp[j] : NULL;
		if (c && e && c->seq == e->seq) {
			VT_CHECKF(c->offset == e->offset && c->type == e->type,
				  "%s: chunk seq %llu at %llu type %u, expected at %llu type %u", what,
				  (unsigned long long)c->seq, (unsigned long long)c->offset, c->type,
				  (unsigned long long)e->offset, e->type);
			i++, j++;
		} else if (c && (!e || c->seq < e->seq)) {
			const struct vt_chunk *w = vt_gen_chunk_by_seq(g, c->seq);
			VT_CHECKF(false, "%s: accepted chunk seq %llu at offset %llu (type %u) that is %s", what,
				  (unsigned long long)c->seq, (unsigned long long)c->offset, c->type,
				  !w ? "not one the writer wrote" : w->overwritten ? "stale: overwritten by a later lap"
								   : "unexpected");
			i++, shown++;
		} else {
			VT_CHECKF(false, "%s: missed chunk seq %llu at offset %llu (type %u)", what,
				  (unsigned long long)e->seq, (unsigned long long)e->offset, e->type);
			j++, shown++;
		}
	}
	for (size_t i = 1; i < t.n_chunks; i++)
		VT_CHECKF(t.chunks[i - 1].seq < t.chunks[i].seq, "%s: chunks out of seq order at %zu", what, i);
	VT_CHECKF(!t.truncated && !t.corrupt_chunks, "%s: truncated %d, corrupt %llu", what, t.truncated,
		  (unsigned long long)t.corrupt_chunks);
	for (size_t i = 0; i < t.n_chunks; i++) {
		const uint8_t *data;
		size_t len;
		int crc = vrt_trace_chunk(&t, i, &data, &len);
		const struct vt_chunk *w = vt_gen_chunk_by_seq(g, t.chunks[i].seq);
		VT_CHECKF(crc == 0, "%s: chunk seq %llu (type %u, at %llu, %s) does not decode: %s", what,
			  (unsigned long long)t.chunks[i].seq, t.chunks[i].type, (unsigned long long)t.chunks[i].offset,
			  w && w->seq > 1 && vt_gen_chunk_by_seq(g, w->seq - 1) &&
					  vt_gen_chunk_by_seq(g, w->seq - 1)->type == VRT_CHUNK_PADDING
				  ? "right after a wrap"
				  : "not after a wrap",
			  vrt_strerror(crc));
	}

	/* Lost history: replay starts at the first checkpoint that survived whole. */
	bool lost = n_exp && exp[0]->seq != 1;
	VT_CHECKF(t.history_lost == lost, "%s: history_lost %d, expected %d", what, t.history_lost, lost);
	size_t start = 0;
	uint64_t first_event = 0;
	if (lost) {
		while (start < n_exp && !vt_whole_checkpoint(exp, n_exp, start))
			start++;
		first_event = start < n_exp ? exp[start]->cp_events : g->n_ev;
	}
	VT_CHECKF(t.replay_from == start, "%s: replay from chunk %zu, expected %zu", what, t.replay_from, start);

	/* Definitions: all of them, including those whose first-lap TABLES chunk was overwritten. */
	VT_CHECKF(t.tables.n_strings == g->n_strings, "%s: %zu strings, %zu defined", what, t.tables.n_strings,
		  g->n_strings);
	for (size_t i = 1; i < g->n_strings && i < t.tables.n_strings; i++)
		VT_CHECKF(!strcmp(vrt_string(&t, i), g->strings[i]), "%s: string %zu is '%s', not '%s'", what, i,
			  vrt_string(&t, i), g->strings[i]);
	VT_CHECKF(t.tables.n_nodes == g->n_nodes, "%s: %zu nodes, %zu defined", what, t.tables.n_nodes, g->n_nodes);
	for (size_t i = 1; i < g->n_nodes && i < t.tables.n_nodes; i++) {
		const struct vrt_stack_node *nd = &t.tables.nodes[i];
		VT_CHECKF(nd->parent == g->nodes[i].parent && nd->kind == g->nodes[i].kind &&
				  nd->value == g->nodes[i].value,
			  "%s: stack node %zu differs", what, i);
	}

	/* Replay. */
	struct vrt_model m;
	VT_REQUIRE(vrt_model_init(&m) == 0);
	struct vrt_replay rp;
	struct vrt_record r;
	vrt_replay_begin(&rp, &t);
	uint64_t k = first_event, mismatches = 0;
	while (vrt_replay_next(&rp, &r)) {
		vrt_model_apply(&m, &r, NULL);
		if (r.op >= VRT_OP_CP_BEGIN)
			continue;
		if (k >= g->n_ev) {
			k++;
			continue;
		}
		const struct vt_event *e = &g->ev[k++];
		bool same = r.op == e->r.op && r.ts == e->r.ts && r.addr == e->r.addr && r.size == e->r.size &&
			    r.stack == e->r.stack && r.stack2 == e->r.stack2 && r.device == e->r.device &&
			    r.kind == e->r.kind && r.id == e->r.id && r.result == e->r.result && rp.thread == e->thread;
		if (!same && mismatches++ < 3)
			VT_CHECKF(false, "%s: event %llu: op %u ts %llu addr %#llx thread %u, wrote op %u ts %llu addr %#llx thread %u",
				  what, (unsigned long long)(k - 1), r.op, (unsigned long long)r.ts,
				  (unsigned long long)r.addr, rp.thread, e->r.op, (unsigned long long)e->r.ts,
				  (unsigned long long)e->r.addr, e->thread);
	}
	VT_CHECKF(mismatches == 0, "%s: %llu events differ", what, (unsigned long long)mismatches);
	VT_CHECKF(rp.error == 0 && rp.bad_chunks == 0, "%s: replay error %d, bad chunks %llu", what, rp.error,
		  (unsigned long long)rp.bad_chunks);
	VT_CHECKF(k == g->n_ev, "%s: replayed events %llu..%llu, wrote %zu", what, (unsigned long long)first_event,
		  (unsigned long long)k, g->n_ev);

	/* The live set at the end. */
	struct vt_collect got = { 0 };
	vrt_model_each(&m, vt_collect_item, &got);
	uint64_t *want = malloc((g->n_live + 1) * sizeof(*want));
	uint64_t want_bytes = 0;
	for (size_t i = 0; i < g->n_live; i++) {
		want[i] = g->live[i].addr;
		want_bytes += g->live[i].size;
	}
	qsort(want, g->n_live, sizeof(*want), cmp_u64);
	if (got.n)
		qsort(got.addr, got.n, sizeof(*got.addr), cmp_u64);
	VT_CHECKF(got.n == g->n_live && got.bytes == want_bytes &&
			  (!got.n || !memcmp(got.addr, want, got.n * sizeof(*want))),
		  "%s: model has %zu live items (%llu bytes), the writer %zu (%llu bytes)", what, got.n,
		  (unsigned long long)got.bytes, g->n_live, (unsigned long long)want_bytes);
	free(want);
	free(got.addr);
	vrt_model_free(&m);
	free(exp);
	vrt_trace_close(&t);
}

#endif /* VRT_TESTS_TRACECHECK_H */
