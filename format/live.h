/* SPDX-License-Identifier: MIT */
/*
 * The live set and its rules, written once (docs/trace-format.md, "Replay semantics"): the
 * preload's collector applies them to what it is about to write, and every checkpoint it writes
 * restates the result; the analyzer's model applies them to what it reads. Both therefore hold
 * the same items after the same records, by construction.
 *
 * The rules: an allocation replaces an older item at its address (whose release was lost or
 * comes late), and a record older than the item it names is stale and leaves it alone; VMM
 * physical memory lives until its handle is released and every mapping of it is gone, and one
 * unmap may cover several mappings; a context reset ends the device's allocations and tensor
 * blocks (not pinned host memory); checkpoint items are taken in only at the start of a replay
 * (a wrapped ring) or at an attach.
 *
 * Memory is bounded by what is live: 64 bytes per item in one dense array (the order items are
 * visited in; an ending moves the last item into its place) plus an open-addressing index of
 * item positions by (space, address) with their hashes, 8-byte slots at most half full: 16 to 32
 * bytes per item, 48 while it doubles (VRT_LIVE_BYTES_PER_ITEM bounds the lot). One thread at a
 * time.
 */
#ifndef VRAMTRACE_LIVE_H
#define VRAMTRACE_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vramtrace/record.h"

/* The most bytes all live items together may hold (64 PiB, far beyond any machine). Items that
 * would cross it come from a damaged trace and are refused, so that every sum of live sizes (the
 * analyzer's totals, its reports' per-site sums) fits an int64_t with room to scale. */
#define VRT_HELD_MAX (1ull << 56)
#define VRT_LIVE_BYTES_PER_ITEM 112
#define VRT_LIVE_ITEM_BYTES 64 /* an item as the set stores it */

/* What an item's address names; the key of the live set is (space, address). */
enum vrt_space {
	VRT_SPACE_ADDR = 1,   /* device, pinned, managed allocations (and seeds) by address */
	VRT_SPACE_HANDLE = 2, /* VMM physical allocations by handle */
	VRT_SPACE_MAP = 3,    /* VMM mappings by virtual address */
	VRT_SPACE_VA = 4,     /* reserved virtual address ranges */
	VRT_SPACE_BLOCK = 5,  /* caching-allocator blocks (tensors) */
	VRT_SPACE_IMPORT = 6, /* memory of another process mapped here */
};

/*
 * One live item, as the set hands it out (it stores them packed, live.c). aux2 is the offset in
 * the handle of a MAP and 0 otherwise; stream is 0 for spaces whose records carry none (HANDLE,
 * MAP, VA, IMPORT); refs and maps count for a HANDLE only (1 and 0 otherwise). A MAP takes its
 * handle's kind and device.
 */
struct vrt_item {
	uint64_t addr, size, ts, aux, aux2, stream;
	uint64_t born_event;  /* the set's event count at its birth (1 = the first event) */
	uint64_t born_phase;  /* phase invocations entered before its birth */
	uint32_t stack;
	uint32_t refs, maps;  /* HANDLE */
	uint16_t api;
	int16_t device;
	uint8_t space, op, kind; /* op: the record that made it live (SEED for a seed) */
	uint8_t seeded;       /* came from a checkpoint or a SEED: born before the recorded history */
	uint8_t captured;     /* born while its thread captured a CUDA graph (made for the graph) */
};

/* Why an item ended. */
enum vrt_live_end {
	VRT_END_RELEASED,     /* the record's own item: its release, or a handle's last reference */
	VRT_END_REPLACED,     /* an allocation at its address: its release was lost or comes late */
	VRT_END_COVERED,      /* a further mapping in the range of one unmap */
	VRT_END_UNREFERENCED, /* a released handle whose last mapping an unmap ended */
	VRT_END_RESET,        /* its device's context was reset */
};

/* What one record did to the item it names. */
enum vrt_live_outcome {
	VRT_LIVE_NONE,     /* not an op of the live set, or a retain of an unknown handle */
	VRT_LIVE_BORN,     /* item: the one born */
	VRT_LIVE_ENDED,    /* item: the one ended (also told to on_end as RELEASED) */
	VRT_LIVE_RETAINED, /* item: a handle that gained a reference */
	VRT_LIVE_DEREFERENCED, /* item: a released handle that lives on while it is mapped */
	VRT_LIVE_RESIZED,  /* item: the block, with its new size; resize: new minus old */
	VRT_LIVE_STALE,    /* older than the live item it names: item is that one, unchanged */
	VRT_LIVE_UNKNOWN,  /* a release of nothing live (allocated before tracing, or not ours) */
	VRT_LIVE_REFUSED,  /* a birth or growth refused: past VRT_HELD_MAX, or out of memory */
};

struct vrt_live_change {
	enum vrt_live_outcome outcome;
	struct vrt_item item;
	int64_t resize;
};

struct vrt_live_slot;

/* One slot of the set's index (live.c). */
struct vrt_live_entry {
	uint32_t pos1; /* item position + 1; 0: empty */
	uint32_t hash; /* vrt_live_key_hash of the item's (space, address) */
};

struct vrt_live_set {
	struct vrt_live_slot *items; /* in items_mem, from its first cache line boundary */
	void *items_mem;
	struct vrt_live_entry *index; /* item positions by (space, address), with their hashes */
	size_t cap;             /* index slots, a power of two */
	size_t used, items_cap; /* live items; room in items */
	int error;              /* VRT_E_NOMEM once an item could not be stored: the set is incomplete */
	uint64_t held;          /* sum of the sizes of all live items, every space: <= VRT_HELD_MAX */
	uint64_t implausible;   /* births and growths refused for crossing VRT_HELD_MAX */
	uint64_t unknown_releases;
	uint64_t events;        /* event records applied (checkpoint records are not events) */
	uint64_t phase_seq;     /* phase invocations entered so far, all names */
	bool seeding;           /* inside a checkpoint whose items are to be taken in */
	bool capturing;         /* the record under way is made for a CUDA graph: set by the caller
				 * (the analyzer's model) before it applies a birth */
	/* Told of every item that ends, with why, before it is gone (may be NULL). It must not
	 * apply records to this set. */
	void (*on_end)(void *ctx, const struct vrt_item *it, enum vrt_live_end why);
	void *ctx;
};

int vrt_live_init(struct vrt_live_set *s);
/* Frees the items; the counters stay readable. */
void vrt_live_free(struct vrt_live_set *s);
/* Applies one record (any op; those outside the live set count as events or do nothing). */
void vrt_live_apply(struct vrt_live_set *s, const struct vrt_record *r, struct vrt_live_change *out);
/* vrt_live_apply with the change's item written to *item instead of out->item (a caller that
 * keeps it elsewhere saves a copy); the item on_end is told of may be *item itself. */
void vrt_live_apply_into(struct vrt_live_set *s, const struct vrt_record *r, struct vrt_live_change *c,
			 struct vrt_item *item);

/* The space a live-set op names, 0 for other ops. */
static inline uint8_t vrt_space_of(uint32_t op)
{
	switch (op) {
	case VRT_OP_ALLOC: case VRT_OP_FREE: case VRT_OP_SEED: return VRT_SPACE_ADDR;
	case VRT_OP_PHYS_CREATE: case VRT_OP_PHYS_RELEASE: return VRT_SPACE_HANDLE;
	case VRT_OP_MAP: case VRT_OP_UNMAP: return VRT_SPACE_MAP;
	case VRT_OP_VA_RESERVE: case VRT_OP_VA_FREE: return VRT_SPACE_VA;
	case VRT_OP_BLOCK_ALLOC: case VRT_OP_BLOCK_FREE: case VRT_OP_BLOCK_SIZE: return VRT_SPACE_BLOCK;
	case VRT_OP_IMPORT: case VRT_OP_IMPORT_CLOSE: return VRT_SPACE_IMPORT;
	}
	return 0;
}

static inline uint32_t vrt_live_key_hash(uint8_t space, uint64_t addr)
{
	uint64_t h = (addr ^ ((uint64_t)space << 59)) * 0x9e3779b97f4a7c15ull;
	return (uint32_t)(h ^ (h >> 31));
}

/* Whether checkpoint items are taken in after r, given whether they were before and how many
 * events came first: from a checkpoint that opens the replay or an attach's, to its end. */
bool vrt_live_seeding_after(bool seeding, uint64_t events, const struct vrt_record *r);
/* Holds memory of its own (an allocation or a VMM handle; not a mapping, a range or a block). */
static inline bool vrt_item_counted(const struct vrt_item *it)
{
	return it->space == VRT_SPACE_ADDR || it->space == VRT_SPACE_HANDLE;
}

/* Brings what applying a record will read into the caches ahead of it, the set unchanged: the
 * item that `soon` names (its index slot read now, which `later` should have brought in a few
 * records earlier), and the index slot of `later`. Either may be NULL. Always inlined: GCC takes
 * a function whose only effect is a prefetch for a pure one, and drops the call. */
static inline __attribute__((always_inline)) void vrt_live_prefetch(const struct vrt_live_set *s,
								     const struct vrt_record *soon,
								     const struct vrt_record *later)
{
	size_t mask = s->cap - 1;
	uint8_t space = soon ? vrt_space_of(soon->op) : 0;
	if (space && s->cap) {
		uint32_t pos1 = s->index[vrt_live_key_hash(space, soon->addr) & mask].pos1;
		if (pos1)
			__builtin_prefetch((const char *)s->items + (size_t)(pos1 - 1) * VRT_LIVE_ITEM_BYTES);
	}
	space = later ? vrt_space_of(later->op) : 0;
	if (space && s->cap)
		__builtin_prefetch(&s->index[vrt_live_key_hash(space, later->addr) & mask]);
}

bool vrt_live_lookup(const struct vrt_live_set *s, uint8_t space, uint64_t addr, struct vrt_item *out);
/* Item i of 0..used-1, in the set's order (which an ending changes). */
void vrt_live_at(const struct vrt_live_set *s, size_t i, struct vrt_item *out);
void vrt_live_each(const struct vrt_live_set *s, void (*fn)(void *ctx, const struct vrt_item *it), void *ctx);

#endif /* VRAMTRACE_LIVE_H */
