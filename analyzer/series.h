/* SPDX-License-Identifier: MIT */
/*
 * Live bytes over time in a bounded number of buckets, in one pass over a trace of unknown
 * length: buckets double in width (pairs merge, keeping the maximum) whenever time runs past
 * the end. Used by timeline, html and export.
 */
#ifndef VRAMTRACE_SERIES_H
#define VRAMTRACE_SERIES_H

#include <stdint.h>

#include "model.h"

#define VRT_SERIES_MAX 64 /* device/kind series kept */

struct vrt_series_key {
	int slot;  /* device slot */
	int kind;  /* memory kind, or -1 for tensors */
};

struct vrt_series {
	int n_series;
	struct vrt_series_key keys[VRT_SERIES_MAX];
	int n_buckets;        /* capacity; at most 2 * wanted are kept */
	double width;         /* seconds per bucket */
	double from, to;      /* time range considered */
	int used;             /* buckets touched */
	int64_t *max;         /* [bucket][series]: highest live bytes inside the bucket */
	int64_t *last;        /* [bucket][series]: live bytes at the bucket's end */
	int64_t current[VRT_SERIES_MAX];
	int64_t before[VRT_SERIES_MAX]; /* live bytes when the range starts (samples before from) */
};

int vrt_series_init(struct vrt_series *s, int buckets, double from, double to);
void vrt_series_free(struct vrt_series *s);
/* After applying a record to m (at time seconds), record the totals that changed. */
void vrt_series_sample(struct vrt_series *s, const struct vrt_model *m, double seconds);
/* Index of a series, adding it (with all-zero history) when new; -1 when full. */
int vrt_series_index(struct vrt_series *s, int slot, int kind);
/* Name such as "dev0.device", "host.host_pinned", "dev0.tensors". */
void vrt_series_name(const struct vrt_series_key *k, char *buf, size_t len);
/* Fills the buckets nobody touched with the value before them (memory stays until it changes),
 * through the end of the range when it is known. */
void vrt_series_finish(struct vrt_series *s);

#endif /* VRAMTRACE_SERIES_H */
