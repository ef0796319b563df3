/* SPDX-License-Identifier: MIT */
/*
 * The model: the live set (format/live.c, the rules the preload applies too) and the totals and
 * peaks the reports read, counted from what each record did to it.
 */
#include "model.h"

#include <stdlib.h>
#include <string.h>

#include "vramtrace/error.h"


bool vrt_effect_only_own(const struct vrt_effect *e)
{
	if (e->kind == VRT_EFFECT_NONE)
		return !e->delta;
	bool counted = e->item.space == VRT_SPACE_BLOCK || vrt_item_counted(&e->item);
	int64_t own = !counted ? 0
		      : e->kind == VRT_EFFECT_BORN ? (int64_t)e->item.size
		      : e->kind == VRT_EFFECT_DIED ? -(int64_t)e->item.size
						   : e->delta;
	return e->delta == own;
}

/* it's size changed by delta: the totals of its layer follow, and the effect's delta. */
static void count_totals(struct vrt_model *m, const struct vrt_item *it, int64_t delta)
{
	struct vrt_effect *e = m->effect;
	int d = vrt_device_slot(it->device);
	if (it->space == VRT_SPACE_BLOCK) {
		m->tensors[d] += delta;
		if (m->tensors[d] > m->tensor_peak[d]) {
			m->tensor_peak[d] = m->tensors[d];
			m->tensor_peak_ts[d] = m->last_ts;
			m->tensor_peak_event[d] = m->set.events;
			m->peak_raises++;
		}
		e->delta += delta; /* a birth may have added the ending of an item it replaced */
		e->tensor = true;
		return;
	}
	if (it->space == VRT_SPACE_IMPORT) {
		m->imported[d] += delta;
		return;
	}
	if (it->space == VRT_SPACE_VA) {
		m->reserved_va += delta;
		return;
	}
	if (!vrt_item_counted(it))
		return;
	int64_t *live = &m->live[d][it->kind];
	*live += delta;
	if (*live > m->peak[d][it->kind]) {
		m->peak[d][it->kind] = *live;
		m->peak_ts[d][it->kind] = m->last_ts;
		m->peak_event[d][it->kind] = m->set.events;
		m->peak_raises++;
	}
	e->delta += delta;
}

/* it's size changed by delta, and the items by `items` (1 born, -1 ended, 0 resized): the
 * totals of its layer follow, the effect's delta, and the observer is told. */
static void count(struct vrt_model *m, const struct vrt_item *it, int64_t delta, int items)
{
	count_totals(m, it, delta);
	if (m->observer)
		m->observer->changed(m->observer->ctx, it, delta, items);
}

/* The set's on_end: an item ended; the record's own one is the effect's. */
static void ended(void *ctx, const struct vrt_item *it, enum vrt_live_end why)
{
	struct vrt_model *m = ctx;
	if (why == VRT_END_RELEASED) {
		m->effect->kind = VRT_EFFECT_DIED;
		if (it != &m->effect->item) /* the set unpacks the record's own item there */
			m->effect->item = *it;
	} else {
		m->effect->others_ended++;
	}
	count(m, it, -(int64_t)it->size, -1);
}

int vrt_model_init(struct vrt_model *m)
{
	memset(m, 0, sizeof(*m));
	int rc = vrt_live_init(&m->set);
	m->set.on_end = ended;
	return rc;
}

/* Frees the live set; the totals stay readable. */
void vrt_model_free(struct vrt_model *m) { vrt_live_free(&m->set); }

/* Whether the record under way, a birth, is made for a graph a capture on its thread builds. */
static bool made_for_a_graph(const struct vrt_model *m, const struct vrt_record *r)
{
	for (int i = 0; i < m->n_captures; i++)
		if (m->captures[i].thread == m->thread &&
		    (r->op != VRT_OP_BLOCK_ALLOC || m->captures[i].stream == r->stream))
			return true;
	return false;
}

/* Only while a capture is open, or for a capture's own records: out of the replay's hot path. */
__attribute__((noinline, cold)) static void follow_captures(struct vrt_model *m, const struct vrt_record *r)
{
	if (r->op == VRT_OP_CAPTURE_BEGIN || r->op == VRT_OP_CAPTURE_END) {
		int i = 0;
		while (i < m->n_captures && m->captures[i].stream != r->stream)
			i++;
		if (r->op == VRT_OP_CAPTURE_BEGIN && i == m->n_captures && i < VRT_MAX_CAPTURES)
			m->captures[m->n_captures++] = (struct vrt_capture){ m->thread, r->stream };
		else if (r->op == VRT_OP_CAPTURE_END && i < m->n_captures)
			m->captures[i] = m->captures[--m->n_captures];
	}
	m->set.capturing = made_for_a_graph(m, r);
}

/* Flattened, as vrt_live_apply_into: the one call per record. */
__attribute__((flatten)) void vrt_model_apply(struct vrt_model *m, const struct vrt_record *r, struct vrt_effect *out)
{
	struct vrt_effect scratch, *e = out ? out : &scratch;
	e->kind = VRT_EFFECT_NONE; /* e->item is written with the kind that makes it valid */
	e->delta = 0;
	e->tensor = false;
	e->others_ended = 0;
	bool cp = r->op >= VRT_OP_CP_BEGIN && r->op <= VRT_OP_CP_END;
	if (r->op == VRT_OP_CP_BEGIN && !m->set.events)
		m->last_ts = r->ts;
	if (!cp && r->ts > m->last_ts)
		m->last_ts = r->ts;
	struct vrt_live_change c;
	uint64_t raises = m->peak_raises;
	m->set.ctx = m; /* a model may have been moved (copied whole) since the last record */
	m->effect = e;
	if (__builtin_expect(m->n_captures || r->op == VRT_OP_CAPTURE_BEGIN || r->op == VRT_OP_CAPTURE_END, 0))
		follow_captures(m, r); /* set.capturing stays false while none is open */
	vrt_live_apply_into(&m->set, r, &c, &e->item);
	if (c.outcome == VRT_LIVE_BORN) {
		e->kind = VRT_EFFECT_BORN;
		count(m, &e->item, (int64_t)e->item.size, 1);
		m->any_blocks |= e->item.space == VRT_SPACE_BLOCK;
	} else if (c.outcome == VRT_LIVE_RESIZED) {
		e->kind = VRT_EFFECT_RESIZED;
		count(m, &e->item, c.resize, 0);
	}
	if (r->op == VRT_OP_LOST)
		m->lost += r->id;
	if ((e->kind == VRT_EFFECT_BORN || e->kind == VRT_EFFECT_DIED) && e->item.space == VRT_SPACE_BLOCK)
		m->tensor_events[vrt_device_slot(e->item.device)]++;
	if (m->observer && m->peak_raises != raises)
		m->observer->peak_raised(m->observer->ctx, m);
	m->effect = NULL;
}

/*
 * A block is born by every BLOCK_ALLOC, and by a block's CP_LIVE while seeding. The set skips
 * one only when a block already holds its address, which set any_blocks when it was born; so
 * these two rules give vrt_model_apply's any_blocks exactly.
 */
void vrt_blocks_probe_apply(struct vrt_blocks_probe *p, const struct vrt_record *r)
{
	bool cp = r->op >= VRT_OP_CP_BEGIN && r->op <= VRT_OP_CP_END;
	p->seeding = vrt_live_seeding_after(p->seeding, p->events, r);
	p->events += !cp;
	p->any_blocks |= r->op == VRT_OP_BLOCK_ALLOC ||
			 (r->op == VRT_OP_CP_LIVE && p->seeding && vrt_space_of((uint32_t)r->id2) == VRT_SPACE_BLOCK);
}

void vrt_model_each(const struct vrt_model *m, void (*fn)(void *ctx, const struct vrt_item *it), void *ctx)
{
	vrt_live_each(&m->set, fn, ctx);
}

/* ---- replay ----------------------------------------------------------------------------- */

void vrt_replay_begin(struct vrt_replay *rp, struct vrt_trace *t)
{
	memset(rp, 0, sizeof(*rp));
	rp->trace = t;
	rp->chunk = t->replay_from;
	for (size_t i = t->replay_from; i < t->n_chunks; i++)
		rp->bytes_total += t->chunks[i].stored;
}

static bool replayed(const struct vrt_trace *t, size_t i)
{
	return t->chunks[i].type == VRT_CHUNK_EVENTS || t->chunks[i].type == VRT_CHUNK_CHECKPOINT;
}

/* What stopped a batch's decoding, raised after its records: the end mark, or an error. */
static void batch_stopped(struct vrt_replay *rp, int verdict)
{
	if (verdict == VRT_RECORDS_END_MARK)
		rp->ended = true;
	else if (verdict)
		rp->batch_error = verdict;
}

/* Hands out the records the reader's second thread decoded with the chunk just taken. */
static void take_decoded(struct vrt_replay *rp, const struct vrt_chunk_records *rs)
{
	rp->recs = rs->recs;
	rp->threads = rs->threads;
	rp->n = rs->n;
	rp->at = rs->rest;
	batch_stopped(rp, rs->verdict);
}

static bool next_chunk(struct vrt_replay *rp)
{
	struct vrt_trace *t = rp->trace;
	rp->next = rp->n = 0; /* the last batch is spent: a chunk's records start a new one */
	while (rp->chunk < t->n_chunks) {
		size_t i = rp->chunk++;
		uint8_t type = t->chunks[i].type;
		if (!replayed(t, i))
			continue;
		size_t len;
		const uint8_t *data;
		rp->bytes_done += t->chunks[i].stored;
		int rc = vrt_trace_chunk(t, i, &data, &len);
		const struct vrt_chunk_records *rs = rc ? NULL : vrt_trace_chunk_records(t);
		/* The next chunk is decompressed and decoded on the reader's second thread while this
		 * one is applied here. */
		size_t next = rp->chunk;
		while (next < t->n_chunks && !replayed(t, next))
			next++;
		vrt_trace_chunk_ahead(t, next);
		if (rc == VRT_E_CHANGED || rc == VRT_E_NOMEM || rc == VRT_E_IO) {
			rp->error = rc; /* what the file held is no longer there: nothing after it is sound */
			rp->at.p = rp->at.end = NULL;
			return false;
		}
		if (rc) {
			rp->bad_chunks++;
			continue;
		}
		if (rs) {
			take_decoded(rp, rs);
			return true;
		}
		if (!len)
			continue;
		rp->at = (struct vrt_records_cursor){ .p = data, .end = data + len, .chunk_type = type };
		return true;
	}
	return false;
}

/* Decodes the current chunk's next records into the batch. */
static __attribute__((noinline)) void fill_batch(struct vrt_replay *rp)
{
	int verdict;
	rp->recs = rp->batch;
	rp->threads = rp->batch_threads;
	rp->next = 0;
	rp->n = vrt_records_decode(rp->trace, &rp->at, rp->batch, rp->batch_threads, VRT_REPLAY_BATCH, &verdict);
	batch_stopped(rp, verdict);
}

bool vrt_replay_refill(struct vrt_replay *rp)
{
	for (;;) {
		if (rp->error || rp->ended)
			return false;
		if (rp->batch_error) {
			rp->error = rp->batch_error;
			return false;
		}
		if (!rp->at.p || rp->at.p >= rp->at.end) {
			if (!next_chunk(rp))
				return false;
			if (rp->n)
				return true;
			continue;
		}
		fill_batch(rp);
		if (rp->n)
			return true;
	}
}

double vrt_ts_seconds(const struct vrt_trace *t, uint64_t ts) { return (double)ts * t->hdr.ts_unit_ns / 1e9; }

const char *vrt_kind_name(uint32_t kind)
{
	switch (kind) {
	case VRT_KIND_DEVICE: return "device";
	case VRT_KIND_HOST_PINNED: return "host_pinned";
	case VRT_KIND_MANAGED: return "managed";
	case VRT_KIND_ARRAY: return "array";
	}
	return "?";
}

const char *vrt_api_name(uint32_t api)
{
	switch (api) {
#define VRT_API_CASE(id, value, name) \
	case value:                   \
		return name;
		VRT_APIS(VRT_API_CASE)
#undef VRT_API_CASE
	}
	return "?";
}

const char *vrt_op_name(uint32_t op)
{
	static const char *const names[VRT_OP_LAST] = {
		[VRT_OP_THREAD] = "thread", [VRT_OP_ALLOC] = "alloc", [VRT_OP_FREE] = "free",
		[VRT_OP_FAILED] = "failed", [VRT_OP_PHYS_CREATE] = "phys_create", [VRT_OP_PHYS_RELEASE] = "phys_release",
		[VRT_OP_MAP] = "map", [VRT_OP_UNMAP] = "unmap", [VRT_OP_VA_RESERVE] = "va_reserve",
		[VRT_OP_VA_FREE] = "va_free", [VRT_OP_IMPORT] = "import", [VRT_OP_IMPORT_CLOSE] = "import_close",
		[VRT_OP_BLOCK_ALLOC] = "block_alloc", [VRT_OP_BLOCK_FREE] = "block_free", [VRT_OP_OOM] = "oom",
		[VRT_OP_MARK] = "mark", [VRT_OP_PHASE_ENTER] = "phase_enter", [VRT_OP_PHASE_EXIT] = "phase_exit",
		[VRT_OP_LOST] = "lost", [VRT_OP_MODE] = "mode", [VRT_OP_SEED] = "seed", [VRT_OP_CONTEXT] = "context",
		[VRT_OP_BLOCK_SIZE] = "block_size", [VRT_OP_WALK] = "walk", [VRT_OP_OWNER] = "owner",
		[VRT_OP_OOM_LIMITS] = "oom_limits", [VRT_OP_EXITING] = "exiting",
		[VRT_OP_CAPTURE_BEGIN] = "capture_begin", [VRT_OP_CAPTURE_END] = "capture_end", [VRT_OP_STRING] = "string", [VRT_OP_MODULE] = "module",
		[VRT_OP_SYMBOL] = "symbol", [VRT_OP_PYCODE] = "pycode", [VRT_OP_PYFRAME] = "pyframe",
		[VRT_OP_STACK] = "stack", [VRT_OP_THREAD_INFO] = "thread_info", [VRT_OP_INFO] = "info",
		[VRT_OP_CP_BEGIN] = "checkpoint", [VRT_OP_CP_LIVE] = "cp_live", [VRT_OP_CP_PHASE] = "cp_phase",
		[VRT_OP_CP_END] = "cp_end",
	};
	return op < VRT_OP_LAST && names[op] ? names[op] : "?";
}
