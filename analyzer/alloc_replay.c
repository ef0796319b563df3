/* SPDX-License-Identifier: MIT */
/*
 * The trace drives the allocator model. Two passes: the first learns what the trace says about
 * its own limits (OOM_LIMITS, INFO, failures the device did not cause) and the device; the
 * second replays.
 *
 * Who freed a segment. A recorded cudaFree (or cuMemUnmap) of the allocator's comes either from
 * the allocator itself, inside the request that follows on the same thread (a failed cudaMalloc
 * or the per-process limit made it free its cache and retry), or from the program
 * (torch.cuda.empty_cache(), which DeepSpeed and many training loops call). The allocator frees
 * only when the request could not be served otherwise, so: frees before a request that the
 * model can serve without freeing, and frees before anything else, are empty_cache() calls.
 * Segment operations are attributed to the next request of their own thread: the allocator
 * holds its mutex from a request's first cudaFree to its tensor event, so no other thread's
 * event falls between them (ties within the clock's resolution aside).
 *
 * Under the recorded setting the device answers as recorded: a cudaMalloc fails where the
 * trace has it fail and gets the address it got, so ties between equal free blocks break the
 * same way. Under another setting the device is its recorded size (or --device-memory), with
 * memory outside the allocator as recorded at that moment, and addresses come from the
 * recording where a cudaMalloc of the same size happened at the same request.
 */
#include "alloc_replay.h"
#include "pass.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sites.h"
#include "vramtrace/error.h"
#include "vramtrace/options.h"

enum rec_kind {
	R_SEG_ALLOC = VRT_AM_SEG_ALLOC,
	R_SEG_FREE = VRT_AM_SEG_FREE,
	R_VA_RESERVE = VRT_AM_VA_RESERVE,
	R_VA_FREE = VRT_AM_VA_FREE,
	R_MAP = VRT_AM_MAP,
	R_UNMAP = VRT_AM_UNMAP,
	R_FAIL_ALLOC,
	R_FAIL_MAP,
};

#define CUDA_ERROR_OUT_OF_MEMORY 2 /* cudaErrorMemoryAllocation has the same number */

struct rec_op {
	uint64_t addr, size;
	uint8_t kind, used;
};

struct op_list {
	struct rec_op *v;
	uint32_t n, cap;
	int device;
};

/* uint64 -> uint64, open addressing; key 0 is empty (keys are device memory addresses). */
struct u64map {
	uint64_t *keys, *vals;
	size_t cap, used;
};

struct torch_va {
	uint64_t start, size;
};

/* A recorded block: the model's block for it and the size the recording gives it. */
struct block_ref {
	uint32_t block;
	uint64_t size;
};

struct engine;

struct dev {
	struct vrt_am am;
	struct engine *e;
	int device;
	bool used;
	int64_t rec_reserved, rec_allocated;
	uint64_t rec_peak, rec_allocated_peak, last_peak;
};

struct engine {
	struct vrt_trace *t;
	struct vrt_alloc_replay *r;
	const struct vrt_alloc_replay_options *o;
	struct vrt_model m;
	struct dev dev[VRT_REPLAY_MAX_DEVICES];
	struct op_list *pending; /* per thread index: segment operations since its last tensor event */
	size_t n_pending;
	size_t busy;             /* pending lists that are not empty */
	struct op_list *cur;     /* the recorded operations of the request being replayed */
	struct op_list model_ops;
	struct u64map segs;      /* recorded allocator segments: address -> size */
	struct u64map blocks;    /* recorded block address -> index into refs */
	struct block_ref *refs;
	uint32_t n_refs, cap_refs, free_refs;
	struct torch_va *va;
	size_t n_va, cap_va;
	uint64_t ev_index;
	bool replaying;          /* the model runs (else the trace is only surveyed) */
	bool restart;            /* the survey found what changes the limits replayed under */
	int error;
	/* what the survey found */
	uint64_t oom_limit, device_total, capacity;
	bool limit_evidence;
	bool total_exact; /* device_total is the device's own figure, not a bound from a reservation */
};

/* ---- small containers -------------------------------------------------------------------- */

static int push(struct op_list *l, uint8_t kind, uint64_t addr, uint64_t size)
{
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? l->cap * 2 : 16;
		struct rec_op *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return VRT_E_NOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = (struct rec_op){ addr, size, kind, 0 };
	return 0;
}

/* splitmix64's finalizer: every bit of the key reaches the low bits (addresses end in zeros). */
static uint64_t mix(uint64_t k)
{
	k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
	k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
	return k ^ (k >> 31);
}

static int map_grow(struct u64map *m)
{
	size_t cap = m->cap ? m->cap * 2 : 1024;
	uint64_t *keys = calloc(cap, 8), *vals = calloc(cap, 8);
	if (!keys || !vals) {
		free(keys);
		free(vals);
		return VRT_E_NOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->keys[i])
			continue;
		size_t j = mix(m->keys[i]) & (cap - 1);
		while (keys[j])
			j = (j + 1) & (cap - 1);
		keys[j] = m->keys[i];
		vals[j] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = keys;
	m->vals = vals;
	m->cap = cap;
	return 0;
}

static int map_put(struct u64map *m, uint64_t key, uint64_t val)
{
	if ((m->used + 1) * 4 > m->cap * 3 && map_grow(m))
		return VRT_E_NOMEM;
	size_t i = mix(key) & (m->cap - 1);
	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	if (!m->keys[i])
		m->used++;
	m->keys[i] = key;
	m->vals[i] = val;
	return 0;
}

static uint64_t map_get(const struct u64map *m, uint64_t key)
{
	if (!m->cap || !key)
		return 0;
	size_t mask = m->cap - 1, i = mix(key) & mask;
	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & mask;
	return m->keys[i] ? m->vals[i] : 0;
}

/* Removes key; its value, or 0 when absent. */
static uint64_t map_take(struct u64map *m, uint64_t key)
{
	if (!m->cap || !key)
		return 0;
	size_t mask = m->cap - 1, i = mix(key) & mask;
	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & mask;
	if (!m->keys[i])
		return 0;
	uint64_t val = m->vals[i];
	size_t hole = i;
	for (size_t j = (hole + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
		size_t home = mix(m->keys[j]) & mask;
		bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
		if (stays)
			continue;
		m->keys[hole] = m->keys[j];
		m->vals[hole] = m->vals[j];
		hole = j;
	}
	m->keys[hole] = 0;
	m->used--;
	return val;
}

static void map_free(struct u64map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

/* Addresses are per device; devices are few: the top byte of a 56-bit address tells them apart. */
static uint64_t dev_key(int device, uint64_t addr) { return addr ^ ((uint64_t)(device & 0xff) << 56); }

/* ---- what is the allocator's ------------------------------------------------------------- */

static struct dev *dev_of(struct engine *e, int device)
{
	if (device < 0 || device >= VRT_REPLAY_MAX_DEVICES)
		return NULL;
	return &e->dev[device];
}

static struct torch_va *va_at(struct engine *e, uint64_t addr)
{
	for (size_t i = 0; i < e->n_va; i++)
		if (addr >= e->va[i].start && addr - e->va[i].start < e->va[i].size)
			return &e->va[i];
	return NULL;
}

static bool torch_stack(const struct engine *e, uint32_t stack) { return vrt_stack_is_torch_segment(e->t, stack); }

static struct op_list *pending_of(struct engine *e, uint32_t thread)
{
	if (thread >= e->n_pending) {
		size_t n = thread + 16;
		struct op_list *p = realloc(e->pending, n * sizeof(*p));
		if (!p) {
			e->error = VRT_E_NOMEM;
			return NULL;
		}
		memset(p + e->n_pending, 0, (n - e->n_pending) * sizeof(*p));
		e->pending = p;
		e->n_pending = n;
	}
	return &e->pending[thread];
}

/* Every change of a pending list's length goes through here, to keep count of the busy ones. */
static void set_len(struct engine *e, struct op_list *l, uint32_t n)
{
	e->busy += (n != 0) - (l->n != 0);
	l->n = n;
}

static void note(struct engine *e, uint32_t thread, int device, uint8_t kind, uint64_t addr, uint64_t size)
{
	struct op_list *l = pending_of(e, thread);
	if (!l)
		return;
	if (!l->n) {
		l->device = device;
		e->busy++;
	}
	if (push(l, kind, addr, size))
		e->error = VRT_E_NOMEM;
}

static void recorded_reserve(struct dev *d, int64_t delta)
{
	d->rec_reserved += delta;
	if (d->rec_reserved > (int64_t)d->rec_peak)
		d->rec_peak = (uint64_t)d->rec_reserved;
}

/* The recording's own segment operations: its reserved total and, in pass 2, the list each
 * request is checked against. */
static void track_segments(struct engine *e, const struct vrt_record *r, uint32_t thread)
{
	struct dev *d = dev_of(e, r->device);
	switch (r->op) {
	case VRT_OP_ALLOC:
		if (d && r->kind == VRT_KIND_DEVICE && r->api == VRT_API_CUDA_MALLOC && torch_stack(e, r->stack)) {
			if (map_put(&e->segs, dev_key(r->device, r->addr), r->size))
				e->error = VRT_E_NOMEM;
			recorded_reserve(d, (int64_t)r->size);
			note(e, thread, r->device, R_SEG_ALLOC, r->addr, r->size);
		}
		break;
	case VRT_OP_FREE: {
		uint64_t size = d ? map_take(&e->segs, dev_key(r->device, r->addr)) : 0;
		if (size) {
			recorded_reserve(d, -(int64_t)size);
			note(e, thread, r->device, R_SEG_FREE, r->addr, size);
		}
		break;
	}
	case VRT_OP_FAILED:
		if (d && r->result == CUDA_ERROR_OUT_OF_MEMORY && torch_stack(e, r->stack) &&
		    (r->api == VRT_API_CUDA_MALLOC || r->api == VRT_API_CU_MEM_CREATE))
			note(e, thread, r->device, r->api == VRT_API_CUDA_MALLOC ? R_FAIL_ALLOC : R_FAIL_MAP, 0, r->size);
		break;
	case VRT_OP_VA_RESERVE:
		if (torch_stack(e, r->stack)) {
			if (e->n_va == e->cap_va) {
				size_t cap = e->cap_va ? e->cap_va * 2 : 8;
				struct torch_va *v = realloc(e->va, cap * sizeof(*v));
				if (!v) {
					e->error = VRT_E_NOMEM;
					break;
				}
				e->va = v;
				e->cap_va = cap;
			}
			e->va[e->n_va++] = (struct torch_va){ r->addr, r->size };
			note(e, thread, r->device, R_VA_RESERVE, r->addr, r->size);
		}
		break;
	case VRT_OP_VA_FREE: {
		struct torch_va *v = va_at(e, r->addr);
		if (v && v->start == r->addr) {
			note(e, thread, r->device, R_VA_FREE, r->addr, v->size);
			*v = e->va[--e->n_va];
		}
		break;
	}
	case VRT_OP_MAP: case VRT_OP_UNMAP:
		if (d && va_at(e, r->addr)) {
			recorded_reserve(d, r->op == VRT_OP_MAP ? (int64_t)r->size : -(int64_t)r->size);
			note(e, thread, r->device, r->op == VRT_OP_MAP ? R_MAP : R_UNMAP, r->addr, r->size);
		}
		break;
	case VRT_OP_CP_LIVE:
		if (e->m.set.seeding && d && r->id2 == VRT_OP_ALLOC && r->kind == VRT_KIND_DEVICE &&
		    r->api == VRT_API_CUDA_MALLOC && torch_stack(e, r->stack) &&
		    !map_put(&e->segs, dev_key(r->device, r->addr), r->size))
			recorded_reserve(d, (int64_t)r->size);
		break;
	}
}

/* ---- the model's side -------------------------------------------------------------------- */

static int64_t outside_allocator(struct engine *e, struct dev *d)
{
	int64_t live = e->m.live[vrt_device_slot(d->device)][VRT_KIND_DEVICE] - d->rec_reserved;
	return live > 0 ? live : 0;
}

static bool env_acquire(void *ctx, enum vrt_am_op op, uint64_t size, uint64_t *addr)
{
	struct dev *d = ctx;
	struct engine *e = d->e;
	struct op_list *l = e->cur;
	for (uint32_t i = 0; l && i < l->n; i++) {
		struct rec_op *x = &l->v[i];
		if (x->used)
			continue;
		if (op == VRT_AM_VA_RESERVE && x->kind == R_VA_RESERVE) {
			x->used = 1;
			*addr = x->addr;
			return true;
		}
		if (op == VRT_AM_SEG_ALLOC && (x->kind == R_SEG_ALLOC || x->kind == R_FAIL_ALLOC)) {
			if (e->r->as_recorded) {
				if (x->size != size)
					break; /* not what the recording did: the device's size decides */
				x->used = 1;
				if (x->kind == R_FAIL_ALLOC)
					return false;
				*addr = x->addr;
				return true;
			}
			if (x->kind == R_SEG_ALLOC && x->size == size) {
				x->used = 1;
				*addr = x->addr;
				break;
			}
		}
		if (op == VRT_AM_MAP && e->r->as_recorded && x->kind == R_FAIL_MAP) {
			x->used = 1;
			return false;
		}
	}
	if (op == VRT_AM_VA_RESERVE || !e->r->capacity || e->r->as_recorded)
		return true;
	return (uint64_t)outside_allocator(e, d) + d->am.stats.reserved + size <= e->r->capacity;
}

static void env_event(void *ctx, enum vrt_am_op op, uint64_t addr, uint64_t size)
{
	struct dev *d = ctx;
	if (push(&d->e->model_ops, (uint8_t)op, addr, size))
		d->e->error = VRT_E_NOMEM;
}

static int start_device(struct engine *e, struct dev *d)
{
	struct vrt_am_env env = { env_acquire, env_event, d };
	vrt_am_init(&d->am, &e->r->cfg, &env);
	d->am.limit = e->r->limit;
	d->am.device_total = e->device_total;
	d->used = true;
	return 0;
}

static struct dev *model_dev(struct engine *e, int device)
{
	struct dev *d = dev_of(e, device);
	if (d && !d->used)
		start_device(e, d);
	return d;
}

/* ---- checking against the recording ------------------------------------------------------ */

/* The operations as one sequence: consecutive pages mapped (or unmapped) together become one
 * range, as the model reports them. */
static uint32_t canonical(const struct rec_op *v, uint32_t n, struct rec_op *out, uint32_t cap)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct rec_op *x = &v[i];
		if (x->kind == R_FAIL_ALLOC || x->kind == R_FAIL_MAP)
			continue;
		if (k && (x->kind == R_MAP || x->kind == R_UNMAP) && out[k - 1].kind == x->kind &&
		    out[k - 1].addr + out[k - 1].size == x->addr) {
			out[k - 1].size += x->size;
			continue;
		}
		if (k < cap)
			out[k++] = *x;
	}
	return k;
}

static const char *op_word(uint8_t kind)
{
	static const char *const words[] = { "?", "cudaMalloc", "cudaFree", "reserve", "release", "map", "unmap" };
	return kind < 7 ? words[kind] : "?";
}

static void describe(char *buf, size_t len, const struct rec_op *v, uint32_t n)
{
	size_t used = 0;
	buf[0] = 0;
	for (uint32_t i = 0; i < n && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s %llu", i ? ", " : "", op_word(v[i].kind),
					 (unsigned long long)v[i].size);
	if (!n)
		snprintf(buf, len, "nothing");
}

/* Compares what the model did for one request (or empty_cache() call) with the recording. */
static void check(struct engine *e, struct op_list *rec, uint64_t ts, const char *what, uint64_t size)
{
	if (!e->r->as_recorded)
		return;
	enum { CAP = 64 };
	struct rec_op a[CAP], b[CAP];
	uint32_t na = canonical(rec ? rec->v : NULL, rec ? rec->n : 0, a, CAP);
	uint32_t nb = canonical(e->model_ops.v, e->model_ops.n, b, CAP);
	struct vrt_replay_check *c = &e->r->check;
	c->requests++;
	c->recorded_ops += na;
	c->model_ops += nb;
	bool same = na == nb;
	for (uint32_t i = 0; same && i < na; i++)
		same = a[i].kind == b[i].kind && a[i].size == b[i].size &&
		       (a[i].kind == R_VA_RESERVE || a[i].addr == b[i].addr);
	if (same)
		return;
	c->mismatched_requests++;
	if (c->first_mismatch_s >= 0)
		return;
	c->first_mismatch_s = vrt_ts_seconds(e->t, ts);
	char ra[160], rb[160];
	describe(ra, sizeof(ra), a, na);
	describe(rb, sizeof(rb), b, nb);
	snprintf(c->first_mismatch, sizeof(c->first_mismatch), "%s %llu: recorded %s; model %s", what,
		 (unsigned long long)size, ra, rb);
}

/* Under the recorded setting, a request that fits where it failed (or the other way round) is
 * a difference even when no segment operation tells. */
static void outcome_differs(struct engine *e, uint64_t ts, const char *what, uint64_t size)
{
	struct vrt_replay_check *c = &e->r->check;
	if (!e->r->as_recorded)
		return;
	c->mismatched_requests++;
	if (c->first_mismatch_s >= 0)
		return;
	c->first_mismatch_s = vrt_ts_seconds(e->t, ts);
	snprintf(c->first_mismatch, sizeof(c->first_mismatch), "%s (%llu bytes)", what, (unsigned long long)size);
}

static void after_model(struct engine *e, struct dev *d, uint64_t ts)
{
	const struct vrt_am_stats *s = &d->am.stats;
	if (s->peak_reserved > d->last_peak) {
		struct vrt_replay_device *o = &e->r->dev[d->device];
		d->last_peak = s->peak_reserved;
		o->peak_reserved_ts = ts;
		o->unused_at_peak = s->reserved - s->allocated;
		o->largest_free_at_peak = vrt_am_largest_free(&d->am);
	}
	if (d->am.error)
		e->error = d->am.error;
}

static bool is_release(uint8_t kind) { return kind == R_SEG_FREE || kind == R_UNMAP || kind == R_VA_FREE; }

static bool has_kind(const struct op_list *l, bool (*pred)(uint8_t))
{
	for (uint32_t i = 0; i < l->n; i++)
		if (!l->v[i].used && pred(l->v[i].kind))
			return true;
	return false;
}

static bool is_failure(uint8_t kind) { return kind == R_FAIL_ALLOC || kind == R_FAIL_MAP; }
static bool is_acquire(uint8_t kind) { return !is_release(kind); }

/* An empty_cache() the program made here: every device's allocator empties its cache. The
 * releases of l are what it did: they move out of l. */
static void empty_cache_here(struct engine *e, struct op_list *l, uint64_t ts)
{
	struct op_list rec = { 0 };
	uint32_t kept = 0;
	for (uint32_t i = 0; i < l->n; i++) {
		if (is_release(l->v[i].kind)) {
			if (push(&rec, l->v[i].kind, l->v[i].addr, l->v[i].size))
				e->error = VRT_E_NOMEM;
		} else {
			l->v[kept++] = l->v[i];
		}
	}
	set_len(e, l, kept);
	e->model_ops.n = 0;
	e->cur = NULL;
	for (int k = 0; k < VRT_REPLAY_MAX_DEVICES; k++)
		if (e->dev[k].used) {
			vrt_am_empty_cache(&e->dev[k].am);
			after_model(e, &e->dev[k], ts);
		}
	e->r->empty_caches++;
	check(e, &rec, ts, "empty_cache()", 0);
	free(rec.v);
}

/* Frees other threads recorded with no request of theirs in between: the program's own. */
static void settle_others(struct engine *e, uint32_t thread, uint64_t ts)
{
	if (!e->busy || (e->busy == 1 && thread < e->n_pending && e->pending[thread].n))
		return;
	for (size_t u = 0; u < e->n_pending; u++) {
		struct op_list *l = &e->pending[u];
		if (u == thread || !l->n || has_kind(l, is_acquire))
			continue; /* an allocation pending on u belongs to u's next request */
		empty_cache_here(e, l, ts);
		set_len(e, l, 0);
	}
}

static void stop(struct engine *e, uint64_t ts)
{
	e->r->stopped = true;
	e->r->stop_ts = ts;
}

static void record_failure(struct engine *e, struct dev *d, const struct vrt_record *r, uint32_t thread)
{
	struct vrt_alloc_replay *o = e->r;
	struct vrt_replay_failure *f = &o->fail;
	o->failed = true;
	f->ts = r->ts;
	f->event = e->ev_index;
	f->request = r->op == VRT_OP_BLOCK_ALLOC ? r->aux : r->size;
	f->rounded = vrt_am_round_size(&o->cfg, f->request);
	f->stream = r->stream;
	f->device = r->device;
	f->reserved = d->am.stats.reserved;
	f->allocated = d->am.stats.allocated;
	f->limit = d->am.limit;
	f->by_limit = d->am.limit &&
		      d->am.stats.reserved + vrt_am_allocation_size(&o->cfg, f->rounded) > d->am.limit;
	f->stack = r->stack;
	f->thread = thread;
}

static void recorded_allocate(struct dev *d, int64_t delta)
{
	d->rec_allocated += delta;
	if (d->rec_allocated > (int64_t)d->rec_allocated_peak)
		d->rec_allocated_peak = (uint64_t)d->rec_allocated;
}

/* The model's block for a recorded block (0: the model failed it) and the recorded size, until
 * its BLOCK_FREE. false when the recording never had the block. */
static bool forget_block(struct engine *e, struct dev *d, int device, uint64_t addr, uint32_t *block)
{
	uint64_t ref = map_take(&e->blocks, dev_key(device, addr));
	*block = 0;
	if (!ref)
		return false;
	struct block_ref *b = &e->refs[ref - 1];
	*block = b->block;
	recorded_allocate(d, -(int64_t)b->size);
	b->block = e->free_refs;
	e->free_refs = (uint32_t)ref;
	return true;
}

static void remember_block(struct engine *e, struct dev *d, const struct vrt_record *r, uint32_t block)
{
	uint32_t stale;
	if (forget_block(e, d, r->device, r->addr, &stale) && stale) /* its free was lost: it cannot still live */
		vrt_am_release(&d->am, stale);
	uint32_t ref = e->free_refs;
	if (ref) {
		e->free_refs = e->refs[ref - 1].block;
	} else {
		if (e->n_refs == e->cap_refs) {
			uint32_t cap = e->cap_refs ? e->cap_refs * 2 : 1024;
			struct block_ref *v = realloc(e->refs, cap * sizeof(*v));
			if (!v) {
				e->error = VRT_E_NOMEM;
				return;
			}
			e->refs = v;
			e->cap_refs = cap;
		}
		ref = ++e->n_refs;
	}
	e->refs[ref - 1] = (struct block_ref){ block, r->size };
	recorded_allocate(d, (int64_t)r->size);
	if (map_put(&e->blocks, dev_key(r->device, r->addr), ref))
		e->error = VRT_E_NOMEM;
}

/* A tensor request: a BLOCK_ALLOC, or (recorded_ok false) one PyTorch failed with an OOM. */
static void request(struct engine *e, const struct vrt_record *r, uint32_t thread, bool recorded_ok)
{
	struct dev *d = model_dev(e, r->device);
	struct op_list *l = pending_of(e, thread);
	if (!d || !l)
		return;
	uint64_t size = recorded_ok ? r->aux : r->size;
	settle_others(e, thread, r->ts);
	if (has_kind(l, is_release) && !has_kind(l, is_failure) && vrt_am_fits_without_release(&d->am, size, r->stream))
		empty_cache_here(e, l, r->ts);
	bool until = e->o->until_event && e->ev_index == e->o->until_event;
	if (until) {
		struct vrt_replay_device *o = &e->r->dev[d->device];
		o->releasable_now = vrt_am_releasable(&d->am);
		o->reserved_at_until = d->am.stats.reserved;
		o->allocated_at_until = d->am.stats.allocated;
	}
	e->cur = l;
	e->model_ops.n = 0;
	uint32_t block = vrt_am_malloc(&d->am, size, r->stream);
	e->cur = NULL;
	e->r->model_events++;
	e->r->requests++;
	after_model(e, d, r->ts);
	check(e, l, r->ts, recorded_ok ? "request" : "failed request", size);
	set_len(e, l, 0);
	if (recorded_ok) {
		remember_block(e, d, r, block); /* a failed one too: the recording's total counts it */
		if (!block) {
			outcome_differs(e, r->ts, "the model fails a request the allocator served", size);
			record_failure(e, d, r, thread);
			if (!e->o->keep_going)
				stop(e, r->ts);
			return;
		}
		e->r->check.blocks++;
		e->r->check.blocks_at_recorded_address += vrt_am_block_addr(&d->am, block) == r->addr;
		return;
	}
	e->r->recorded_ooms++;
	if (!block) {
		if (!e->r->failed) {
			record_failure(e, d, r, thread);
			e->r->fail.in_trace = true; /* the program went on: so does the replay */
		}
		return;
	}
	if (until) {
		e->r->until_fits = true;
		vrt_am_release(&d->am, block);
		return;
	}
	if (e->r->as_recorded) {
		outcome_differs(e, r->ts, "the model serves a request the allocator failed", size);
		vrt_am_release(&d->am, block); /* the program never had it */
		return;
	}
	e->r->avoided_oom = true;
	e->r->avoided_oom_ts = r->ts;
	vrt_am_release(&d->am, block);
	if (!e->o->keep_going)
		stop(e, r->ts);
}

static void release(struct engine *e, const struct vrt_record *r, uint32_t thread)
{
	settle_others(e, thread, r->ts);
	struct op_list *l = pending_of(e, thread);
	if (l && has_kind(l, is_release) && !has_kind(l, is_acquire)) {
		empty_cache_here(e, l, r->ts);
		set_len(e, l, 0);
	}
	struct dev *d = dev_of(e, r->device);
	uint32_t block = 0;
	if (!d || !d->used || !forget_block(e, d, r->device, r->addr, &block)) {
		e->r->unknown_frees++;
		return;
	}
	if (!block)
		return; /* the model failed it: nothing to give back */
	vrt_am_release(&d->am, block);
	e->r->model_events++;
	e->r->frees++;
	after_model(e, d, r->ts);
}

/* A block live when the retained history begins: placed as a request of its size. */
static void seed_block(struct engine *e, const struct vrt_record *r)
{
	struct dev *d = model_dev(e, r->device);
	if (!d)
		return;
	e->r->approximate = true;
	uint32_t block = vrt_am_malloc(&d->am, r->aux ? r->aux : r->size, r->stream);
	after_model(e, d, r->ts);
	remember_block(e, d, r, block);
}

static void resize_block(struct engine *e, const struct vrt_record *r)
{
	struct dev *d = dev_of(e, r->device);
	uint64_t ref = d ? map_get(&e->blocks, dev_key(r->device, r->addr)) : 0;
	if (!ref)
		return;
	struct block_ref *b = &e->refs[ref - 1];
	recorded_allocate(d, (int64_t)r->size - (int64_t)b->size);
	b->size = r->size;
}

/* ---- the two passes ---------------------------------------------------------------------- */

/* The device's total memory as the driver reported it (the largest seen wins). */
static void know_device_total(struct engine *e, uint64_t total)
{
	if (!total || (e->total_exact && total <= e->device_total))
		return;
	e->device_total = total;
	e->total_exact = true;
}

/*
 * An expandable segment reserves ceil((total + total/8) / page) pages, so its size bounds the
 * total from above: total <= size * 8/9. The large pool's 20 MiB pages round more than the small
 * pool's 2 MiB ones, so the tightest bound seen is kept; any total under every bound and above
 * each one's page below sizes every segment seen as PyTorch did (a segment made before a tighter
 * bound arrived restarts the replay: learned()).
 */
static void bound_device_total(struct engine *e, uint64_t reserved)
{
	uint64_t bound = (uint64_t)((unsigned __int128)reserved * 8 / 9);
	if (!e->total_exact && bound && (!e->device_total || bound < e->device_total))
		e->device_total = bound;
}

/* What the trace says about its limits and its device; true when that changed. */
static bool survey(struct engine *e, const struct vrt_record *r, uint32_t thread)
{
	struct dev *d = dev_of(e, r->device);
	struct op_list *l;
	uint64_t before[3] = { e->oom_limit, e->device_total, e->capacity };
	bool evidence = e->limit_evidence;
	switch (r->op) {
	case VRT_OP_OOM_LIMITS:
		if (r->result && !e->oom_limit)
			e->oom_limit = r->aux;
		if (!r->result)
			know_device_total(e, r->aux);
		if (d && !e->capacity) /* free on the device plus what this process held there */
			e->capacity = r->aux2 + (uint64_t)e->m.live[vrt_device_slot(r->device)][VRT_KIND_DEVICE];
		break;
	case VRT_OP_OOM:
		if (r->api == VRT_API_TORCH_OOM) {
			l = pending_of(e, thread);
			if (l && !has_kind(l, is_failure))
				e->limit_evidence = true; /* the device never refused: a limit did */
			if (d && !e->capacity && r->aux) /* PyTorch's record has the device's free bytes */
				e->capacity = r->aux + (uint64_t)e->m.live[vrt_device_slot(r->device)][VRT_KIND_DEVICE];
			if (l && !e->replaying)
				set_len(e, l, 0);
		} else if (d && r->kind == VRT_KIND_DEVICE) {
			know_device_total(e, r->aux2);
			if (!e->capacity)
				e->capacity = r->aux + (uint64_t)e->m.live[vrt_device_slot(r->device)][VRT_KIND_DEVICE];
		}
		break;
	case VRT_OP_VA_RESERVE:
		if (torch_stack(e, r->stack))
			bound_device_total(e, r->size);
		break;
	case VRT_OP_BLOCK_ALLOC: case VRT_OP_BLOCK_FREE:
		if (!e->replaying && (l = pending_of(e, thread)))
			set_len(e, l, 0);
		break;
	}
	return before[0] != e->oom_limit || before[1] != e->device_total || before[2] != e->capacity ||
	       evidence != e->limit_evidence;
}

static void choose_limits(struct engine *e, const struct vrt_alloc_replay_options *o, struct vrt_alloc_replay *r);

/* A finding during the replay: the device's size reaches the model if it made no expandable
 * segment yet; a different limit or device means replaying again, knowing the whole trace. */
static void learned(struct engine *e)
{
	struct vrt_alloc_replay now = { .cfg = e->r->cfg };
	choose_limits(e, e->o, &now);
	bool segments = false;
	for (int k = 0; k < VRT_REPLAY_MAX_DEVICES; k++) {
		segments |= e->dev[k].used && e->dev[k].am.n_es && e->dev[k].am.device_total != e->device_total;
		if (e->dev[k].used && !e->dev[k].am.n_es)
			e->dev[k].am.device_total = e->device_total;
	}
	if (now.limit != e->r->limit || now.capacity != e->r->capacity || segments) {
		e->restart = true;
		e->r->stopped = true;
	}
}

static void apply(struct engine *e, const struct vrt_record *r, uint32_t thread)
{
	if (survey(e, r, thread) && e->replaying)
		learned(e);
	if (!e->replaying || e->restart)
		return;
	switch (r->op) {
	case VRT_OP_BLOCK_ALLOC:
		request(e, r, thread, true);
		break;
	case VRT_OP_BLOCK_FREE:
		release(e, r, thread);
		break;
	case VRT_OP_OOM:
		if (r->api == VRT_API_TORCH_OOM)
			request(e, r, thread, false);
		break;
	case VRT_OP_BLOCK_SIZE:
		resize_block(e, r);
		break;
	case VRT_OP_CP_LIVE:
		if (e->m.set.seeding && r->id2 == VRT_OP_BLOCK_ALLOC)
			seed_block(e, r);
		break;
	}
}

/* Tensor events change no device memory in the live-set model: it is kept for the rest. */
static bool tensor_event(uint32_t op) { return op == VRT_OP_BLOCK_ALLOC || op == VRT_OP_BLOCK_FREE || op == VRT_OP_BLOCK_SIZE; }

static int replay_once(struct engine *e)
{
	struct vrt_pass p; /* the model leaves tensor events out: it is applied here */
	struct vrt_record r;
	vrt_pass_open(&p, e->t, &(struct vrt_pass_options){ .label = "whatif", .quiet = true, .simulation = true });
	while (!e->error && !e->r->stopped && vrt_pass_next(&p, &r, NULL)) {
		if (!tensor_event(r.op))
			vrt_model_apply(&e->m, &r, NULL);
		track_segments(e, &r, p.rp.thread);
		apply(e, &r, p.rp.thread);
		if (r.op >= VRT_OP_CP_BEGIN)
			continue;
		if (e->replaying)
			e->r->events++;
		if (e->replaying && e->o->until_event && e->ev_index == e->o->until_event) {
			e->r->until_reached = true;
			stop(e, r.ts);
		}
		e->ev_index++;
	}
	int rc = vrt_pass_finish(&p);
	return e->error ? e->error : rc;
}

/* Back to the start of the trace; what the survey found is kept. */
static int reset(struct engine *e)
{
	vrt_model_free(&e->m);
	map_free(&e->segs);
	map_free(&e->blocks);
	e->n_refs = e->free_refs = 0;
	for (size_t u = 0; u < e->n_pending; u++)
		e->pending[u].n = 0;
	e->busy = 0;
	e->n_va = 0;
	e->ev_index = 0;
	e->restart = false;
	for (int k = 0; k < VRT_REPLAY_MAX_DEVICES; k++) {
		if (e->dev[k].used)
			vrt_am_free_all(&e->dev[k].am);
		e->dev[k] = (struct dev){ .e = e, .device = k };
	}
	struct vrt_alloc_replay *r = e->r;
	memset(r->dev, 0, sizeof(r->dev)); /* the until figures too */
	r->n_dev = 0;
	r->requests = r->frees = r->unknown_frees = r->empty_caches = r->recorded_ooms = 0;
	r->failed = r->avoided_oom = r->stopped = r->until_reached = r->until_fits = false;
	r->events = r->model_events = 0;
	memset(&r->check, 0, sizeof(r->check));
	r->check.first_mismatch_s = -1;
	return vrt_model_init(&e->m);
}

static void choose_limits(struct engine *e, const struct vrt_alloc_replay_options *o, struct vrt_alloc_replay *r)
{
	const char *info = vrt_info(e->t, "torch.allocator_limit");
	uint64_t v;
	if (o->allocator_limit) {
		r->limit = o->allocator_limit;
		r->limit_source = "--allocator-limit";
	} else if (o->no_limit) {
		r->limit_source = "none (lifted)";
	} else if (info && *info && !vrt_parse_size(info, &v) && v) {
		r->limit = v;
		r->limit_source = "the trace's INFO torch.allocator_limit";
	} else if (e->oom_limit) {
		r->limit = e->oom_limit;
		r->limit_source = "PyTorch's figures at the trace's out-of-memory error";
	} else if (r->cfg.fraction < 1.0 && e->device_total) {
		r->limit = (uint64_t)(r->cfg.fraction * (double)e->device_total);
		r->limit_source = "per_process_memory_fraction";
	} else if (e->limit_evidence) {
		uint64_t peak = 0;
		for (int k = 0; k < VRT_REPLAY_MAX_DEVICES; k++)
			peak = e->dev[k].rec_peak > peak ? e->dev[k].rec_peak : peak;
		r->limit = peak;
		r->limit_source = "inferred: the device did not refuse, so a limit did, at most the recorded peak";
	} else {
		r->limit_source = "none";
	}
	if (o->device_memory) {
		r->capacity = o->device_memory;
		r->capacity_source = "--device-memory";
	} else if (e->capacity) {
		r->capacity = e->capacity;
		r->capacity_source = "free at the trace's out-of-memory error, plus what the process held";
	} else {
		r->capacity_source = "unknown (the trace never ran out of device memory)";
	}
	if (o->device_memory && !e->device_total)
		e->device_total = o->device_memory;
}

static const char *recorded_conf(const struct vrt_trace *t)
{
	const char *c = vrt_info(t, "env.PYTORCH_ALLOC_CONF"); /* read first, as PyTorch does */
	if (!c || !*c)
		c = vrt_info(t, "env.PYTORCH_CUDA_ALLOC_CONF");
	return c ? c : "";
}

int vrt_alloc_replay_run(struct vrt_trace *t, const struct vrt_alloc_replay_options *o, struct vrt_alloc_replay *r,
			 char *err, size_t err_len)
{
	memset(r, 0, sizeof(*r));
	r->check.first_mismatch_s = -1;
	struct vrt_am_config recorded;
	const char *rc = recorded_conf(t);
	vrt_am_config_default(&recorded);
	if (vrt_am_config_parse(&recorded, rc, err, err_len))
		vrt_am_config_default(&recorded); /* PyTorch would have refused to start: take the defaults */
	vrt_am_config_format(&recorded, r->recorded_conf, sizeof(r->recorded_conf));
	r->cfg = recorded;
	if (o->alloc_conf && vrt_am_config_parse(&r->cfg, o->alloc_conf, err, err_len))
		return VRT_E_ARG;
	if (r->cfg.async_backend) {
		snprintf(err, err_len, "backend:cudaMallocAsync is not a caching allocator the model follows");
		return VRT_E_UNSUPPORTED;
	}
	vrt_am_config_format(&r->cfg, r->conf, sizeof(r->conf));
	r->trace_torch = vrt_info(t, "torch");
	r->other_release = r->trace_torch && *r->trace_torch &&
			   strncmp(r->trace_torch, VRT_AM_TORCH_RELEASE ".", strlen(VRT_AM_TORCH_RELEASE) + 1);
	r->approximate = t->history_lost || (t->hdr.flags & VRT_FILE_ATTACHED);

	struct engine *e = calloc(1, sizeof(*e));
	if (!e)
		return VRT_E_NOMEM;
	e->t = t;
	e->r = r;
	e->o = o;
	bool same = vrt_am_config_equal(&r->cfg, &recorded) && !o->allocator_limit && !o->no_limit &&
		    !o->device_memory;
	int rcode = reset(e);
	choose_limits(e, o, r);
	r->as_recorded = same;
	e->replaying = true;
	if (!rcode)
		rcode = replay_once(e);
	/* A replay that failed stopped before what the rest of the trace says of its limits and its
	 * device (PyTorch's figures at a later out-of-memory error): it is surveyed as well. */
	if (!rcode && r->failed)
		e->restart = true;
	if (!rcode && e->restart) {
		/* the limits replayed under changed, or were not all known: survey the whole trace first */
		e->replaying = false;
		rcode = reset(e);
		if (!rcode)
			rcode = replay_once(e);
		if (!rcode)
			choose_limits(e, o, r);
		if (!rcode)
			rcode = reset(e);
		e->replaying = true;
		if (!rcode)
			rcode = replay_once(e);
	}
	if (!rcode && !r->stopped)
		for (size_t u = 0; u < e->n_pending; u++)
			if (e->pending[u].n && !has_kind(&e->pending[u], is_acquire))
				empty_cache_here(e, &e->pending[u], e->m.last_ts);
	for (int k = 0; k < VRT_REPLAY_MAX_DEVICES; k++) {
		struct dev *d = &e->dev[k];
		if (!d->used)
			continue;
		struct vrt_replay_device *out = &r->dev[k];
		out->device = k;
		out->stats = d->am.stats;
		out->peak_reserved = d->am.stats.peak_reserved;
		out->peak_allocated = d->am.stats.peak_allocated;
		out->recorded_peak_reserved = d->rec_peak;
		out->recorded_peak_allocated = d->rec_allocated_peak;
		out->reserved_now = d->am.stats.reserved;
		out->allocated_now = d->am.stats.allocated;
		out->recorded_reserved_now = d->rec_reserved > 0 ? (uint64_t)d->rec_reserved : 0;
		if (!(o->until_event && r->until_reached))
			out->releasable_now = vrt_am_releasable(&d->am);
		r->n_dev = k + 1;
		vrt_am_free_all(&d->am);
	}
	if (!rcode && !r->requests)
		rcode = VRT_E_EMPTY;
	vrt_model_free(&e->m);
	map_free(&e->segs);
	map_free(&e->blocks);
	free(e->refs);
	for (size_t u = 0; u < e->n_pending; u++)
		free(e->pending[u].v);
	free(e->pending);
	free(e->model_ops.v);
	free(e->va);
	free(e);
	return rcode;
}
