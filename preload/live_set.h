/* SPDX-License-Identifier: MIT */
/*
 * What is alive right now, keyed by (space, address). Collector thread only. Linear probing with
 * backward-shift deletion, so lookups never wade through tombstones after long runs.
 */
#ifndef VRAMTRACE_LIVE_SET_H
#define VRAMTRACE_LIVE_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum vrt_space {
	VRT_SPACE_ADDR = 1,   /* device, pinned, managed allocations by address */
	VRT_SPACE_HANDLE = 2, /* VMM physical allocations by handle */
	VRT_SPACE_MAP = 3,    /* VMM mappings by virtual address */
	VRT_SPACE_VA = 4,     /* reserved virtual address ranges */
	VRT_SPACE_BLOCK = 5,  /* PyTorch caching-allocator blocks (tensors) */
	VRT_SPACE_IMPORT = 6, /* memory of another process mapped here */
};

struct vrt_live {
	uint64_t addr;
	uint64_t size;
	uint64_t ts;     /* ts units */
	uint64_t aux;
	uint64_t aux2;
	uint64_t stream;
	uint32_t stack;
	uint32_t refs;   /* HANDLE: references (create + retains); mappings are counted in maps */
	uint32_t maps;   /* HANDLE: live mappings of it */
	uint16_t api;
	int16_t device;
	uint8_t space;   /* 0: empty slot */
	uint8_t op;      /* the op that made it live */
	uint8_t kind;
	uint8_t pad;
};

struct vrt_live_set {
	struct vrt_live *slots;
	size_t cap;  /* power of two */
	size_t used;
};

int vrt_live_init(struct vrt_live_set *s);
void vrt_live_free(struct vrt_live_set *s);
struct vrt_live *vrt_live_find(struct vrt_live_set *s, uint8_t space, uint64_t addr);
/* The entry for (space, addr), created empty if absent; NULL only when out of memory. */
struct vrt_live *vrt_live_upsert(struct vrt_live_set *s, uint8_t space, uint64_t addr, bool *created);
void vrt_live_remove(struct vrt_live_set *s, struct vrt_live *e);

#endif /* VRAMTRACE_LIVE_SET_H */
