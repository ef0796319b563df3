/* SPDX-License-Identifier: MIT */
#include "intern.h"

#include <stdlib.h>
#include <string.h>

#include "vramtrace/error.h"

static uint64_t hash_bytes(const void *p, size_t n)
{
	const uint8_t *s = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ull;
	return h;
}

static uint64_t hash_node(uint32_t parent, uint8_t kind, uint64_t value)
{
	uint64_t h = value * 0x9e3779b97f4a7c15ull ^ ((uint64_t)parent << 3 | kind) * 0xc2b2ae3d27d4eb4full;
	return h ^ (h >> 29);
}

static int index_init(struct vrt_index *x)
{
	x->cap = 4096;
	x->used = 0;
	x->ids = calloc(x->cap, sizeof(*x->ids));
	x->hashes = calloc(x->cap, sizeof(*x->hashes));
	return x->ids && x->hashes ? 0 : VRT_E_NOMEM;
}

static bool index_grow(struct vrt_index *x)
{
	size_t cap = x->cap * 2;
	uint32_t *ids = calloc(cap, sizeof(*ids));
	uint64_t *hashes = calloc(cap, sizeof(*hashes));
	if (!ids || !hashes) {
		free(ids);
		free(hashes);
		return false;
	}
	for (size_t i = 0; i < x->cap; i++) {
		if (!x->ids[i])
			continue;
		size_t j = x->hashes[i] & (cap - 1);
		while (ids[j])
			j = (j + 1) & (cap - 1);
		ids[j] = x->ids[i];
		hashes[j] = x->hashes[i];
	}
	free(x->ids);
	free(x->hashes);
	x->ids = ids;
	x->hashes = hashes;
	x->cap = cap;
	return true;
}

static bool grow_array(void **arr, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return true;
	size_t ncap = *cap ? *cap * 2 : 1024;
	while (ncap < need)
		ncap *= 2;
	void *p = realloc(*arr, ncap * elem);
	if (!p)
		return false;
	*arr = p;
	*cap = ncap;
	return true;
}

int vrt_intern_init(struct vrt_intern *in, struct vrt_buf *pending, struct vrt_buf *all)
{
	memset(in, 0, sizeof(*in));
	in->pending = pending;
	in->all = all;
	in->n_strings = 1;
	in->n_nodes = 1;
	if (index_init(&in->strings_index) || index_init(&in->nodes_index) ||
	    !grow_array((void **)&in->strings, &in->cap_strings, 1024, sizeof(char *)) ||
	    !grow_array((void **)&in->nodes, &in->cap_nodes, 1024, sizeof(struct vrt_node)))
		return VRT_E_NOMEM;
	in->string_lens = calloc(in->cap_strings, sizeof(uint32_t));
	return in->string_lens ? 0 : VRT_E_NOMEM;
}

void vrt_intern_free(struct vrt_intern *in)
{
	for (size_t i = 1; i < in->n_strings; i++)
		free(in->strings[i]);
	free(in->strings);
	free(in->string_lens);
	free(in->nodes);
	free(in->strings_index.ids);
	free(in->strings_index.hashes);
	free(in->nodes_index.ids);
	free(in->nodes_index.hashes);
	memset(in, 0, sizeof(*in));
}

void vrt_intern_emit(struct vrt_intern *in, const struct vrt_record *r)
{
	struct vrt_buf *bufs[2] = { in->pending, in->all };
	for (int i = 0; i < 2; i++) {
		struct vrt_delta d = { 0, 0 }; /* table records carry no delta fields */
		if (bufs[i])
			vrt_buf_put_record(bufs[i], r, &d);
	}
}

uint32_t vrt_intern_string(struct vrt_intern *in, const char *s, size_t n)
{
	struct vrt_index *x = &in->strings_index;
	uint64_t h = hash_bytes(s, n);
	size_t i = h & (x->cap - 1);
	for (; x->ids[i]; i = (i + 1) & (x->cap - 1)) {
		uint32_t id = x->ids[i];
		if (x->hashes[i] == h && in->string_lens[id] == n && !memcmp(in->strings[id], s, n))
			return id;
	}
	size_t id = in->n_strings;
	if (id >= UINT32_MAX)
		return 0;
	size_t old_cap = in->cap_strings;
	if (!grow_array((void **)&in->strings, &in->cap_strings, id + 1, sizeof(char *)))
		return 0;
	if (in->cap_strings != old_cap) {
		uint32_t *lens = realloc(in->string_lens, in->cap_strings * sizeof(uint32_t));
		if (!lens)
			return 0;
		in->string_lens = lens;
	}
	char *copy = malloc(n + 1);
	if (!copy)
		return 0;
	memcpy(copy, s, n);
	copy[n] = 0;
	if ((x->used + 1) * 2 > x->cap) {
		if (!index_grow(x)) {
			free(copy);
			return 0;
		}
		for (i = h & (x->cap - 1); x->ids[i]; i = (i + 1) & (x->cap - 1))
			;
	}
	in->strings[id] = copy;
	in->string_lens[id] = (uint32_t)n;
	in->n_strings++;
	x->ids[i] = (uint32_t)id;
	x->hashes[i] = h;
	x->used++;
	struct vrt_record r = { .op = VRT_OP_STRING, .id = id, .bytes = (const uint8_t *)copy, .bytes_len = (uint32_t)n };
	vrt_intern_emit(in, &r);
	return (uint32_t)id;
}

uint32_t vrt_intern_node(struct vrt_intern *in, uint32_t parent, uint8_t kind, uint64_t value, bool *created)
{
	struct vrt_index *x = &in->nodes_index;
	uint64_t h = hash_node(parent, kind, value);
	size_t i = h & (x->cap - 1);
	*created = false;
	for (; x->ids[i]; i = (i + 1) & (x->cap - 1)) {
		const struct vrt_node *nd = &in->nodes[x->ids[i]];
		if (x->hashes[i] == h && nd->parent == parent && nd->kind == kind && nd->value == value)
			return x->ids[i];
	}
	size_t id = in->n_nodes;
	if (id >= UINT32_MAX || !grow_array((void **)&in->nodes, &in->cap_nodes, id + 1, sizeof(struct vrt_node)))
		return 0;
	if ((x->used + 1) * 2 > x->cap) {
		if (!index_grow(x))
			return 0;
		for (i = h & (x->cap - 1); x->ids[i]; i = (i + 1) & (x->cap - 1))
			;
	}
	in->nodes[id] = (struct vrt_node){ parent, kind, value };
	in->n_nodes++;
	x->ids[i] = (uint32_t)id;
	x->hashes[i] = h;
	x->used++;
	*created = true;
	struct vrt_record r = { .op = VRT_OP_STACK, .id = id, .id2 = parent, .aux2 = kind, .aux = value };
	vrt_intern_emit(in, &r);
	return (uint32_t)id;
}
