/* SPDX-License-Identifier: MIT */
/*
 * The live model follows the same rules as the preload's live set (preload/collector.c):
 * an allocation replaces an older item at its address, a release older than the item it names
 * is stale and ignored, VMM physical memory stays counted until its handle is released and every
 * mapping of it is gone, and a context reset drops that device's allocations.
 */
#include "model.h"

#include <stdlib.h>
#include <string.h>

#include "vramtrace/error.h"

int vrt_device_slot(int device) { return device >= 0 && device < VRT_MAX_DEVICES ? device : VRT_HOST_SLOT; }

bool vrt_item_counted(const struct vrt_item *it) { return it->space == VRT_IS_ADDR || it->space == VRT_IS_HANDLE; }

bool vrt_effect_only_own(const struct vrt_effect *e)
{
	if (e->kind == VRT_EFFECT_NONE)
		return !e->delta;
	bool counted = e->item.space == VRT_IS_BLOCK || vrt_item_counted(&e->item);
	int64_t own = !counted ? 0
		      : e->kind == VRT_EFFECT_BORN ? (int64_t)e->item.size
		      : e->kind == VRT_EFFECT_DIED ? -(int64_t)e->item.size
						   : e->delta;
	return e->delta == own;
}

/*
 * A live item as stored: 64 bytes, one cache line. Fields a space never uses share a word:
 * extra is the stream of an allocation or a tensor block, the offset in the handle of a mapping,
 * and a handle's references and mappings. The event index of the birth keeps 48 bits (2.8e14
 * events), beside the device.
 */
struct vrt_live {
	uint64_t addr, size, ts, aux;
	uint64_t extra;
	uint64_t born_phase;
	uint64_t born;   /* born_event | (uint16_t)device << 48 */
	uint32_t stack;
	uint8_t api, op, space;
	uint8_t flags;   /* kind (bits 0-1), seeded (bit 2) */
};
_Static_assert(sizeof(struct vrt_live) == 64, "a live item is one cache line");

#define BORN_EVENT_MASK ((1ull << 48) - 1)

static int16_t live_device(const struct vrt_live *l) { return (int16_t)(uint16_t)(l->born >> 48); }
static uint8_t live_kind(const struct vrt_live *l) { return l->flags & 3; }
static uint32_t handle_refs(const struct vrt_live *l) { return (uint32_t)l->extra; }
static uint32_t handle_maps(const struct vrt_live *l) { return (uint32_t)(l->extra >> 32); }
static void handle_set(struct vrt_live *l, uint32_t refs, uint32_t maps) { l->extra = refs | (uint64_t)maps << 32; }

static void unpack(const struct vrt_live *l, struct vrt_item *it)
{
	bool handle = l->space == VRT_IS_HANDLE, map = l->space == VRT_IS_MAP;
	bool streams = l->space == VRT_IS_ADDR || l->space == VRT_IS_BLOCK;
	*it = (struct vrt_item){
		.addr = l->addr, .size = l->size, .ts = l->ts, .aux = l->aux, .aux2 = map ? l->extra : 0,
		.stream = streams ? l->extra : 0, .born_event = l->born & BORN_EVENT_MASK, .born_phase = l->born_phase,
		.stack = l->stack, .refs = handle ? handle_refs(l) : 1, .maps = handle ? handle_maps(l) : 0,
		.api = l->api, .device = live_device(l), .space = l->space, .op = l->op, .kind = live_kind(l),
		.seeded = (l->flags >> 2) & 1,
	};
}

/* The index: linear probing over item positions, at most half full, so that a probe rarely
 * touches an item that is not the one looked for. */
static uint64_t key_hash(uint8_t space, uint64_t addr) { return (addr ^ ((uint64_t)space << 59)) * 0x9e3779b97f4a7c15ull; }

static size_t home_of(size_t cap, uint8_t space, uint64_t addr)
{
	uint64_t h = key_hash(space, addr);
	return (size_t)(h ^ (h >> 31)) & (cap - 1);
}

int vrt_model_init(struct vrt_model *m)
{
	memset(m, 0, sizeof(*m));
	m->cap = 4096;
	m->items_cap = 1024;
	m->index = calloc(m->cap, sizeof(*m->index));
	m->items = malloc(m->items_cap * sizeof(*m->items));
	if (m->index && m->items)
		return 0;
	vrt_model_free(m);
	return VRT_E_NOMEM;
}

/* Frees the live set; the totals stay readable. */
void vrt_model_free(struct vrt_model *m)
{
	free(m->items);
	free(m->index);
	m->items = NULL;
	m->index = NULL;
	m->cap = m->items_cap = m->used = 0;
}

/* The index slot that holds item position pos (which is in the index). */
static size_t slot_of_item(const struct vrt_model *m, size_t pos)
{
	const struct vrt_live *l = &m->items[pos];
	size_t i = home_of(m->cap, l->space, l->addr);
	while (m->index[i] != pos + 1)
		i = (i + 1) & (m->cap - 1);
	return i;
}

static struct vrt_live *find(struct vrt_model *m, uint8_t space, uint64_t addr)
{
	if (!m->cap)
		return NULL;
	for (size_t i = home_of(m->cap, space, addr);; i = (i + 1) & (m->cap - 1)) {
		uint32_t v = m->index[i];
		if (!v)
			return NULL;
		struct vrt_live *l = &m->items[v - 1];
		if (l->addr == addr && l->space == space)
			return l;
	}
}

static bool grow_index(struct vrt_model *m)
{
	size_t cap = m->cap * 2;
	uint32_t *index = calloc(cap, sizeof(*index));
	if (!index)
		return false;
	for (size_t pos = 0; pos < m->used; pos++) {
		size_t i = home_of(cap, m->items[pos].space, m->items[pos].addr);
		while (index[i])
			i = (i + 1) & (cap - 1);
		index[i] = (uint32_t)pos + 1;
	}
	free(m->index);
	m->index = index;
	m->cap = cap;
	return true;
}

/* Room for one more item, indexed under (space, addr); the caller fills it. NULL (and the
 * model's error set) when memory runs out. */
static struct vrt_live *insert(struct vrt_model *m, uint8_t space, uint64_t addr)
{
	if (!m->cap || m->used >= UINT32_MAX - 1) {
		m->error = VRT_E_NOMEM;
		return NULL;
	}
	if ((m->used + 1) * 2 > m->cap && !grow_index(m)) {
		m->error = VRT_E_NOMEM;
		return NULL;
	}
	if (m->used == m->items_cap) {
		/* Large arrays are their own mappings, which realloc moves without copying: resident
		 * memory stays what the items use. */
		size_t ncap = m->items_cap * 2;
		struct vrt_live *items = realloc(m->items, ncap * sizeof(*items));
		if (!items) {
			m->error = VRT_E_NOMEM;
			return NULL;
		}
		m->items = items;
		m->items_cap = ncap;
	}
	size_t i = home_of(m->cap, space, addr);
	while (m->index[i])
		i = (i + 1) & (m->cap - 1);
	m->index[i] = (uint32_t)(m->used + 1);
	struct vrt_live *l = &m->items[m->used++];
	l->space = space;
	l->addr = addr;
	return l;
}

/* Removes l: backward-shift deletion in the index, and the last item moves into l's place. */
static void erase(struct vrt_model *m, struct vrt_live *l)
{
	m->held -= l->size;
	size_t pos = (size_t)(l - m->items), mask = m->cap - 1;
	size_t hole = slot_of_item(m, pos);
	for (size_t i = (hole + 1) & mask; m->index[i]; i = (i + 1) & mask) {
		const struct vrt_live *x = &m->items[m->index[i] - 1];
		size_t home = home_of(m->cap, x->space, x->addr);
		bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
		if (stays)
			continue;
		m->index[hole] = m->index[i];
		hole = i;
	}
	m->index[hole] = 0;
	size_t last = m->used - 1;
	if (pos != last) {
		m->index[slot_of_item(m, last)] = (uint32_t)pos + 1;
		m->items[pos] = m->items[last];
	}
	m->used--;
}

static void count(struct vrt_model *m, const struct vrt_live *l, int64_t delta, struct vrt_effect *e)
{
	int d = vrt_device_slot(live_device(l));
	if (l->space == VRT_IS_BLOCK) {
		m->tensors[d] += delta;
		if (m->tensors[d] > m->tensor_peak[d]) {
			m->tensor_peak[d] = m->tensors[d];
			m->tensor_peak_ts[d] = m->last_ts;
			m->tensor_peak_event[d] = m->events;
		}
		e->delta += delta; /* born() may have added the death of an item it replaced */
		e->tensor = true;
		return;
	}
	if (l->space == VRT_IS_IMPORT) {
		m->imported[d] += delta;
		return;
	}
	if (l->space == VRT_IS_VA) {
		m->reserved_va += delta;
		return;
	}
	if (l->space != VRT_IS_ADDR && l->space != VRT_IS_HANDLE)
		return;
	uint8_t kind = live_kind(l);
	int64_t *live = &m->live[d][kind];
	*live += delta;
	if (*live > m->peak[d][kind]) {
		m->peak[d][kind] = *live;
		m->peak_ts[d][kind] = m->last_ts;
		m->peak_event[d][kind] = m->events;
	}
	e->delta += delta;
}

static uint8_t space_of(uint32_t op)
{
	switch (op) {
	case VRT_OP_ALLOC: case VRT_OP_FREE: case VRT_OP_SEED: return VRT_IS_ADDR;
	case VRT_OP_PHYS_CREATE: case VRT_OP_PHYS_RELEASE: return VRT_IS_HANDLE;
	case VRT_OP_MAP: case VRT_OP_UNMAP: return VRT_IS_MAP;
	case VRT_OP_VA_RESERVE: case VRT_OP_VA_FREE: return VRT_IS_VA;
	case VRT_OP_BLOCK_ALLOC: case VRT_OP_BLOCK_FREE: case VRT_OP_BLOCK_SIZE: return VRT_IS_BLOCK;
	case VRT_OP_IMPORT: case VRT_OP_IMPORT_CLOSE: return VRT_IS_IMPORT;
	}
	return 0;
}

static void died(struct vrt_model *m, struct vrt_live *l, struct vrt_effect *e)
{
	e->kind = VRT_EFFECT_DIED;
	unpack(l, &e->item);
	count(m, l, -(int64_t)l->size, e);
	erase(m, l);
}

static void handle_unref(struct vrt_model *m, uint64_t handle, bool ref, bool map, struct vrt_effect *e)
{
	struct vrt_live *h = find(m, VRT_IS_HANDLE, handle);
	if (!h)
		return;
	uint32_t refs = handle_refs(h), maps = handle_maps(h);
	if (ref && refs)
		refs--;
	if (map && maps)
		maps--;
	handle_set(h, refs, maps);
	if (!refs && !maps)
		died(m, h, e);
}

static void born(struct vrt_model *m, const struct vrt_record *r, uint8_t op, bool seeded, struct vrt_effect *e)
{
	uint8_t space = space_of(op);
	if (!space)
		return;
	if (op == VRT_OP_PHYS_CREATE && r->api == VRT_API_CU_MEM_RETAIN_HANDLE) {
		struct vrt_live *h = find(m, VRT_IS_HANDLE, r->addr);
		if (h)
			handle_set(h, handle_refs(h) + 1, handle_maps(h));
		return;
	}
	struct vrt_live *old = find(m, space, r->addr);
	if (old) {
		if (old->ts > r->ts)
			return;
		struct vrt_effect ignored = { 0 };
		died(m, old, &ignored); /* its release was lost or comes late: it cannot still live */
		e->delta += ignored.delta;
	}
	if (r->size > VRT_HELD_MAX - m->held) {
		m->implausible++;
		return;
	}
	struct vrt_live *l = insert(m, space, r->addr);
	if (!l)
		return;
	m->held += r->size;
	l->size = r->size;
	l->ts = r->ts;
	l->aux = r->aux;
	l->extra = space == VRT_IS_MAP ? r->aux2 : r->stream;
	l->born_phase = m->phase_seq;
	l->born = (m->events & BORN_EVENT_MASK) | (uint64_t)(uint16_t)(int16_t)r->device << 48;
	l->stack = r->stack;
	l->api = (uint8_t)r->api;
	l->op = op;
	l->flags = (uint8_t)((r->kind & 3) | (seeded ? 4 : 0));
	if (space == VRT_IS_HANDLE) /* checkpoints carry the reference count in y */
		handle_set(l, seeded && r->aux2 ? (uint32_t)r->aux2 : 1, 0);
	if (space == VRT_IS_MAP) {
		struct vrt_live *h = find(m, VRT_IS_HANDLE, r->aux);
		if (h) {
			handle_set(h, handle_refs(h), handle_maps(h) + 1);
			l->flags = (uint8_t)((l->flags & ~3) | live_kind(h));
			l->born = (l->born & BORN_EVENT_MASK) | (h->born & ~BORN_EVENT_MASK);
		}
	}
	if (space == VRT_IS_BLOCK)
		m->any_blocks = true;
	e->kind = VRT_EFFECT_BORN;
	unpack(l, &e->item);
	count(m, l, (int64_t)l->size, e);
}

static void release(struct vrt_model *m, const struct vrt_record *r, struct vrt_effect *e)
{
	uint8_t space = space_of(r->op);
	struct vrt_live *l = find(m, space, r->addr);
	if (!l) {
		m->unknown_frees++;
		return;
	}
	if (l->ts > r->ts)
		return; /* stale: names an earlier incarnation */
	if (space == VRT_IS_HANDLE) {
		handle_unref(m, r->addr, true, false, e);
		return;
	}
	uint64_t handle = l->aux, size = l->size, end = r->addr + (r->size ? r->size : size);
	died(m, l, e);
	if (space != VRT_IS_MAP)
		return;
	struct vrt_effect more = { 0 };
	handle_unref(m, handle, false, true, &more);
	for (uint64_t p = r->addr + size; p < end;) {
		struct vrt_live *next = find(m, VRT_IS_MAP, p);
		if (!next)
			break;
		uint64_t h = next->aux, n = next->size;
		erase(m, next);
		handle_unref(m, h, false, true, &more);
		p += n;
	}
	e->delta += more.delta;
}

static void context_reset(struct vrt_model *m, int device, struct vrt_effect *e)
{
	for (size_t i = 0; i < m->used;) {
		struct vrt_live *l = &m->items[i];
		bool gone = live_device(l) == device && live_kind(l) != VRT_KIND_HOST_PINNED &&
			    (l->space == VRT_IS_ADDR || l->space == VRT_IS_BLOCK);
		if (gone) { /* the last item takes its place: look at position i again */
			struct vrt_effect ignored = { 0 };
			died(m, l, &ignored);
			e->delta += ignored.delta;
		} else {
			i++;
		}
	}
}

/* Whether checkpoint items are taken in after r: at the start of a wrapped ring, or when tracing
 * began late (attach). */
static bool seeding_after(bool seeding, uint64_t events, const struct vrt_record *r)
{
	if (r->op == VRT_OP_CP_BEGIN)
		return !events || r->id == VRT_CP_ATTACH;
	return r->op == VRT_OP_CP_END ? false : seeding;
}

void vrt_model_apply(struct vrt_model *m, const struct vrt_record *r, struct vrt_effect *out)
{
	struct vrt_effect scratch, *e = out ? out : &scratch;
	e->kind = VRT_EFFECT_NONE; /* e->item is written with the kind that makes it valid */
	e->delta = 0;
	e->tensor = false;
	switch (r->op) {
	case VRT_OP_CP_LIVE:
		if (m->seeding && space_of((uint32_t)r->id2) && !find(m, space_of((uint32_t)r->id2), r->addr))
			born(m, r, (uint8_t)r->id2, true, e);
		return;
	case VRT_OP_CP_PHASE:
		if (!m->events && r->aux > m->phase_seq)
			m->phase_seq = r->aux;
		return;
	case VRT_OP_CP_BEGIN:
		m->seeding = seeding_after(m->seeding, m->events, r);
		if (!m->events)
			m->last_ts = r->ts;
		return;
	case VRT_OP_CP_END:
		m->seeding = seeding_after(m->seeding, m->events, r);
		return;
	}
	m->events++;
	if (r->ts > m->last_ts)
		m->last_ts = r->ts;
	switch (r->op) {
	case VRT_OP_ALLOC: case VRT_OP_PHYS_CREATE: case VRT_OP_MAP: case VRT_OP_VA_RESERVE: case VRT_OP_IMPORT:
	case VRT_OP_BLOCK_ALLOC:
		born(m, r, (uint8_t)r->op, false, e);
		break;
	case VRT_OP_SEED:
		born(m, r, VRT_OP_ALLOC, true, e);
		break;
	case VRT_OP_FREE: case VRT_OP_PHYS_RELEASE: case VRT_OP_UNMAP: case VRT_OP_VA_FREE: case VRT_OP_IMPORT_CLOSE:
	case VRT_OP_BLOCK_FREE:
		release(m, r, e);
		break;
	case VRT_OP_BLOCK_SIZE: {
		struct vrt_live *l = find(m, VRT_IS_BLOCK, r->addr);
		if (l && r->size > l->size && r->size - l->size > VRT_HELD_MAX - m->held) {
			m->implausible++;
		} else if (l && r->size != l->size) {
			m->held = m->held - l->size + r->size;
			int64_t delta = (int64_t)r->size - (int64_t)l->size;
			l->size = r->size;
			e->kind = VRT_EFFECT_RESIZED;
			unpack(l, &e->item);
			count(m, l, delta, e);
		}
		break;
	}
	case VRT_OP_CONTEXT:
		if (r->id == 0)
			context_reset(m, r->device, e);
		break;
	case VRT_OP_PHASE_ENTER:
		m->phase_seq++;
		break;
	case VRT_OP_LOST:
		m->lost += r->id;
		break;
	}
	if (e->kind == VRT_EFFECT_BORN && e->item.space == VRT_IS_BLOCK)
		m->tensor_events[vrt_device_slot(e->item.device)]++;
	if (e->kind == VRT_EFFECT_DIED && e->item.space == VRT_IS_BLOCK)
		m->tensor_events[vrt_device_slot(e->item.device)]++;
}

/*
 * A block is born by every BLOCK_ALLOC, and by a block's CP_LIVE while seeding. born() skips one
 * only when a block already holds its address, which set any_blocks when it was born; so these
 * two rules give vrt_model_apply's any_blocks exactly.
 */
void vrt_blocks_probe_apply(struct vrt_blocks_probe *p, const struct vrt_record *r)
{
	bool cp = r->op >= VRT_OP_CP_BEGIN && r->op <= VRT_OP_CP_END;
	p->seeding = seeding_after(p->seeding, p->events, r);
	p->events += !cp;
	p->any_blocks |= r->op == VRT_OP_BLOCK_ALLOC ||
			 (r->op == VRT_OP_CP_LIVE && p->seeding && space_of((uint32_t)r->id2) == VRT_IS_BLOCK);
}

void vrt_model_each(const struct vrt_model *m, void (*fn)(void *ctx, const struct vrt_item *it), void *ctx)
{
	struct vrt_item it;
	for (size_t i = 0; i < m->used; i++) {
		unpack(&m->items[i], &it);
		fn(ctx, &it);
	}
}

/* ---- replay ----------------------------------------------------------------------------- */

void vrt_replay_begin(struct vrt_replay *rp, struct vrt_trace *t)
{
	memset(rp, 0, sizeof(*rp));
	rp->trace = t;
	rp->chunk = t->replay_from;
	for (size_t i = t->replay_from; i < t->n_chunks; i++)
		rp->bytes_total += t->chunks[i].stored;
}

static bool next_chunk(struct vrt_replay *rp)
{
	struct vrt_trace *t = rp->trace;
	while (rp->chunk < t->n_chunks) {
		size_t i = rp->chunk++;
		uint8_t type = t->chunks[i].type;
		if (type != VRT_CHUNK_EVENTS && type != VRT_CHUNK_CHECKPOINT)
			continue;
		size_t len;
		rp->bytes_done += t->chunks[i].stored;
		int rc = vrt_trace_chunk(t, i, &rp->p, &len);
		if (rc == VRT_E_CHANGED || rc == VRT_E_NOMEM || rc == VRT_E_IO) {
			rp->error = rc; /* what the file held is no longer there: nothing after it is sound */
			rp->p = rp->end = NULL;
			return false;
		}
		if (rc) {
			rp->bad_chunks++;
			continue;
		}
		if (!len)
			continue;
		rp->end = rp->p + len;
		rp->delta = (struct vrt_delta){ 0, 0 };
		rp->thread = 0;
		rp->chunk_type = type;
		return true;
	}
	return false;
}

bool vrt_replay_next(struct vrt_replay *rp, struct vrt_record *r)
{
	for (;;) {
		if (rp->error)
			return false;
		if (!rp->p || rp->p >= rp->end) {
			if (!next_chunk(rp))
				return false;
			continue;
		}
		int rc = vrt_record_decode(&rp->p, rp->end, r, &rp->delta);
		if (rc) {
			rp->error = rc;
			return false;
		}
		if (r->op == VRT_OP_THREAD) {
			rp->thread = (uint32_t)r->id;
			continue;
		}
		if (r->op == VRT_OP_MARK && rp->trace->end_mark && !strcmp(vrt_string(rp->trace, r->id), rp->trace->end_mark)) {
			rp->p = rp->end = NULL; /* the end of this trace, for every reader */
			rp->chunk = rp->trace->n_chunks;
			return false;
		}
		bool is_cp = r->op >= VRT_OP_CP_BEGIN && r->op <= VRT_OP_CP_END;
		bool in_cp = rp->chunk_type == VRT_CHUNK_CHECKPOINT;
		if (is_cp != in_cp || (r->op >= VRT_OP_STRING && r->op <= VRT_OP_INFO)) {
			rp->error = VRT_E_RECORD; /* a record in the wrong kind of chunk */
			return false;
		}
		if ((r->stack && !vrt_stack_valid(rp->trace, r->stack)) ||
		    (r->stack2 && !vrt_stack_valid(rp->trace, r->stack2))) {
			rp->error = VRT_E_RANGE;
			return false;
		}
		return true;
	}
}

double vrt_ts_seconds(const struct vrt_trace *t, uint64_t ts) { return (double)ts * t->hdr.ts_unit_ns / 1e9; }

const char *vrt_kind_name(uint32_t kind)
{
	switch (kind) {
	case VRT_KIND_DEVICE: return "device";
	case VRT_KIND_HOST_PINNED: return "host_pinned";
	case VRT_KIND_MANAGED: return "managed";
	case VRT_KIND_ARRAY: return "array";
	}
	return "?";
}

const char *vrt_api_name(uint32_t api)
{
	switch (api) {
#define VRT_API_CASE(id, value, name) \
	case value:                   \
		return name;
		VRT_APIS(VRT_API_CASE)
#undef VRT_API_CASE
	}
	return "?";
}

const char *vrt_op_name(uint32_t op)
{
	static const char *const names[VRT_OP_LAST] = {
		[VRT_OP_THREAD] = "thread", [VRT_OP_ALLOC] = "alloc", [VRT_OP_FREE] = "free",
		[VRT_OP_FAILED] = "failed", [VRT_OP_PHYS_CREATE] = "phys_create", [VRT_OP_PHYS_RELEASE] = "phys_release",
		[VRT_OP_MAP] = "map", [VRT_OP_UNMAP] = "unmap", [VRT_OP_VA_RESERVE] = "va_reserve",
		[VRT_OP_VA_FREE] = "va_free", [VRT_OP_IMPORT] = "import", [VRT_OP_IMPORT_CLOSE] = "import_close",
		[VRT_OP_BLOCK_ALLOC] = "block_alloc", [VRT_OP_BLOCK_FREE] = "block_free", [VRT_OP_OOM] = "oom",
		[VRT_OP_MARK] = "mark", [VRT_OP_PHASE_ENTER] = "phase_enter", [VRT_OP_PHASE_EXIT] = "phase_exit",
		[VRT_OP_LOST] = "lost", [VRT_OP_MODE] = "mode", [VRT_OP_SEED] = "seed", [VRT_OP_CONTEXT] = "context",
		[VRT_OP_BLOCK_SIZE] = "block_size", [VRT_OP_WALK] = "walk", [VRT_OP_OWNER] = "owner",
		[VRT_OP_OOM_LIMITS] = "oom_limits", [VRT_OP_EXITING] = "exiting", [VRT_OP_STRING] = "string", [VRT_OP_MODULE] = "module",
		[VRT_OP_SYMBOL] = "symbol", [VRT_OP_PYCODE] = "pycode", [VRT_OP_PYFRAME] = "pyframe",
		[VRT_OP_STACK] = "stack", [VRT_OP_THREAD_INFO] = "thread_info", [VRT_OP_INFO] = "info",
		[VRT_OP_CP_BEGIN] = "checkpoint", [VRT_OP_CP_LIVE] = "cp_live", [VRT_OP_CP_PHASE] = "cp_phase",
		[VRT_OP_CP_END] = "cp_end",
	};
	return op < VRT_OP_LAST && names[op] ? names[op] : "?";
}
