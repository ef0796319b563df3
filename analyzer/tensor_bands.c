/* SPDX-License-Identifier: MIT */
/* The largest tensors and their lives (tensor_bands.h). */
#include "tensor_bands.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"

int vrt_bands_init(struct vrt_bands *b, int n)
{
	memset(b, 0, sizeof(*b));
	b->v = calloc((size_t)(n > 0 ? n : 1), sizeof(*b->v));
	b->cap = n;
	return b->v ? 0 : VRT_E_NOMEM;
}

void vrt_bands_free(struct vrt_bands *b)
{
	free(b->v);
	memset(b, 0, sizeof(*b));
}

/* x gives way before y: smaller, or as large and born later. */
static bool weaker(const struct vrt_band *x, const struct vrt_band *y)
{
	return x->size != y->size ? x->size < y->size : x->born_event > y->born_event;
}

static void sift_down(struct vrt_bands *b, int i)
{
	for (;;) {
		int l = 2 * i + 1, r = l + 1, m = i;
		if (l < b->n && weaker(&b->v[l], &b->v[m]))
			m = l;
		if (r < b->n && weaker(&b->v[r], &b->v[m]))
			m = r;
		if (m == i)
			return;
		struct vrt_band t = b->v[i];
		b->v[i] = b->v[m];
		b->v[m] = t;
		i = m;
	}
}

static void sift_up(struct vrt_bands *b, int i)
{
	while (i > 0 && weaker(&b->v[i], &b->v[(i - 1) / 2])) {
		struct vrt_band t = b->v[i];
		b->v[i] = b->v[(i - 1) / 2];
		b->v[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
}

static void heapify(struct vrt_bands *b)
{
	for (int i = b->n / 2 - 1; i >= 0; i--)
		sift_down(b, i);
}

/* The entry of a live tensor (its birth's event and its address name it), or -1. No entry can
 * be smaller than the heap's first, so most tensors are ruled out by their size alone. */
static int find(const struct vrt_bands *b, const struct vrt_item *it, uint64_t size)
{
	if (!b->n || (b->n == b->cap && size < b->v[0].size))
		return -1;
	for (int i = 0; i < b->n; i++)
		if (!b->v[i].died && b->v[i].born_event == it->born_event && b->v[i].addr == it->addr)
			return i;
	return -1;
}

static void offer(struct vrt_bands *b, const struct vrt_trace *t, const struct vrt_item *it)
{
	struct vrt_band x = { .size = it->size, .requested = it->aux ? it->aux : it->size, .addr = it->addr,
			      .born_event = it->born_event, .born_s = vrt_ts_seconds(t, it->ts), .stack = it->stack,
			      .device = it->device, .seeded = it->seeded };
	if (b->n < b->cap) {
		b->v[b->n++] = x;
		sift_up(b, b->n - 1);
	} else if (b->cap && weaker(&b->v[0], &x)) {
		b->v[0] = x;
		sift_down(b, 0);
	}
}

static void died(struct vrt_bands *b, int i, double now)
{
	b->v[i].died = true;
	b->v[i].died_s = now;
}

static void mark_seen(void *ctx, const struct vrt_item *it)
{
	struct vrt_bands *b = ctx;
	if (it->space != VRT_SPACE_BLOCK)
		return;
	int i = find(b, it, it->size);
	if (i >= 0)
		b->v[i].seen = true;
}

/* After a record that ended more than its own item (a context reset): the entries whose
 * tensor the model no longer holds died now. */
static void recount(struct vrt_bands *b, const struct vrt_model *m, double now)
{
	for (int i = 0; i < b->n; i++)
		b->v[i].seen = false;
	vrt_model_each(m, mark_seen, b);
	for (int i = 0; i < b->n; i++)
		if (!b->v[i].died && !b->v[i].seen)
			died(b, i, now);
	b->recounts++;
}

void vrt_bands_apply(struct vrt_bands *b, const struct vrt_trace *t, const struct vrt_model *m,
		     const struct vrt_effect *e, double now)
{
	const struct vrt_item *it = &e->item;
	if (e->kind != VRT_EFFECT_NONE && it->space == VRT_SPACE_BLOCK) {
		if (e->kind == VRT_EFFECT_BORN) {
			offer(b, t, it);
		} else if (e->kind == VRT_EFFECT_DIED) {
			int i = find(b, it, it->size);
			if (i >= 0)
				died(b, i, now);
		} else { /* its real size replaces the estimate */
			int i = find(b, it, it->size - (uint64_t)e->delta);
			if (i >= 0) {
				b->v[i].size = it->size;
				heapify(b);
			} else {
				offer(b, t, it);
			}
		}
	}
	if (!vrt_effect_only_own(e))
		recount(b, m, now);
}

static int by_birth(const void *a, const void *c)
{
	const struct vrt_band *x = a, *y = c;
	if (x->born_s != y->born_s)
		return x->born_s < y->born_s ? -1 : 1;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

void vrt_bands_sort(struct vrt_bands *b)
{
	if (b->n)
		qsort(b->v, (size_t)b->n, sizeof(*b->v), by_birth);
}
