/* SPDX-License-Identifier: MIT */
#include "series.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vramtrace/error.h"

int vrt_series_init(struct vrt_series *s, int buckets, double from, double to)
{
	memset(s, 0, sizeof(*s));
	s->n_buckets = buckets * 2;
	s->from = from;
	s->to = to;
	s->width = to > from && to < 1e300 ? (to - from) / buckets : 0.001;
	size_t n = (size_t)s->n_buckets * VRT_SERIES_MAX;
	s->max = calloc(n, sizeof(int64_t));
	s->last = malloc(n * sizeof(int64_t));
	if (!s->max || !s->last)
		return VRT_E_NOMEM;
	memset(s->last, 0xff, n * sizeof(int64_t)); /* every byte 0xff: -1, untouched */
	return 0;
}

void vrt_series_free(struct vrt_series *s)
{
	free(s->max);
	free(s->last);
	s->max = s->last = NULL;
}

int vrt_series_index(struct vrt_series *s, int slot, int kind)
{
	for (int i = 0; i < s->n_series; i++)
		if (s->keys[i].slot == slot && s->keys[i].kind == kind)
			return i;
	if (s->n_series == VRT_SERIES_MAX)
		return -1;
	s->keys[s->n_series] = (struct vrt_series_key){ slot, kind };
	return s->n_series++;
}

/* Halves the resolution: bucket i takes buckets 2i and 2i+1. */
static void merge_pairs(struct vrt_series *s)
{
	for (int b = 0; b < s->n_buckets / 2; b++)
		for (int k = 0; k < VRT_SERIES_MAX; k++) {
			int64_t *m0 = &s->max[(2 * b) * VRT_SERIES_MAX + k], *m1 = &s->max[(2 * b + 1) * VRT_SERIES_MAX + k];
			int64_t *l0 = &s->last[(2 * b) * VRT_SERIES_MAX + k], *l1 = &s->last[(2 * b + 1) * VRT_SERIES_MAX + k];
			s->max[b * VRT_SERIES_MAX + k] = *m0 > *m1 ? *m0 : *m1;
			s->last[b * VRT_SERIES_MAX + k] = *l1 >= 0 ? *l1 : *l0;
		}
	for (int b = s->n_buckets / 2; b < s->n_buckets; b++)
		for (int k = 0; k < VRT_SERIES_MAX; k++) {
			s->max[b * VRT_SERIES_MAX + k] = 0;
			s->last[b * VRT_SERIES_MAX + k] = -1;
		}
	s->width *= 2;
	s->used = (s->used + 1) / 2;
}

static int64_t total_of(const struct vrt_model *m, const struct vrt_series_key *k)
{
	return k->kind < 0 ? m->tensors[k->slot] : m->live[k->slot][k->kind];
}

static void add_new_series(struct vrt_series *s, const struct vrt_model *m)
{
	for (int d = 0; d <= VRT_MAX_DEVICES; d++) {
		for (int k = 0; k < VRT_KIND_LAST; k++)
			if (m->peak[d][k])
				vrt_series_index(s, d, k);
		if (m->tensor_peak[d])
			vrt_series_index(s, d, -1);
	}
}

void vrt_series_sample(struct vrt_series *s, const struct vrt_model *m, double seconds)
{
	if (seconds > s->to)
		return;
	if (seconds < s->from) { /* what is live when the range starts is carried into it */
		add_new_series(s, m);
		for (int i = 0; i < s->n_series; i++)
			s->before[i] = s->current[i] = total_of(m, &s->keys[i]);
		return;
	}
	/* The bucket in double until it fits: a time far past the range (a damaged trace's) must not
	 * be converted to int first. */
	while ((seconds - s->from) / s->width >= s->n_buckets)
		merge_pairs(s);
	int b = (int)((seconds - s->from) / s->width);
	add_new_series(s, m);
	if (b + 1 > s->used)
		s->used = b + 1;
	for (int i = 0; i < s->n_series; i++) {
		int64_t v = total_of(m, &s->keys[i]);
		s->current[i] = v;
		int64_t *mx = &s->max[b * VRT_SERIES_MAX + i];
		if (v > *mx)
			*mx = v;
		s->last[b * VRT_SERIES_MAX + i] = v;
	}
}

void vrt_series_finish(struct vrt_series *s)
{
	/* A known range is shown to its end: memory stays until something changes it. */
	if (s->to < 1e300 && s->width > 0) {
		double span = (s->to - s->from) / s->width;
		int through_end = span >= s->n_buckets ? s->n_buckets : (int)span + (span > (int)span);
		if (through_end > s->used)
			s->used = through_end;
	}
	int64_t carry[VRT_SERIES_MAX];
	memcpy(carry, s->before, sizeof(carry));
	for (int b = 0; b < s->used; b++)
		for (int i = 0; i < s->n_series; i++) {
			int64_t *last = &s->last[b * VRT_SERIES_MAX + i], *mx = &s->max[b * VRT_SERIES_MAX + i];
			if (*last < 0) {
				*last = carry[i];
				if (*mx < carry[i])
					*mx = carry[i];
			} else if (*mx < carry[i]) {
				*mx = carry[i] > *mx ? carry[i] : *mx; /* held at the start of the bucket */
			}
			carry[i] = *last;
		}
}

void vrt_series_name(const struct vrt_series_key *k, char *buf, size_t len)
{
	const char *kind = k->kind < 0 ? "tensors" : vrt_kind_name((uint32_t)k->kind);
	if (k->slot == VRT_HOST_SLOT)
		snprintf(buf, len, "host.%s", kind);
	else
		snprintf(buf, len, "dev%d.%s", k->slot, kind);
}
