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
	uint32_t streams;    /* leaks: the streams its survivors came on where each call's came on one no
				* other call's did (a workspace kept per stream, a stream made each call); else 0 */
	const char *label;   /* a pseudo-site such as "[PyTorch allocator cache]"; stack is then 0 */
	int64_t bytes;
	uint64_t count;
	int64_t value2;      /* a second figure some reports keep (e.g. bytes at an earlier time) */
	uint64_t first, last; /* e.g. phase invocations born in */
	uint32_t outlived;   /* leaks: the most later call entries one call's survivors here (not the last
				* call's) were still live at; 0: each call's were gone by the entry after next */
	uint8_t kinds;       /* 1 << VRT_KIND_* of its memory where the list mixes kinds (0: not kept) */
	int64_t captured;    /* leaks: bytes of its survivors made for a CUDA graph (during a capture) */
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
struct vrt_site *vrt_sites_find(const struct vrt_sites *s, uint32_t stack); /* by stack; NULL if none */
void vrt_sites_sort(struct vrt_sites *s); /* most bytes first */
int64_t vrt_sites_total(const struct vrt_sites *s);

/* Stacks whose allocation went through PyTorch's caching allocator (memoized). */
bool vrt_stack_is_torch_segment(const struct vrt_trace *t, uint32_t stack);
/* The category a site falls into for OOM/leak explanations, with the rule that matched. */
const char *vrt_site_category(const struct vrt_trace *t, const struct vrt_site *s, const char **rule);

/*
 * The stack a site is listed under. A stack with Python frames prints as its headline and its
 * Python frames (vrt_site_print); stacks that print alike are one site, listed under the first
 * of them asked about. Their native frames in between differ as the interpreter specializes a
 * call: Python 3.13 enters a class's __init__ without type_call's C frames once the call has run
 * a few times, so one line's allocations arrive under two stacks, and listed apart the first
 * call's looked like a one-time allocation. A stack without Python frames is its own site.
 */
struct vrt_site_keys {
	const struct vrt_trace *t;
	uint32_t *site_of;  /* by stack id: its site's stack + 1 (0: not asked yet) */
	size_t n_site_of;
	struct vrt_site_key *table; /* open addressing by the printed frames' hash, at most half full */
	size_t cap, used;
};
void vrt_site_keys_init(struct vrt_site_keys *k, const struct vrt_trace *t);
void vrt_site_keys_free(struct vrt_site_keys *k);
/* The site's stack; the stack itself where memory for the answer is short. */
uint32_t vrt_site_keys_stack(struct vrt_site_keys *k, uint32_t stack);

/* The sites as they print: stacks that print alike are one site (listed under the first), their
 * bytes and counts summed, kinds joined, value2 and outlived the larger, first and last the
 * outer; labels stay apart. Sorted again. Without memory, s is left as it is (VRT_E_NOMEM). */
int vrt_sites_fold_printed(const struct vrt_trace *t, struct vrt_sites *s);

/* Text: "  1.00 GiB   3x  train (train.py:42)" then indented frames. */
void vrt_site_print(FILE *out, const struct vrt_trace *t, const struct vrt_site *s, int max_frames);
/* JSON: {"bytes": B, "count": C, "frames": [...]} (no closing brace when open_end). */
void vrt_site_json(FILE *out, const struct vrt_trace *t, const struct vrt_site *s, bool open_end);

/* Group every live item of the model that satisfies keep() into sites. */
void vrt_sites_from_model(struct vrt_sites *s, const struct vrt_model *m,
			  bool (*keep)(const struct vrt_item *it, void *ctx), void *ctx);

#endif /* VRAMTRACE_SITES_H */
