/* SPDX-License-Identifier: MIT */
/*
 * PyTorch's memory snapshot (torch.cuda.memory._snapshot(), pickled), written from a trace, for
 * pytorch.org/memory_viz and torch.cuda._memory_viz:
 *  - "segments": the caching allocator's segments live at the end, each with its blocks tiling
 *    it: the tensors live in it ("active_allocated") and the gaps between them ("inactive"), as
 *    PyTorch lays them out. A trace without tensor events has a segment per CUDA allocation,
 *    wholly allocated. Expandable segments are the runs of mappings of one reservation.
 *  - "device_traces": per device, PyTorch's trace actions in order: alloc, free_requested +
 *    free_completed, segment_alloc/free (segment_map/unmap for expandable segments), oom.
 * Frames are written once and shared through the pickle memo, as Python's own pickler does: a
 * stack's frame list, and each distinct frame, is one object however often it appears.
 * "The end" is where the interpreter's teardown began when the trace says (EXITING), as in
 * report: what teardown frees, the program did not, and a snapshot the program took of itself
 * sees the same state.
 */
#include "memory_viz.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model.h"
#include "pass.h"
#include "pickle.h"
#include "report_common.h"
#include "sites.h"
#include "stacks.h"

struct frame_key {
	const char *function, *file;
	int line;
	uint32_t memo; /* 0: empty slot */
};

struct viz {
	const struct vrt_trace *t;
	FILE *out;
	uint32_t next_memo;
	uint32_t *stack_memo; /* by stack id: the memo index of its frame list + 1, 0: not written */
	size_t stack_cap;
	struct frame_key *frames; /* open addressing by (function, file, line) */
	size_t frames_cap, frames_used;
	bool blocks;
};

/* ---- frames, shared through the memo ---------------------------------------------------- */

static size_t frame_home(const struct viz *v, const struct frame_key *k)
{
	uint64_t h = ((uint64_t)(uintptr_t)k->function * 31 + (uint64_t)(uintptr_t)k->file) * 0x9e3779b97f4a7c15ull ^
		     (uint64_t)k->line;
	return (size_t)(h ^ (h >> 29)) & (v->frames_cap - 1);
}

static bool frames_grow(struct viz *v)
{
	size_t cap = v->frames_cap ? v->frames_cap * 2 : 4096;
	struct frame_key *bigger = calloc(cap, sizeof(*bigger));
	if (!bigger)
		return false;
	struct frame_key *old = v->frames;
	size_t old_cap = v->frames_cap;
	v->frames = bigger;
	v->frames_cap = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i].memo) {
			size_t j = frame_home(v, &old[i]);
			while (bigger[j].memo)
				j = (j + 1) & (cap - 1);
			bigger[j] = old[i];
		}
	free(old);
	return true;
}

/* The frame's memo slot: found (memo set), or a new one to fill (memo 0), or NULL. */
static struct frame_key *frame_slot(struct viz *v, const struct frame_key *k)
{
	if ((v->frames_used + 1) * 2 > v->frames_cap && !frames_grow(v))
		return NULL;
	size_t i = frame_home(v, k);
	for (; v->frames[i].memo; i = (i + 1) & (v->frames_cap - 1))
		if (v->frames[i].function == k->function && v->frames[i].file == k->file && v->frames[i].line == k->line)
			return &v->frames[i];
	return &v->frames[i];
}

static void pk_frame(struct viz *v, const struct vrt_frame *f)
{
	struct frame_key k = { f->function, f->type == VRT_FT_PYTHON ? f->file : f->module, f->line, 0 };
	struct frame_key *slot = frame_slot(v, &k);
	if (slot && slot->memo) {
		pk_get(v->out, slot->memo - 1);
		return;
	}
	pk_dict_begin(v->out);
	pk_key_str(v->out, "filename", k.file);
	pk_key_int(v->out, "line", f->line);
	pk_key_str(v->out, "name", f->function);
	pk_dict_end(v->out);
	if (slot) {
		k.memo = ++v->next_memo;
		*slot = k;
		v->frames_used++;
		pk_put(v->out, k.memo - 1);
	}
}

static void pk_frames(struct viz *v, uint32_t stack)
{
	if (stack >= v->stack_cap) {
		size_t cap = v->t->tables.n_nodes + 1 > stack + 1 ? v->t->tables.n_nodes + 1 : stack + 1;
		uint32_t *m = realloc(v->stack_memo, cap * sizeof(*m));
		if (m) {
			memset(m + v->stack_cap, 0, (cap - v->stack_cap) * sizeof(*m));
			v->stack_memo = m;
			v->stack_cap = cap;
		}
	}
	bool memo = stack < v->stack_cap;
	if (memo && v->stack_memo[stack]) {
		pk_get(v->out, v->stack_memo[stack] - 1);
		return;
	}
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = stack ? vrt_stack_frames(v->t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES) : 0;
	pk_list_begin(v->out);
	for (int i = 0; i < n; i++)
		pk_frame(v, &frames[i]);
	pk_list_end(v->out);
	if (memo) {
		v->stack_memo[stack] = ++v->next_memo;
		pk_put(v->out, v->next_memo - 1);
	}
}

/* ---- device traces ------------------------------------------------------------------------ */

static bool torch_segment(const struct viz *v, const struct vrt_item *it)
{
	return it->kind == VRT_KIND_DEVICE && vrt_item_counted(it) && vrt_stack_is_torch_segment(v->t, it->stack);
}

/* What memory_viz calls the change one record made; NULL: nothing it draws. With tensors it
 * draws the allocator (segments and blocks), without them every device allocation as a block. */
static const char *action_of(const struct viz *v, const struct vrt_record *r, const struct vrt_effect *e)
{
	if (r->op == VRT_OP_OOM)
		return "oom";
	if (e->kind != VRT_EFFECT_BORN && e->kind != VRT_EFFECT_DIED)
		return NULL;
	const struct vrt_item *it = &e->item;
	bool born = e->kind == VRT_EFFECT_BORN;
	if (it->space == VRT_SPACE_BLOCK)
		return born ? "alloc" : "free_completed";
	if (!v->blocks)
		return it->kind == VRT_KIND_DEVICE && vrt_item_counted(it) ? (born ? "alloc" : "free_completed") : NULL;
	if (it->space == VRT_SPACE_MAP)
		return it->kind == VRT_KIND_DEVICE ? (born ? "segment_map" : "segment_unmap") : NULL;
	return torch_segment(v, it) ? (born ? "segment_alloc" : "segment_free") : NULL;
}

static void pk_entry(struct viz *v, const char *action, uint64_t addr, uint64_t size, uint64_t stream, uint64_t ts,
		     uint32_t stack, const uint64_t *device_free)
{
	pk_dict_begin(v->out);
	pk_key_str(v->out, "action", action);
	pk_key_int(v->out, "addr", (int64_t)addr);
	pk_key_int(v->out, "size", (int64_t)size);
	pk_key_int(v->out, "stream", (int64_t)stream);
	pk_key_int(v->out, "time_us", (int64_t)(vrt_ts_seconds(v->t, ts) * 1e6));
	if (device_free)
		pk_key_int(v->out, "device_free", (int64_t)*device_free);
	pk_str(v->out, "frames");
	pk_frames(v, stack);
	pk_dict_end(v->out);
}

/* The entries of one record; returns how many. A tensor's real size (BLOCK_SIZE) replaces its
 * estimate: memory_viz has no resize, so the estimate is freed and the real size allocated. */
static int entries(struct viz *v, const struct vrt_record *r, const struct vrt_effect *e)
{
	const struct vrt_item *it = &e->item;
	if (e->kind == VRT_EFFECT_RESIZED && it->space == VRT_SPACE_BLOCK) {
		pk_entry(v, "free_completed", it->addr, it->size - (uint64_t)e->delta, it->stream, r->ts, it->stack, NULL);
		pk_entry(v, "alloc", it->addr, it->size, it->stream, r->ts, it->stack, NULL);
		return 2;
	}
	const char *action = action_of(v, r, e);
	if (!action)
		return 0;
	if (r->op == VRT_OP_OOM) {
		pk_entry(v, action, 0, r->size, r->stream, r->ts, r->stack, &r->aux);
		return 1;
	}
	bool born = e->kind == VRT_EFFECT_BORN;
	if (!born && it->space == VRT_SPACE_BLOCK) { /* PyTorch traces both halves of a free */
		pk_entry(v, "free_requested", it->addr, it->size, it->stream, r->ts, it->stack, NULL);
		pk_entry(v, action, it->addr, it->size, it->stream, r->ts, it->stack, NULL);
		return 2;
	}
	pk_entry(v, action, it->addr, it->size, it->stream, born ? it->ts : r->ts, it->stack, NULL);
	return 1;
}

/* One device's entries: a replay of the whole trace. With end, a replay that reached the end
 * hands its model over (the state at the end, for the segments): one live set at a time. */
static int device_trace(struct viz *v, struct vrt_trace *t, int dev, uint64_t max_events, bool quiet,
			struct vrt_model *end)
{
	struct vrt_model m;
	if (vrt_model_init(&m))
		return vrt_fail(VRT_E_NOMEM, "export");
	struct vrt_pass p;
	struct vrt_record r;
	struct vrt_effect e;
	uint64_t written = 0;
	pk_list_begin(v->out);
	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .label = "export", .quiet = quiet, .model = &m,
						      .stop_at_teardown = true });
	while (written + 2 <= max_events && vrt_pass_next(&p, &r, &e)) {
		int d = r.op == VRT_OP_OOM ? r.device : e.kind == VRT_EFFECT_NONE ? -1 : e.item.device;
		if (d == dev)
			written += (uint64_t)entries(v, &r, &e);
	}
	pk_list_end(v->out);
	int rc = vrt_pass_close(&p);
	bool whole = written + 2 <= max_events && !rc;
	if (end && whole) {
		vrt_model_free(end);
		*end = m;
	} else {
		vrt_model_free(&m);
	}
	if (written + 2 > max_events && !quiet)
		fprintf(stderr, "vramtrace: device %d: only the first %llu events exported (--max-events)\n", dev,
			(unsigned long long)written);
	return rc;
}

/* ---- segments at the end -------------------------------------------------------------------- */

struct piece {
	uint64_t addr, size, requested, stream;
	uint32_t stack;
	int16_t device;
	bool expandable;
};

struct pieces {
	struct piece *v;
	size_t n, cap;
};

static void pieces_add(struct pieces *p, const struct piece *x)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 256;
		struct piece *bigger = realloc(p->v, cap * sizeof(*bigger));
		if (!bigger)
			return;
		p->v = bigger;
		p->cap = cap;
	}
	p->v[p->n++] = *x;
}

struct live {
	const struct viz *v;
	struct pieces segments, blocks;
};

static void collect(void *ctx, const struct vrt_item *it)
{
	struct live *l = ctx;
	struct piece p = { it->addr, it->size, it->size, it->stream, it->stack, it->device < 0 ? 0 : it->device, false };
	if (it->space == VRT_SPACE_BLOCK) {
		p.requested = it->aux ? it->aux : it->size;
		pieces_add(&l->blocks, &p);
	} else if (!l->v->blocks ? it->kind == VRT_KIND_DEVICE && vrt_item_counted(it) : torch_segment(l->v, it)) {
		pieces_add(&l->segments, &p);
	} else if (l->v->blocks && it->space == VRT_SPACE_MAP && it->kind == VRT_KIND_DEVICE) {
		p.expandable = true;
		pieces_add(&l->segments, &p);
	}
}

static int by_place(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;
	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Mappings that follow one another make one expandable segment, as PyTorch's do. */
static void merge_mappings(struct pieces *s)
{
	size_t out = 0;
	for (size_t i = 0; i < s->n; i++) {
		struct piece *last = out ? &s->v[out - 1] : NULL;
		if (last && last->expandable && s->v[i].expandable && last->device == s->v[i].device &&
		    last->addr + last->size == s->v[i].addr)
			last->size += s->v[i].size;
		else
			s->v[out++] = s->v[i];
	}
	s->n = out;
}

static void pk_block(struct viz *v, uint64_t addr, uint64_t size, uint64_t requested, const char *state, uint32_t stack)
{
	pk_dict_begin(v->out);
	pk_key_int(v->out, "address", (int64_t)addr);
	pk_key_int(v->out, "size", (int64_t)size);
	pk_key_int(v->out, "requested_size", (int64_t)requested);
	pk_key_str(v->out, "state", state);
	pk_str(v->out, "frames");
	pk_frames(v, stack);
	pk_dict_end(v->out);
}

/* One segment, its blocks from b (sorted; *next: the first not yet placed) and the gaps between
 * them. Returns the tensors' bytes in it. */
static void pk_segment(struct viz *v, const struct piece *s, const struct pieces *b, size_t *next)
{
	size_t first = *next, end = first;
	while (end < b->n && b->v[end].device == s->device && b->v[end].addr < s->addr + s->size)
		end++;
	int64_t allocated = 0, requested = 0;
	for (size_t i = first; i < end; i++) {
		allocated += (int64_t)b->v[i].size;
		requested += (int64_t)b->v[i].requested;
	}
	if (!v->blocks)
		allocated = requested = (int64_t)s->size;
	pk_dict_begin(v->out);
	pk_key_int(v->out, "device", s->device);
	pk_key_int(v->out, "address", (int64_t)s->addr);
	pk_key_int(v->out, "total_size", (int64_t)s->size);
	pk_key_int(v->out, "allocated_size", allocated);
	pk_key_int(v->out, "active_size", allocated);
	pk_key_int(v->out, "requested_size", requested);
	pk_key_int(v->out, "stream", (int64_t)s->stream);
	pk_key_str(v->out, "segment_type", s->size <= (2u << 20) && !s->expandable ? "small" : "large");
	pk_str(v->out, "segment_pool_id");
	pk_tuple2_int(v->out, 0, 0);
	pk_str(v->out, "is_expandable");
	pk_bool(v->out, s->expandable);
	pk_str(v->out, "frames");
	pk_frames(v, s->stack);
	pk_str(v->out, "blocks");
	pk_list_begin(v->out);
	if (!v->blocks) {
		pk_block(v, s->addr, s->size, s->size, "active_allocated", s->stack);
	} else {
		uint64_t at = s->addr;
		for (size_t i = first; i < end; i++) {
			if (b->v[i].addr > at)
				pk_block(v, at, b->v[i].addr - at, 0, "inactive", 0);
			pk_block(v, b->v[i].addr, b->v[i].size, b->v[i].requested, "active_allocated", b->v[i].stack);
			at = b->v[i].addr + b->v[i].size;
		}
		if (at < s->addr + s->size)
			pk_block(v, at, s->addr + s->size - at, 0, "inactive", 0);
	}
	pk_list_end(v->out);
	pk_dict_end(v->out);
	*next = end;
}

/* Segments sorted by place, each with the blocks inside it; returns the tensors that lie in no
 * recorded segment (their segment was made before tracing began, say). */
static size_t pk_segments(struct viz *v, struct live *l)
{
	if (l->segments.n)
		qsort(l->segments.v, l->segments.n, sizeof(struct piece), by_place);
	if (l->blocks.n)
		qsort(l->blocks.v, l->blocks.n, sizeof(struct piece), by_place);
	merge_mappings(&l->segments);
	size_t next = 0, orphans = 0;
	pk_list_begin(v->out);
	for (size_t i = 0; i < l->segments.n; i++) {
		const struct piece *s = &l->segments.v[i];
		while (next < l->blocks.n && by_place(&l->blocks.v[next], s) < 0) { /* before this segment */
			orphans++;
			next++;
		}
		pk_segment(v, s, &l->blocks, &next);
	}
	pk_list_end(v->out);
	return orphans + (l->blocks.n - next);
}

/* ---- the snapshot ---------------------------------------------------------------------------- */

/* One pass for the state at the end and the devices memory_viz has entries for. */
static int survey(struct viz *v, struct vrt_trace *t, struct vrt_model *end, uint64_t *devices, bool quiet)
{
	struct vrt_pass p;
	struct vrt_record r;
	struct vrt_effect e;
	*devices = 0;
	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .label = "export", .quiet = quiet, .model = end,
						      .stop_at_teardown = true });
	while (vrt_pass_next(&p, &r, &e)) {
		int d = r.op == VRT_OP_OOM ? r.device : e.kind == VRT_EFFECT_NONE ? -1 : e.item.device;
		if (d >= 0 && d < 64 && (r.op == VRT_OP_OOM || e.kind == VRT_EFFECT_BORN))
			*devices |= 1ull << d;
	}
	return vrt_pass_close(&p);
}

/* The state at the end, when no device trace replayed that far. */
static int end_state(struct vrt_trace *t, struct vrt_model *end, bool have, bool quiet)
{
	if (have)
		return 0;
	struct vrt_pass p;
	struct vrt_record r;
	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .label = "export", .quiet = quiet, .model = end,
						      .stop_at_teardown = true });
	while (vrt_pass_next(&p, &r, NULL))
		;
	return vrt_pass_close(&p);
}

int vrt_export_memory_viz(struct vrt_trace *t, FILE *out, uint64_t max_events, bool quiet)
{
	struct vrt_model end; /* the survey's live set, then the end's: one at a time */
	if (vrt_model_init(&end))
		return vrt_fail(VRT_E_NOMEM, "export");
	struct viz v = { .t = t, .out = out };
	uint64_t devices = 0;
	int rc = survey(&v, t, &end, &devices, quiet);
	v.blocks = end.any_blocks;
	vrt_model_free(&end);
	if (!rc && (rc = vrt_model_init(&end)))
		rc = vrt_fail(VRT_E_NOMEM, "export");
	bool have_end = false;
	if (!rc) {
		pk_begin(out);
		pk_dict_begin(out);
		pk_str(out, "device_traces");
		pk_list_begin(out);
		/* One list per device up to the highest one used (memory_viz indexes them by device). */
		for (int dev = 0; !rc && dev < 64 && (devices >> dev); dev++) {
			bool last = dev + 1 >= 64 || !(devices >> (dev + 1));
			rc = device_trace(&v, t, dev, max_events, quiet, last ? &end : NULL);
			have_end = have_end || last;
		}
		if (!devices) { /* one empty list: device 0 */
			pk_list_begin(out);
			pk_list_end(out);
		}
		pk_list_end(out);
	}
	if (!rc)
		rc = end_state(t, &end, have_end && end.set.events, quiet);
	if (!rc) {
		struct live l = { .v = &v };
		vrt_model_each(&end, collect, &l);
		pk_str(out, "segments");
		size_t orphans = pk_segments(&v, &l);
		pk_dict_end(out);
		pk_end(out);
		if (orphans && !quiet)
			fprintf(stderr, "vramtrace: %zu tensors live at the end lie in no segment the trace recorded (made "
					"before tracing began); they are left out of \"segments\"\n", orphans);
		free(l.segments.v);
		free(l.blocks.v);
	}
	free(v.stack_memo);
	free(v.frames);
	vrt_model_free(&end);
	return rc;
}
