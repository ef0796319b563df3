/* SPDX-License-Identifier: MIT */
/* The live-set rules (live.h; docs/trace-format.md, "Replay semantics"). */
#include "live.h"

#include <stdlib.h>
#include <string.h>

#include "vramtrace/error.h"

/*
 * A live item as stored: 64 bytes, one cache line. Fields a space never uses share a word:
 * extra is the stream of an allocation or a tensor block, the offset in the handle of a mapping,
 * and a handle's references and mappings. The event count at the birth keeps 48 bits (2.8e14
 * events), beside the device.
 */
struct vrt_live_slot {
	uint64_t addr, size, ts, aux;
	uint64_t extra;
	uint64_t born_phase;
	uint64_t born;   /* born_event | (uint16_t)device << 48 */
	uint32_t stack;
	uint8_t api, op, space;
	uint8_t flags;   /* kind (bits 0-1), seeded (bit 2), a seeded mapping not yet linked (bit 3),
			  * born during a CUDA graph capture (bit 4) */
};
_Static_assert(sizeof(struct vrt_live_slot) == VRT_LIVE_ITEM_BYTES, "a live item is one cache line");
_Static_assert(sizeof(struct vrt_live_slot) + 48 <= VRT_LIVE_BYTES_PER_ITEM, "the bound covers an item");

#define BORN_EVENT_MASK ((1ull << 48) - 1)
#define FLAG_SEEDED 4
#define FLAG_UNLINKED 8
#define FLAG_CAPTURED 16

static int16_t slot_device(const struct vrt_live_slot *l) { return (int16_t)(uint16_t)(l->born >> 48); }
static uint8_t slot_kind(const struct vrt_live_slot *l) { return l->flags & 3; }
static uint32_t handle_refs(const struct vrt_live_slot *l) { return (uint32_t)l->extra; }
static uint32_t handle_maps(const struct vrt_live_slot *l) { return (uint32_t)(l->extra >> 32); }
static void handle_set(struct vrt_live_slot *l, uint32_t refs, uint32_t maps) { l->extra = refs | (uint64_t)maps << 32; }

static void unpack(const struct vrt_live_slot *l, struct vrt_item *it)
{
	bool handle = l->space == VRT_SPACE_HANDLE, map = l->space == VRT_SPACE_MAP;
	bool streams = l->space == VRT_SPACE_ADDR || l->space == VRT_SPACE_BLOCK;
	/* Field by field: a compound literal zeroes the whole item first. */
	it->addr = l->addr;
	it->size = l->size;
	it->ts = l->ts;
	it->aux = l->aux;
	it->aux2 = map ? l->extra : 0;
	it->stream = streams ? l->extra : 0;
	it->born_event = l->born & BORN_EVENT_MASK;
	it->born_phase = l->born_phase;
	it->stack = l->stack;
	it->refs = handle ? handle_refs(l) : 1;
	it->maps = handle ? handle_maps(l) : 0;
	it->api = l->api;
	it->device = slot_device(l);
	it->space = l->space;
	it->op = l->op;
	it->kind = slot_kind(l);
	it->seeded = (l->flags & FLAG_SEEDED) != 0;
	it->captured = (l->flags & FLAG_CAPTURED) != 0;
}

/* ---- the index: linear probing over item positions, at most half full. Each slot keeps its
 * key's hash beside the position: a probe compares hashes in the index and touches an item only
 * when they match, and a deletion finds the home of every slot it moves without touching items. */

static uint32_t key_hash(uint8_t space, uint64_t addr) { return vrt_live_key_hash(space, addr); }

/* Items start at a cache line (malloc aligns to 16 bytes): an item is read from one line, not
 * two. Room for cap items in the block at *mem, whose first `used` items stay: realloc keeps the
 * bytes, and they move to the block's first line boundary if it lies elsewhere now. */
static bool items_resize(struct vrt_live_set *s, size_t cap)
{
	size_t before = s->items ? (size_t)((char *)s->items - (char *)s->items_mem) : 0;
	char *mem = realloc(s->items_mem, cap * sizeof(*s->items) + 64);
	if (!mem)
		return false;
	size_t at = (64 - ((uintptr_t)mem & 63)) & 63;
	if (at != before)
		memmove(mem + at, mem + before, s->used * sizeof(*s->items));
	s->items_mem = mem;
	s->items = (struct vrt_live_slot *)(mem + at);
	s->items_cap = cap;
	return true;
}

int vrt_live_init(struct vrt_live_set *s)
{
	memset(s, 0, sizeof(*s));
	s->cap = 4096;
	s->index = calloc(s->cap, sizeof(*s->index));
	if (s->index && items_resize(s, 1024))
		return 0;
	vrt_live_free(s);
	return VRT_E_NOMEM;
}

void vrt_live_free(struct vrt_live_set *s)
{
	free(s->items_mem);
	free(s->index);
	s->items_mem = NULL;
	s->items = NULL;
	s->index = NULL;
	s->cap = s->items_cap = s->used = 0;
}

/* The index slot that holds item position pos (which is in the index). */
static size_t slot_of_item(const struct vrt_live_set *s, size_t pos)
{
	const struct vrt_live_slot *l = &s->items[pos];
	size_t mask = s->cap - 1, i = key_hash(l->space, l->addr) & mask;
	while (s->index[i].pos1 != pos + 1)
		i = (i + 1) & mask;
	return i;
}

/* The slot of (space, addr), or the empty slot where its probe ends. */
static size_t probe(const struct vrt_live_set *s, uint8_t space, uint64_t addr, uint32_t hash)
{
	size_t mask = s->cap - 1;
	for (size_t i = hash & mask;; i = (i + 1) & mask) {
		struct vrt_live_entry e = s->index[i];
		if (!e.pos1)
			return i;
		if (e.hash == hash && s->items[e.pos1 - 1].addr == addr && s->items[e.pos1 - 1].space == space)
			return i;
	}
}

static struct vrt_live_slot *find(const struct vrt_live_set *s, uint8_t space, uint64_t addr)
{
	if (!s->cap)
		return NULL;
	uint32_t pos1 = s->index[probe(s, space, addr, key_hash(space, addr))].pos1;
	return pos1 ? &s->items[pos1 - 1] : NULL;
}

/* Rehashed from the slots themselves: no item is read. */
static bool grow_index(struct vrt_live_set *s)
{
	size_t cap = s->cap * 2, mask = cap - 1;
	struct vrt_live_entry *index = calloc(cap, sizeof(*index));
	if (!index)
		return false;
	for (size_t k = 0; k < s->cap; k++) {
		if (!s->index[k].pos1)
			continue;
		size_t i = s->index[k].hash & mask;
		while (index[i].pos1)
			i = (i + 1) & mask;
		index[i] = s->index[k];
	}
	free(s->index);
	s->index = index;
	s->cap = cap;
	return true;
}

/* Room for one more item, indexed under (space, addr) of hash `hash`, in the empty index slot
 * `at` where its probe ended (SIZE_MAX: not known); the caller fills it. NULL (and the set's
 * error set) when memory runs out. */
static struct vrt_live_slot *insert(struct vrt_live_set *s, uint8_t space, uint64_t addr, uint32_t hash, size_t at)
{
	if (!s->cap || s->used >= UINT32_MAX - 1) {
		s->error = VRT_E_NOMEM;
		return NULL;
	}
	if ((s->used + 1) * 2 > s->cap) {
		if (!grow_index(s)) {
			s->error = VRT_E_NOMEM;
			return NULL;
		}
		at = SIZE_MAX;
	}
	/* Large arrays are their own mappings, which realloc moves without copying (and whose
	 * alignment it keeps): resident memory stays what the items use. */
	if (s->used == s->items_cap && !items_resize(s, s->items_cap * 2)) {
		s->error = VRT_E_NOMEM;
		return NULL;
	}
	if (at == SIZE_MAX)
		at = probe(s, space, addr, hash);
	s->index[at] = (struct vrt_live_entry){ (uint32_t)(s->used + 1), hash };
	struct vrt_live_slot *l = &s->items[s->used++];
	l->space = space;
	l->addr = addr;
	return l;
}

/* Removes l, which index slot `hole` holds: backward-shift deletion in the index, and the last
 * item moves into l's place. */
static void erase(struct vrt_live_set *s, struct vrt_live_slot *l, size_t hole)
{
	s->held -= l->size;
	size_t pos = (size_t)(l - s->items), mask = s->cap - 1;
	for (size_t i = (hole + 1) & mask; s->index[i].pos1; i = (i + 1) & mask) {
		size_t home = s->index[i].hash & mask;
		bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
		if (stays)
			continue;
		s->index[hole] = s->index[i];
		hole = i;
	}
	s->index[hole] = (struct vrt_live_entry){ 0, 0 };
	size_t last = s->used - 1;
	if (pos != last) {
		s->index[slot_of_item(s, last)].pos1 = (uint32_t)pos + 1;
		s->items[pos] = s->items[last];
	}
	s->used--;
}

/* ---- the rules ---------------------------------------------------------------------------- */

/* l, which index slot `at` holds, ends: on_end is told (it leaves the set alone), then it is
 * gone. */
static void end_at(struct vrt_live_set *s, struct vrt_live_slot *l, size_t at, enum vrt_live_end why,
		   struct vrt_item *out)
{
	struct vrt_item scratch, *it = out ? out : &scratch;
	unpack(l, it);
	if (s->on_end)
		s->on_end(s->ctx, it, why);
	erase(s, l, at);
}

static void end(struct vrt_live_set *s, struct vrt_live_slot *l, enum vrt_live_end why, struct vrt_item *out)
{
	end_at(s, l, slot_of_item(s, (size_t)(l - s->items)), why, out);
}

/* A handle loses a reference or a mapping; it ends when it has neither. */
static bool handle_unref(struct vrt_live_set *s, struct vrt_live_slot *h, bool ref, bool map, enum vrt_live_end why,
			 struct vrt_item *out)
{
	uint32_t refs = handle_refs(h), maps = handle_maps(h);
	if (ref && refs)
		refs--;
	if (map && maps)
		maps--;
	handle_set(h, refs, maps);
	if (refs || maps)
		return false;
	end(s, h, why, out);
	return true;
}

/* A mapping counts in its handle's mappings and takes its kind and device. */
static void link_to_handle(struct vrt_live_set *s, struct vrt_live_slot *map)
{
	struct vrt_live_slot *h = find(s, VRT_SPACE_HANDLE, map->aux);
	if (!h)
		return;
	handle_set(h, handle_refs(h), handle_maps(h) + 1);
	map->flags = (uint8_t)((map->flags & ~3) | slot_kind(h));
	map->born = (map->born & BORN_EVENT_MASK) | (h->born & ~BORN_EVENT_MASK);
}

/* At the end of a seeding checkpoint: its mappings join their handles, whatever the order the
 * checkpoint listed them in. */
static void link_seeded(struct vrt_live_set *s)
{
	for (size_t i = 0; i < s->used; i++) {
		struct vrt_live_slot *l = &s->items[i];
		if (!(l->flags & FLAG_UNLINKED))
			continue;
		l->flags &= (uint8_t)~FLAG_UNLINKED;
		link_to_handle(s, l);
	}
}

static void born(struct vrt_live_set *s, const struct vrt_record *r, uint8_t op, bool seeded, struct vrt_live_change *c,
		 struct vrt_item *item)
{
	uint8_t space = vrt_space_of(op);
	if (!space)
		return;
	if (op == VRT_OP_PHYS_CREATE && r->api == VRT_API_CU_MEM_RETAIN_HANDLE) {
		struct vrt_live_slot *h = find(s, VRT_SPACE_HANDLE, r->addr);
		if (h) {
			handle_set(h, handle_refs(h) + 1, handle_maps(h));
			c->outcome = VRT_LIVE_RETAINED;
			unpack(h, item);
		}
		return;
	}
	uint32_t hash = key_hash(space, r->addr);
	size_t at = s->cap ? probe(s, space, r->addr, hash) : SIZE_MAX;
	struct vrt_live_slot *old = at != SIZE_MAX && s->index[at].pos1 ? &s->items[s->index[at].pos1 - 1] : NULL;
	if (old && old->ts > r->ts) {
		c->outcome = VRT_LIVE_STALE;
		unpack(old, item);
		return;
	}
	if (old) {
		end_at(s, old, at, VRT_END_REPLACED, NULL);
		at = SIZE_MAX; /* the index changed */
	}
	c->outcome = VRT_LIVE_REFUSED;
	if (r->size > VRT_HELD_MAX - s->held) {
		s->implausible++;
		return;
	}
	struct vrt_live_slot *l = insert(s, space, r->addr, hash, at);
	if (!l)
		return;
	s->held += r->size;
	l->size = r->size;
	l->ts = r->ts;
	l->aux = r->aux;
	l->extra = space == VRT_SPACE_MAP ? r->aux2 : r->stream;
	l->born_phase = s->phase_seq;
	l->born = (s->events & BORN_EVENT_MASK) | (uint64_t)(uint16_t)(int16_t)r->device << 48;
	l->stack = r->stack;
	l->api = (uint8_t)r->api;
	l->op = op == VRT_OP_SEED ? VRT_OP_ALLOC : op; /* a seed is taken as an allocation */
	l->flags = (uint8_t)((r->kind & 3) | (seeded ? FLAG_SEEDED : 0) | (s->capturing && !seeded ? FLAG_CAPTURED : 0));
	bool restated = r->op == VRT_OP_CP_LIVE;
	if (space == VRT_SPACE_HANDLE) /* a checkpoint restates the references in y */
		handle_set(l, restated ? (uint32_t)r->aux2 : 1, 0);
	if (space == VRT_SPACE_MAP && restated)
		l->flags |= FLAG_UNLINKED; /* its handle may come later in the checkpoint (link_seeded) */
	else if (space == VRT_SPACE_MAP)
		link_to_handle(s, l);
	c->outcome = VRT_LIVE_BORN;
	unpack(l, item);
}

/* The mappings an unmap of [addr, end) covers after the first (ending at addr): each ends, and
 * its handle loses the mapping. */
static void unmap_rest(struct vrt_live_set *s, uint64_t addr, uint64_t end_addr)
{
	while (addr < end_addr) {
		struct vrt_live_slot *m = find(s, VRT_SPACE_MAP, addr);
		if (!m)
			break;
		uint64_t handle = m->aux, n = m->size;
		end(s, m, VRT_END_COVERED, NULL);
		struct vrt_live_slot *h = find(s, VRT_SPACE_HANDLE, handle);
		if (h)
			handle_unref(s, h, false, true, VRT_END_UNREFERENCED, NULL);
		addr += n;
	}
}

static void release(struct vrt_live_set *s, const struct vrt_record *r, struct vrt_live_change *c,
		    struct vrt_item *item)
{
	uint8_t space = vrt_space_of(r->op);
	size_t at = s->cap ? probe(s, space, r->addr, key_hash(space, r->addr)) : 0;
	struct vrt_live_slot *l = s->cap && s->index[at].pos1 ? &s->items[s->index[at].pos1 - 1] : NULL;
	if (!l) {
		s->unknown_releases++;
		c->outcome = VRT_LIVE_UNKNOWN;
		return;
	}
	if (l->ts > r->ts) { /* stale: names an earlier incarnation */
		c->outcome = VRT_LIVE_STALE;
		unpack(l, item);
		return;
	}
	if (space == VRT_SPACE_HANDLE) {
		unpack(l, item);
		c->outcome = handle_unref(s, l, true, false, VRT_END_RELEASED, item) ? VRT_LIVE_ENDED
										       : VRT_LIVE_DEREFERENCED;
		return;
	}
	uint64_t handle = l->aux, size = l->size, end_addr = r->addr + (r->size ? r->size : size);
	end_at(s, l, at, VRT_END_RELEASED, item);
	c->outcome = VRT_LIVE_ENDED;
	if (space != VRT_SPACE_MAP)
		return;
	struct vrt_live_slot *h = find(s, VRT_SPACE_HANDLE, handle);
	if (h)
		handle_unref(s, h, false, true, VRT_END_UNREFERENCED, NULL);
	unmap_rest(s, r->addr + size, end_addr);
}

static void resize(struct vrt_live_set *s, const struct vrt_record *r, struct vrt_live_change *c,
		   struct vrt_item *item)
{
	struct vrt_live_slot *l = find(s, VRT_SPACE_BLOCK, r->addr);
	if (!l || r->size == l->size)
		return;
	if (r->size > l->size && r->size - l->size > VRT_HELD_MAX - s->held) {
		s->implausible++;
		c->outcome = VRT_LIVE_REFUSED;
		return;
	}
	s->held = s->held - l->size + r->size;
	c->resize = (int64_t)r->size - (int64_t)l->size;
	l->size = r->size;
	c->outcome = VRT_LIVE_RESIZED;
	unpack(l, item);
}

static void context_reset(struct vrt_live_set *s, int device)
{
	for (size_t i = 0; i < s->used;) {
		struct vrt_live_slot *l = &s->items[i];
		bool gone = slot_device(l) == device && slot_kind(l) != VRT_KIND_HOST_PINNED &&
			    (l->space == VRT_SPACE_ADDR || l->space == VRT_SPACE_BLOCK);
		if (gone) /* the last item takes its place: look at position i again */
			end(s, l, VRT_END_RESET, NULL);
		else
			i++;
	}
}

bool vrt_live_seeding_after(bool seeding, uint64_t events, const struct vrt_record *r)
{
	if (r->op == VRT_OP_CP_BEGIN)
		return !events || r->id == VRT_CP_ATTACH;
	return r->op == VRT_OP_CP_END ? false : seeding;
}

static void apply_checkpoint(struct vrt_live_set *s, const struct vrt_record *r, struct vrt_live_change *c,
			     struct vrt_item *item)
{
	switch (r->op) {
	case VRT_OP_CP_LIVE: {
		uint8_t space = vrt_space_of((uint32_t)r->id2);
		if (s->seeding && space && !find(s, space, r->addr))
			born(s, r, (uint8_t)r->id2, true, c, item);
		return;
	}
	case VRT_OP_CP_PHASE:
		if (!s->events && r->aux > s->phase_seq)
			s->phase_seq = r->aux;
		return;
	case VRT_OP_CP_BEGIN:
		s->seeding = vrt_live_seeding_after(s->seeding, s->events, r);
		return;
	case VRT_OP_CP_END:
		if (s->seeding)
			link_seeded(s);
		s->seeding = false;
		return;
	}
}

/* Flattened: the one call per record, its helpers inlined (about 5% of a replay). */
__attribute__((flatten)) void vrt_live_apply_into(struct vrt_live_set *s, const struct vrt_record *r,
						  struct vrt_live_change *c, struct vrt_item *item)
{
	c->outcome = VRT_LIVE_NONE; /* *item is written with the outcome that makes it valid */
	c->resize = 0;
	if (r->op >= VRT_OP_CP_BEGIN && r->op <= VRT_OP_CP_END) {
		apply_checkpoint(s, r, c, item);
		return;
	}
	s->events++;
	switch (r->op) {
	case VRT_OP_ALLOC: case VRT_OP_PHYS_CREATE: case VRT_OP_MAP: case VRT_OP_VA_RESERVE: case VRT_OP_IMPORT:
	case VRT_OP_BLOCK_ALLOC: case VRT_OP_SEED:
		born(s, r, r->op, r->op == VRT_OP_SEED, c, item);
		break;
	case VRT_OP_FREE: case VRT_OP_PHYS_RELEASE: case VRT_OP_UNMAP: case VRT_OP_VA_FREE: case VRT_OP_IMPORT_CLOSE:
	case VRT_OP_BLOCK_FREE:
		release(s, r, c, item);
		break;
	case VRT_OP_BLOCK_SIZE:
		resize(s, r, c, item);
		break;
	case VRT_OP_CONTEXT:
		if (r->id == 0)
			context_reset(s, r->device);
		break;
	case VRT_OP_PHASE_ENTER:
		s->phase_seq++;
		break;
	}
}

void vrt_live_apply(struct vrt_live_set *s, const struct vrt_record *r, struct vrt_live_change *out)
{
	struct vrt_live_change scratch, *c = out ? out : &scratch;
	vrt_live_apply_into(s, r, c, &c->item);
}

bool vrt_live_lookup(const struct vrt_live_set *s, uint8_t space, uint64_t addr, struct vrt_item *out)
{
	const struct vrt_live_slot *l = find(s, space, addr);
	if (l && out)
		unpack(l, out);
	return l != NULL;
}

void vrt_live_at(const struct vrt_live_set *s, size_t i, struct vrt_item *out) { unpack(&s->items[i], out); }

void vrt_live_each(const struct vrt_live_set *s, void (*fn)(void *ctx, const struct vrt_item *it), void *ctx)
{
	struct vrt_item it;
	for (size_t i = 0; i < s->used; i++) {
		unpack(&s->items[i], &it);
		fn(ctx, &it);
	}
}
