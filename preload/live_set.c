/* SPDX-License-Identifier: MIT */
#include "live_set.h"

#include <stdlib.h>
#include <string.h>

#include "vramtrace/error.h"

static size_t slot_of(const struct vrt_live_set *s, uint8_t space, uint64_t addr)
{
	uint64_t h = (addr ^ ((uint64_t)space << 59)) * 0x9e3779b97f4a7c15ull;
	return (size_t)(h ^ (h >> 31)) & (s->cap - 1);
}

int vrt_live_init(struct vrt_live_set *s)
{
	s->cap = 1024;
	s->used = 0;
	s->slots = calloc(s->cap, sizeof(*s->slots));
	return s->slots ? 0 : VRT_E_NOMEM;
}

void vrt_live_free(struct vrt_live_set *s)
{
	free(s->slots);
	memset(s, 0, sizeof(*s));
}

struct vrt_live *vrt_live_find(struct vrt_live_set *s, uint8_t space, uint64_t addr)
{
	for (size_t i = slot_of(s, space, addr);; i = (i + 1) & (s->cap - 1)) {
		struct vrt_live *e = &s->slots[i];
		if (!e->space)
			return NULL;
		if (e->space == space && e->addr == addr)
			return e;
	}
}

static int grow(struct vrt_live_set *s)
{
	struct vrt_live_set bigger = { calloc(s->cap * 2, sizeof(struct vrt_live)), s->cap * 2, 0 };
	if (!bigger.slots)
		return VRT_E_NOMEM;
	for (size_t i = 0; i < s->cap; i++) {
		struct vrt_live *e = &s->slots[i];
		if (!e->space)
			continue;
		size_t j = slot_of(&bigger, e->space, e->addr);
		while (bigger.slots[j].space)
			j = (j + 1) & (bigger.cap - 1);
		bigger.slots[j] = *e;
		bigger.used++;
	}
	free(s->slots);
	*s = bigger;
	return 0;
}

struct vrt_live *vrt_live_upsert(struct vrt_live_set *s, uint8_t space, uint64_t addr, bool *created)
{
	struct vrt_live *e = vrt_live_find(s, space, addr);
	*created = false;
	if (e)
		return e;
	if ((s->used + 1) * 4 > s->cap * 3 && grow(s))
		return NULL;
	size_t i = slot_of(s, space, addr);
	while (s->slots[i].space)
		i = (i + 1) & (s->cap - 1);
	e = &s->slots[i];
	memset(e, 0, sizeof(*e));
	e->space = space;
	e->addr = addr;
	s->used++;
	*created = true;
	return e;
}

/* Backward-shift deletion: later entries of the probe run move up into the hole. */
void vrt_live_remove(struct vrt_live_set *s, struct vrt_live *e)
{
	size_t hole = (size_t)(e - s->slots);
	size_t mask = s->cap - 1;
	for (size_t i = (hole + 1) & mask; s->slots[i].space; i = (i + 1) & mask) {
		size_t home = slot_of(s, s->slots[i].space, s->slots[i].addr);
		/* Move i into the hole unless its home lies cyclically in (hole, i]. */
		bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
		if (stays)
			continue;
		s->slots[hole] = s->slots[i];
		hole = i;
	}
	s->slots[hole].space = 0;
	s->used--;
}
