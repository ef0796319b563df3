/* SPDX-License-Identifier: MIT */
/*
 * vramtrace leaks: what each invocation of a phase leaves behind.
 *
 * An invocation is one outermost call of the phase (nested calls of the same name belong to
 * it), or, for "mark:LABEL", the time from one mark LABEL to the next. A survivor of invocation K
 * is an allocation made inside K and still live when K+1 starts (for the last one: at the end).
 * Bytes are tensors when the trace has PyTorch block events, else CUDA allocations; pinned host
 * memory is counted apart.
 *
 * Without phases, growth is found at the low points of total memory: the trace is cut into
 * windows, the live set is grouped by site at each window's minimum, and a site whose bytes
 * keep rising across those minima is growing; one that stops rising is a bounded cache.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attribution.h"
#include "cli.h"
#include "json.h"
#include "model.h"
#include "owners.h"
#include "pass.h"
#include "reports.h"
#include "report_common.h"
#include "sites.h"
#include "stacks.h"

/* The text's table of calls shows this many at each end of a longer run (--json has all). */
#define CALLS_SHOWN_EACH_END 25

/* Calls of one phase followed: a step a second for half a year. Each costs ~100 bytes (its
 * survivors' groups apart). */
#define MAX_INVOCATIONS (1u << 24)
#define WINDOWS 24

struct leaks_options {
	const char *phase;
	const char *layer; /* "tensors", "cuda" or NULL for tensors when the trace has them */
	bool json, quiet, fail_on_growth;
	int top, frames;
};

struct invocation {
	uint64_t enter_event, exit_event; /* event indices; exit 0 while open */
	double enter_s, exit_s;
	int64_t live_at_entry, live_at_exit, live_at_next;
	int64_t allocated, freed;
	int64_t survivors;                /* bytes born here and live at the next entry */
	uint64_t lost;                    /* events lost from its entry to the next (LOST records) */
	bool returned;                    /* its exit (or the next mark) is in the trace; else the end
					   * (or teardown) closed it */
};

struct group {
	uint32_t stack;
	uint32_t invocation; /* 1-based */
	int64_t bytes;
	uint64_t count;
	uint32_t live;       /* its items live now (all of them were at its first look) */
	uint32_t gone_scan;  /* once none is live: the last scan that saw some of it */
	uint32_t seen;       /* its items the scan under way saw (scan_all) */
	uint32_t held_scan;  /* the scan whose retention walk explained it, 0 while none has */
	uint32_t cut_scan;   /* the last scan whose walk ran out of time before it got here */
	struct vrt_held_by held;
	struct vrt_held_by cut; /* that walk's account (timed out), until a later walk explains it */
	uint64_t stream;     /* its items' stream (0: not stream-ordered, or they came on several) */
	int64_t captured;    /* bytes of its items made for a CUDA graph (born during a capture) */
};

struct leaks {
	struct vrt_trace *t;
	const struct leaks_options *o;
	bool blocks;             /* count tensors (PyTorch blocks) rather than CUDA allocations */
	bool by_mark;
	const char *name;
	uint32_t name_id;
	struct invocation *inv;
	size_t n_inv, cap_inv;
	int depth;
	struct group *groups;
	size_t n_groups, cap_groups;
	uint32_t *open;          /* positions of the groups with items live (and of some whose last
				  * one ended since the last scan_all), room for cap_groups */
	size_t n_open;
	uint32_t *group_index;   /* open addressing: group position + 1, keyed by (stack, invocation) */
	size_t index_cap;
	uint32_t scan;           /* index of the current scan (entry K+1, or the end) */
	struct vrt_owners owners; /* what the retention walks found */
	struct vrt_roots roots;   /* where the chains that hold the survivors start */
	bool walk_fresh;         /* a walk closed since the last scan: it explains this one */
	bool ended;              /* the end was measured (at teardown's start, or the trace's end) */
	double teardown_s;       /* when teardown began (EXITING), 0 if the trace does not say */
	int64_t live_at_teardown, live_at_end;
	const char *picked_why;  /* why the phase was picked without --phase (NULL: it was named) */
	FILE *out;               /* where --json goes */
	uint64_t visited;        /* live items the scans looked at (a follower's budget) */
	/* Items born in the open call since the last scan, for the next scan's first look (which
	 * then looks at them alone, not at every live item). */
	struct birth *births;
	size_t n_births, cap_births;
	/* The next scan looks at every live item: a record ended items besides its own since the
	 * last scan (a replaced allocation, a reset), or the call's births came to more than a
	 * quarter of what is live (looking at each of them costs more then). */
	bool scan_all_next;
	/* While the output is written: the site each survivor's stack is listed under (stacks that
	 * print alike are one site). Not owned; NULL: every stack is its own site. */
	struct vrt_site_keys *keys;
};

/* An item by its key in the live set and its birth, which tells its incarnation apart. */
struct birth {
	uint64_t addr, born_event;
	uint8_t space;
};

/* ---- choosing the phase and the layer ------------------------------------------------- */

/* What the survey learns of one phase name: its outermost calls, what they allocated, and the
 * live total at their entries, in both layers (tensors, CUDA allocations). */
struct phase_count {
	uint32_t name;
	uint64_t enters, calls;
	int depth;
	int64_t allocated[2];             /* [0] tensors, [1] CUDA device memory */
	int64_t entry_second[2], entry_last[2];
};

/* What one pass over the trace learns before the replay that counts. */
struct survey {
	struct phase_count counts[64];
	int n_counts;
	struct vrt_blocks_probe blocks; /* up to --until-mark, as the replay will see it */
	/* With phases surveyed (a model): where the low-point analysis ends, the model just before
	 * teardown began (EXITING), or at the end when it did not. */
	bool torn_down;
	double teardown_s;              /* 0: the trace does not say */
	uint64_t end_events;
	bool end_blocks;
};

static struct phase_count *count_of(struct survey *s, uint32_t name)
{
	int i = 0;
	while (i < s->n_counts && s->counts[i].name != name)
		i++;
	if (i == s->n_counts && s->n_counts < 64)
		s->counts[s->n_counts++] = (struct phase_count){ .name = name };
	return i < s->n_counts ? &s->counts[i] : NULL;
}

static int64_t layer_total(const struct vrt_model *m, int layer)
{
	int64_t total = 0;
	for (int d = 0; d <= VRT_MAX_DEVICES; d++)
		total += layer ? m->live[d][VRT_KIND_DEVICE] + m->live[d][VRT_KIND_MANAGED] : m->tensors[d];
	return total;
}

static void count_boundary(struct survey *s, const struct vrt_model *m, const struct vrt_record *r)
{
	struct phase_count *c = count_of(s, (uint32_t)r->id);
	if (!c)
		return;
	if (r->op == VRT_OP_PHASE_EXIT) {
		c->depth -= c->depth > 0;
		return;
	}
	c->enters++;
	if (c->depth++)
		return;
	c->calls++;
	for (int l = 0; l < 2; l++) {
		if (c->calls == 2)
			c->entry_second[l] = layer_total(m, l);
		c->entry_last[l] = layer_total(m, l);
	}
}

static void count_allocation(struct survey *s, const struct vrt_effect *e)
{
	if (e->kind != VRT_EFFECT_BORN || e->delta <= 0)
		return;
	int layer = e->tensor ? 0 : e->item.kind == VRT_KIND_DEVICE ? 1 : -1;
	for (int i = 0; layer >= 0 && i < s->n_counts; i++)
		if (s->counts[i].depth > 0 && s->counts[i].allocated[layer] < INT64_MAX - e->delta)
			s->counts[i].allocated[layer] += e->delta;
}

/* One record of a pass that surveys the phases, the model applied (the pass may be another
 * command's: html's first). */
static void survey_record(struct survey *s, const struct vrt_trace *t, const struct vrt_model *m,
			  const struct vrt_record *r, const struct vrt_effect *e)
{
	if (r->op == VRT_OP_PHASE_ENTER || r->op == VRT_OP_PHASE_EXIT)
		count_boundary(s, m, r);
	count_allocation(s, e);
	if (r->op == VRT_OP_EXITING && !s->torn_down) {
		s->torn_down = true;
		s->teardown_s = vrt_ts_seconds(t, r->ts);
	}
	if (!s->torn_down) {
		s->end_events = m->set.events;
		s->end_blocks = m->any_blocks;
	}
}

/* The blocks probe's answer where a model applied the same records: the two agree (model.c), and
 * the model's costs nothing more. */
static void blocks_seen_by(struct vrt_blocks_probe *b, const struct vrt_model *m)
{
	b->any_blocks = m->any_blocks;
	b->events = m->set.events;
}

struct follow;
static void follow_record(struct follow *f, const struct survey *s, const struct vrt_model *m,
			  const struct vrt_record *r, const struct vrt_effect *e, uint64_t records);
static void follow_end(struct follow *f, const struct vrt_model *m);

/*
 * One pass for what the replay needs to know first: the phases entered (over the whole trace)
 * when none was named, and whether tensor blocks exist when --layer does not say. A bad record
 * before --until-mark fails here, as the replay would. With f, the pass replays the phases it
 * sees entered too (struct follow). Flattened: its loop's calls, made for every record, inlined
 * (as vrt_model_apply's).
 */
static __attribute__((flatten)) int survey(struct vrt_trace *t, const struct leaks_options *o, bool want_phases,
					   struct survey *s, struct follow *f)
{
	bool want_blocks = !o->layer;
	struct vrt_pass p;
	const struct vrt_record *r;
	struct vrt_effect e;
	struct vrt_model m;
	if (want_phases && vrt_model_init(&m))
		return vrt_fail(VRT_E_NOMEM, "leaks");
	/* Following the phases, this pass is the phase's replay too: named as the replay. */
	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .label = f ? "leaks" : "leaks: survey", .quiet = o->quiet,
							  .model = want_phases ? &m : NULL });
	while ((want_phases || (want_blocks && !s->blocks.any_blocks)) && (r = vrt_pass_take(&p, &e))) {
		if (want_phases) {
			survey_record(s, t, &m, r, &e);
			blocks_seen_by(&s->blocks, &m);
		} else {
			vrt_blocks_probe_apply(&s->blocks, r);
		}
		if (f)
			follow_record(f, s, &m, r, &e, p.records);
	}
	int error = vrt_pass_finish(&p);
	if (f && !error)
		follow_end(f, &m);
	if (want_phases)
		vrt_model_free(&m);
	if (error)
		return vrt_fail(error, "%s: stopped at a bad record after %llu events", vrt_escape(t->path),
				(unsigned long long)s->blocks.events);
	return 0;
}

/* The phase (or, after "mark:", the mark label) the user named. */
static const char *phase_named(const char *wanted, bool *by_mark)
{
	*by_mark = !strncmp(wanted, "mark:", 5);
	return *by_mark ? wanted + 5 : wanted;
}

/*
 * Without --phase: the phase that explains growth. A candidate has two or more calls that
 * allocate something in the layer counted; memory at entry rising from the second call on ranks
 * first, then a Python phase over an NVTX range (compiler passes and library ranges are NVTX),
 * then what the calls allocated. None: the low-point analysis takes over. *why says it.
 */
static const char *pick_phase(const struct vrt_trace *t, const struct survey *s, int layer, char *why, size_t len)
{
	int best = -1;
	int64_t best_growth = 0;
	for (int i = 0; i < s->n_counts; i++) {
		const struct phase_count *c = &s->counts[i];
		if (c->calls < 2 || c->allocated[layer] <= 0)
			continue;
		int64_t growth = c->entry_last[layer] - c->entry_second[layer];
		bool python = strncmp(vrt_string(t, c->name), "nvtx:", 5);
		if (best >= 0) {
			const struct phase_count *b = &s->counts[best];
			bool b_python = strncmp(vrt_string(t, b->name), "nvtx:", 5);
			if ((growth > 0) != (best_growth > 0) ? best_growth > 0
			    : python != b_python ? b_python
			    : growth != best_growth ? growth < best_growth
			    : c->allocated[layer] <= b->allocated[layer])
				continue;
		}
		best = i;
		best_growth = growth;
	}
	if (best < 0) {
		snprintf(why, len, "no phase has two or more calls that allocate");
		return NULL;
	}
	const struct phase_count *c = &s->counts[best];
	if (best_growth > 0)
		snprintf(why, len, "%llu calls; memory at entry rises by %s from the second call to the last",
			 (unsigned long long)c->calls, vrt_bytes(best_growth));
	else
		snprintf(why, len, "%llu calls that allocate %s in all; memory at entry does not rise",
			 (unsigned long long)c->calls, vrt_bytes(c->allocated[layer]));
	return vrt_string(t, c->name);
}

/* ---- counting --------------------------------------------------------------------------- */

static bool counts(const struct leaks *lk, const struct vrt_item *it)
{
	if (lk->blocks)
		return it->space == VRT_SPACE_BLOCK;
	return vrt_item_counted(it) && it->kind != VRT_KIND_HOST_PINNED;
}

/* What is live in a layer: tensors (blocks), or CUDA memory other than pinned host memory. */
static int64_t layer_live(bool blocks, const struct vrt_model *m)
{
	int64_t total = 0;
	for (int d = 0; d <= VRT_MAX_DEVICES; d++) {
		if (blocks) {
			total += m->tensors[d];
			continue;
		}
		for (int k = 0; k < VRT_KIND_LAST; k++)
			if (k != VRT_KIND_HOST_PINNED)
				total += m->live[d][k];
	}
	return total;
}

static int64_t live_total(const struct leaks *lk, const struct vrt_model *m)
{
	return layer_live(lk->blocks, m);
}

/* Invocation an event index falls in (1-based), 0 if none. Invocations are ordered. */
static uint32_t invocation_of(const struct leaks *lk, uint64_t event)
{
	/* A scan asks about every live item: most were born before the first call (weights) or in
	 * the last one, answered without the search. */
	if (!lk->n_inv || event < lk->inv[0].enter_event)
		return 0;
	size_t lo = 0, hi = lk->n_inv;
	if (event >= lk->inv[hi - 1].enter_event)
		lo = hi;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (lk->inv[mid].enter_event <= event)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return 0;
	const struct invocation *v = &lk->inv[lo - 1];
	return (!v->exit_event || event <= v->exit_event) ? (uint32_t)lo : 0;
}

static size_t group_home(const struct leaks *lk, uint32_t stack, uint32_t invocation)
{
	uint64_t h = ((uint64_t)stack << 32 | invocation) * 0x9e3779b97f4a7c15ull;
	return (size_t)(h ^ (h >> 29)) & (lk->index_cap - 1);
}

static bool reindex_groups(struct leaks *lk)
{
	size_t cap = lk->index_cap ? lk->index_cap * 2 : 1024;
	uint32_t *index = calloc(cap, sizeof(*index));
	if (!index)
		return false;
	free(lk->group_index);
	lk->group_index = index;
	lk->index_cap = cap;
	for (size_t i = 0; i < lk->n_groups; i++) {
		size_t j = group_home(lk, lk->groups[i].stack, lk->groups[i].invocation);
		while (index[j])
			j = (j + 1) & (cap - 1);
		index[j] = (uint32_t)i + 1;
	}
	return true;
}

static struct group *group_of(struct leaks *lk, uint32_t stack, uint32_t invocation)
{
	if ((lk->n_groups + 1) * 2 > lk->index_cap && !reindex_groups(lk))
		return NULL;
	size_t j = group_home(lk, stack, invocation);
	for (; lk->group_index[j]; j = (j + 1) & (lk->index_cap - 1)) {
		struct group *g = &lk->groups[lk->group_index[j] - 1];
		if (g->stack == stack && g->invocation == invocation)
			return g;
	}
	if (lk->n_groups == lk->cap_groups) {
		size_t cap = lk->cap_groups ? lk->cap_groups * 2 : 256;
		uint32_t *open = realloc(lk->open, cap * sizeof(*open));
		if (open)
			lk->open = open;
		struct group *g = open ? realloc(lk->groups, cap * sizeof(*g)) : NULL;
		if (!g)
			return NULL;
		lk->groups = g;
		lk->cap_groups = cap;
	}
	struct group *g = &lk->groups[lk->n_groups++];
	*g = (struct group){ .stack = stack, .invocation = invocation };
	lk->group_index[j] = (uint32_t)lk->n_groups;
	lk->open[lk->n_open++] = (uint32_t)(lk->n_groups - 1); /* born at its first look, with items live */
	return g;
}

/*
 * What holds a group: the first walk that closed after it was born and before a scan that saw
 * it (usually the walk at the next call's entry) explains it; a later walk is asked only while
 * no walk has (the walk at that boundary was skipped, ran out of time before it got there, or
 * did not ask about it). Until then the last walk that ran out of time is its account.
 */
static void explain_survivor(struct leaks *lk, struct group *g, const struct vrt_item *it)
{
	if (!lk->walk_fresh || (g->held_scan && g->held_scan != lk->scan))
		return;
	const struct vrt_walk *w;
	enum vrt_held status = vrt_owners_explain(&lk->owners, it, &w);
	if (status == VRT_HELD_OFF)
		return;
	if (status == VRT_HELD_TIMED_OUT && !g->held_scan) {
		if (g->cut_scan != lk->scan) {
			memset(&g->cut, 0, sizeof(g->cut));
			g->cut_scan = lk->scan;
		}
		vrt_held_add(&g->cut, w, it);
		return;
	}
	vrt_held_add(&g->held, w, it);
	vrt_roots_add(&lk->roots, lk->t, w, it);
	g->held_scan = lk->scan;
}

static const struct vrt_held_by *group_held(const struct group *g)
{
	return g->held_scan ? &g->held : &g->cut;
}

/*
 * The scans: at each call's entry (and at the end, scan n_inv + 1) the survivors of the call
 * before are grouped by site, its items live then (their first look); a group counts its items
 * while they live, each death as it happens (item_died), and remembers the last scan that saw
 * one of them. So a scan looks at the last call's births alone, not at every live item, unless
 * something else must: a record that ended items besides its own (whose deaths the effect does
 * not name), or a retention walk that closed since and explains what it sees.
 */

/* it, born in call `born`, is live at that call's next entry: a survivor. */
static struct group *first_seen(struct leaks *lk, const struct vrt_item *it, uint32_t born)
{
	struct group *g = group_of(lk, it->stack, born);
	if (!g)
		return NULL;
	g->stream = !g->count || g->stream == it->stream ? it->stream : 0;
	g->captured += it->captured ? (int64_t)it->size : 0;
	g->bytes += (int64_t)it->size;
	g->count++;
	g->live++;
	lk->inv[born - 1].survivors += (int64_t)it->size;
	return g;
}

static struct group *find_group(const struct leaks *lk, uint32_t stack, uint32_t invocation)
{
	for (size_t j = lk->index_cap ? group_home(lk, stack, invocation) : 0; lk->index_cap && lk->group_index[j];
	     j = (j + 1) & (lk->index_cap - 1)) {
		struct group *g = &lk->groups[lk->group_index[j] - 1];
		if (g->stack == stack && g->invocation == invocation)
			return g;
	}
	return NULL;
}

/* The call an item was born in when a scan has looked at that call's survivors; else 0. */
static uint32_t looked_at_call_of(const struct leaks *lk, const struct vrt_item *it)
{
	if (!lk->scan || (lk->scan <= lk->n_inv && it->born_event >= lk->inv[lk->scan - 1].enter_event))
		return 0; /* born in or after the call the last scan entered */
	uint32_t born = invocation_of(lk, it->born_event);
	return born < lk->scan ? born : 0;
}

/* A counted item ended, as the record's own. */
static void item_died(struct leaks *lk, const struct vrt_item *it)
{
	uint32_t born = looked_at_call_of(lk, it);
	struct group *g = born ? find_group(lk, it->stack, born) : NULL;
	if (g && g->live && !--g->live)
		g->gone_scan = lk->scan;
}

static bool birth_live(const struct vrt_model *m, const struct birth *b, struct vrt_item *it)
{
	return vrt_live_lookup(&m->set, b->space, b->addr, it) && it->born_event == b->born_event;
}

/* The births kept stay under a quarter of the live set (and 64): past it, the next scan looks at
 * every live item instead. */
static int note_birth(struct leaks *lk, const struct vrt_model *m, const struct vrt_item *it)
{
	if (lk->scan_all_next)
		return 0;
	if (lk->n_births >= m->set.used / 4 + 64) {
		lk->scan_all_next = true;
		return 0;
	}
	if (lk->n_births == lk->cap_births) {
		size_t cap = lk->cap_births ? lk->cap_births * 2 : 256;
		struct birth *v = realloc(lk->births, cap * sizeof(*v));
		if (!v)
			return VRT_E_NOMEM;
		lk->births = v;
		lk->cap_births = cap;
	}
	lk->births[lk->n_births++] = (struct birth){ it->addr, it->born_event, it->space };
	return 0;
}

/* The first look at the last call's births (all made while it was open): those still live are
 * its survivors. */
static void scan_births(struct leaks *lk, const struct vrt_model *m)
{
	struct vrt_item it;
	for (size_t i = 0; i < lk->n_births; i++)
		if (birth_live(m, &lk->births[i], &it))
			first_seen(lk, &it, lk->scan - 1);
	lk->visited += lk->n_births;
}

static void scan_visit(void *ctx, const struct vrt_item *it)
{
	struct leaks *lk = ctx;
	if (!counts(lk, it) || it->seeded)
		return;
	uint32_t born = invocation_of(lk, it->born_event);
	if (!born || born >= lk->scan)
		return;
	struct group *g = born + 1 == lk->scan ? first_seen(lk, it, born) : find_group(lk, it->stack, born);
	if (!g)
		return;
	g->seen++;
	explain_survivor(lk, g, it);
}

/* Every live item looked at: the groups' counts are what is live, whatever ended unnamed. */
static void scan_all(struct leaks *lk, const struct vrt_model *m)
{
	for (size_t i = 0; i < lk->n_open; i++)
		lk->groups[lk->open[i]].seen = 0;
	vrt_model_each(m, scan_visit, lk);
	size_t kept = 0;
	for (size_t i = 0; i < lk->n_open; i++) {
		struct group *g = &lk->groups[lk->open[i]];
		if (g->live && !g->seen)
			g->gone_scan = lk->scan - 1;
		g->live = g->seen;
		if (g->live)
			lk->open[kept++] = lk->open[i];
	}
	lk->n_open = kept;
	lk->visited += m->set.used;
}

static void scan_survivors(struct leaks *lk, const struct vrt_model *m, uint32_t scan)
{
	lk->scan = scan;
	if (lk->scan_all_next || lk->walk_fresh)
		scan_all(lk, m);
	else
		scan_births(lk, m);
	lk->n_births = 0;
	lk->scan_all_next = false;
	if (lk->walk_fresh)
		vrt_owners_settle(&lk->owners);
	lk->walk_fresh = false;
}

/* Later entries (and the end) at which some of a group was still live. */
static uint32_t outlived(const struct leaks *lk, const struct group *g)
{
	uint32_t last = g->live ? lk->scan : g->gone_scan;
	return last > g->invocation + 1 ? last - g->invocation - 1 : 0;
}

static bool is_boundary(const struct leaks *lk, const struct vrt_record *r, int *kind)
{
	if (lk->by_mark) {
		*kind = 0;
		return r->op == VRT_OP_MARK && r->id == lk->name_id;
	}
	*kind = r->op == VRT_OP_PHASE_ENTER ? 1 : -1;
	return (r->op == VRT_OP_PHASE_ENTER || r->op == VRT_OP_PHASE_EXIT) && r->id == lk->name_id;
}

static void close_invocation(struct leaks *lk, const struct vrt_model *m, double now, bool returned)
{
	struct invocation *v = &lk->inv[lk->n_inv - 1];
	v->returned = returned;
	v->exit_event = m->set.events;
	v->exit_s = now;
	v->live_at_exit = live_total(lk, m);
}

static int open_invocation(struct leaks *lk, const struct vrt_model *m, double now)
{
	if (lk->n_inv == MAX_INVOCATIONS)
		return VRT_E_SIZE;
	if (lk->n_inv == lk->cap_inv) {
		size_t cap = lk->cap_inv ? lk->cap_inv * 2 : 64;
		struct invocation *nv = realloc(lk->inv, cap * sizeof(*nv));
		if (!nv)
			return VRT_E_NOMEM;
		lk->inv = nv;
		lk->cap_inv = cap;
	}
	int64_t live = live_total(lk, m);
	if (lk->n_inv) {
		lk->inv[lk->n_inv - 1].live_at_next = live;
		scan_survivors(lk, m, (uint32_t)lk->n_inv + 1);
	}
	lk->inv[lk->n_inv++] = (struct invocation){ .enter_event = m->set.events + 1, .enter_s = now, .live_at_entry = live };
	return 0;
}

/* The end stands in for the next entry of the last call: where teardown began when the trace
 * says (what the interpreter frees after that, the program did not), else where it ends. */
static void measure_end(struct leaks *lk, const struct vrt_model *m, double now)
{
	if (lk->ended)
		return;
	lk->ended = true;
	if (!lk->n_inv)
		return;
	struct invocation *last = &lk->inv[lk->n_inv - 1];
	if (!last->exit_event)
		close_invocation(lk, m, now, lk->by_mark); /* an interval between marks ends with the trace */
	last->live_at_next = live_total(lk, m);
	scan_survivors(lk, m, (uint32_t)lk->n_inv + 1);
}

/* What a record changes in every replay, a call open or not: the walks, and the teardown. */
static inline void replay_walks_and_end(struct leaks *lk, const struct vrt_model *m, const struct vrt_record *r)
{
	if (vrt_owners_apply(&lk->owners, r))
		lk->walk_fresh = true;
	if (r->op == VRT_OP_EXITING && !lk->ended) {
		lk->teardown_s = vrt_ts_seconds(lk->t, r->ts);
		lk->live_at_teardown = live_total(lk, m);
		measure_end(lk, m, lk->teardown_s);
	}
}

/* One record of the phase's replay, the model applied (the pass may be another command's:
 * html's last). Returns 0 or a vrt_error (too many calls, no memory): the replay ends there. */
static int replay_record(struct leaks *lk, const struct vrt_model *m, const struct vrt_record *r,
			 const struct vrt_effect *e)
{
	replay_walks_and_end(lk, m, r);
	if (r->op == VRT_OP_LOST && lk->n_inv) /* a lost free would show as a survivor of this call */
		lk->inv[lk->n_inv - 1].lost += r->id;
	int kind, rc = 0;
	if (!lk->ended && lk->name_id && is_boundary(lk, r, &kind)) {
		double now = vrt_ts_seconds(lk->t, r->ts);
		if (kind == 1 && lk->depth++ == 0) {
			rc = open_invocation(lk, m, now);
		} else if (kind == -1 && lk->depth > 0 && --lk->depth == 0) {
			close_invocation(lk, m, now, true);
		} else if (kind == 0) {
			if (lk->n_inv)
				close_invocation(lk, m, now, true);
			rc = open_invocation(lk, m, now);
		}
	}
	if (!lk->n_inv) /* before the first call: nothing to count yet */
		return rc;
	lk->scan_all_next |= e->others_ended != 0;
	if (e->kind == VRT_EFFECT_NONE || !counts(lk, &e->item))
		return rc;
	if (e->kind == VRT_EFFECT_DIED && !e->item.seeded)
		item_died(lk, &e->item);
	bool in_call = !lk->inv[lk->n_inv - 1].exit_event;
	if (in_call && e->kind == VRT_EFFECT_BORN && !e->item.seeded && !lk->ended && !rc)
		rc = note_birth(lk, m, &e->item);
	if (in_call) {
		struct invocation *v = &lk->inv[lk->n_inv - 1];
		/* Sums over events, not over the live set: they saturate instead of wrapping. */
		if (e->delta > 0 && __builtin_add_overflow(v->allocated, e->delta, &v->allocated))
			v->allocated = INT64_MAX;
		else if (e->delta < 0 && __builtin_sub_overflow(v->freed, e->delta, &v->freed))
			v->freed = INT64_MAX;
	}
	return rc;
}

/* After the replay's last record: the end stands in for the last call's next entry. */
static void replay_end(struct leaks *lk, const struct vrt_model *m)
{
	measure_end(lk, m, vrt_ts_seconds(lk->t, m->last_ts));
	lk->live_at_end = live_total(lk, m);
}

static int replay_on(struct leaks *lk, struct vrt_model *m)
{
	struct vrt_pass p;
	const struct vrt_record *r;
	struct vrt_effect e;
	vrt_pass_open(&p, lk->t, &(struct vrt_pass_options){ .label = "leaks", .quiet = lk->o->quiet, .model = m });
	while ((r = vrt_pass_take(&p, &e))) {
		int rc = replay_record(lk, m, r, &e);
		if (rc == VRT_E_SIZE) {
			vrt_pass_abandon(&p);
			return vrt_fail(rc, "%s: %s has more than %u calls: name a phase called less often with --phase, "
				       "or stop earlier with --until-mark", vrt_escape(lk->t->path), vrt_escape(lk->name),
				MAX_INVOCATIONS);
		}
		if (rc) {
			vrt_pass_abandon(&p);
			return vrt_fail(rc, "leaks");
		}
	}
	int rc = vrt_pass_close(&p);
	if (rc)
		return rc;
	replay_end(lk, m);
	return 0;
}

/* The phase's replay, a pass of its own. Returns 0 or an exit code after its message. */
static int replay(struct leaks *lk)
{
	struct vrt_model m;
	if (vrt_model_init(&m))
		return vrt_fail(VRT_E_NOMEM, "leaks");
	int rc = replay_on(lk, &m);
	vrt_model_free(&m);
	return rc;
}

/* ---- following every phase in the survey's pass ------------------------------------------ */

static void leaks_free(struct leaks *lk)
{
	free(lk->births);
	free(lk->open);
	free(lk->inv);
	free(lk->groups);
	free(lk->group_index);
	vrt_owners_free(&lk->owners);
}


/* Phases followed at once: the first names entered. */
#define FOLLOW_MAX 4
/* Live items a follower's scans may look at beyond one per record of the pass so far. */
#define FOLLOW_SLACK (1u << 22)

/*
 * The replays of the phases the survey sees entered, run in its pass on its model, so that the
 * phase pick_phase chooses is replayed already. A replay's state before its phase's first entry
 * does not depend on the phase: `before` is that state, fed from the pass's start, and a
 * follower starts as its copy at the phase's first entry. A follower stops (off), leaving its
 * phase, if picked, to a replay of its own as before, on an error (too many calls, no memory),
 * when its scans outgrow the budget (a phase entered far more often than the pass has records
 * to spare), or when the layer it counts turns out wrong (tensor blocks after it started
 * counting CUDA allocations: without --layer the replay counts the layer of the whole trace).
 */
struct follow {
	const char *layer;          /* --layer */
	struct leaks before;        /* no phase */
	int64_t before_teardown[2]; /* its live_at_teardown in either layer ([1]: tensors) */
	struct leaks lk[FOLLOW_MAX];
	bool off[FOLLOW_MAX];
	int n;
};

static void follow_init(struct follow *f, struct vrt_trace *t, const struct leaks_options *o)
{
	memset(f, 0, sizeof(*f));
	f->layer = o->layer;
	f->before = (struct leaks){ .t = t, .o = o };
}

static void follow_stop(struct follow *f, int i)
{
	if (f->off[i])
		return;
	f->off[i] = true;
	leaks_free(&f->lk[i]);
}

/* A follower of the phase r enters, as `before` stands before r. */
static void follow_start(struct follow *f, const struct survey *s, const struct vrt_record *r)
{
	for (int i = 0; i < f->n; i++)
		if (f->lk[i].name_id == r->id)
			return;
	if (f->n == FOLLOW_MAX || r->id > UINT32_MAX)
		return;
	struct leaks *lk = &f->lk[f->n];
	/* `before` has no name (replay_record opens no call for it): it holds no calls or groups,
	 * so the copy shares nothing with it but the owners, copied deep below. */
	*lk = f->before;
	lk->name_id = (uint32_t)r->id;
	lk->blocks = f->layer ? !strcmp(f->layer, "tensors") : s->blocks.any_blocks;
	lk->live_at_teardown = f->before_teardown[lk->blocks];
	f->off[f->n] = vrt_owners_copy(&lk->owners, &f->before.owners) != 0;
	f->n++;
}

/* One record of the survey's pass, its model applied and the blocks probe too. */
static void follow_record(struct follow *f, const struct survey *s, const struct vrt_model *m,
			  const struct vrt_record *r, const struct vrt_effect *e, uint64_t records)
{
	if (r->op == VRT_OP_PHASE_ENTER)
		follow_start(f, s, r);
	bool was_ended = f->before.ended;
	/* `before` has no name: it opens no call, and the rest of replay_record leaves it alone. */
	replay_walks_and_end(&f->before, m, r);
	if (f->before.ended && !was_ended)
		for (int l = 0; l < 2; l++)
			f->before_teardown[l] = layer_live(l, m);
	for (int i = 0; i < f->n; i++) {
		if (f->off[i])
			continue;
		struct leaks *lk = &f->lk[i];
		if (replay_record(lk, m, r, e) || lk->visited > records + FOLLOW_SLACK ||
		    (!f->layer && !lk->blocks && s->blocks.any_blocks))
			follow_stop(f, i);
	}
}

static void follow_end(struct follow *f, const struct vrt_model *m)
{
	for (int i = 0; i < f->n; i++)
		if (!f->off[i])
			replay_end(&f->lk[i], m);
}

/* The picked phase's replay, when a follower made it: lk takes it over (true). A follower still
 * on counts the layer the replay would (a wrong guess stopped it). */
static bool follow_adopt(struct follow *f, struct leaks *lk)
{
	for (int i = 0; f && i < f->n; i++) {
		if (f->off[i] || f->lk[i].name_id != lk->name_id)
			continue;
		struct leaks picked = f->lk[i];
		picked.name = lk->name;
		picked.picked_why = lk->picked_why;
		picked.out = lk->out;
		leaks_free(lk);
		*lk = picked;
		f->off[i] = true; /* lk owns what it held */
		return true;
	}
	return false;
}

static void follow_free(struct follow *f)
{
	if (!f)
		return;
	for (int i = 0; i < f->n; i++)
		follow_stop(f, i);
	leaks_free(&f->before);
	free(f);
}

/* ---- output ----------------------------------------------------------------------------- */

static int by_bytes(const void *a, const void *b)
{
	const struct group *x = a, *y = b;
	if (x->bytes != y->bytes)
		return x->bytes > y->bytes ? -1 : 1;
	if (x->invocation != y->invocation)
		return x->invocation < y->invocation ? -1 : 1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

/* The stack a survivor's site is listed under (sites.h: stacks that print alike are one). */
static uint32_t site_stack(const struct leaks *lk, uint32_t stack)
{
	return lk->keys ? vrt_site_keys_stack(lk->keys, stack) : stack;
}

static int by_invocation(const void *a, const void *b)
{
	const struct group *x = *(const struct group *const *)a, *y = *(const struct group *const *)b;
	return x->invocation < y->invocation ? -1 : x->invocation > y->invocation;
}

struct stream_use {
	size_t site; /* its position in the list */
	uint64_t stream;
	uint32_t invocation;
};

static int by_site_and_stream(const void *a, const void *b)
{
	const struct stream_use *x = a, *y = b;
	if (x->site != y->site)
		return x->site < y->site ? -1 : 1;
	if (x->stream != y->stream)
		return x->stream < y->stream ? -1 : 1;
	return x->invocation < y->invocation ? -1 : x->invocation > y->invocation;
}

/*
 * site->streams for the sites of a list whose calls each left their survivors on a stream of
 * their own, none another call's: PyTorch keeps a cuBLAS workspace for every stream a matmul
 * ran on, so a stream made each call makes a workspace each call, which looks like memory set
 * up once that grows. Without memory for it, no site gets the count (the text says less).
 */
static void count_streams(const struct leaks *lk, uint32_t from, struct vrt_sites *s)
{
	struct stream_use *use = malloc((lk->n_groups ? lk->n_groups : 1) * sizeof(*use));
	if (!use)
		return;
	size_t n = 0;
	for (size_t i = 0; i < lk->n_groups; i++) {
		const struct group *g = &lk->groups[i];
		struct vrt_site *site = g->count && g->invocation >= from ? vrt_sites_find(s, site_stack(lk, g->stack))
									   : NULL;
		if (site)
			use[n++] = (struct stream_use){ (size_t)(site - s->v), g->stream, g->invocation };
	}
	qsort(use, n, sizeof(*use), by_site_and_stream);
	for (size_t i = 0; i < n;) {
		size_t site = use[i].site;
		uint32_t streams = 0;
		bool own = true; /* every stream one call's, none 0 */
		while (i < n && use[i].site == site) {
			uint64_t stream = use[i].stream;
			uint32_t invocation = use[i].invocation;
			own &= stream != 0;
			for (; i < n && use[i].site == site && use[i].stream == stream; i++)
				own &= use[i].invocation == invocation;
			streams++;
		}
		/* and no call on two: as many streams as calls that left survivors here */
		s->v[site].streams = own && streams >= 2 && streams == (uint64_t)s->v[site].value2 ? streams : 0;
	}
	free(use);
}

/* Per site over the invocations from `from` on (1: all), largest first: bytes, and in how many
 * invocations it left something. Groups are taken call by call: a site's stacks that left
 * survivors in one call count that call once (without memory for the order, in the groups'
 * own: such a call may count twice, nothing is left out). */
static void sites_since(const struct leaks *lk, uint32_t from, struct vrt_sites *s)
{
	vrt_sites_init(s);
	const struct group **order = malloc((lk->n_groups ? lk->n_groups : 1) * sizeof(*order));
	size_t n = 0;
	for (size_t i = 0; order && i < lk->n_groups; i++)
		order[n++] = &lk->groups[i];
	if (order)
		qsort(order, n, sizeof(*order), by_invocation);
	for (size_t i = 0; i < lk->n_groups; i++) {
		const struct group *g = order ? order[i] : &lk->groups[i];
		if (!g->count || g->invocation < from)
			continue;
		struct vrt_site *site = vrt_sites_get(s, site_stack(lk, g->stack), NULL);
		if (!site)
			continue;
		site->bytes += g->bytes;
		site->count += g->count;
		site->captured += g->captured;
		if (site->last != g->invocation || site->first == UINT64_MAX)
			site->value2++; /* invocations that left survivors here */
		site->first = g->invocation < site->first ? g->invocation : site->first;
		site->last = g->invocation > site->last ? g->invocation : site->last;
		uint32_t later = outlived(lk, g);
		if (g->invocation < lk->n_inv && later > site->outlived)
			site->outlived = later;
	}
	free(order);
	count_streams(lk, from, s);
	vrt_sites_sort(s);
}

/* Whether a site of a list over `calls` calls left survivors in each of them (all but one of
 * three or more: the last call's may be freed by a teardown the trace ends in). */
static bool grows_every_call(const struct vrt_site *s, size_t calls)
{
	return calls >= 2 && (uint64_t)s->value2 >= (calls > 2 ? calls - 1 : calls);
}

/* Whether a site that left survivors in every call kept only one call's worth at a time: each
 * call's (the last call's aside) were freed during the next call. A last result kept until the
 * next replaces it, or a free deferred by a call: it is live at every entry but does not grow. */
static bool kept_until_next_call(const struct vrt_site *s, size_t calls)
{
	return grows_every_call(s, calls) && s->first < s->last && s->outlived == 0;
}

/* Memory set up once by design, labelled and not blamed: its kind (PERSISTENT_*), or -1. A site
 * of such a kind that keeps growing (a new NCCL communicator or library handle every call) is
 * blamed like any other: set up once is what it is not. */
enum { PERSISTENT_WORKSPACE, PERSISTENT_NCCL, PERSISTENT_ALLOCATOR_CACHE, PERSISTENT_KINDS };

static int persistent_kind(const struct vrt_trace *t, const struct vrt_site *s, bool keeps_growing)
{
	const char *rule;
	const char *category = vrt_site_category(t, s, &rule);
	if (!strcmp(category, "allocator_cache"))
		return PERSISTENT_ALLOCATOR_CACHE; /* a pseudo-site: no line to blame */
	if (keeps_growing)
		return -1;
	if (!strcmp(category, "workspace"))
		return PERSISTENT_WORKSPACE;
	if (!strcmp(category, "nccl"))
		return PERSISTENT_NCCL;
	return -1;
}

/* For a site of a list over `calls` calls (sites_since). */
static bool persistent_by_design(const struct vrt_trace *t, const struct vrt_site *s, size_t calls)
{
	return persistent_kind(t, s, grows_every_call(s, calls)) >= 0;
}

/* How a site's survivors behave (over all n_inv calls), and whether it is persistent by design. */
static const char *verdict(const struct vrt_trace *t, const struct vrt_site *s, size_t n_inv, const char **why)
{
	const char *rule;
	const char *category = vrt_site_category(t, s, &rule);
	bool grows = grows_every_call(s, n_inv);
	if (persistent_kind(t, s, grows) >= 0) {
		*why = rule;
		return "persistent by design";
	}
	if (kept_until_next_call(s, n_inv)) {
		*why = "each call's were freed during the next one: one call's worth is live at a time";
		return "kept until the next call";
	}
	if (grows) {
		bool set_up_once = !strcmp(category, "nccl") || !strcmp(category, "workspace");
		if (!strcmp(category, "workspace") && s->streams) {
			*why = "leaves memory behind in every invocation, each call's on a new stream: memory of its "
			       "kind is kept per stream (PyTorch keeps a cuBLAS workspace for each stream a matmul ran "
			       "on), so a stream made each call adds one; make the stream once";
			return "grows every call";
		}
		*why = set_up_once ? "leaves memory behind in every invocation, though memory of its kind is set up once "
				     "by design: a new one each call?"
				   : "leaves memory behind in every invocation";
		return "grows every call";
	}
	if (s->value2 == 1 && s->first == 1) {
		*why = "only the first invocation left memory here";
		return "one-time (warm-up or cache)";
	}
	*why = "leaves memory behind in some invocations";
	return "grows sometimes";
}

/* Steady growth: from the second call on, so that what the first call sets up once (cuBLAS
 * workspaces, the allocator's first segments, lazily built optimizer state) is not averaged
 * into a per-call figure. Measured between call entries where there are enough of them: the
 * last call has no next entry, and the trace end that stands in for it may fall before or
 * after interpreter teardown freed things. */
static double growth_per_invocation(const struct leaks *lk)
{
	size_t n = lk->n_inv;
	if (n >= 3)
		return (double)(lk->inv[n - 1].live_at_entry - lk->inv[1].live_at_entry) / (double)(n - 2);
	if (n == 2)
		return (double)(lk->inv[1].live_at_next - lk->inv[1].live_at_entry);
	return n ? (double)(lk->inv[0].live_at_next - lk->inv[0].live_at_entry) : 0;
}

static double growth_including_first(const struct leaks *lk)
{
	size_t n = lk->n_inv;
	if (n >= 2)
		return (double)(lk->inv[n - 1].live_at_entry - lk->inv[0].live_at_entry) / (double)(n - 1);
	return n ? (double)(lk->inv[0].live_at_next - lk->inv[0].live_at_entry) : 0;
}

/* What one invocation of the phase is, for sentences: "train() call", or for a mark phase
 * "interval between \"step\" marks" (a mark is not a call). */
static const char *invocation_name(const struct leaks *lk)
{
	static char name[320];
	if (lk->by_mark)
		snprintf(name, sizeof(name), "interval between \"%.250s\" marks", lk->name);
	else
		snprintf(name, sizeof(name), "%.250s() call", lk->name);
	return name;
}

/* The blamed site holding the most: persistent-by-design memory is labelled, not blamed. */
static const struct vrt_site *top_blamed(const struct leaks *lk, const struct vrt_sites *s, int64_t *total)
{
	const struct vrt_site *top = NULL;
	*total = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (persistent_by_design(lk->t, &s->v[i], lk->n_inv))
			continue;
		*total += s->v[i].bytes;
		if (!top)
			top = &s->v[i];
	}
	return top;
}

/* The blamed sites of the survivors of calls from `from` on, largest first, as stacks and bytes. */
static int blamed_since(const struct leaks *lk, uint32_t from, uint32_t **stacks, int64_t **bytes, size_t *n)
{
	struct vrt_sites since;
	sites_since(lk, from, &since); /* largest first: vrt_shares_build keeps the first MAX_SITES, and a
					* share's first stack names it */
	*stacks = calloc(since.n ? since.n : 1, sizeof(**stacks));
	*bytes = calloc(since.n ? since.n : 1, sizeof(**bytes));
	*n = 0;
	for (size_t i = 0; *stacks && *bytes && i < since.n; i++)
		if (!persistent_by_design(lk->t, &since.v[i], lk->n_inv + 1 - from) && since.v[i].bytes > 0 &&
		    !kept_until_next_call(&since.v[i], lk->n_inv + 1 - from)) { /* level: not the growth */
			(*stacks)[*n] = since.v[i].stack;
			(*bytes)[(*n)++] = since.v[i].bytes;
		}
	vrt_sites_free(&since);
	return *stacks && *bytes ? 0 : VRT_E_NOMEM;
}

/* The survivors the headline splits: those of the calls its growth is measured over (from the
 * second call on, as growth_per_invocation), so that what only the first call left (optimizer
 * state built lazily, warm-up) takes no share of a per-call figure it is not part of; all
 * calls' where the later calls left nothing blamed. */
static int steady_survivors(const struct leaks *lk, uint32_t **stacks, int64_t **bytes, size_t *n)
{
	int rc = blamed_since(lk, lk->n_inv >= 2 ? 2 : 1, stacks, bytes, n);
	if (rc || *n || lk->n_inv < 2)
		return rc;
	free(*stacks);
	free(*bytes);
	return blamed_since(lk, 1, stacks, bytes, n);
}

/*
 * "+84 MiB per train() call: 78% from Engine.__init__ (x.py:52-55), 22% from train ->
 * Module.cuda (x.py:99, in module.py:1097)": the blamed survivors of the calls the growth is
 * measured over, by where the user's code made them (attribution.h), the largest three.
 */
static void headline(const struct leaks *lk, const struct vrt_sites *s, char *buf, size_t len)
{
	double growth = growth_per_invocation(lk);
	int64_t survivors;
	const struct vrt_site *top = top_blamed(lk, s, &survivors);
	if (growth <= 0 || !top || survivors <= 0) {
		snprintf(buf, len, "no growth: from the second %s on, memory at each entry stays level", invocation_name(lk));
		return;
	}
	uint32_t *stacks = NULL;
	int64_t *bytes = NULL;
	size_t n = 0;
	int rc = steady_survivors(lk, &stacks, &bytes, &n);
	struct vrt_shares shares;
	/* one call that had not returned: what it held so far, not a figure per call */
	bool unfinished = lk->n_inv == 1 && !lk->inv[0].returned;
	int k = unfinished ? snprintf(buf, len, "+%s so far in the only %s (it had not returned where the trace ends)",
				      vrt_bytes((int64_t)growth), invocation_name(lk))
			   : snprintf(buf, len, "+%s per %s", vrt_bytes((int64_t)growth), invocation_name(lk));
	if (!rc && k > 0 && (size_t)k < len && !vrt_shares_build(lk->t, stacks, bytes, n, &shares)) {
		if (shares.n) {
			snprintf(buf + k, len - (size_t)k, ": ");
			vrt_shares_format(&shares, 3, buf + k + 2, len - (size_t)k - 2);
		}
		vrt_shares_free(&shares);
	}
	free(stacks);
	free(bytes);
}

/* ---- what holds the survivors --------------------------------------------------------- */

/* Per site of sites (same order): the merged holders of its groups. */
static struct vrt_held_by *held_by_site(struct leaks *lk, struct vrt_sites *sites)
{
	struct vrt_held_by *held = calloc(sites->n ? sites->n : 1, sizeof(*held));
	for (size_t i = 0; held && i < lk->n_groups; i++) {
		const struct group *g = &lk->groups[i];
		if (!g->count)
			continue;
		struct vrt_site *site = vrt_sites_get(sites, site_stack(lk, g->stack), NULL);
		if (site && (size_t)(site - sites->v) < sites->n)
			vrt_held_merge(&held[site - sites->v], group_held(g));
	}
	return held;
}

/* What the survivors are: the owner's identity when a walk decided most of their bytes, else
 * the allocating stack's rule. */
static const char *survivor_category(const struct vrt_trace *t, const struct vrt_site *s, const struct vrt_held_by *h,
				     bool *identity)
{
	int64_t bytes;
	int c = h ? vrt_held_category(h, &bytes) : -1;
	*identity = c > 0 && 2 * bytes >= s->bytes;
	if (*identity)
		return vrt_owner_category_name((unsigned)c);
	const char *rule;
	return vrt_site_category(t, s, &rule);
}

/* The kept chains, largest first. */
static int sorted_chains(const struct vrt_held_by *h, int order[VRT_HELD_CHAINS])
{
	int n = 0;
	for (int i = 0; i < VRT_HELD_CHAINS; i++)
		if (h->bytes[i])
			order[n++] = i;
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && h->bytes[order[j]] > h->bytes[order[j - 1]]; j--) {
			int x = order[j];
			order[j] = order[j - 1];
			order[j - 1] = x;
		}
	return n;
}

#define HELD_INDENT "                         "

static void print_held(const struct leaks *lk, const struct vrt_site *s, const struct vrt_held_by *h)
{
	const struct vrt_trace *t = lk->t;
	bool identity;
	const char *category = survivor_category(t, s, h, &identity);
	printf(HELD_INDENT "what it is: %s (%s)\n", category, identity ? "by identity" : "by the allocating stack's rule");
	int order[VRT_HELD_CHAINS];
	int n = sorted_chains(h, order);
	enum vrt_held status = vrt_held_status(h);
	if (!n) {
		static const char *const why[VRT_HELD_KINDS] = {
			"not looked for (no retention walk after this call)",
			"a Python object (no chain recorded)",
			"nothing any root reaches: a reference cycle, or native code",
			"no Python object: memory that native code allocated and keeps",
			"unknown: the retention walk ran out of time before it got here",
		};
		printf(HELD_INDENT "held by: %s\n", why[status]);
		return;
	}
	const char *head = status == VRT_HELD_FOUND ? "held by" : "held only by a cycle or native code";
	for (int k = 0; k < n && k < 2; k++) {
		printf(HELD_INDENT "%s: ", k ? "    and" : head);
		if (n > 1)
			printf("%s  ", vrt_bytes(h->bytes[order[k]]));
		vrt_chain_print(stdout, vrt_string(t, h->chain[order[k]]), " -> ");
		putchar('\n');
	}
	if (n > 2 || h->other_chains)
		printf(HELD_INDENT "    and more chains holding %s\n",
		       vrt_bytes(h->other_chains + (n > 2 ? h->bytes[order[2]] : 0) + (n > 3 ? h->bytes[order[3]] : 0)));
}

static void held_json(FILE *out, const struct leaks *lk, const struct vrt_site *s, const struct vrt_held_by *h)
{
	const struct vrt_trace *t = lk->t;
	int order[VRT_HELD_CHAINS];
	int n = sorted_chains(h, order);
	fprintf(out, ", \"held_by\": [");
	for (int k = 0; k < n; k++) {
		fprintf(out, "%s", k ? ", " : "");
		vrt_chain_json(out, vrt_string(t, h->chain[order[k]]));
	}
	fprintf(out, "], \"held_by_bytes\": [");
	for (int k = 0; k < n; k++)
		fprintf(out, "%s%lld", k ? ", " : "", (long long)h->bytes[order[k]]);
	bool identity;
	const char *category = survivor_category(t, s, h, &identity);
	fprintf(out, "], \"held_by_status\": \"%s\", \"category\": ", vrt_held_name(vrt_held_status(h)));
	json_string(out, category);
	fprintf(out, ", \"decided_by\": \"%s\"", identity ? "identity" : "rule");
}


static void print_text(struct leaks *lk, struct vrt_sites *sites)
{
	const struct vrt_trace *t = lk->t;
	char line[1024];
	printf("vramtrace leaks: %s, phase %s%s (%zu invocation%s; %s)\n\n", vrt_escape(t->path), lk->by_mark ? "mark:" : "", lk->name,
	       lk->n_inv, lk->n_inv == 1 ? "" : "s", lk->blocks ? "tensors" : "CUDA device allocations");
	int width = 4; /* the call column: as wide as the last call's number */
	for (size_t n = lk->n_inv; n >= 10000; n /= 10)
		width++;
	printf("  %*s  live at entry      allocated          freed   live at exit  live at next entry    left behind\n",
	       width, "call");
	bool any_open = false;
	for (size_t i = 0; i < lk->n_inv; i++) {
		const struct invocation *v = &lk->inv[i];
		bool last = i + 1 == lk->n_inv;
		if (i == CALLS_SHOWN_EACH_END && lk->n_inv > 2 * CALLS_SHOWN_EACH_END) {
			size_t hidden = lk->n_inv - 2 * CALLS_SHOWN_EACH_END;
			printf("  ... %zu calls in between (--json lists every call)\n", hidden);
			i += hidden - 1;
			continue;
		}
		char lost[48] = "";
		if (v->lost)
			snprintf(lost, sizeof(lost), "  (%llu events lost: bounds)", (unsigned long long)v->lost);
		bool open = !v->returned;
		printf("  %*zu %14s %14s %14s %14s %19s%s %13s%s\n", width, i + 1, vrt_bytes(v->live_at_entry),
		       vrt_bytes(v->allocated), vrt_bytes(v->freed), open ? "(running)" : vrt_bytes(v->live_at_exit),
		       vrt_bytes(v->live_at_next), last ? "*" : " ", vrt_bytes(v->survivors), lost);
		any_open |= open;
	}
	if (any_open)
		printf("  (running): the call had not returned where the trace ends\n");
	if (lk->n_inv && lk->teardown_s)
		printf("  * no next call: measured where teardown began (%.3f s); the interpreter's teardown then "
		       "freed %s\n", lk->teardown_s, vrt_bytes(lk->live_at_teardown - lk->live_at_end));
	else if (lk->n_inv)
		printf("  * no next call: measured where the trace (or --until-mark) ends\n");
	headline(lk, sites, line, sizeof(line));
	printf("\n%s\n", line);
	if (lk->owners.walks) {
		vrt_roots_sort(&lk->roots);
		vrt_roots_print(stdout, &lk->roots, "kept alive by (what the retention walks found holding the survivors):\n");
	}
	printf("\nsurvivors by site (allocated inside a call, still live when the next call starts; over all calls):\n");
	int64_t persistent = 0, persistent_by[PERSISTENT_KINDS] = { 0 };
	size_t shown = 0;
	struct vrt_held_by *held = lk->owners.walks ? held_by_site(lk, sites) : NULL;
	for (size_t i = 0; i < sites->n; i++) {
		const struct vrt_site *s = &sites->v[i];
		const char *why;
		const char *v = verdict(t, s, lk->n_inv, &why);
		int kind = persistent_kind(t, s, grows_every_call(s, lk->n_inv));
		if (kind >= 0) {
			persistent += s->bytes;
			persistent_by[kind] += s->bytes;
			continue;
		}
		if (shown++ >= (size_t)lk->o->top)
			continue;
		vrt_site_print(stdout, t, s, lk->o->frames);
		printf("%24s born in call%s %llu", "", s->first == s->last ? "" : "s", (unsigned long long)s->first);
		if (s->last != s->first)
			printf("..%llu", (unsigned long long)s->last);
		if (s->value2 > 1) /* the headline is per call: so is this */
			printf(", %s a call", vrt_bytes(s->bytes / s->value2));
		if (s->streams)
			printf(" on %u streams", s->streams);
		printf(", %s (%s)\n", v, why);
		if (2 * s->captured >= s->bytes && s->captured)
			printf("%24s made for a CUDA graph: allocated while its thread captured one (torch.cuda.graph, "
			       "torch.compile's \"reduce-overhead\" mode), and kept as long as the graph lives (PyTorch "
			       "keeps it in the graph's private pool): a graph captured each call keeps its memory each "
			       "time; capture once and replay it\n", "");
		if (held)
			print_held(lk, s, &held[i]);
	}
	free(held);
	if (!shown)
		printf("  none: every allocation made inside a call was freed before the next one started%s\n",
		       persistent ? ", apart from what was set up once (below)" : "");
	if (persistent) {
		static const char *const kinds[PERSISTENT_KINDS] = { "cuBLAS/cuDNN workspaces", "NCCL buffers",
								      "allocator cache" };
		printf("\npersistent by design, labelled and not blamed: %s (", vrt_bytes(persistent));
		for (int k = 0, listed = 0; k < PERSISTENT_KINDS; k++)
			if (persistent_by[k])
				printf("%s%s %s", listed++ ? ", " : "", kinds[k], vrt_bytes(persistent_by[k]));
		printf("; set up once)\n");
	}
}

static void print_json(FILE *out, struct leaks *lk, struct vrt_sites *sites)
{
	const struct vrt_trace *t = lk->t;
	char line[1024];
	fprintf(out, "{\"file\": ");
	json_string(out, t->path);
	fprintf(out, ", \"pid\": %d, \"rank\": %d, ", t->hdr.pid, t->hdr.rank);
	vrt_json_completeness(out, t, -1);
	fprintf(out, ", \"phase\": ");
	json_string(out, lk->name);
	fprintf(out, ", \"invocation\": ");
	json_string(out, invocation_name(lk));
	fprintf(out, ", \"layer\": \"%s\", \"phases\": [", lk->blocks ? "tensors" : "cuda");
	for (size_t i = 0; i < lk->n_inv; i++) {
		const struct invocation *v = &lk->inv[i];
		fprintf(out, "%s{\"name\": ", i ? ", " : "");
		json_string(out, lk->name);
		fprintf(out, ", \"index\": %zu, \"start_s\": %.6f, \"end_s\": %.6f, \"live_bytes_at_entry\": %lld, "
			"\"allocated_bytes\": %lld, \"freed_bytes\": %lld, \"live_bytes_at_exit\": %lld, "
			"\"live_bytes_at_next_entry\": %lld, \"survivor_bytes\": %lld, \"events_lost\": %llu, \"returned\": %s}",
			i + 1, v->enter_s, v->exit_s, (long long)v->live_at_entry, (long long)v->allocated, (long long)v->freed,
			(long long)v->live_at_exit, (long long)v->live_at_next, (long long)v->survivors,
			(unsigned long long)v->lost, v->returned ? "true" : "false");
	}
	headline(lk, sites, line, sizeof(line));
	fprintf(out, "], \"phase_picked_because\": ");
	if (lk->picked_why)
		json_string(out, lk->picked_why);
	else
		fputs("null", out);
	const struct vrt_owners *w = &lk->owners;
	fprintf(out, ", \"retention_walks\": {\"count\": %llu, \"cut_short\": %llu, \"seconds\": %.6f, \"most_objects\": %llu}",
		(unsigned long long)w->walks, (unsigned long long)w->timed_out, (double)w->walk_us / 1e6,
		(unsigned long long)w->walk_objects_max);
	vrt_roots_sort(&lk->roots);
	vrt_roots_json(out, &lk->roots);
	fprintf(out, ", \"growth_per_invocation_bytes\": %.0f, \"growth_including_first_bytes\": %.0f, \"summary\": ",
		growth_per_invocation(lk), growth_including_first(lk));
	json_string(out, line);
	fprintf(out, ", \"survivors\": [");
	if (lk->n_groups)
		qsort(lk->groups, lk->n_groups, sizeof(*lk->groups), by_bytes);
	bool first = true;
	for (size_t i = 0; i < lk->n_groups; i++) {
		const struct group *g = &lk->groups[i];
		if (!g->count)
			continue;
		struct vrt_site s = { .stack = g->stack, .bytes = g->bytes, .count = g->count };
		struct vrt_site *total = vrt_sites_get(sites, site_stack(lk, g->stack), NULL);
		const char *why;
		const char *v = total ? verdict(t, total, lk->n_inv, &why) : "";
		fprintf(out, "%s", first ? "" : ", ");
		vrt_site_json(out, t, &s, true);
		fprintf(out, ", \"phase_index\": %u, \"outlived_invocations\": %u, \"streams_one_a_call\": %u, "
			     "\"captured_bytes\": %lld, \"persistent\": %s, \"verdict\": ",
			g->invocation, outlived(lk, g) + 1, total ? total->streams : 0, (long long)g->captured,
			total && persistent_by_design(t, total, lk->n_inv) ? "true" : "false");
		json_string(out, v);
		held_json(out, lk, &s, group_held(g));
		fprintf(out, "}");
		first = false;
	}
	fprintf(out, "]}");
}

/* ---- no phases: growth at the low points --------------------------------------------- */

/* How the top growing site's surviving allocations came between the first low point and the
 * last: a loop's step when they came at a steady pace. Only what is still live at the last low
 * point counts (a step that makes two tensors and frees one leaves one, and is one step). */
struct cadence {
	struct vrt_sites stacks; /* every stack that allocated in the window: who else calls a helper */
	uint64_t allocations;   /* of the top stack, born in the window and live at its end */
	uint64_t steps;         /* those births, a burst within one step counted once */
	double mean;            /* seconds between steps */
	bool steady;            /* at least 4 steps, and the intervals' spread under half their mean */
};

/*
 * What the two passes of the low-point analysis gather. The first finds the lowest total in
 * each of WINDOWS windows of events; the second takes the live set by site at each low point,
 * in event order (as seeking to each would), and on the way the stacks that allocate between
 * the first low point and the last; at the last, where the growing sites are known, when the
 * top one's allocations that are still live were born after the first (its cadence).
 */
struct lows {
	uint64_t total_events;  /* the events looked at: up to teardown, else all */
	uint64_t lost[WINDOWS]; /* events lost in each window (LOST records) */
	uint64_t min_event[WINDOWS];
	int64_t min_live[WINDOWS];
	double min_s[WINDOWS];  /* when the low point was */
	struct vrt_sites at[WINDOWS];
	int first, last;        /* the first and last window with a low point, -1: none */
	int next;               /* the next window whose live set the second pass takes */
	uint64_t events_before; /* the model's events before the second pass's current record */
	struct cadence cad;
	uint32_t top_stack;     /* the top growing site's, known at the last low point */
	double *born_s;         /* the birth times of its allocations live there, born after the first */
	size_t n_born, cap_born;
	bool born_oom;
};

static struct lows *lows_new(uint64_t total_events)
{
	struct lows *lw = calloc(1, sizeof(*lw));
	if (!lw)
		return NULL;
	lw->total_events = total_events;
	lw->first = lw->last = -1;
	for (int w = 0; w < WINDOWS; w++) {
		lw->min_live[w] = INT64_MAX;
		vrt_sites_init(&lw->at[w]);
	}
	vrt_sites_init(&lw->cad.stacks);
	return lw;
}

static void lows_free(struct lows *lw)
{
	if (!lw)
		return;
	for (int w = 0; w < WINDOWS; w++)
		vrt_sites_free(&lw->at[w]);
	vrt_sites_free(&lw->cad.stacks);
	free(lw->born_s);
	free(lw);
}

/* Whether the first pass still needs records: it looks at events up to total_events. */
static bool lows_want(const struct lows *lw, const struct vrt_model *m)
{
	return m->set.events <= lw->total_events;
}

/* First pass, one record (the model applied). */
static void lows_record(const struct leaks *lk, struct lows *lw, const struct vrt_model *m, const struct vrt_record *r)
{
	uint64_t total = lw->total_events;
	if (!m->set.events || m->set.events > total)
		return; /* before the first event, or after the end (teardown, the mark) */
	int w = (int)((m->set.events - 1) * WINDOWS / (total ? total : 1));
	if (r->op == VRT_OP_LOST && w < WINDOWS)
		lw->lost[w] += r->id;
	int64_t live = live_total(lk, m);
	if (w < WINDOWS && live < lw->min_live[w]) {
		lw->min_live[w] = live;
		lw->min_event[w] = m->set.events;
		lw->min_s[w] = vrt_ts_seconds(lk->t, r->ts);
	}
}

/* After the first pass: the windows that have a low point. */
static void lows_found(struct lows *lw)
{
	for (int w = 0; w < WINDOWS; w++)
		if (lw->min_live[w] != INT64_MAX) {
			lw->first = lw->first < 0 ? w : lw->first;
			lw->last = w;
		}
	lw->next = lw->first < 0 ? WINDOWS : lw->first;
}

/* Whether the second pass still needs records: until the last low point's live set is taken. */
static bool low_sets_want(const struct lows *lw)
{
	return lw->next <= lw->last;
}

struct born_ctx {
	const struct leaks *lk;
	struct lows *lw;
};

static void note_born(void *ctx, const struct vrt_item *it)
{
	struct born_ctx *b = ctx;
	struct lows *lw = b->lw;
	if (it->stack != lw->top_stack || it->born_event <= lw->min_event[lw->first] || !counts(b->lk, it) ||
	    lw->born_oom)
		return;
	if (lw->n_born == lw->cap_born) {
		size_t cap = lw->cap_born ? lw->cap_born * 2 : 64;
		double *v = realloc(lw->born_s, cap * sizeof(*v));
		if (!v) {
			lw->born_oom = true;
			return;
		}
		lw->born_s = v;
		lw->cap_born = cap;
	}
	lw->born_s[lw->n_born++] = vrt_ts_seconds(b->lk->t, it->ts);
}

/* The sites whose bytes rise across the low points, into growing (sorted); returns the top one
 * the user's code allocates, whose steps are counted (NULL: none). The same on every call. */
/* The blamed site rising most: persistent-by-design memory that rises is blamed, a pseudo-site
 * (the allocator's cache) never. */
static const struct vrt_site *top_growing(const struct leaks *lk, const struct vrt_sites *growing)
{
	for (size_t i = 0; i < growing->n; i++)
		if (!growing->v[i].label && growing->v[i].value2 && persistent_kind(lk->t, &growing->v[i], true) < 0)
			return &growing->v[i];
	return NULL;
}

static const struct vrt_site *growing_sites(const struct leaks *lk, struct lows *lw, struct vrt_sites *growing)
{
	int first = lw->first, last = lw->last;
	for (size_t i = 0; last > first && i < lw->at[last].n; i++) {
		const struct vrt_site *s = &lw->at[last].v[i];
		/* Bytes of this site at each low point; growing = rising in the last third too. */
		int64_t prev = -1, at_first = 0, at_two_thirds = 0;
		int rises = 0, falls = 0;
		int two_thirds = first + (last - first) * 2 / 3;
		for (int w = first; w <= last; w++) {
			if (lw->min_live[w] == INT64_MAX)
				continue;
			struct vrt_site *x = s->label ? vrt_sites_get(&lw->at[w], 0, s->label) : vrt_sites_get(&lw->at[w], s->stack, NULL);
			int64_t b = x ? x->bytes : 0;
			if (w == first)
				at_first = b;
			if (w <= two_thirds)
				at_two_thirds = b;
			rises += prev >= 0 && b > prev;
			falls += prev >= 0 && b < prev;
			prev = b;
		}
		if (s->bytes <= at_first || rises < 2 || falls > rises / 4)
			continue;
		struct vrt_site *g = s->label ? vrt_sites_get(growing, 0, s->label) : vrt_sites_get(growing, s->stack, NULL);
		if (!g)
			continue;
		g->bytes = s->bytes - at_first;
		g->count = s->count;
		g->value2 = s->bytes > at_two_thirds; /* still rising late: unbounded; else it levelled off */
	}
	vrt_sites_sort(growing);
	return top_growing(lk, growing);
}

/* At the last low point: the top growing site, and when its allocations live there were born. */
static void cadence_evidence(const struct leaks *lk, struct lows *lw, const struct vrt_model *m)
{
	struct vrt_sites growing;
	vrt_sites_init(&growing);
	const struct vrt_site *top = growing_sites(lk, lw, &growing);
	if (top) {
		lw->top_stack = top->stack;
		vrt_model_each(m, note_born, &(struct born_ctx){ lk, lw });
	}
	vrt_sites_free(&growing);
}

/* The live sets of the low points the model has reached (each exactly when it reaches it). */
static void low_sets_take(const struct leaks *lk, struct lows *lw, const struct vrt_model *m)
{
	for (; lw->next <= lw->last; lw->next++) {
		int w = lw->next;
		if (lw->min_live[w] == INT64_MAX)
			continue;
		if (m->set.events < lw->min_event[w])
			return;
		vrt_report_group_live(lk->t, m, &lw->at[w], -2, lk->blocks ? -1 : VRT_KIND_DEVICE);
		if (w == lw->last)
			cadence_evidence(lk, lw, m);
	}
}

/* Second pass, one record (the model applied). */
static void low_sets_record(const struct leaks *lk, struct lows *lw, const struct vrt_model *m, const struct vrt_effect *e)
{
	if (lw->last > lw->first && lw->events_before < lw->min_event[lw->last] &&
	    m->set.events > lw->min_event[lw->first] && e->kind == VRT_EFFECT_BORN && counts(lk, &e->item) &&
	    lw->cad.stacks.n < 4096)
		vrt_sites_get(&lw->cad.stacks, e->item.stack, NULL);
	lw->events_before = m->set.events;
	low_sets_take(lk, lw, m);
}

static int by_seconds(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

#define MAX_BURST 64 /* allocations one step keeps, at most, for its size to be recognised */

/*
 * Steps from the survivors' birth times (sorted). Births closer than a quarter of the mean gap
 * over the whole span are one burst; a step keeps as many as the commonest burst holds, so a
 * step that keeps two is one step, and two steps that came close together (a loop that woke
 * late and caught up) are still two. Steady: at least 4 steps, the bursts' spacing spread under
 * half its mean.
 */
static void steps_of(const double *t, size_t n, struct cadence *c)
{
	c->allocations = n;
	if (n < 2)
		return;
	double burst_gap = (t[n - 1] - t[0]) / (double)(n - 1) / 4;
	uint64_t sizes[MAX_BURST + 1] = { 0 }, bursts = 1, size = 1;
	double start = t[0], mean = 0, m2 = 0;
	for (size_t i = 1; i <= n; i++) {
		if (i < n && t[i] - t[i - 1] <= burst_gap) {
			size++;
			continue;
		}
		sizes[size < MAX_BURST ? size : MAX_BURST]++;
		if (i == n)
			break;
		double gap = t[i] - start, d = gap - mean;
		bursts++;
		mean += d / (double)(bursts - 1);
		m2 += d * (gap - mean);
		start = t[i];
		size = 1;
	}
	uint64_t per_step = 1;
	for (uint64_t k = 2; k < MAX_BURST; k++)
		if (sizes[k] > sizes[per_step])
			per_step = k;
	double spread = bursts > 2 ? sqrt(m2 / (double)(bursts - 2)) : 0;
	c->steps = (n + per_step / 2) / per_step;
	c->mean = c->steps > 1 ? (t[n - 1] - t[0]) / (double)(c->steps - 1) : 0;
	c->steady = c->steps >= 4 && bursts >= 4 && mean > 0 && spread < mean / 2;
}

/* The top growing site's cadence, from what the second pass gathered (nothing without one). */
static void cadence_of(struct lows *lw, const struct vrt_site *top)
{
	struct cadence *c = &lw->cad;
	if (!top) {
		vrt_sites_free(&c->stacks);
		vrt_sites_init(&c->stacks);
		return;
	}
	if (lw->born_oom)
		return;
	if (lw->n_born)
		qsort(lw->born_s, lw->n_born, sizeof(*lw->born_s), by_seconds);
	steps_of(lw->born_s, lw->n_born, c);
}

static const char *duration(double s, char *buf, size_t len)
{
	if (s < 1e-3)
		snprintf(buf, len, "%.0f us", s * 1e6);
	else if (s < 1)
		snprintf(buf, len, "%.0f ms", s * 1e3);
	else
		snprintf(buf, len, "%.1f s", s);
	return buf;
}

/*
 * "+8.00 MiB per step (63 steps, one every 52 ms; +154 MiB/s): 100% from main (grow.py:28)":
 * what the growing sites add together, per step when the top one allocated at a loop's steady
 * pace (a step: the allocations of one step that live on), else per second over the window between the first low
 * point and the last; then the sites by where the user's code made them (as phase leaks' headline).
 */
static void baseline_headline(const struct leaks *lk, const struct vrt_sites *growing, double window_s,
			      const struct cadence *c, char *buf, size_t len)
{
	int64_t total = 0;
	size_t cap = growing->n + c->stacks.n + 1;
	uint32_t *stacks = calloc(cap, sizeof(*stacks));
	int64_t *bytes = calloc(cap, sizeof(*bytes));
	size_t n = 0;
	for (size_t i = 0; stacks && bytes && i < growing->n; i++)
		if (!growing->v[i].label && growing->v[i].value2 && persistent_kind(lk->t, &growing->v[i], true) < 0) {
			total += growing->v[i].bytes;
			stacks[n] = growing->v[i].stack;
			bytes[n++] = growing->v[i].bytes;
		}
	size_t blamed = n;
	for (size_t i = 0; blamed && stacks && bytes && i < c->stacks.n; i++)
		stacks[n++] = c->stacks.v[i].stack; /* bytes 0: evidence only */
	int64_t labelled = 0; /* the allocator's cache, workspaces, NCCL: rising, but not blamed */
	for (size_t i = 0; i < growing->n; i++)
		if (growing->v[i].label || persistent_kind(lk->t, &growing->v[i], growing->v[i].value2) >= 0)
			labelled += growing->v[i].bytes;
	int k;
	if ((!blamed || total <= 0 || window_s <= 0) && labelled > 0) {
		k = snprintf(buf, len, "no growth of %s: the working set is steady; what rose is %s of memory kept by "
			     "design (the allocator's cache, workspaces, NCCL)", lk->blocks ? "tensors" : "CUDA allocations",
			     vrt_bytes(labelled));
	} else if (!blamed || total <= 0 || window_s <= 0) {
		k = snprintf(buf, len, "no growth: no site of %s keeps rising across the low points of total memory",
			     lk->blocks ? "tensors" : "CUDA allocations");
	} else if (c->steady && c->steps) {
		char every[32];
		k = snprintf(buf, len, "+%s per step (%llu steps, one every %s; +%s/s)",
			     vrt_bytes(total / (int64_t)c->steps), (unsigned long long)c->steps,
			     duration(c->mean, every, sizeof(every)), vrt_bytes((int64_t)((double)total / window_s)));
	} else {
		char over[32];
		k = snprintf(buf, len, "+%s over %s (+%s/s)", vrt_bytes(total), duration(window_s, over, sizeof(over)),
			     vrt_bytes((int64_t)((double)total / window_s)));
	}
	struct vrt_shares shares;
	if (blamed && k > 0 && (size_t)k < len && !vrt_shares_build(lk->t, stacks, bytes, n, &shares)) {
		if (shares.n) {
			snprintf(buf + k, len - (size_t)k, ": ");
			vrt_shares_format(&shares, 3, buf + k + 2, len - (size_t)k - 2);
		}
		vrt_shares_free(&shares);
	}
	free(stacks);
	free(bytes);
}

/* --json without phases: the growing sites (the first top), as the text shows them. */
static void baseline_json(FILE *out, const struct leaks *lk, const struct vrt_sites *growing, const struct vrt_site *top,
			  const struct cadence *cad, uint64_t lost, double window_s, const char *summary)
{
	fprintf(out, "{\"file\": ");
	json_string(out, lk->t->path);
	fprintf(out, ", \"pid\": %d, \"rank\": %d, ", lk->t->hdr.pid, lk->t->hdr.rank);
	vrt_json_completeness(out, lk->t, -1);
	fprintf(out, ", \"phase\": null, \"phases\": [], \"survivors\": [], \"events_lost_in_windows\": %llu, ",
		(unsigned long long)lost);
	fprintf(out, "\"summary\": ");
	json_string(out, summary);
	fprintf(out, ", \"layer\": \"%s\", \"window_s\": %.6f, \"teardown_s\": ", lk->blocks ? "tensors" : "cuda",
		window_s);
	if (lk->teardown_s)
		fprintf(out, "%.6f", lk->teardown_s);
	else
		fprintf(out, "null");
	fprintf(out, ", \"growing\": [");
	for (size_t i = 0; i < growing->n && i < (size_t)lk->o->top; i++) {
		const struct vrt_site *g = &growing->v[i];
		const char *rule;
		fprintf(out, "%s", i ? ", " : "");
		vrt_site_json(out, lk->t, g, true);
		fprintf(out, ", \"still_rising\": %s, \"category\": ", g->value2 ? "true" : "false");
		json_string(out, vrt_site_category(lk->t, g, &rule));
		fprintf(out, ", \"bytes_per_second\": %.0f", window_s > 0 ? (double)g->bytes / window_s : 0.0);
		if (g == top)
			fprintf(out, ", \"allocations_in_window\": %llu", (unsigned long long)cad->allocations);
		if (g == top && cad->steady)
			fprintf(out, ", \"steps\": %llu, \"step_s\": %.6f, \"bytes_per_step\": %lld",
				(unsigned long long)cad->steps, cad->mean, (long long)(g->bytes / (int64_t)cad->steps));
		else
			fprintf(out, ", \"steps\": null, \"step_s\": null, \"bytes_per_step\": null");
		fprintf(out, "}");
	}
	fprintf(out, "]}");
}

/* After the two passes: the sites that grow across the low points, printed as text or written as
 * JSON to lk->out. Returns 0 or VRT_EXIT_FINDINGS (--fail-on-growth). */
static int baseline(struct leaks *lk, struct lows *lw)
{
	int rc = 0, first = lw->first, last = lw->last;
	struct vrt_sites growing;
	vrt_sites_init(&growing);
	const struct vrt_site *top = growing_sites(lk, lw, &growing);
	/* Events lost between the first low point and the last: lost frees look like growth. */
	uint64_t lost = 0;
	for (int w = first < 0 ? 0 : first; w <= last; w++)
		lost += lw->lost[w];
	double window_s = last > first ? lw->min_s[last] - lw->min_s[first] : 0;
	cadence_of(lw, top);
	vrt_sites_fold_printed(lk->t, &growing); /* the cadence is the top stack's own; what is shown, as it prints */
	top = top_growing(lk, &growing);
	char summary[1024];
	baseline_headline(lk, &growing, window_s, &lw->cad, summary, sizeof(summary));
	if (!rc && lk->o->json) {
		baseline_json(lk->out, lk, &growing, top, &lw->cad, lost, window_s, summary);
	} else if (!rc) {
		printf("vramtrace leaks: %s (no phases: growth of %s at the low points of total memory, %d windows",
		       vrt_escape(lk->t->path), lk->blocks ? "tensors" : "CUDA allocations", last - first + 1);
		if (lk->teardown_s)
			printf("; the end is where teardown began, %.3f s", lk->teardown_s);
		printf(")\n\n%s\n\n", summary);
		for (size_t i = 0; i < growing.n && i < (size_t)lk->o->top; i++) {
			const char *rule;
			const char *cat = vrt_site_category(lk->t, &growing.v[i], &rule);
			vrt_site_print(stdout, lk->t, &growing.v[i], 6);
			printf("%24s %s across the low points (%s; category %s)\n", "",
			       growing.v[i].value2 ? "keeps rising" : "rose, then levelled off (bounded cache?)",
			       vrt_bytes(growing.v[i].bytes), cat);
			if (lost)
				printf("%24s but %llu events were lost between those low points: a lost free looks "
				       "like growth\n", "", (unsigned long long)lost);
		}
		if (!growing.n)
			printf("no site grows across the low points of total memory\n");
	}
	if (!rc && lk->o->fail_on_growth && growing.n && growing.v[0].value2)
		rc = VRT_EXIT_FINDINGS;
	vrt_sites_free(&growing);
	return rc;
}

/* Without a phase: the two passes of the low points (up to total_events), then the growth. */
static int low_points(struct leaks *lk, uint64_t total_events)
{
	struct lows *lw = lows_new(total_events);
	struct vrt_model m;
	if (!lw || vrt_model_init(&m)) {
		lows_free(lw);
		return vrt_fail(VRT_E_NOMEM, "leaks");
	}
	struct vrt_pass p;
	struct vrt_record r;
	struct vrt_effect e;
	vrt_pass_open(&p, lk->t, &(struct vrt_pass_options){ .label = "leaks: low points", .quiet = lk->o->quiet,
							      .model = &m });
	while (lows_want(lw, &m) && vrt_pass_next(&p, &r, NULL))
		lows_record(lk, lw, &m, &r);
	vrt_pass_abandon(&p); /* the survey reported this trace's errors */
	vrt_model_free(&m);
	lows_found(lw);
	if (vrt_model_init(&m)) {
		lows_free(lw);
		return vrt_fail(VRT_E_NOMEM, "leaks");
	}
	vrt_pass_open(&p, lk->t, &(struct vrt_pass_options){ .label = "leaks: low points", .quiet = lk->o->quiet,
							      .model = &m });
	while (low_sets_want(lw) && vrt_pass_next(&p, &r, &e))
		low_sets_record(lk, lw, &m, &e);
	vrt_pass_abandon(&p);
	vrt_model_free(&m);
	int rc = baseline(lk, lw);
	lows_free(lw);
	return rc;
}

/* ---- driver ----------------------------------------------------------------------------- */

/* What the survey decides: the phase to follow (the one named, else the one pick_phase finds, *why
 * saying why, else none: the low points) and what is counted. */
static void leaks_pick(struct leaks *lk, const struct survey *sv, const char *named, char *why, size_t why_len)
{
	const char *layer = lk->o->layer;
	lk->name = named ? named : pick_phase(lk->t, sv, layer ? strcmp(layer, "tensors") != 0 : !sv->blocks.any_blocks,
					      why, why_len);
	lk->name_id = lk->name ? vrt_trace_string_id(lk->t, lk->name) : 0;
	lk->picked_why = named ? NULL : why;
	/* A phase's replay counts the layer found over the whole trace; the low points look up to
	 * teardown, and so does their layer. */
	lk->blocks = layer ? !strcmp(layer, "tensors") : lk->name_id ? sv->blocks.any_blocks : sv->end_blocks;
	if (!lk->name_id)
		lk->teardown_s = sv->teardown_s;
}

/*
 * The survey, when there is one to make (to pick the phase, or to learn the layer of a named
 * phase that exists; without a name, following the phases it sees: *f), then leaks_pick. Returns 0 or an exit code after its message; a named
 * phase the trace never saw leaves lk->name_id 0.
 */
static int leaks_choose(struct leaks *lk, struct survey *sv, struct follow **f, char *why, size_t why_len)
{
	const struct leaks_options *o = lk->o;
	const char *named = o->phase ? phase_named(o->phase, &lk->by_mark) : NULL;
	int rc = 0;
	if (!named && (*f = malloc(sizeof(**f))))
		follow_init(*f, lk->t, o);
	if (!named || (!o->layer && vrt_trace_string_id(lk->t, named)))
		rc = survey(lk->t, o, !named, sv, *f);
	if (!rc || named)
		leaks_pick(lk, sv, named, why, why_len);
	return rc;
}

/* The analysis of the phase chosen (or of the low points), printed as text or written as JSON to
 * lk->out. Returns 0, VRT_EXIT_FINDINGS (--fail-on-growth), or an exit code after its message. */
static int leaks_report(struct leaks *lk, const struct survey *sv, struct follow *f)
{
	if (!lk->name_id)
		return low_points(lk, sv->end_events);
	int rc = follow_adopt(f, lk) ? 0 : replay(lk);
	if (!rc && !lk->by_mark && !lk->n_inv) {
		/* The trace has the name (a Python function, a file) but it never became a phase: a
		 * --phase the job was not run with, or a Class.method CPython 3.9/3.10 could not match. */
		fprintf(stderr, "vramtrace leaks: %s: \"%s\" was never entered as a phase in this trace%s (the trace "
				"has the name, but no call of it became a phase: vramtrace run --phase %s records it)\n",
			vrt_escape(lk->t->path), vrt_escape(lk->name), vrt_settings.until_mark ? " before --until-mark" : "",
			vrt_escape(lk->name));
		rc = VRT_EXIT_USAGE;
	} else if (!rc) {
		struct vrt_site_keys keys;
		vrt_site_keys_init(&keys, lk->t);
		lk->keys = &keys;
		struct vrt_sites sites;
		sites_since(lk, 1, &sites);
		if (lk->o->json)
			print_json(lk->out, lk, &sites);
		else
			print_text(lk, &sites);
		if (lk->o->fail_on_growth && growth_per_invocation(lk) > 0)
			rc = VRT_EXIT_FINDINGS;
		vrt_sites_free(&sites);
		lk->keys = NULL;
		vrt_site_keys_free(&keys);
	}
	return rc;
}

static int leaks_one(const char *path, const struct leaks_options *o, bool many, bool first)
{
	struct vrt_trace t;
	int rc = vrt_open_or_fail(&t, path);
	if (rc)
		return rc;
	vrt_warn_trace_state(&t, o->quiet);
	struct leaks lk = { .t = &t, .o = o, .out = stdout };
	struct survey sv = { 0 };
	struct follow *f = NULL;
	char why[256] = "";
	int survey_rc = leaks_choose(&lk, &sv, &f, why, sizeof(why));
	if (!o->phase && !o->quiet && !survey_rc)
		fprintf(stderr, "vramtrace: %s: no --phase given; %s %s (%s)\n", vrt_escape(path),
			lk.name ? "following" : "looking for growth", lk.name ? lk.name : "without phases", why);
	if (o->phase && !lk.name_id) {
		/* A --phase the trace never saw is a typo (or the wrong trace): fail, don't fall back. */
		fprintf(stderr, "vramtrace leaks: %s: no phase or mark named \"%s\" in this trace (without --phase, leaks "
				"picks the phase that explains the growth)\n", vrt_escape(path), vrt_escape(o->phase));
		follow_free(f);
		vrt_trace_close(&t);
		return VRT_EXIT_USAGE;
	}
	if (o->json && many)
		fputs(first ? "{\"processes\": [" : ", ", stdout);
	else if (!first)
		putchar('\n');
	rc = survey_rc ? survey_rc : leaks_report(&lk, &sv, f);
	follow_free(f);
	leaks_free(&lk);
	vrt_trace_close(&t);
	return rc;
}

/* ---- fed by another command's passes (reports.h) ------------------------------------------ */

/*
 * leaks_one's stages with the default options, each riding one of the caller's passes: the
 * survey the first; the low points' first pass the second (when no phase is followed); the
 * phase's replay, or the low points' second pass, the third. Quiet: a failure is kept, and given
 * as an exit code at the end without a message.
 */
struct vrt_leaks_feed {
	struct leaks_options o;
	struct leaks lk;
	struct survey sv;
	struct lows *lw;        /* without a phase to follow */
	int pass;               /* the caller's pass being fed, from 0 */
	int error;              /* a vrt_error: the analysis stopped there */
	char why[256];
};

struct vrt_leaks_feed *vrt_leaks_feed_new(struct vrt_trace *t)
{
	struct vrt_leaks_feed *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->o = (struct leaks_options){ .json = true, .quiet = true, .top = 10, .frames = 8 };
	f->lk = (struct leaks){ .t = t, .o = &f->o };
	return f;
}

void vrt_leaks_feed_record(struct vrt_leaks_feed *f, const struct vrt_model *m, const struct vrt_record *r,
			   const struct vrt_effect *e)
{
	if (f->error)
		return;
	if (f->pass == 0) {
		survey_record(&f->sv, f->lk.t, m, r, e);
		blocks_seen_by(&f->sv.blocks, m);
	} else if (f->pass == 1 && f->lw) {
		lows_record(&f->lk, f->lw, m, r);
	} else if (f->pass == 2 && f->lk.name_id) {
		f->error = replay_record(&f->lk, m, r, e);
	} else if (f->pass == 2 && f->lw) {
		low_sets_record(&f->lk, f->lw, m, e);
	}
}

bool vrt_leaks_feed_wants(const struct vrt_leaks_feed *f, const struct vrt_model *m)
{
	if (f->error || f->pass > 2)
		return false;
	if (f->pass == 1)
		return f->lw && lows_want(f->lw, m);
	if (f->pass == 2 && !f->lk.name_id)
		return f->lw && low_sets_want(f->lw);
	return true;
}

void vrt_leaks_feed_pass_end(struct vrt_leaks_feed *f, const struct vrt_model *m)
{
	if (f->pass == 0) {
		leaks_pick(&f->lk, &f->sv, NULL, f->why, sizeof(f->why));
		if (!f->lk.name_id && !(f->lw = lows_new(f->sv.end_events)))
			f->error = VRT_E_NOMEM;
	} else if (f->pass == 1 && f->lw) {
		lows_found(f->lw);
	} else if (f->pass == 2 && f->lk.name_id && !f->error) {
		replay_end(&f->lk, m);
	}
	f->pass++;
}

int vrt_leaks_feed_json(struct vrt_leaks_feed *f, FILE *out)
{
	if (f->error || f->pass < 3)
		return vrt_exit_code(f->error ? f->error : VRT_E_ARG);
	f->lk.out = out;
	if (!f->lk.name_id)
		return baseline(&f->lk, f->lw);
	struct vrt_site_keys keys;
	vrt_site_keys_init(&keys, f->lk.t);
	f->lk.keys = &keys;
	struct vrt_sites sites;
	sites_since(&f->lk, 1, &sites);
	print_json(out, &f->lk, &sites);
	vrt_sites_free(&sites);
	f->lk.keys = NULL;
	vrt_site_keys_free(&keys);
	return 0;
}

void vrt_leaks_feed_free(struct vrt_leaks_feed *f)
{
	if (!f)
		return;
	leaks_free(&f->lk);
	lows_free(f->lw);
	free(f);
}

int vrt_cmd_leaks(int argc, char **argv)
{
	struct leaks_options o = { .top = 10, .frames = 8 };
	const char *files[256];
	int n_files;
	const struct vrt_arg opts[] = {
		VRT_OPT_JSON(&o.json), VRT_OPT_QUIET(&o.quiet), VRT_OPT_TOP(&o.top), VRT_OPT_FRAMES(&o.frames),
		VRT_OPT_UNTIL_MARK, VRT_OPT_WIDTH,
		{ "--fail-on-growth", NULL, VRT_ARG_FLAG, &o.fail_on_growth },
		{ "--phase", NULL, VRT_ARG_TEXT, &o.phase },
		{ "--layer", NULL, VRT_ARG_TEXT, &o.layer },
		VRT_OPT_END,
	};
	int parsed = vrt_args_parse("leaks", argc, argv, opts, files, 256, &n_files);
	if (parsed)
		return parsed < 0 ? 0 : parsed;
	if (!n_files)
		return vrt_usage("leaks", "no trace file given");
	if (o.layer && strcmp(o.layer, "tensors") && strcmp(o.layer, "cuda"))
		return vrt_usage("leaks", "--layer is tensors or cuda");
	char **paths;
	int n, rc = vrt_collect_inputs(n_files, files, &paths, &n);
	if (rc)
		return vrt_fail(rc, "no trace files in the arguments");
	int worst = 0, printed = 0;
	bool many = vrt_json_lists_processes(n_files, files, n);
	for (int i = 0; i < n; i++) {
		rc = leaks_one(paths[i], &o, many, printed == 0);
		printed += rc == 0 || rc == VRT_EXIT_FINDINGS;
		worst = rc > worst ? rc : worst;
	}
	if (o.json && printed) /* JSON on stdout, or nothing: the errors went to stderr */
		fputs(many ? "]}\n" : "\n", stdout);
	vrt_free_inputs(paths, n);
	return worst;
}
