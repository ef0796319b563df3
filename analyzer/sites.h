/* SPDX-License-Identifier: MIT */
/* Bytes and counts grouped by allocation site (stack id), plus labelled pseudo-sites. */
#ifndef VRAMTRACE_SITES_H
#define VRAMTRACE_SITES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"
#include "trace_reader.h"

struct vrt_site {
	uint32_t stack;
	const char *label;   /* a pseudo-site such as "[PyTorch allocator cache]"; stack is then 0 */
	int64_t bytes;
	uint64_t count;
	int64_t value2;      /* a second figure some reports keep (e.g. bytes at an earlier time) */
	uint64_t first, last; /* e.g. phase invocations born in */
	uint8_t kinds;       /* 1 << VRT_KIND_* of its memory where the list mixes kinds (0: not kept) */
};

struct vrt_sites {
	struct vrt_site *v;
	size_t n, cap;
	uint32_t *index;     /* open addressing: position + 1 by stack; labels are searched linearly */
	size_t index_cap;
};

void vrt_sites_init(struct vrt_sites *s);
void vrt_sites_free(struct vrt_sites *s);
struct vrt_site *vrt_sites_get(struct vrt_sites *s, uint32_t stack, const char *label);
void vrt_sites_sort(struct vrt_sites *s); /* most bytes first */
int64_t vrt_sites_total(const struct vrt_sites *s);

/* Stacks whose allocation went through PyTorch's caching allocator (memoized). */
bool vrt_stack_is_torch_segment(const struct vrt_trace *t, uint32_t stack);
/* The category a site falls into for OOM/leak explanations, with the rule that matched. */
const char *vrt_site_category(const struct vrt_trace *t, const struct vrt_site *s, const char **rule);

/* Text: "  1.00 GiB   3x  train (train.py:42)" then indented frames. */
void vrt_site_print(FILE *out, const struct vrt_trace *t, const struct vrt_site *s, int max_frames);
/* JSON: {"bytes": B, "count": C, "frames": [...]} (no closing brace when open_end). */
void vrt_site_json(FILE *out, const struct vrt_trace *t, const struct vrt_site *s, bool open_end);

/* Group every live item of the model that satisfies keep() into sites. */
void vrt_sites_from_model(struct vrt_sites *s, const struct vrt_model *m,
			  bool (*keep)(const struct vrt_item *it, void *ctx), void *ctx);

#endif /* VRAMTRACE_SITES_H */
