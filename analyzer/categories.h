/* SPDX-License-Identifier: MIT */
/*
 * Live memory by what it is: parameters, gradients, optimizer state, activations, workspaces,
 * NCCL, the allocator's cache... Each live item is decided by what a retention walk found its
 * owner to be (owners.h) when one ran, else by its allocating stack's rule (sites.c).
 */
#ifndef VRAMTRACE_CATEGORIES_H
#define VRAMTRACE_CATEGORIES_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"
#include "owners.h"

#define VRT_MAX_CATEGORIES 16

struct vrt_category {
	const char *name;
	int64_t bytes;
	int64_t identity; /* the part a retention walk decided by what the tensors are */
};

/*
 * The categories of what m holds on one device slot (host pinned memory with host), largest
 * first. tensors: the tensor view (PyTorch blocks, the cache as what tensors leave of PyTorch's
 * segments, other CUDA allocations). walk: the walk that explains the live set, or NULL; with
 * it, roots (if not NULL) gets what holds each item categorized (owners.h).
 */
void vrt_categorize(const struct vrt_trace *t, const struct vrt_model *m, const struct vrt_walk *walk, int slot,
		    bool tensors, bool host, struct vrt_category *cats, int *n, struct vrt_roots *roots);
/* vrt_categorize for every device slot and the host's pinned memory (VRT_HOST_SLOT) in one pass
 * over the live set: cats[d] and n[d] per slot, the tensor view where m has blocks; roots (if not
 * NULL) holds VRT_MAX_DEVICES lists, one per device. */
void vrt_categorize_slots(const struct vrt_trace *t, const struct vrt_model *m, const struct vrt_walk *walk,
			  struct vrt_category cats[][VRT_MAX_CATEGORIES], int *n, struct vrt_roots *roots);
/* What identity means for a category, and the stack rule's description of it. */
const char *vrt_category_identity(const char *name);
const char *vrt_category_rule(const char *name);

#endif /* VRAMTRACE_CATEGORIES_H */
