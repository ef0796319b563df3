/* SPDX-License-Identifier: MIT */
/*
 * The sites at each peak, followed in one pass (peak_sites.h).
 *
 * Live bytes are kept in parts, one per (slot, kind, stack), a tensor's kind being its own
 * (PART_BLOCK). A part is in its kind's list of its slot (tensors are in none) and in the slot's
 * tensor view, and keeps, beside its bytes and items now, what they were at the last peak of
 * each. Each list holds the parts changed since its last peak; a record that raises the list's
 * peak copies theirs. Which parts make which site, and the tensor view's segments and cache,
 * are decided only when a list is taken, by vrt_group_role: the rule vrt_report_group_live
 * groups a live set by.
 */
#include "peak_sites.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "report_common.h"
#include "vramtrace/error.h"

#define PART_BLOCK VRT_KIND_LAST
#define TENSOR_VIEW VRT_KIND_LAST /* a slot's lists: one per kind, then the tensor view */
#define N_VIEWS (VRT_KIND_LAST + 1)
#define CHANGED_FOR_KIND 1
#define CHANGED_FOR_TENSORS 2

struct part {
	uint32_t stack;
	uint8_t slot, kind; /* kind: a VRT_KIND_*, or PART_BLOCK */
	uint8_t changed;    /* CHANGED_FOR_*: in that list's changed parts */
	uint32_t items, items_at_kind_peak, items_at_tensor_peak;
	int64_t bytes, bytes_at_kind_peak, bytes_at_tensor_peak;
};

struct list {
	uint32_t *changed; /* positions of the parts changed since its last peak, each once */
	size_t n_changed, changed_cap;
	int64_t peak;      /* the model's peak of the list when it last took its parts */
	bool used;
};

struct vrt_peak_sites {
	const struct vrt_trace *t;
	struct vrt_model_observer observer;
	struct part *parts;
	size_t n_parts, parts_cap;
	uint32_t *index; /* part position + 1 by (slot, kind, stack); at most half full */
	size_t index_cap;
	struct list lists[VRT_MAX_DEVICES + 1][N_VIEWS];
	uint16_t used[(VRT_MAX_DEVICES + 1) * N_VIEWS]; /* slot * N_VIEWS + view of each list in use */
	size_t n_used;
	int error;
};

struct vrt_peak_sites *vrt_peak_sites_new(const struct vrt_trace *t)
{
	struct vrt_peak_sites *ps = calloc(1, sizeof(*ps));
	if (ps)
		ps->t = t;
	return ps;
}

void vrt_peak_sites_free(struct vrt_peak_sites *ps)
{
	if (!ps)
		return;
	for (size_t i = 0; i < ps->n_used; i++)
		free(ps->lists[ps->used[i] / N_VIEWS][ps->used[i] % N_VIEWS].changed);
	free(ps->parts);
	free(ps->index);
	free(ps);
}

static uint64_t part_key(int slot, int kind, uint32_t stack)
{
	return stack | (uint64_t)slot << 32 | (uint64_t)kind << 40;
}

static size_t home(uint64_t key, size_t cap) { return (size_t)(key * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1); }

static bool grow_index(struct vrt_peak_sites *ps)
{
	size_t cap = ps->index_cap ? ps->index_cap * 2 : 256;
	uint32_t *index = calloc(cap, sizeof(*index));
	if (!index)
		return false;
	for (size_t i = 0; i < ps->n_parts; i++) {
		const struct part *p = &ps->parts[i];
		size_t j = home(part_key(p->slot, p->kind, p->stack), cap);
		while (index[j])
			j = (j + 1) & (cap - 1);
		index[j] = (uint32_t)i + 1;
	}
	free(ps->index);
	ps->index = index;
	ps->index_cap = cap;
	return true;
}

static struct part *part_of(struct vrt_peak_sites *ps, int slot, int kind, uint32_t stack)
{
	uint64_t key = part_key(slot, kind, stack);
	size_t j = ps->index_cap ? home(key, ps->index_cap) : 0;
	for (; ps->index_cap && ps->index[j]; j = (j + 1) & (ps->index_cap - 1)) {
		struct part *p = &ps->parts[ps->index[j] - 1];
		if (p->stack == stack && p->slot == slot && p->kind == kind)
			return p;
	}
	if (ps->n_parts >= UINT32_MAX - 1)
		return NULL;
	if (ps->n_parts == ps->parts_cap) {
		size_t cap = ps->parts_cap ? ps->parts_cap * 2 : 64;
		struct part *parts = realloc(ps->parts, cap * sizeof(*parts));
		if (!parts)
			return NULL;
		ps->parts = parts;
		ps->parts_cap = cap;
	}
	if ((ps->n_parts + 1) * 2 > ps->index_cap) {
		if (!grow_index(ps))
			return NULL;
		j = home(key, ps->index_cap);
		while (ps->index[j])
			j = (j + 1) & (ps->index_cap - 1);
	}
	ps->index[j] = (uint32_t)++ps->n_parts;
	struct part *p = &ps->parts[ps->n_parts - 1];
	*p = (struct part){ .stack = stack, .slot = (uint8_t)slot, .kind = (uint8_t)kind };
	return p;
}

/* p joins the changed parts of the list (slot, view), which bit `changed` of p stands for. */
static bool mark_changed(struct vrt_peak_sites *ps, struct part *p, int view, uint8_t changed)
{
	struct list *l = &ps->lists[p->slot][view];
	if (!l->used) {
		l->used = true;
		ps->used[ps->n_used++] = (uint16_t)(p->slot * N_VIEWS + view);
	}
	if (l->n_changed == l->changed_cap) {
		size_t cap = l->changed_cap ? l->changed_cap * 2 : 64;
		uint32_t *v = realloc(l->changed, cap * sizeof(*v));
		if (!v)
			return false;
		l->changed = v;
		l->changed_cap = cap;
	}
	l->changed[l->n_changed++] = (uint32_t)(p - ps->parts);
	p->changed |= changed;
	return true;
}

static void changed(void *ctx, const struct vrt_item *it, int64_t bytes, int items)
{
	struct vrt_peak_sites *ps = ctx;
	bool block = it->space == VRT_SPACE_BLOCK;
	if (ps->error || (!block && (!vrt_item_counted(it) || it->kind >= VRT_KIND_LAST)))
		return;
	struct part *p = part_of(ps, vrt_device_slot(it->device), block ? PART_BLOCK : it->kind, it->stack);
	if (!p) {
		ps->error = VRT_E_NOMEM;
		return;
	}
	p->bytes += bytes;
	p->items += (uint32_t)items;
	if ((!block && !(p->changed & CHANGED_FOR_KIND) && !mark_changed(ps, p, p->kind, CHANGED_FOR_KIND)) ||
	    (!(p->changed & CHANGED_FOR_TENSORS) && !mark_changed(ps, p, TENSOR_VIEW, CHANGED_FOR_TENSORS)))
		ps->error = VRT_E_NOMEM;
}

/* The list's peak rose: its changed parts take what they hold now as what they held then. */
static void take_parts(struct vrt_peak_sites *ps, struct list *l, bool tensors)
{
	for (size_t i = 0; i < l->n_changed; i++) {
		struct part *p = &ps->parts[l->changed[i]];
		if (tensors) {
			p->items_at_tensor_peak = p->items;
			p->bytes_at_tensor_peak = p->bytes;
			p->changed &= (uint8_t)~CHANGED_FOR_TENSORS;
		} else {
			p->items_at_kind_peak = p->items;
			p->bytes_at_kind_peak = p->bytes;
			p->changed &= (uint8_t)~CHANGED_FOR_KIND;
		}
	}
	l->n_changed = 0;
}

static void peak_raised(void *ctx, const struct vrt_model *m)
{
	struct vrt_peak_sites *ps = ctx;
	for (size_t i = 0; i < ps->n_used; i++) {
		int slot = ps->used[i] / N_VIEWS, view = ps->used[i] % N_VIEWS;
		struct list *l = &ps->lists[slot][view];
		int64_t peak = view == TENSOR_VIEW ? m->tensor_peak[slot] : m->peak[slot][view];
		if (peak == l->peak)
			continue;
		l->peak = peak;
		take_parts(ps, l, view == TENSOR_VIEW);
	}
}

void vrt_peak_sites_follow(struct vrt_peak_sites *ps, struct vrt_model *m)
{
	ps->observer = (struct vrt_model_observer){ changed, peak_raised, ps };
	m->observer = &ps->observer;
}

/* A part's items at the list's peak, as one item for vrt_group_role. */
static struct vrt_item item_of(const struct part *p, bool tensors)
{
	bool block = p->kind == PART_BLOCK;
	return (struct vrt_item){
		.size = (uint64_t)(tensors ? p->bytes_at_tensor_peak : p->bytes_at_kind_peak),
		.stack = p->stack,
		.device = p->slot == VRT_HOST_SLOT ? -1 : p->slot,
		.space = block ? VRT_SPACE_BLOCK : VRT_SPACE_ADDR,
		.kind = block ? VRT_KIND_DEVICE : p->kind,
	};
}

int vrt_peak_sites_take(const struct vrt_peak_sites *ps, int slot, int kind, struct vrt_sites *out)
{
	if (ps->error)
		return ps->error;
	bool tensors = kind < 0;
	int64_t segments = 0, blocks = 0;
	for (size_t i = 0; i < ps->n_parts; i++) {
		const struct part *p = &ps->parts[i];
		uint32_t items = tensors ? p->items_at_tensor_peak : p->items_at_kind_peak;
		if (p->slot != slot || !items || (!tensors && p->kind != kind))
			continue;
		struct vrt_item it = item_of(p, tensors);
		enum vrt_group_role role = vrt_group_role(ps->t, &it, slot, kind);
		if (role == VRT_GROUP_OUT)
			continue;
		if (role == VRT_GROUP_SEGMENT) {
			segments += (int64_t)it.size;
			continue;
		}
		if (role == VRT_GROUP_BLOCK)
			blocks += (int64_t)it.size;
		struct vrt_site *site = vrt_sites_get(out, p->stack, NULL);
		if (!site)
			return VRT_E_NOMEM;
		site->bytes += (int64_t)it.size;
		site->count += items;
		if (tensors)
			site->kinds |= vrt_group_kind_bit(&it);
	}
	if (tensors)
		vrt_group_add_cache(out, slot, segments, blocks);
	vrt_sites_sort(out);
	return 0;
}
