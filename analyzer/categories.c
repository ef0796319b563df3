/* SPDX-License-Identifier: MIT */
#include "categories.h"

#include <string.h>

#include "sites.h"

static void add_category(struct vrt_category *cats, int *n, const char *name, int64_t bytes, bool identity)
{
	int k = 0;
	while (k < *n && strcmp(cats[k].name, name))
		k++;
	if (k == *n && *n < VRT_MAX_CATEGORIES)
		cats[(*n)++] = (struct vrt_category){ name, 0, 0 };
	if (k < *n) {
		cats[k].bytes += bytes;
		cats[k].identity += identity ? bytes : 0;
	}
}

static void sort_categories(struct vrt_category *cats, int n)
{
	for (int i = 0; i < n; i++) /* largest first */
		for (int j = i + 1; j < n; j++)
			if (cats[j].bytes > cats[i].bytes) {
				struct vrt_category c = cats[i];
				cats[i] = cats[j];
				cats[j] = c;
			}
}

struct categorizer {
	const struct vrt_trace *t;
	const struct vrt_walk *walk; /* NULL: no walk */
	int slot;
	bool tensors, host;          /* the tensor view of a device; pinned host memory */
	int64_t torch_segments, blocks;
	struct vrt_category *cats;
	int *n;
	struct vrt_roots *roots;     /* NULL: not asked for */
};

/* One live item's category: what the walk found it to be, else its stack's rule. */
static void categorize_item(void *ctx, const struct vrt_item *it)
{
	struct categorizer *c = ctx;
	bool block = it->space == VRT_SPACE_BLOCK;
	if (vrt_device_slot(it->device) != c->slot || (c->host ? it->kind != VRT_KIND_HOST_PINNED
							      : it->kind == VRT_KIND_HOST_PINNED))
		return;
	if (block && c->tensors) {
		c->blocks += (int64_t)it->size;
	} else if (block || !vrt_item_counted(it)) {
		return;
	} else if (c->tensors && it->kind == VRT_KIND_DEVICE && vrt_stack_is_torch_segment(c->t, it->stack)) {
		c->torch_segments += (int64_t)it->size; /* what tensors do not use of it is the cache */
		return;
	}
	if (c->walk) {
		if (c->roots)
			vrt_roots_add(c->roots, c->t, c->walk, it);
		struct vrt_held_by h = { 0 };
		vrt_held_add(&h, c->walk, it);
		int64_t bytes;
		int category = vrt_held_category(&h, &bytes);
		if (category > 0 && 2 * bytes >= (int64_t)it->size) {
			add_category(c->cats, c->n, vrt_owner_category_name((unsigned)category), (int64_t)it->size, true);
			return;
		}
	}
	struct vrt_site site = { .stack = it->stack };
	const char *rule;
	add_category(c->cats, c->n, vrt_site_category(c->t, &site, &rule), (int64_t)it->size, false);
}

static void categorize_finish(struct categorizer *c)
{
	if (c->torch_segments > c->blocks)
		add_category(c->cats, c->n, "allocator_cache", c->torch_segments - c->blocks, false);
	sort_categories(c->cats, *c->n);
}

void vrt_categorize(const struct vrt_trace *t, const struct vrt_model *m, const struct vrt_walk *walk, int slot,
		    bool tensors, bool host, struct vrt_category *cats, int *n, struct vrt_roots *roots)
{
	struct categorizer c = { .t = t, .walk = walk, .slot = slot, .tensors = tensors, .host = host, .cats = cats,
				 .n = n, .roots = roots };
	vrt_model_each(m, categorize_item, &c);
	categorize_finish(&c);
}

/* An item goes to its own slot's categorizer, which keeps or skips it as a pass of its own would. */
static void categorize_in_slot(void *ctx, const struct vrt_item *it)
{
	struct categorizer *by_slot = ctx;
	categorize_item(&by_slot[vrt_device_slot(it->device)], it);
}

void vrt_categorize_slots(const struct vrt_trace *t, const struct vrt_model *m, const struct vrt_walk *walk,
			  struct vrt_category cats[][VRT_MAX_CATEGORIES], int *n, struct vrt_roots *roots)
{
	struct categorizer by_slot[VRT_MAX_DEVICES + 1];
	for (int d = 0; d <= VRT_MAX_DEVICES; d++) {
		bool host = d == VRT_HOST_SLOT;
		by_slot[d] = (struct categorizer){ .t = t, .walk = walk, .slot = d, .tensors = m->any_blocks && !host,
						   .host = host, .cats = cats[d], .n = &n[d],
						   .roots = host || !roots ? NULL : &roots[d] };
	}
	vrt_model_each(m, categorize_in_slot, by_slot);
	for (int d = 0; d <= VRT_MAX_DEVICES; d++)
		categorize_finish(&by_slot[d]);
}

/* What decided a category by identity (enum vrt_owner_category; owners.h). */
const char *vrt_category_identity(const char *name)
{
	static const struct { const char *name, *what; } identities[] = {
		{ "parameters", "the storages of nn.Parameters" },
		{ "gradients", ".grad of parameters, and gradient buffers optimizers own" },
		{ "optimizer_state", "optimizer.state, master weights and other buffers optimizers own" },
		{ "activations", "tensors with an autograd history (grad_fn)" },
	};
	for (size_t i = 0; i < sizeof(identities) / sizeof(identities[0]); i++)
		if (!strcmp(identities[i].name, name))
			return identities[i].what;
	return "";
}

const char *vrt_category_rule(const char *name)
{
	static const struct { const char *name, *rule; } rules[] = {
		{ "activations", "allocated inside a forward() or a module call" },
		{ "gradients", "allocated during backward, by autograd, or in a gradient buffer" },
		{ "optimizer_state", "allocated inside torch/optim, an optimizer or Adam" },
		{ "parameters", "allocated by reset_parameters, Module._apply or as a Parameter" },
		{ "workspace", "cuBLAS/cuDNN workspaces" },
		{ "nccl", "allocated by NCCL" },
		{ "allocator_cache", "reserved by PyTorch's caching allocator, no tensor in it" },
		{ "non_pytorch", "CUDA allocations outside PyTorch's allocator" },
		{ "unattributed", "allocated before tracing started" },
		{ "user_tensors", "allocated by Python code outside modules, autograd and optimizers (inputs, losses)" },
		{ "other", "no rule matched" },
	};
	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		if (!strcmp(rules[i].name, name))
			return rules[i].rule;
	return "";
}
