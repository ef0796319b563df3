/* SPDX-License-Identifier: MIT */
#include "pass.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "report_common.h"
#include "vramtrace/error.h"

/* Records between looks at the progress line: cheap next to decoding them. */
#define PROGRESS_EVERY 0xfffffu

/* Records between a prefetch and its use: the model's work on them hides the cache miss. */
#define PREFETCH_NEAR 4
/* Live items from which the live set outgrows a core's private caches (about 100 bytes each
 * with the index): below, a prefetch costs more than the misses it saves. */
#define PREFETCH_MIN_ITEMS 16384

static uint64_t passes, simulations;
/* Traces (by serial) already warned about: every pass over one trace sees the same refusals. */
static uint64_t warned[16];
static unsigned n_warned;

uint64_t vrt_pass_count(void) { return passes; }

static void print_pass_count(void)
{
	fprintf(stderr, "vramtrace: debug: %llu passes", (unsigned long long)passes);
	if (simulations)
		fprintf(stderr, ", %llu allocator replays", (unsigned long long)simulations);
	fputc('\n', stderr);
}

static bool env_on(const char *name)
{
	const char *v = getenv(name);
	return v && *v && strcmp(v, "0");
}

void vrt_pass_open(struct vrt_pass *p, struct vrt_trace *t, const struct vrt_pass_options *o)
{
	if (!passes && !simulations && env_on("VRAMTRACE_DEBUG_PASSES"))
		atexit(print_pass_count);
	if (o->simulation)
		simulations++;
	else
		passes++;
	memset(p, 0, sizeof(*p));
	p->t = t;
	p->o = *o;
	if (!p->o.label)
		p->o.label = "reading";
	vrt_progress_begin(&p->progress, p->o.label, o->quiet);
	vrt_replay_begin(&p->rp, t);
}

const struct vrt_record *vrt_pass_take(struct vrt_pass *p, struct vrt_effect *e)
{
	const struct vrt_record *r = p->stopped ? NULL : vrt_replay_take(&p->rp);
	if (!r)
		return NULL;
	if (p->o.stop_at_teardown && r->op == VRT_OP_EXITING) {
		p->teardown_s = vrt_ts_seconds(p->t, r->ts);
		p->stopped = true;
		return NULL;
	}
	if (p->o.until_time && r->op < VRT_OP_CP_BEGIN && vrt_ts_seconds(p->t, r->ts) > p->o.until_s) {
		p->stopped = true;
		return NULL;
	}
	if (p->o.model) {
		/* An item is read about PREFETCH_NEAR records after its index slot was prefetched,
		 * and applied PREFETCH_NEAR records after that. */
		if (p->o.model->set.used >= PREFETCH_MIN_ITEMS)
			vrt_live_prefetch(&p->o.model->set, vrt_replay_ahead(&p->rp, PREFETCH_NEAR),
					  vrt_replay_ahead(&p->rp, 2 * PREFETCH_NEAR));
		p->o.model->thread = p->rp.thread;
		vrt_model_apply(p->o.model, r, e);
	} else if (e) {
		*e = (struct vrt_effect){ .kind = VRT_EFFECT_NONE };
	}
	p->events += !(r->op >= VRT_OP_CP_BEGIN && r->op <= VRT_OP_CP_END);
	if (!(++p->records & PROGRESS_EVERY))
		vrt_progress_update(&p->progress, p->rp.bytes_done, p->rp.bytes_total);
	return r;
}

bool vrt_pass_next(struct vrt_pass *p, struct vrt_record *r, struct vrt_effect *e)
{
	const struct vrt_record *next = vrt_pass_take(p, e);
	if (next)
		*r = *next;
	return next != NULL;
}

void vrt_pass_abandon(struct vrt_pass *p)
{
	vrt_progress_end(&p->progress);
	p->progress.enabled = false;
}

static void warn_model(struct vrt_pass *p)
{
	const struct vrt_model *m = p->o.model;
	if (p->o.quiet || !m || !m->set.implausible)
		return;
	for (unsigned i = 0; i < n_warned && i < sizeof(warned) / sizeof(warned[0]); i++)
		if (warned[i] == p->t->serial)
			return;
	warned[n_warned++ % (sizeof(warned) / sizeof(warned[0]))] = p->t->serial;
	fprintf(stderr, "vramtrace: warning: %s: %llu allocations were left out: together with what was live "
			"they would hold more than %s (a damaged trace?)\n",
		vrt_escape(p->t->path), (unsigned long long)m->set.implausible, vrt_bytes((int64_t)VRT_HELD_MAX));
}

int vrt_pass_finish(struct vrt_pass *p)
{
	vrt_pass_abandon(p);
	warn_model(p);
	if (p->rp.error)
		return p->rp.error;
	return p->o.model ? p->o.model->set.error : 0;
}

int vrt_pass_close(struct vrt_pass *p)
{
	int error = vrt_pass_finish(p);
	unsigned long long events = p->o.model ? p->o.model->set.events : p->events;
	if (!error)
		return 0;
	if (error == VRT_E_CHANGED)
		return vrt_fail(error, "%s: stopped after %llu events", vrt_escape(p->t->path), events);
	if (p->rp.error && error == VRT_E_RANGE && p->t->cut_short) { /* the tables went with the cut part */
		vrt_fail(0, "%s: stopped after %llu events: a record names a stack, string or thread whose definition "
			    "is in the part of the file that is missing (it was cut short); read a whole copy of it",
			 vrt_escape(p->t->path), events);
		return vrt_exit_code(error);
	}
	if (p->rp.error)
		return vrt_fail(error, "%s: stopped at a bad record after %llu events", vrt_escape(p->t->path), events);
	return vrt_fail(error, "%s: the live set could not be kept after %llu events", vrt_escape(p->t->path), events);
}
