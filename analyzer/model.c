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

/*
 * The live set is a linear-probing table of 96-byte items with a parallel array of 8-byte tags:
 * probes walk the tags (a cache line holds 8) and touch an item only where its tag matches. A tag
 * is the key's hash with bit 0 set, so that 0 marks an empty slot; equal tags are confirmed
 * against the item. Items sit where they always did, so live-set walks see the same order.
 */
static uint64_t key_hash(uint8_t space, uint64_t addr) { return (addr ^ ((uint64_t)space << 59)) * 0x9e3779b97f4a7c15ull; }

static size_t home_of(size_t cap, uint64_t h) { return (size_t)(h ^ (h >> 31)) & (cap - 1); }

static size_t slot_of(const struct vrt_model *m, uint8_t space, uint64_t addr)
{
	return home_of(m->cap, key_hash(space, addr));
}

int vrt_model_init(struct vrt_model *m)
{
	memset(m, 0, sizeof(*m));
	m->cap = 4096;
	m->slots = calloc(m->cap, sizeof(*m->slots));
	m->tags = calloc(m->cap, sizeof(*m->tags));
	if (m->slots && m->tags)
		return 0;
	vrt_model_free(m);
	return VRT_E_NOMEM;
}

void vrt_model_free(struct vrt_model *m)
{
	free(m->slots);
	free(m->tags);
	m->slots = NULL;
	m->tags = NULL;
}

static struct vrt_item *find(struct vrt_model *m, uint8_t space, uint64_t addr)
{
	uint64_t h = key_hash(space, addr), tag = h | 1;
	for (size_t i = home_of(m->cap, h);; i = (i + 1) & (m->cap - 1)) {
		if (!m->tags[i])
			return NULL;
		if (m->tags[i] == tag && m->slots[i].space == space && m->slots[i].addr == addr)
			return &m->slots[i];
	}
}

/* A free slot for (space, addr), its tag set; the caller fills the item. */
static size_t claim(uint64_t *tags, size_t cap, uint8_t space, uint64_t addr)
{
	uint64_t h = key_hash(space, addr);
	size_t i = home_of(cap, h);
	while (tags[i])
		i = (i + 1) & (cap - 1);
	tags[i] = h | 1;
	return i;
}

static bool grow(struct vrt_model *m)
{
	size_t cap = m->cap * 2;
	struct vrt_item *slots = calloc(cap, sizeof(*slots));
	uint64_t *tags = calloc(cap, sizeof(*tags));
	if (!slots || !tags) {
		free(slots);
		free(tags);
		return false;
	}
	for (size_t i = 0; i < m->cap; i++)
		if (m->tags[i])
			slots[claim(tags, cap, m->slots[i].space, m->slots[i].addr)] = m->slots[i];
	vrt_model_free(m);
	m->slots = slots;
	m->tags = tags;
	m->cap = cap;
	return true;
}

static struct vrt_item *insert(struct vrt_model *m, uint8_t space, uint64_t addr)
{
	if ((m->used + 1) * 4 > m->cap * 3 && !grow(m))
		return NULL;
	m->used++;
	return &m->slots[claim(m->tags, m->cap, space, addr)];
}

static void erase(struct vrt_model *m, struct vrt_item *it)
{
	m->held -= it->size;
	size_t hole = (size_t)(it - m->slots), mask = m->cap - 1;
	for (size_t i = (hole + 1) & mask; m->tags[i]; i = (i + 1) & mask) {
		size_t home = slot_of(m, m->slots[i].space, m->slots[i].addr);
		bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
		if (stays)
			continue;
		m->slots[hole] = m->slots[i];
		m->tags[hole] = m->tags[i];
		hole = i;
	}
	m->slots[hole].space = 0;
	m->tags[hole] = 0;
	m->used--;
}

static void count(struct vrt_model *m, const struct vrt_item *it, int64_t delta, struct vrt_effect *e)
{
	int d = vrt_device_slot(it->device);
	if (it->space == VRT_IS_BLOCK) {
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
	if (it->space == VRT_IS_IMPORT) {
		m->imported[d] += delta;
		return;
	}
	if (it->space == VRT_IS_VA) {
		m->reserved_va += delta;
		return;
	}
	if (!vrt_item_counted(it) || it->kind >= VRT_KIND_LAST)
		return;
	int64_t *live = &m->live[d][it->kind];
	*live += delta;
	if (*live > m->peak[d][it->kind]) {
		m->peak[d][it->kind] = *live;
		m->peak_ts[d][it->kind] = m->last_ts;
		m->peak_event[d][it->kind] = m->events;
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

static void died(struct vrt_model *m, struct vrt_item *it, struct vrt_effect *e)
{
	e->kind = VRT_EFFECT_DIED;
	e->item = *it;
	count(m, it, -(int64_t)it->size, e);
	erase(m, it);
}

static void handle_unref(struct vrt_model *m, uint64_t handle, bool ref, bool map, struct vrt_effect *e)
{
	struct vrt_item *h = find(m, VRT_IS_HANDLE, handle);
	if (!h)
		return;
	if (ref && h->refs)
		h->refs--;
	if (map && h->maps)
		h->maps--;
	if (!h->refs && !h->maps)
		died(m, h, e);
}

static void born(struct vrt_model *m, const struct vrt_record *r, uint8_t op, bool seeded, struct vrt_effect *e)
{
	uint8_t space = space_of(op);
	if (!space)
		return;
	if (op == VRT_OP_PHYS_CREATE && r->api == VRT_API_CU_MEM_RETAIN_HANDLE) {
		struct vrt_item *h = find(m, VRT_IS_HANDLE, r->addr);
		if (h)
			h->refs++;
		return;
	}
	struct vrt_item *old = find(m, space, r->addr);
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
	struct vrt_item *it = insert(m, space, r->addr);
	if (!it)
		return;
	m->held += r->size;
	/* Every field, one by one: a struct assignment zeroes all 96 bytes first (rep stos), which
	 * cost a quarter of born(). */
	it->addr = r->addr;
	it->size = r->size;
	it->ts = r->ts;
	it->aux = r->aux;
	it->aux2 = r->aux2;
	it->stream = r->stream;
	it->born_event = m->events;
	it->born_phase = m->phase_seq;
	it->stack = r->stack;
	it->refs = 1;
	it->maps = 0;
	it->api = (uint16_t)r->api;
	it->device = (int16_t)r->device;
	it->space = space;
	it->op = op;
	it->kind = (uint8_t)r->kind;
	it->seeded = seeded;
	if (space == VRT_IS_HANDLE && seeded && r->aux2)
		it->refs = (uint32_t)r->aux2; /* checkpoints carry the reference count there */
	if (space == VRT_IS_MAP) {
		struct vrt_item *h = find(m, VRT_IS_HANDLE, r->aux);
		if (h) {
			h->maps++;
			it->kind = h->kind;
			it->device = h->device;
		}
	}
	if (space == VRT_IS_BLOCK)
		m->any_blocks = true;
	e->kind = VRT_EFFECT_BORN;
	e->item = *it;
	count(m, it, (int64_t)it->size, e);
}

static void release(struct vrt_model *m, const struct vrt_record *r, struct vrt_effect *e)
{
	uint8_t space = space_of(r->op);
	struct vrt_item *it = find(m, space, r->addr);
	if (!it) {
		m->unknown_frees++;
		return;
	}
	if (it->ts > r->ts)
		return; /* stale: names an earlier incarnation */
	if (space == VRT_IS_HANDLE) {
		handle_unref(m, r->addr, true, false, e);
		return;
	}
	uint64_t handle = it->aux, size = it->size, end = r->addr + (r->size ? r->size : size);
	died(m, it, e);
	if (space != VRT_IS_MAP)
		return;
	struct vrt_effect more = { 0 };
	handle_unref(m, handle, false, true, &more);
	for (uint64_t p = r->addr + size; p < end;) {
		struct vrt_item *next = find(m, VRT_IS_MAP, p);
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
	for (size_t i = 0; i < m->cap;) {
		struct vrt_item *it = &m->slots[i];
		bool gone = it->space && it->device == device && it->kind != VRT_KIND_HOST_PINNED &&
			    (it->space == VRT_IS_ADDR || it->space == VRT_IS_BLOCK);
		if (gone) {
			struct vrt_effect ignored = { 0 };
			died(m, it, &ignored);
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
		struct vrt_item *it = find(m, VRT_IS_BLOCK, r->addr);
		if (it && r->size > it->size && r->size - it->size > VRT_HELD_MAX - m->held) {
			m->implausible++;
		} else if (it && r->size != it->size) {
			m->held = m->held - it->size + r->size;
			int64_t delta = (int64_t)r->size - (int64_t)it->size;
			it->size = r->size;
			e->kind = VRT_EFFECT_RESIZED;
			e->item = *it;
			count(m, it, delta, e);
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
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i].space)
			fn(ctx, &m->slots[i]);
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
