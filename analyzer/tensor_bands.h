/* SPDX-License-Identifier: MIT */
/*
 * The largest tensors of a trace, each with its life: the N largest PyTorch blocks ever live
 * (by size, the earliest first among equals), when each was born and when it died (or that it
 * lived to the end), fed record by record from a pass the caller already makes (html's
 * timeline). Memory: N entries, whatever the trace's length.
 */
#ifndef VRAMTRACE_TENSOR_BANDS_H
#define VRAMTRACE_TENSOR_BANDS_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

struct vrt_band {
	uint64_t size, requested, addr, born_event;
	double born_s, died_s;
	uint32_t stack;
	int16_t device;
	bool died, seeded;
	bool seen; /* scratch of a recount */
};

struct vrt_bands {
	struct vrt_band *v; /* a min-heap: v[0] is the first to give way to a larger tensor */
	int n, cap;
	uint64_t recounts;
};

int vrt_bands_init(struct vrt_bands *b, int n);
void vrt_bands_free(struct vrt_bands *b);
/* After the model applied a record whose effect is e, at `now` seconds. */
void vrt_bands_apply(struct vrt_bands *b, const struct vrt_trace *t, const struct vrt_model *m,
		     const struct vrt_effect *e, double now);
/* Sorts the bands by birth (then address), for the page; the heap is gone after it. */
void vrt_bands_sort(struct vrt_bands *b);

#endif /* VRAMTRACE_TENSOR_BANDS_H */
