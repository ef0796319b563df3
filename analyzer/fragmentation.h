/* SPDX-License-Identifier: MIT */
/*
 * PyTorch's caching allocator over time, from the recorded events (no simulation): per device,
 * what its segments reserve, what tensors (blocks) hold, and the largest free range inside the
 * segments (fragmentation), on html's time grid, plus the same figures at the out-of-memory
 * event. Fed record by record from a pass the caller already makes (html's timeline).
 *
 * Segments are the counted device allocations whose stack is PyTorch's allocator (cudaMalloc'd
 * segments), and its cuMemMap'd pages for expandable segments (consecutive pages make one
 * segment, as PyTorch's do). Reserved counts what those hold (for expandable segments, the
 * physical handles), as `oom` and `report` count the allocator's cache. A block inside no
 * recorded segment (its segment was made before tracing began, or the trace lost it) is
 * counted as "outside": it is in allocated, and no free range is known around it.
 *
 * Memory: the live segments and the free ranges between blocks (one node each), and four
 * figures per bucket and device; never the trace's length.
 */
#ifndef VRAMTRACE_FRAGMENTATION_H
#define VRAMTRACE_FRAGMENTATION_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"

#define VRT_FRAG_DEVICES 8 /* device slots followed; further ones are counted, not drawn */

/* A set of disjoint address ranges, each with a tag: ranges with the same tag that touch are
 * one range. A treap by start address whose nodes also keep the longest range below them. */
struct vrt_ranges {
	struct vrt_range_node *v; /* nodes by index; 0 is never used */
	uint32_t n, cap, free_list, root;
	uint32_t seed;
	int error;                /* VRT_E_NOMEM once a node could not be stored */
};

struct vrt_frag_point {
	int64_t reserved, allocated, largest_free, outside;
};

struct vrt_frag_device {
	int slot;
	bool expandable;              /* some segment was made of mapped pages */
	struct vrt_ranges segments;   /* tag: the segment's start; 1 for mapped pages */
	struct vrt_ranges free;       /* free ranges inside segments, tagged as their segment */
	struct vrt_frag_point now;
	int64_t peak_reserved;
	struct vrt_frag_point *b;     /* per bucket: the moment allocated was highest; allocated -1: untouched */
};

struct vrt_frag {
	const struct vrt_trace *t;
	int n_dev;
	struct vrt_frag_device dev[VRT_FRAG_DEVICES];
	uint64_t devices_dropped;
	int cap, cur_b;               /* buckets (html's grid: cap = 2 x wanted) and the last one written */
	bool dirty;                   /* a checkpoint or seed changed the live set: rebuild from the model */
	bool any_segment;
	uint64_t rebuilds;
	/* the first out-of-memory event */
	bool oom;
	int oom_slot;
	double oom_s;
	uint64_t oom_requested;
	bool oom_known;               /* its device was followed */
	struct vrt_frag_point at_oom;
	int error;
};

int vrt_frag_init(struct vrt_frag *f, const struct vrt_trace *t, int buckets_cap);
void vrt_frag_free(struct vrt_frag *f);
/* After the model applied r (with effect e). */
void vrt_frag_apply(struct vrt_frag *f, const struct vrt_model *m, const struct vrt_record *r,
		    const struct vrt_effect *e);
/* Buckets after the last one written up to b take the state now (before the next change). */
void vrt_frag_roll(struct vrt_frag *f, int b);
/* Records the state now in bucket b when allocated is the highest of the bucket so far. */
void vrt_frag_sample(struct vrt_frag *f, int b);
/* Halves the resolution, as html's grid does: bucket i keeps whichever of 2i, 2i+1 held more. */
void vrt_frag_merge(struct vrt_frag *f);
/* At the end of the pass: applies a pending rebuild. */
void vrt_frag_finish(struct vrt_frag *f, const struct vrt_model *m);
/* "allocator": {...} member (with the leading ", "); used buckets: html's. */
void vrt_frag_json(const struct vrt_frag *f, FILE *out, int used);

/* The range set on its own (tests/unit/test_ranges.c checks it against a brute force). */
void vrt_ranges_init(struct vrt_ranges *s, uint32_t seed);
void vrt_ranges_free(struct vrt_ranges *s);
void vrt_ranges_add(struct vrt_ranges *s, uint64_t start, uint64_t end, uint64_t tag);
/* Removes [start, end) from every range it overlaps; returns the bytes removed. */
uint64_t vrt_ranges_remove(struct vrt_ranges *s, uint64_t start, uint64_t end);
/* The tag of the range holding all of [start, end); false when none does. */
bool vrt_ranges_holding(const struct vrt_ranges *s, uint64_t start, uint64_t end, uint64_t *tag);
bool vrt_ranges_overlap(const struct vrt_ranges *s, uint64_t start, uint64_t end);
uint64_t vrt_ranges_longest(const struct vrt_ranges *s);

#endif /* VRAMTRACE_FRAGMENTATION_H */
