/* SPDX-License-Identifier: MIT */
/*
 * Definitions the collector hands out ids for: strings and stack-trie nodes. Each new one is
 * encoded once into the pending TABLES buffer (and into the complete copy the ring needs at its
 * first wrap). Collector thread only.
 */
#ifndef VRAMTRACE_INTERN_H
#define VRAMTRACE_INTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "vramtrace/record.h"

struct vrt_node {
	uint32_t parent;
	uint8_t kind;   /* enum vrt_frame_kind */
	uint64_t value;
};

struct vrt_index {
	uint32_t *ids;  /* 0 = empty */
	uint64_t *hashes;
	size_t cap;
	size_t used;
};

struct vrt_intern {
	struct vrt_index strings_index;
	char **strings;       /* by id; [0] unused */
	uint32_t *string_lens;
	size_t n_strings, cap_strings;
	struct vrt_index nodes_index;
	struct vrt_node *nodes; /* by id; [0] is the root */
	size_t n_nodes, cap_nodes;
	struct vrt_buf *pending; /* new definitions since the last TABLES chunk */
	struct vrt_buf *all;     /* every definition, for ring consolidation */
};

int vrt_intern_init(struct vrt_intern *in, struct vrt_buf *pending, struct vrt_buf *all);
void vrt_intern_free(struct vrt_intern *in);
/* Both return 0 when out of memory (0 is never a valid id). */
uint32_t vrt_intern_string(struct vrt_intern *in, const char *s, size_t n);
uint32_t vrt_intern_node(struct vrt_intern *in, uint32_t parent, uint8_t kind, uint64_t value, bool *created);
/* Appends a table record to pending and all. */
void vrt_intern_emit(struct vrt_intern *in, const struct vrt_record *r);

#endif /* VRAMTRACE_INTERN_H */
