/* SPDX-License-Identifier: MIT */
/*
 * Each remedy is measured where the request failed. The allocator settings and the cap are
 * replayed (alloc_replay.h) up to that request, under the trace's own limit: "fits" means no
 * request before it failed and it did not either; what they free is how much less the
 * allocator held just before it. The others take bytes off what was live by category, and fit
 * when they take at least what was missing: an upper bound, since freed tensor memory is only
 * reusable where the allocator can place the next request.
 */
#include "remedies.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_replay.h"
#include "cli.h"
#include "json.h"
#include "model.h"
#include "pass.h"

static struct vrt_remedy *add(struct vrt_remedies *r, const char *name, int64_t frees, enum vrt_fit fits,
			      const char *decided_by, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static struct vrt_remedy *add(struct vrt_remedies *r, const char *name, int64_t frees, enum vrt_fit fits,
			      const char *decided_by, const char *fmt, ...)
{
	if (r->n == VRT_MAX_REMEDIES)
		return NULL;
	struct vrt_remedy *m = &r->v[r->n++];
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->frees_bytes = frees;
	m->fits = fits;
	m->decided_by = decided_by;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m->detail, sizeof(m->detail), fmt, ap);
	va_end(ap);
	return m;
}

/* ---- replayed remedies ------------------------------------------------------------------- */

struct outcome {
	struct vrt_alloc_replay r;
	int rc;
	char err[200];
};

static void replay_to(struct vrt_trace *t, const struct vrt_remedy_input *in, const char *conf, bool no_limit,
		      struct outcome *o)
{
	struct vrt_alloc_replay_options opt = { .alloc_conf = conf, .no_limit = no_limit, .until_event = in->event,
						.keep_going = true };
	o->rc = vrt_alloc_replay_run(t, &opt, &o->r, o->err, sizeof(o->err));
}

static enum vrt_fit fit_of(const struct outcome *o, uint64_t event)
{
	if (o->rc || !o->r.until_reached)
		return VRT_FIT_UNKNOWN;
	if (o->r.failed && o->r.fail.event < event)
		return VRT_FIT_NO;
	return o->r.until_fits ? VRT_FIT_YES : VRT_FIT_NO;
}

static const struct vrt_replay_device *device_of(const struct outcome *o, int device)
{
	return device >= 0 && device < o->r.n_dev ? &o->r.dev[device] : NULL;
}

/* A setting tried where the recorded one failed. */
static void try_setting(struct vrt_trace *t, const struct vrt_remedy_input *in, const struct outcome *base,
			const char *name, const char *extra, struct vrt_remedies *out)
{
	char conf[300];
	const char *recorded = base->r.recorded_conf;
	snprintf(conf, sizeof(conf), "%s%s%s", recorded, *recorded ? "," : "", extra);
	struct outcome *o = calloc(1, sizeof(*o));
	if (!o)
		return;
	replay_to(t, in, conf, false, o);
	enum vrt_fit fits = fit_of(o, in->event);
	const struct vrt_replay_device *d = device_of(o, in->device), *b = device_of(base, in->device);
	if (fits == VRT_FIT_UNKNOWN) {
		add(out, name, 0, fits, "replay", "the replay did not reach the failing request%s%s", *o->err ? ": " : "",
		    o->err);
	} else if (o->r.failed && o->r.fail.event < in->event) {
		add(out, name, 0, VRT_FIT_NO, "replay", "an earlier request fails: %s at %.3f s",
		    vrt_bytes((int64_t)o->r.fail.request), vrt_ts_seconds(t, o->r.fail.ts));
	} else {
		/* Both replayed to just before the request: before the allocator gave its cache back to
		 * try again, so the recorded figure here is above what PyTorch's message reports. */
		int64_t frees = b && d ? (int64_t)b->reserved_at_until - (int64_t)d->reserved_at_until : 0;
		char with[32], recorded_setting[32];
		snprintf(with, sizeof(with), "%s", vrt_bytes(d ? (int64_t)d->reserved_at_until : 0));
		snprintf(recorded_setting, sizeof(recorded_setting), "%s", vrt_bytes(b ? (int64_t)b->reserved_at_until : 0));
		if (!strcmp(with, recorded_setting))
			add(out, name, frees, fits, "replay",
			    "%s reserved just before the request, about as much as the recorded setting replayed", with);
		else
			add(out, name, frees, fits, "replay",
			    "%s reserved just before the request, against %s with the recorded setting replayed", with,
			    recorded_setting);
	}
	free(o);
}

static void cap_remedy(struct vrt_trace *t, const struct vrt_remedy_input *in, const struct outcome *base,
		       struct vrt_remedies *out)
{
	const struct vrt_record *l = in->limits;
	if (l && l->op && !l->result) {
		add(out, "no per-process cap", 0, VRT_FIT_NO, "replay",
		    "there was none to lift: the device itself had only %s free", vrt_bytes((int64_t)l->aux2));
		return;
	}
	if (!(l && l->op) && !base->r.limit)
		return; /* no cap known, and the device's own size is not in the trace */
	struct outcome *o = calloc(1, sizeof(*o));
	if (!o)
		return;
	replay_to(t, in, NULL, true, o);
	uint64_t allowed = l && l->op ? l->aux : base->r.limit, free_bytes = l && l->op ? l->aux2 : in->device_free;
	uint64_t reserved = l && l->op ? l->id : base->r.fail.reserved;
	int64_t frees = free_bytes ? (int64_t)(free_bytes + reserved) - (int64_t)allowed : 0;
	add(out, "no per-process cap", frees, fit_of(o, in->event), "replay",
	    "PyTorch may reserve %s (%s)%s%s%s", vrt_bytes((int64_t)allowed),
	    l && l->op ? "set_per_process_memory_fraction" : base->r.limit_source, free_bytes ? "; the device had " : "",
	    free_bytes ? vrt_bytes((int64_t)free_bytes) : "", free_bytes ? " free" : "");
	free(o);
}

/* ---- remedies from what was live --------------------------------------------------------- */

static const struct vrt_category *category(const struct vrt_remedy_input *in, const char *name)
{
	for (int i = 0; i < in->n_cats; i++)
		if (!strcmp(in->cats[i].name, name))
			return &in->cats[i];
	return NULL;
}

static enum vrt_fit covers(int64_t frees, int64_t shortfall)
{
	if (shortfall <= 0)
		return VRT_FIT_UNKNOWN;
	return frees >= shortfall ? VRT_FIT_YES : VRT_FIT_NO;
}

/* A retention walk at the failure decides a category by what its tensors are; without one, or
 * where it found little, the allocating stacks' rules did. An absent category was decided by
 * the walk when there was one: it found no such tensor. */
static const char *decided(const struct vrt_remedy_input *in, const struct vrt_category *c)
{
	if (!c)
		return in->walked ? "identity" : "rule";
	return c->identity && 2 * c->identity >= c->bytes ? "identity" : "rule";
}

static int world_size(const struct vrt_trace *t)
{
	if (t->hdr.world_size > 0)
		return t->hdr.world_size;
	const char *w = vrt_info(t, "env.WORLD_SIZE");
	int n = w ? atoi(w) : 0;
	return n > 0 ? n : 1;
}

static void category_remedies(const struct vrt_trace *t, const struct vrt_remedy_input *in, struct vrt_remedies *out)
{
	const struct vrt_category *act = category(in, "activations"), *par = category(in, "parameters"),
				  *opt = category(in, "optimizer_state");
	int64_t a = act ? act->bytes : 0, p = par ? par->bytes : 0, s = opt ? opt->bytes : 0;
	int world = world_size(t);
	add(out, "activation checkpointing", a, covers(a, out->shortfall), decided(in, act),
	    "at most the %s of activations live then (saved for backward), less what recomputing keeps", vrt_bytes(a));
	int64_t part = world > 1 ? p - p / world : 0;
	if (world > 1)
		add(out, "ZeRO-3 partitioning", part, covers(part, out->shortfall), decided(in, par),
		    "%s of parameters on the device, a %d-th of them kept on each of %d ranks", vrt_bytes(p), world, world);
	else
		add(out, "ZeRO-3 partitioning", 0, VRT_FIT_NO, decided(in, par),
		    "one rank (WORLD_SIZE 1): there is nothing to partition the %s of parameters across", vrt_bytes(p));
	add(out, "offload_param", p, covers(p, out->shortfall), decided(in, par), "the %s of parameters on the device",
	    vrt_bytes(p));
	if (s)
		add(out, "offload_optimizer", s, covers(s, out->shortfall), decided(in, opt),
		    "the %s of optimizer state still on the device", vrt_bytes(s));
	else
		add(out, "offload_optimizer", 0, VRT_FIT_NO, decided(in, opt),
		    "no optimizer state is on the device (offloaded already, or not made yet): nothing to move");
}

/* ---- the failing call and the earlier calls of its phase (or mark intervals) -------------- */

#define MAX_CALLS 256

/* Tensor bytes after each tensor request of one call, from its entry. */
struct series {
	uint64_t entry, *live;
	size_t n, cap;
	bool overflowed; /* more requests than SERIES_MAX: not projected */
};

struct calls {
	uint64_t peak[MAX_CALLS];
	int n, depth;
	bool open;
	uint64_t current;
	int64_t label_size; /* the number in the last mark's label; -1: none */
	/* The intervals between marks, whatever the phase: a size is a whole step's (forward,
	 * backward, optimizer), where the phase's calls may be its forward passes only. */
	uint64_t mark_peak[MAX_CALLS];
	int64_t mark_size[MAX_CALLS];
	int n_marks;
	bool mark_open;
	uint64_t mark_current;
	struct series now, last; /* the open (failing) call; the last call that ended */
	int error;
};

/* Requests of one call kept for the projection (32 MiB): a call making more is not projected. */
#define SERIES_MAX (1u << 22)

static void series_push(struct calls *c, uint64_t live)
{
	struct series *s = &c->now;
	if (s->n >= SERIES_MAX) {
		s->overflowed = true;
		return;
	}
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		uint64_t *grown = realloc(s->live, cap * sizeof(*grown));
		if (!grown) {
			c->error = VRT_E_NOMEM;
			return;
		}
		s->live = grown;
		s->cap = cap;
	}
	s->live[s->n++] = live;
}

/* The last number in a mark's label ("batch 16", "seq=2048"), -1 if it has none. */
static int64_t number_in(const char *label)
{
	int64_t n = -1;
	for (const char *p = label; p && *p; p++) {
		if (*p < '0' || *p > '9')
			continue;
		int64_t v = 0;
		while (*p >= '0' && *p <= '9' && v < (INT64_MAX - 9) / 10)
			v = v * 10 + (*p++ - '0');
		n = v;
		if (!*p)
			break;
	}
	return n;
}

static void open_call(struct calls *c, uint64_t live)
{
	c->open = true;
	c->current = live;
	c->now.entry = live;
	c->now.n = 0;
	c->now.overflowed = false;
}

static void close_call(struct calls *c)
{
	if (!c->open)
		return;
	if (c->n < MAX_CALLS)
		c->peak[c->n++] = c->current;
	struct series done = c->now; /* the ended call becomes the last one; its buffer is reused */
	c->now = c->last;
	c->last = done;
	c->open = false;
}

/* A mark ends the interval since the last one and begins the next, of the size it names. */
static void next_mark(struct calls *c, int64_t size, uint64_t live)
{
	if (c->mark_open && c->n_marks < MAX_CALLS) {
		c->mark_size[c->n_marks] = c->label_size;
		c->mark_peak[c->n_marks++] = c->mark_current;
	}
	c->label_size = size;
	c->mark_open = true;
	c->mark_current = live;
}

/* Peaks of tensor bytes of every earlier call of the failing call's phase (or, with no phase,
 * of every interval between marks), the tensor bytes after each request of the last of them
 * and of the failing call, and the tensor bytes at the failure. */
static int call_peaks(struct vrt_trace *t, const struct vrt_remedy_input *in, struct calls *c, uint64_t *now)
{
	struct vrt_model m;
	struct vrt_pass p;
	struct vrt_record r;
	int rc = vrt_model_init(&m);
	if (rc)
		return rc;
	int slot = vrt_device_slot(in->device);
	uint64_t events = 0;
	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .label = "remedies", .quiet = true, .model = &m });
	while (events < in->event && !c->error && vrt_pass_next(&p, &r, NULL)) {
		events += r.op < VRT_OP_CP_BEGIN;
		uint64_t live = m.tensors[slot] > 0 ? (uint64_t)m.tensors[slot] : 0;
		if (in->phase && r.op == VRT_OP_PHASE_ENTER && r.id == in->phase && !c->depth++) {
			open_call(c, live);
		} else if (in->phase && r.op == VRT_OP_PHASE_EXIT && r.id == in->phase && c->depth && !--c->depth) {
			close_call(c);
		} else if (r.op == VRT_OP_MARK) {
			next_mark(c, number_in(vrt_string(t, (uint32_t)r.id)), live);
			if (!in->phase) {
				close_call(c);
				open_call(c, live);
			}
		} else if (c->open && r.op == VRT_OP_BLOCK_ALLOC && r.device == in->device) {
			series_push(c, live);
		}
		if (c->open && live > c->current)
			c->current = live;
		if (c->mark_open && live > c->mark_current)
			c->mark_current = live;
	}
	*now = m.tensors[slot] > 0 ? (uint64_t)m.tensors[slot] : 0;
	rc = vrt_pass_finish(&p);
	vrt_model_free(&m);
	return rc ? rc : c->error;
}

/*
 * What the rest of the failing call still needed, from the last call before it: that call went
 * on from its k-th request (k: as many as the failing call made) to its peak; the failing call
 * grew from its entry by s times what the last one had by then (a batch twice as large: s = 2),
 * so it would go on by s times as much. Only when both calls took the same path that far: the
 * last one made more requests, and had grown by its k-th.
 */
static void project_rest(struct calls *c, uint64_t now, struct vrt_remedies *out)
{
	const struct series *f = &c->now, *l = &c->last;
	out->call_rest = -1;
	if (!c->open || !c->n || !f->n || l->n <= f->n || f->overflowed || l->overflowed)
		return;
	uint64_t at_k = l->live[f->n - 1], peak = at_k;
	for (size_t i = f->n; i < l->n; i++)
		peak = l->live[i] > peak ? l->live[i] : peak;
	if (at_k <= l->entry || now <= f->entry)
		return;
	out->call_scale = (double)(now - f->entry) / (double)(at_k - l->entry);
	out->call_rest = (int64_t)((double)(peak - at_k) * out->call_scale);
	out->call_requests = f->n;
	out->last_call_requests = l->n;
	out->call_from_first = c->n == 1;
	out->call_peak = now + (uint64_t)out->call_rest;
}

/*
 * A remedy that makes room for the failing request but not for what its call still needs. A
 * projection from the first call is no verdict: that call also does what is done once (an
 * optimizer's state, lazily built caches, first-use allocations that shift its requests against
 * a later call's), so a later call's rest may be far less (on the H200, expandable segments
 * under a cap: projected 2.27 GiB more from the first step, and the real re-run fitted).
 */
static void judge_calls(struct vrt_remedies *out, const char *label)
{
	if (out->call_rest < 0 || out->shortfall <= 0)
		return;
	for (int i = 0; i < out->n; i++) {
		struct vrt_remedy *m = &out->v[i];
		if (m->fits != VRT_FIT_YES || m->frees_bytes >= out->shortfall + out->call_rest)
			continue;
		m->fits = out->call_from_first ? VRT_FIT_UNKNOWN : VRT_FIT_NO;
		size_t used = strlen(m->detail);
		if (out->call_from_first)
			snprintf(m->detail + used, sizeof(m->detail) - used,
				 "; the request fits; the rest of the %s may not (about %s more if it goes as the first one "
				 "did, which also did one-time work)", label, vrt_bytes(out->call_rest));
		else
			snprintf(m->detail + used, sizeof(m->detail) - used,
				 "; the request fits, not the rest of the %s (about %s more)", label, vrt_bytes(out->call_rest));
	}
}

/* "call of PHASE" / "calls of PHASE", or the same of intervals between marks. */
static void call_noun(char *buf, size_t n, const char *phase, bool plural)
{
	if (phase)
		snprintf(buf, n, "call%s of %.80s", plural ? "s" : "", phase);
	else
		snprintf(buf, n, "interval%s between marks", plural ? "s" : "");
}

/*
 * Where marks carry a size (a number in the label: "batch 8"), the peaks of the intervals
 * between them against their sizes, fitted by least squares (peak = a + b size), say the largest
 * size whose peak leaves the tensors the room they had under the limit at the failure (the limit
 * less what the allocator held beyond tensors then), less SIZE_MARGIN of it.
 */
#define SIZE_MARGIN 0.02

static void largest_size(const struct calls *c, uint64_t now, uint64_t need, struct vrt_remedies *out)
{
	double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
	int64_t lo = INT64_MAX, hi = -1;
	uint64_t peak_at_hi = 0;
	out->largest_size = -1;
	for (int i = 0; i < c->n_marks; i++) {
		if (c->mark_size[i] <= 0)
			continue;
		double x = (double)c->mark_size[i], y = (double)c->mark_peak[i];
		n++, sx += x, sy += y, sxx += x * x, sxy += x * y;
		lo = c->mark_size[i] < lo ? c->mark_size[i] : lo;
		if (c->mark_size[i] > hi)
			hi = c->mark_size[i], peak_at_hi = 0;
		if (c->mark_size[i] == hi && c->mark_peak[i] > peak_at_hi)
			peak_at_hi = c->mark_peak[i];
	}
	double det = n * sxx - sx * sx;
	if (n < 2 || lo == hi || det <= 0 || !out->limit || out->reserved_at_failure < now)
		return;
	double b = (n * sxy - sx * sy) / det, a = (sy - b * sx) / n;
	/*
	 * The failing size needed at least `need`. Where the line says less there, it is bent by
	 * small sizes whose peaks fixed costs decide (the first steps of a doubling batch stay
	 * level), and it would call the failing size itself a fit: the line from the largest size
	 * that finished to the failure's need is the one to go by then.
	 */
	int64_t failing = c->mark_open ? c->label_size : -1;
	out->size_through_failure = false;
	if (failing > hi && a + b * (double)failing < (double)need && need > peak_at_hi) {
		b = (double)(need - peak_at_hi) / (double)(failing - hi);
		a = (double)peak_at_hi - b * (double)hi;
		out->size_through_failure = true;
	}
	/* 2 % of it kept back: a size's blocks fragment the reserve differently from the failing
	 * call's (on the H200 the straight line put the limit one batch too high without it) */
	double room = ((double)out->limit - (double)(out->reserved_at_failure - now)) * (1 - SIZE_MARGIN);
	if (b <= 0 || room <= a)
		return;
	out->largest_size = (int64_t)((room - a) / b);
	out->size_slope = b;
	out->size_intercept = a;
	out->failing_size = failing;
}

static void batch_remedy(const struct calls *c, uint64_t now, const struct vrt_remedy_input *in, const char *phase,
			 struct vrt_remedies *out)
{
	char label[100];
	call_noun(label, sizeof(label), phase, c->n != 1);
	if (!c->n) {
		add(out, "a smaller batch or sequence", 0, VRT_FIT_UNKNOWN, "replay", "the trace holds no earlier %s",
		    out->call_label);
		return;
	}
	uint64_t best = 0;
	char list[160];
	size_t used = 0;
	list[0] = 0;
	for (int i = 0; i < c->n; i++) {
		best = c->peak[i] > best ? c->peak[i] : best;
		if (i >= c->n - 6 && used < sizeof(list))
			used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", used ? ", " : "",
						 vrt_bytes((int64_t)c->peak[i]));
	}
	uint64_t need = now + in->requested;
	struct vrt_remedy *m = add(out, "a smaller batch or sequence", need > best ? (int64_t)(need - best) : 0,
				   VRT_FIT_YES, "replay",
				   "%d earlier %s peaked at %s%s in tensors (this one needed at least %s): one like those fits",
				   c->n, label, c->n > 6 ? "... " : "", list, vrt_bytes((int64_t)need));
	largest_size(c, now, need, out);
	if (m && out->largest_size >= 0) {
		size_t used = strlen(m->detail);
		snprintf(m->detail + used, sizeof(m->detail) - used,
			 "; by the sizes the marks name (a step peaks at %s + %s per unit%s), the largest that fits is about %lld (2 %% kept for fragmentation)",
			 vrt_bytes((int64_t)out->size_intercept), vrt_bytes((int64_t)out->size_slope),
			 out->size_through_failure ? ", from the largest size that finished to the failing one's need" : "",
			 (long long)out->largest_size);
	}
}

/* The failing call's projection, the smaller-batch remedy, and every fit judged on the call. */
static void call_remedies(struct vrt_trace *t, const struct vrt_remedy_input *in, struct vrt_remedies *out)
{
	struct calls *c = calloc(1, sizeof(*c));
	uint64_t now = 0;
	out->call_rest = -1;
	out->largest_size = -1;
	if (!c)
		return;
	c->label_size = -1;
	const char *phase = in->phase ? vrt_string(t, in->phase) : NULL;
	call_noun(out->call_label, sizeof(out->call_label), phase, false);
	if (!call_peaks(t, in, c, &now)) {
		project_rest(c, now, out);
		judge_calls(out, out->call_label);
		batch_remedy(c, now, in, phase, out);
	}
	free(c->now.live);
	free(c->last.live);
	free(c);
}

/* ---- all of them ------------------------------------------------------------------------- */

static int64_t shortfall(const struct vrt_remedy_input *in, const struct outcome *base)
{
	const struct vrt_record *l = in->limits;
	if (l && l->op) {
		int64_t need = l->result ? (int64_t)(l->id + l->size) - (int64_t)l->aux : (int64_t)l->size - (int64_t)l->aux2;
		return need > 0 ? need : 0;
	}
	const struct vrt_replay_failure *f = &base->r.fail;
	if (!base->rc && base->r.failed && f->event == in->event && f->by_limit) {
		int64_t need = (int64_t)(f->reserved + vrt_am_allocation_size(&base->r.cfg, f->rounded)) - (int64_t)f->limit;
		return need > 0 ? need : 0;
	}
	if (in->device_free && in->requested > in->device_free)
		return (int64_t)(in->requested - in->device_free);
	return 0;
}

void vrt_remedies_compute(struct vrt_trace *t, const struct vrt_remedy_input *in, struct vrt_remedies *out)
{
	memset(out, 0, sizeof(*out));
	struct outcome *base = calloc(1, sizeof(*base));
	if (!base)
		return;
	replay_to(t, in, NULL, false, base);
	out->replayed = !base->rc && base->r.until_reached;
	if (!out->replayed)
		snprintf(out->note, sizeof(out->note), "the allocator replay did not reach the failing request (%.120s)",
			 base->rc ? (*base->err ? base->err : vrt_strerror(base->rc)) : "an earlier request failed in it");
	out->shortfall = shortfall(in, base);
	if (out->replayed) {
		out->limit = base->r.limit;
		out->limit_source = base->r.limit_source;
		out->by_limit = base->r.failed && base->r.fail.event == in->event && base->r.fail.by_limit;
		out->reserved_at_failure = base->r.fail.reserved;
		cap_remedy(t, in, base, out);
		if (!base->r.cfg.expandable)
			try_setting(t, in, base, "expandable_segments:True", "expandable_segments:True", out);
		if (base->r.cfg.max_split_size != 128ull << 20)
			try_setting(t, in, base, "max_split_size_mb:128", "max_split_size_mb:128", out);
		if (base->r.cfg.max_split_size != 512ull << 20)
			try_setting(t, in, base, "max_split_size_mb:512", "max_split_size_mb:512", out);
		const struct vrt_replay_device *d = device_of(base, in->device);
		uint64_t cached = d ? d->releasable_now : 0;
		add(out, "empty_cache()", (int64_t)cached, VRT_FIT_NO, "replay",
		    cached ? "what it gives back just before the request: the allocator frees that itself before it "
			     "raises out of memory"
			   : "nothing cached could be given back: every cached block is part of a segment in use");
	}
	category_remedies(t, in, out);
	call_remedies(t, in, out);
	free(base);
}

static const char *fit_text(enum vrt_fit f) { return f == VRT_FIT_YES ? "fits" : f == VRT_FIT_NO ? "no" : "?"; }

void vrt_remedies_print(const struct vrt_remedies *r, FILE *out)
{
	fprintf(out, "\nwhat would make it fit (what a change frees at the failing request, whether that request and "
		     "every one before it then fit, what decided it)");
	if (r->shortfall)
		fprintf(out, "; %s were missing", vrt_bytes(r->shortfall));
	fputs(":\n", out);
	for (int i = 0; i < r->n; i++) {
		const struct vrt_remedy *m = &r->v[i];
		fprintf(out, "  %-28s %10s  %-4s  [%s] %s\n", m->name, vrt_bytes(m->frees_bytes), fit_text(m->fits),
			m->decided_by, m->detail);
	}
	if (*r->note)
		fprintf(out, "  (%s)\n", r->note);
	if (r->call_rest >= 0)
		fprintf(out,
			"  (the failing %s had made %zu tensor requests; the one before it made %zu and grew by %s after its "
			"%zu-th; %.2fx that is about %s more, a peak of about %s in tensors: a remedy fits only with room "
			"for it%s)\n",
			r->call_label, r->call_requests, r->last_call_requests,
			vrt_bytes((int64_t)((double)r->call_rest / r->call_scale)), r->call_requests, r->call_scale,
			vrt_bytes(r->call_rest), vrt_bytes((int64_t)r->call_peak),
			r->call_from_first ? "; the one before it is the first, so this is an estimate, not a verdict" : "");
}

void vrt_remedies_json(const struct vrt_remedies *r, FILE *out)
{
	fprintf(out, ", \"shortfall_bytes\": %lld, \"limit_bytes\": %llu, \"limit_source\": ", (long long)r->shortfall,
		(unsigned long long)r->limit);
	if (r->limit_source)
		json_string(out, r->limit_source);
	else
		fputs("null", out);
	fprintf(out, ", \"limit_refused\": %s, \"remedies\": [", r->by_limit ? "true" : "false");
	for (int i = 0; i < r->n; i++) {
		const struct vrt_remedy *m = &r->v[i];
		fprintf(out, "%s{\"name\": ", i ? ", " : "");
		json_string(out, m->name);
		fprintf(out, ", \"frees_bytes\": %lld, \"fits\": %s, \"decided_by\": \"%s\", \"detail\": ",
			(long long)m->frees_bytes, m->fits == VRT_FIT_YES ? "true" : m->fits == VRT_FIT_NO ? "false" : "null",
			m->decided_by);
		json_string(out, m->detail);
		fputc('}', out);
	}
	fputc(']', out);
	fputs(", \"largest_size_that_fits\": ", out);
	if (r->largest_size >= 0)
		fprintf(out, "{\"size\": %lld, \"failing_size\": %lld, \"bytes_per_unit\": %.0f, \"bytes_at_zero\": %.0f, "
			"\"through_failure\": %s}",
			(long long)r->largest_size, (long long)r->failing_size, r->size_slope, r->size_intercept,
			r->size_through_failure ? "true" : "false");
	else
		fputs("null", out);
	fputs(", \"failing_call\": ", out);
	if (r->call_rest < 0) {
		fputs("null", out);
		return;
	}
	fputs("{\"what\": ", out);
	json_string(out, r->call_label);
	fprintf(out,
		", \"requests\": %zu, \"last_call_requests\": %zu, \"scale\": %.4f, \"rest_bytes\": %lld, "
		"\"peak_bytes\": %llu, \"from_first_call\": %s}",
		r->call_requests, r->last_call_requests, r->call_scale, (long long)r->call_rest,
		(unsigned long long)r->call_peak, r->call_from_first ? "true" : "false");
}
