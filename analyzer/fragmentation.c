/* SPDX-License-Identifier: MIT */
/* The allocator's segments and free ranges over time (fragmentation.h). */
#include "fragmentation.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sites.h"

#define MAPPED_TAG 1 /* free ranges and segments of mapped pages: touching ones are one segment */

struct vrt_range_node {
	uint64_t start, end, tag, longest; /* longest: the longest range in this node's subtree */
	uint32_t left, right, prio;
};

/* ---- the range set ------------------------------------------------------------------------- */

void vrt_ranges_init(struct vrt_ranges *s, uint32_t seed)
{
	memset(s, 0, sizeof(*s));
	s->seed = seed ? seed : 0x9e3779b9u;
}

void vrt_ranges_free(struct vrt_ranges *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

static uint32_t next_prio(struct vrt_ranges *s)
{
	s->seed ^= s->seed << 13;
	s->seed ^= s->seed >> 17;
	s->seed ^= s->seed << 5;
	return s->seed;
}

static void update(struct vrt_ranges *s, uint32_t x)
{
	struct vrt_range_node *n = &s->v[x];
	uint64_t best = n->end - n->start;
	if (n->left && s->v[n->left].longest > best)
		best = s->v[n->left].longest;
	if (n->right && s->v[n->right].longest > best)
		best = s->v[n->right].longest;
	n->longest = best;
}

/* Splits x into the nodes starting before key (*l) and the others (*r). */
static void split(struct vrt_ranges *s, uint32_t x, uint64_t key, uint32_t *l, uint32_t *r)
{
	if (!x) {
		*l = *r = 0;
		return;
	}
	if (s->v[x].start < key) {
		split(s, s->v[x].right, key, &s->v[x].right, r);
		*l = x;
	} else {
		split(s, s->v[x].left, key, l, &s->v[x].left);
		*r = x;
	}
	update(s, x);
}

/* Every node of a before every node of b. */
static uint32_t merge(struct vrt_ranges *s, uint32_t a, uint32_t b)
{
	if (!a || !b)
		return a ? a : b;
	if (s->v[a].prio > s->v[b].prio) {
		s->v[a].right = merge(s, s->v[a].right, b);
		update(s, a);
		return a;
	}
	s->v[b].left = merge(s, a, s->v[b].left);
	update(s, b);
	return b;
}

static uint32_t new_node(struct vrt_ranges *s, uint64_t start, uint64_t end, uint64_t tag)
{
	uint32_t x = s->free_list;
	if (x) {
		s->free_list = s->v[x].left;
	} else {
		if (s->n + 1 >= s->cap) {
			uint32_t cap = s->cap ? s->cap * 2 : 64;
			struct vrt_range_node *v = realloc(s->v, (size_t)cap * sizeof(*v));
			if (!v) {
				s->error = VRT_E_NOMEM;
				return 0;
			}
			s->v = v;
			s->cap = cap;
		}
		x = ++s->n;
	}
	s->v[x] = (struct vrt_range_node){ start, end, tag, end - start, 0, 0, next_prio(s) };
	return x;
}

static void drop_node(struct vrt_ranges *s, uint32_t x)
{
	s->v[x].left = s->free_list;
	s->free_list = x;
}

static void insert_node(struct vrt_ranges *s, uint32_t x)
{
	uint32_t l, r;
	split(s, s->root, s->v[x].start, &l, &r);
	s->root = merge(s, merge(s, l, x), r);
}

/* Takes the node starting at start out of the tree (it must be there). */
static void unlink_at(struct vrt_ranges *s, uint64_t start)
{
	uint32_t l, m, r;
	split(s, s->root, start, &l, &r);
	split(s, r, start + 1, &m, &r);
	if (m)
		drop_node(s, m);
	s->root = merge(s, l, r);
}

/* The node with the highest start <= at, or 0. */
static uint32_t at_or_before(const struct vrt_ranges *s, uint64_t at)
{
	uint32_t x = s->root, best = 0;
	while (x) {
		if (s->v[x].start <= at) {
			best = x;
			x = s->v[x].right;
		} else {
			x = s->v[x].left;
		}
	}
	return best;
}

/* The node with the lowest start >= at, or 0. */
static uint32_t at_or_after(const struct vrt_ranges *s, uint64_t at)
{
	uint32_t x = s->root, best = 0;
	while (x) {
		if (s->v[x].start >= at) {
			best = x;
			x = s->v[x].left;
		} else {
			x = s->v[x].right;
		}
	}
	return best;
}

void vrt_ranges_add(struct vrt_ranges *s, uint64_t start, uint64_t end, uint64_t tag)
{
	if (end <= start)
		return;
	uint32_t before = start ? at_or_before(s, start - 1) : 0;
	if (before && s->v[before].end == start && s->v[before].tag == tag) {
		start = s->v[before].start;
		unlink_at(s, start);
	}
	uint32_t after = at_or_after(s, end);
	if (after && s->v[after].start == end && s->v[after].tag == tag) {
		uint64_t e = s->v[after].end;
		unlink_at(s, end);
		end = e;
	}
	uint32_t x = new_node(s, start, end, tag);
	if (x)
		insert_node(s, x);
}

uint64_t vrt_ranges_remove(struct vrt_ranges *s, uint64_t start, uint64_t end)
{
	uint64_t removed = 0;
	if (end <= start)
		return 0;
	uint32_t x = at_or_before(s, start);
	if (!x || s->v[x].end <= start)
		x = at_or_after(s, start);
	while (x && s->v[x].start < end) {
		struct vrt_range_node n = s->v[x];
		unlink_at(s, n.start);
		uint64_t lo = n.start > start ? n.start : start, hi = n.end < end ? n.end : end;
		removed += hi - lo;
		/* What lies outside [start, end) stays, with its tag. */
		uint32_t keep;
		if (n.start < start && (keep = new_node(s, n.start, start, n.tag)))
			insert_node(s, keep);
		if (n.end > end && (keep = new_node(s, end, n.end, n.tag)))
			insert_node(s, keep);
		x = at_or_after(s, hi);
	}
	return removed;
}

bool vrt_ranges_holding(const struct vrt_ranges *s, uint64_t start, uint64_t end, uint64_t *tag)
{
	uint32_t x = at_or_before(s, start);
	if (!x || s->v[x].end < end || end < start)
		return false;
	*tag = s->v[x].tag;
	return true;
}

bool vrt_ranges_overlap(const struct vrt_ranges *s, uint64_t start, uint64_t end)
{
	uint32_t x = at_or_before(s, start);
	if (x && s->v[x].end > start)
		return true;
	x = at_or_after(s, start);
	return x && s->v[x].start < end;
}

uint64_t vrt_ranges_longest(const struct vrt_ranges *s) { return s->root ? s->v[s->root].longest : 0; }

/* ---- the allocator's state ----------------------------------------------------------------- */

int vrt_frag_init(struct vrt_frag *f, const struct vrt_trace *t, int buckets_cap)
{
	memset(f, 0, sizeof(*f));
	f->t = t;
	f->cap = buckets_cap;
	f->cur_b = -1;
	return 0;
}

void vrt_frag_free(struct vrt_frag *f)
{
	for (int i = 0; i < f->n_dev; i++) {
		vrt_ranges_free(&f->dev[i].segments);
		vrt_ranges_free(&f->dev[i].free);
		free(f->dev[i].b);
	}
	f->n_dev = 0;
}

static struct vrt_frag_device *device_of(struct vrt_frag *f, int device)
{
	int slot = vrt_device_slot(device);
	for (int i = 0; i < f->n_dev; i++)
		if (f->dev[i].slot == slot)
			return &f->dev[i];
	if (f->n_dev == VRT_FRAG_DEVICES) {
		f->devices_dropped++;
		return NULL;
	}
	struct vrt_frag_point *b = malloc((size_t)f->cap * sizeof(*b));
	if (!b) {
		f->error = VRT_E_NOMEM;
		return NULL;
	}
	for (int i = 0; i < f->cap; i++)
		b[i] = (struct vrt_frag_point){ 0, -1, 0, 0 };
	struct vrt_frag_device *d = &f->dev[f->n_dev++];
	*d = (struct vrt_frag_device){ .slot = slot, .b = b };
	vrt_ranges_init(&d->segments, 0x2545f491u + (uint32_t)slot);
	vrt_ranges_init(&d->free, 0x68e31da4u + (uint32_t)slot);
	return d;
}

/* Counted in reserved: what the allocator holds (a cudaMalloc'd segment, a physical handle). */
static bool reserved_item(const struct vrt_frag *f, const struct vrt_item *it)
{
	return it->space != VRT_SPACE_BLOCK && vrt_item_counted(it) && it->kind == VRT_KIND_DEVICE &&
	       vrt_stack_is_torch_segment(f->t, it->stack);
}

/* A segment's address range: a cudaMalloc'd segment, or mapped pages of an expandable one. */
static bool segment_item(const struct vrt_frag *f, const struct vrt_item *it)
{
	if (it->kind != VRT_KIND_DEVICE || !vrt_stack_is_torch_segment(f->t, it->stack))
		return false;
	return it->space == VRT_SPACE_MAP || (it->space == VRT_SPACE_ADDR && vrt_item_counted(it));
}

static void segment_born(struct vrt_frag *f, struct vrt_frag_device *d, const struct vrt_item *it)
{
	uint64_t tag = it->space == VRT_SPACE_MAP ? MAPPED_TAG : it->addr;
	d->expandable = d->expandable || it->space == VRT_SPACE_MAP;
	f->any_segment = true;
	vrt_ranges_add(&d->segments, it->addr, it->addr + it->size, tag);
	vrt_ranges_add(&d->free, it->addr, it->addr + it->size, tag);
}

static void segment_died(struct vrt_frag_device *d, const struct vrt_item *it)
{
	vrt_ranges_remove(&d->segments, it->addr, it->addr + it->size);
	uint64_t was_free = vrt_ranges_remove(&d->free, it->addr, it->addr + it->size);
	/* Blocks still in it (a damaged trace) now lie in no segment. */
	d->now.outside += (int64_t)(it->size - was_free);
}

static void block_born(struct vrt_frag_device *d, uint64_t addr, uint64_t size)
{
	uint64_t tag;
	if (vrt_ranges_holding(&d->free, addr, addr + size, &tag))
		vrt_ranges_remove(&d->free, addr, addr + size);
	else
		d->now.outside += (int64_t)size;
}

static void block_died(struct vrt_frag_device *d, uint64_t addr, uint64_t size)
{
	uint64_t tag;
	if (vrt_ranges_holding(&d->segments, addr, addr + size, &tag) && !vrt_ranges_overlap(&d->free, addr, addr + size))
		vrt_ranges_add(&d->free, addr, addr + size, tag);
	else
		d->now.outside = d->now.outside > (int64_t)size ? d->now.outside - (int64_t)size : 0;
}

static void refresh(struct vrt_frag_device *d, const struct vrt_model *m)
{
	d->now.allocated = m->tensors[d->slot];
	d->now.largest_free = (int64_t)vrt_ranges_longest(&d->free);
	if (d->now.reserved > d->peak_reserved)
		d->peak_reserved = d->now.reserved;
}

struct rebuild_ctx {
	struct vrt_frag *f;
	bool blocks; /* the second walk: blocks, once every segment is in */
};

static void rebuild_visit(void *ctx, const struct vrt_item *it)
{
	struct rebuild_ctx *c = ctx;
	bool block = it->space == VRT_SPACE_BLOCK;
	if (c->blocks != block || (!block && !reserved_item(c->f, it) && !segment_item(c->f, it)))
		return;
	struct vrt_frag_device *d = device_of(c->f, it->device);
	if (!d)
		return;
	if (block) {
		block_born(d, it->addr, it->size);
		return;
	}
	if (reserved_item(c->f, it))
		d->now.reserved += (int64_t)it->size;
	if (segment_item(c->f, it))
		segment_born(c->f, d, it);
}

/* The state from the model's live set: after a checkpoint or seeds, or a record that changed
 * more than the item its effect names (a context reset, an unmap that ended a handle). */
static void rebuild(struct vrt_frag *f, const struct vrt_model *m)
{
	for (int i = 0; i < f->n_dev; i++) {
		struct vrt_frag_device *d = &f->dev[i];
		vrt_ranges_free(&d->segments);
		vrt_ranges_free(&d->free);
		vrt_ranges_init(&d->segments, 0x2545f491u + (uint32_t)d->slot);
		vrt_ranges_init(&d->free, 0x68e31da4u + (uint32_t)d->slot);
		d->now.reserved = d->now.outside = 0;
	}
	struct rebuild_ctx c = { f, false };
	vrt_model_each(m, rebuild_visit, &c);
	c.blocks = true;
	vrt_model_each(m, rebuild_visit, &c);
	for (int i = 0; i < f->n_dev; i++)
		refresh(&f->dev[i], m);
	f->rebuilds++;
	f->dirty = false;
}

static void apply_effect(struct vrt_frag *f, const struct vrt_model *m, const struct vrt_effect *e)
{
	const struct vrt_item *it = &e->item;
	bool block = it->space == VRT_SPACE_BLOCK, reserved = !block && reserved_item(f, it);
	bool segment = !block && segment_item(f, it);
	if (!block && !reserved && !segment)
		return;
	struct vrt_frag_device *d = device_of(f, it->device);
	if (!d)
		return;
	if (block) {
		uint64_t old = e->kind == VRT_EFFECT_RESIZED ? it->size - (uint64_t)e->delta : it->size;
		if (e->kind != VRT_EFFECT_BORN)
			block_died(d, it->addr, old);
		if (e->kind != VRT_EFFECT_DIED)
			block_born(d, it->addr, it->size);
	} else {
		if (reserved)
			d->now.reserved += e->kind == VRT_EFFECT_BORN ? (int64_t)it->size
					   : e->kind == VRT_EFFECT_DIED ? -(int64_t)it->size
									: e->delta;
		if (segment && e->kind == VRT_EFFECT_BORN)
			segment_born(f, d, it);
		else if (segment && e->kind == VRT_EFFECT_DIED)
			segment_died(d, it);
	}
	refresh(d, m);
}

static void note_oom(struct vrt_frag *f, const struct vrt_record *r)
{
	f->oom = true;
	f->oom_slot = vrt_device_slot(r->device);
	f->oom_s = vrt_ts_seconds(f->t, r->ts);
	f->oom_requested = r->size;
	for (int i = 0; i < f->n_dev; i++)
		if (f->dev[i].slot == f->oom_slot) {
			f->oom_known = true;
			f->at_oom = f->dev[i].now;
		}
}

void vrt_frag_apply(struct vrt_frag *f, const struct vrt_model *m, const struct vrt_record *r,
		    const struct vrt_effect *e)
{
	bool bulk = r->op >= VRT_OP_CP_BEGIN || r->op == VRT_OP_SEED || r->op == VRT_OP_CONTEXT;
	if (bulk) {
		f->dirty = true;
		return;
	}
	if (f->dirty || !vrt_effect_only_own(e))
		rebuild(f, m);
	else if (e->kind != VRT_EFFECT_NONE)
		apply_effect(f, m, e);
	if (r->op == VRT_OP_OOM && !f->oom)
		note_oom(f, r);
}

void vrt_frag_roll(struct vrt_frag *f, int b)
{
	for (int i = f->cur_b + 1; i <= b && i < f->cap; i++)
		for (int k = 0; k < f->n_dev; k++)
			f->dev[k].b[i] = f->dev[k].now;
	if (b > f->cur_b)
		f->cur_b = b;
}

void vrt_frag_sample(struct vrt_frag *f, int b)
{
	if (f->dirty || b < 0 || b >= f->cap)
		return;
	for (int k = 0; k < f->n_dev; k++) {
		struct vrt_frag_device *d = &f->dev[k];
		if (d->now.allocated > d->b[b].allocated)
			d->b[b] = d->now;
	}
}

void vrt_frag_merge(struct vrt_frag *f)
{
	for (int k = 0; k < f->n_dev; k++) {
		struct vrt_frag_point *v = f->dev[k].b;
		for (int i = 0; i < f->cap / 2; i++)
			v[i] = v[2 * i + 1].allocated > v[2 * i].allocated ? v[2 * i + 1] : v[2 * i];
		for (int i = f->cap / 2; i < f->cap; i++)
			v[i] = (struct vrt_frag_point){ 0, -1, 0, 0 };
	}
	f->cur_b = f->cur_b < 0 ? -1 : f->cur_b / 2;
}

void vrt_frag_finish(struct vrt_frag *f, const struct vrt_model *m)
{
	if (f->dirty)
		rebuild(f, m);
}

/* ---- the page's data ----------------------------------------------------------------------- */

static int64_t field(const struct vrt_frag_point *p, int which)
{
	if (p->allocated < 0) /* untouched: before the device's first segment or block */
		return 0;
	return which == 0 ? p->reserved : which == 1 ? p->allocated : which == 2 ? p->largest_free : p->outside;
}

/* One figure per bucket, divided by its unit, delta-coded (as html's series values). */
static void write_column(FILE *out, const struct vrt_frag_device *d, int which, int used)
{
	static const char *const names[] = { "reserved", "allocated", "largest_free", "outside" };
	int64_t unit = 0;
	for (int b = 0; b < used; b++)
		unit = vrt_gcd64(unit, field(&d->b[b], which));
	if (unit <= 0)
		unit = 1;
	fprintf(out, ", \"%s\": {\"unit\": %lld, \"values\": [", names[which], (long long)unit);
	int64_t prev = 0;
	for (int b = 0; b < used; b++) {
		int64_t v = field(&d->b[b], which) / unit;
		fprintf(out, b ? ",%lld" : "%lld", (long long)(v - prev));
		prev = v;
	}
	fputs("]}", out);
}

static void write_point(FILE *out, const struct vrt_frag_point *p)
{
	fprintf(out, "{\"reserved_bytes\": %lld, \"allocated_bytes\": %lld, \"largest_free_bytes\": %lld, "
		     "\"outside_bytes\": %lld}",
		(long long)p->reserved, (long long)p->allocated, (long long)p->largest_free, (long long)p->outside);
}

void vrt_frag_json(const struct vrt_frag *f, FILE *out, int used)
{
	if (used > f->cap)
		used = f->cap;
	fprintf(out, ", \"allocator\": {\"any_segment\": %s, \"rebuilds\": %llu, \"devices_dropped\": %llu, \"devices\": [",
		f->any_segment ? "true" : "false", (unsigned long long)f->rebuilds, (unsigned long long)f->devices_dropped);
	for (int k = 0; k < f->n_dev; k++) {
		const struct vrt_frag_device *d = &f->dev[k];
		fprintf(out, "%s{\"device\": %d, \"expandable\": %s, \"peak_reserved\": %lld, \"end\": ", k ? ", " : "",
			d->slot == VRT_HOST_SLOT ? -1 : d->slot, d->expandable ? "true" : "false", (long long)d->peak_reserved);
		write_point(out, &d->now);
		for (int which = 0; which < 4; which++)
			write_column(out, d, which, used);
		fputc('}', out);
	}
	fputs("], \"oom\": ", out);
	if (!f->oom) {
		fputs("null}", out);
		return;
	}
	fprintf(out, "{\"device\": %d, \"time_s\": %.6f, \"requested_bytes\": %llu, \"known\": %s, \"at\": ",
		f->oom_slot == VRT_HOST_SLOT ? -1 : f->oom_slot, f->oom_s, (unsigned long long)f->oom_requested,
		f->oom_known ? "true" : "false");
	write_point(out, &f->at_oom);
	fputs("}}", out);
}
