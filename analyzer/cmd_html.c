/* SPDX-License-Identifier: MIT */
/*
 * vramtrace html: one self-contained HTML report (analyzer/report.html.in, compiled in).
 *
 * Everything the page draws is aggregated here, so the file is bounded by
 * series x sites x buckets and never grows with the trace:
 *
 *   pass 1  replays to the end: peaks per device/kind series, what is live at the end, the
 *           time range (first to last event), and each stack's own highest bytes;
 *   pass 2  replays up to the last peak: what is live at each series' peak. The top N sites
 *           of a series are those holding the most bytes at its peak or at the end (then, if
 *           the series has fewer, those that held the most at any time);
 *   pass 3  replays again, keeping the live bytes of each chosen site (everything else is
 *           "other") and, per time bucket, the breakdown at the moment the series was highest
 *           inside that bucket. Buckets double in width if time runs past the end (as in
 *           series.c), so at most 2 x --buckets are kept. Phases, marks and OOMs are gathered
 *           on the same grid (runs closer than a bucket merge).
 *
 * The leaks and OOM sections are what `leaks --json` and `oom --json` write, computed in this
 * process on these three passes (reports.h): pass 1 finds the OOM and surveys leaks' phases;
 * pass 2's model explains the OOM and, when leaks follows no phase, finds its low points (the
 * pass then goes on to teardown); pass 3 replays leaks' phase, or takes the live sets at the low
 * points. Leaks' JSON is embedded with long arrays cut short (its survivors grouped by site
 * first, so that the cut keeps whole sites), and left out past an output cap.
 * Pass 3 also feeds the allocator's views (fragmentation.c: segments, tensors and the largest
 * free block per bucket; tensor_bands.c: the largest tensors' lives) on traces with tensors.
 * Everything placed in the page's <script> has '<', '>' and '&' escaped as \u00XX, so nothing
 * can close the element.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "commands.h"
#include "fragmentation.h"
#include "html_template.h"
#include "json.h"
#include "safe_output.h"
#include "model.h"
#include "pass.h"
#include "reports.h"
#include "report_common.h"
#include "sites.h"
#include "stacks.h"
#include "tensor_bands.h"

#define MAX_SERIES 64
#define MAX_SITES 1000
#define MAX_BUCKETS 100000
#define MAX_FRAMES_SHOWN 96      /* frames kept per site (the innermost) */
#define MAX_PHASE_NAMES 32
#define MAX_MARK_LABELS 64
#define MAX_OOMS 256
#define SECTION_OUTPUT_LIMIT (64u << 20) /* a leaks answer larger than this is left out */
#define SECTION_ARRAY_ITEMS 1000  /* rows kept of any array in its JSON */
#define SECTION_SITE_ITEMS 50     /* rows kept of arrays of sites (they carry frames) */
#define TENSOR_BANDS 64         /* the largest tensors drawn with their lives */

struct html_options {
	const char *trace, *out;
	int sites, buckets;
	bool quiet;
};

/* One device/kind series: its totals, its chosen sites, and its buckets. */
struct series {
	int slot, kind;          /* kind -1: tensors (PyTorch blocks) */
	int64_t peak, at_end;
	double peak_s;
	uint64_t peak_event;
	bool peak_taken;
	struct vrt_sites at_peak, live_end;
	int n_top;
	uint32_t *top;           /* chosen stacks, sorted by stack for lookup */
	int *top_rank;           /* position of top[i] in rank order (0: most bytes) */
	int *site_id;            /* global site index per rank */
	int64_t *cur;            /* live bytes per rank, now */
	int64_t total;           /* series total after the last sample */
};

struct interval {
	double start, end;
	uint32_t count;
};

struct phase_track {
	uint32_t name;
	int depth;
	double start;
	struct interval *iv;
	size_t n, cap;
};

struct mark_track {
	uint32_t label;
	struct interval *at;     /* start: first, end: last of a run of marks within one bucket */
	size_t n, cap;
};

struct oom_event {
	double at;
	uint64_t size;
	int device;
	uint32_t api;
};

struct site_def {
	uint32_t stack;
};

/* Live and highest bytes of one stack in one series (pass 1), keyed by series_key(). */
struct stack_max {
	uint64_t key;            /* 0: empty */
	int64_t live, max;
};

struct html {
	struct vrt_trace *t;
	const struct html_options *o;
	struct vrt_model end;
	bool have_range;
	double from, to;
	int main_series;
	struct series s[MAX_SERIES];
	int n_series;
	int8_t index[VRT_MAX_DEVICES + 1][VRT_KIND_LAST + 1]; /* series by slot and kind + 1 */
	struct site_def *sites;
	int n_sites;
	struct vrt_sites site_map;   /* stack -> position in sites + 1 (in count) */
	struct vrt_site_keys *keys;  /* stacks that print alike are one site (sites.h) */
	struct stack_max *smax;
	size_t smax_n, smax_cap;
	/* time buckets, shared by all series */
	int wanted, cap, cur_b;
	double width;
	int stride;              /* values per bucket and series: sites + other */
	int64_t *bmax;           /* [bucket][series] */
	int64_t *vals;           /* [bucket][series][stride] */
	uint64_t resyncs;        /* times the chosen sites were recounted from the model */
	/* markers */
	struct phase_track phases[MAX_PHASE_NAMES];
	int n_phases;
	uint64_t phases_dropped;
	struct mark_track marks[MAX_MARK_LABELS];
	int n_marks;
	uint64_t marks_dropped;
	struct oom_event ooms[MAX_OOMS];
	int n_ooms;
	uint64_t ooms_dropped;
	struct vrt_oom_search *oom; /* fed by the first pass, for the "oom" section */
	struct vrt_leaks_feed *leaks; /* fed by all three passes, for the "leaks" section */
	FILE *oom_out;              /* its JSON, written by the second pass (oom_json) */
	char *oom_json;
	size_t oom_len;
	/* the allocator's views (traces with PyTorch blocks), fed by pass 3 */
	bool allocator;
	struct vrt_frag frag;
	struct vrt_bands bands;
	int *band_site;          /* the page's site of each band */
};

/* ---- series ------------------------------------------------------------------------------ */

static int series_of_item(const struct html *h, const struct vrt_item *it)
{
	int d = vrt_device_slot(it->device);
	if (it->space == VRT_SPACE_BLOCK)
		return h->index[d][0];
	if (vrt_item_counted(it) && it->kind < VRT_KIND_LAST)
		return h->index[d][it->kind + 1];
	return -1;
}

static int64_t series_total(const struct vrt_model *m, const struct series *s)
{
	return s->kind < 0 ? m->tensors[s->slot] : m->live[s->slot][s->kind];
}

static void add_series(struct html *h, int slot, int kind, int64_t peak, uint64_t peak_ts, uint64_t peak_event,
		       int64_t at_end)
{
	if (h->n_series == MAX_SERIES)
		return;
	struct series *s = &h->s[h->n_series];
	*s = (struct series){ .slot = slot, .kind = kind, .peak = peak, .at_end = at_end,
			      .peak_s = vrt_ts_seconds(h->t, peak_ts), .peak_event = peak_event };
	vrt_sites_init(&s->at_peak);
	vrt_sites_init(&s->live_end);
	h->index[slot][kind + 1] = (int8_t)h->n_series++;
}

/* Every device/kind that ever held memory, and the one shown first. */
static void find_series(struct html *h)
{
	const struct vrt_model *m = &h->end;
	memset(h->index, -1, sizeof(h->index));
	for (int d = 0; d <= VRT_MAX_DEVICES; d++) {
		if (m->tensor_peak[d] > 0)
			add_series(h, d, -1, m->tensor_peak[d], m->tensor_peak_ts[d], m->tensor_peak_event[d], m->tensors[d]);
		for (int k = 0; k < VRT_KIND_LAST; k++)
			if (m->peak[d][k] > 0)
				add_series(h, d, k, m->peak[d][k], m->peak_ts[d][k], m->peak_event[d][k], m->live[d][k]);
	}
	h->main_series = 0;
	int64_t best = -1;
	for (int i = 0; i < h->n_series; i++) {
		const struct series *s = &h->s[i];
		int rank = s->kind < 0 ? 3 : s->kind == VRT_KIND_DEVICE ? 2 : s->slot != VRT_HOST_SLOT ? 1 : 0;
		int64_t score = (int64_t)rank << 56 | (s->peak & ((1ll << 56) - 1));
		if (score > best) {
			best = score;
			h->main_series = i;
		}
	}
}

/* What an effect's delta should be if only its own item moved; other bytes moved too when they
 * differ (a replaced allocation, a context reset, an unmap that ended a VMM handle). */
static int64_t own_delta(const struct vrt_effect *e, bool counts)
{
	if (!counts || e->kind == VRT_EFFECT_NONE)
		return 0;
	return e->kind == VRT_EFFECT_BORN ? (int64_t)e->item.size
	       : e->kind == VRT_EFFECT_DIED ? -(int64_t)e->item.size
					    : e->delta;
}

/* The stack an item's bytes are listed under: the first of those that print as its does. */
static uint32_t site_stack(const struct html *h, uint32_t stack)
{
	return h->keys ? vrt_site_keys_stack(h->keys, stack) : stack;
}

/* slot and kind (+2, so never 0) over the site's stack id; -1 for an item no series counts. */
static int64_t series_key(const struct html *h, const struct vrt_item *it)
{
	int kind = it->space == VRT_SPACE_BLOCK ? -1 : vrt_item_counted(it) && it->kind < VRT_KIND_LAST ? it->kind : -2;
	if (kind == -2)
		return -1;
	return (int64_t)((uint64_t)(vrt_device_slot(it->device) * 8 + kind + 2) << 32 | site_stack(h, it->stack));
}

static struct stack_max *stack_max_of(struct html *h, uint64_t key)
{
	if ((h->smax_n + 1) * 2 > h->smax_cap) {
		size_t cap = h->smax_cap ? h->smax_cap * 2 : 1024;
		struct stack_max *v = calloc(cap, sizeof(*v));
		if (!v)
			return NULL;
		for (size_t i = 0; i < h->smax_cap; i++) {
			if (!h->smax[i].key)
				continue;
			size_t j = (size_t)(h->smax[i].key * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
			while (v[j].key)
				j = (j + 1) & (cap - 1);
			v[j] = h->smax[i];
		}
		free(h->smax);
		h->smax = v;
		h->smax_cap = cap;
	}
	size_t j = (size_t)(key * 0x9e3779b97f4a7c15ull >> 20) & (h->smax_cap - 1);
	for (; h->smax[j].key; j = (j + 1) & (h->smax_cap - 1))
		if (h->smax[j].key == key)
			return &h->smax[j];
	h->smax_n++;
	h->smax[j] = (struct stack_max){ key, 0, 0 };
	return &h->smax[j];
}

/* Each stack's own highest bytes; effects that moved other items' bytes are skipped (their
 * sites' figures are a little off then; this only ranks sites beyond the peak and end ones). */
static void note_stack_max(struct html *h, const struct vrt_effect *e)
{
	int64_t key = e->kind == VRT_EFFECT_NONE ? -1 : series_key(h, &e->item);
	if (key < 0 || !e->delta || e->delta != own_delta(e, true))
		return;
	struct stack_max *x = stack_max_of(h, (uint64_t)key);
	if (x && (x->live += e->delta) > x->max)
		x->max = x->live;
}

/* ---- pass 1: totals and time range ------------------------------------------------------- */

static int pass_totals(struct html *h)
{
	struct vrt_pass p;
	struct vrt_record r;
	struct vrt_effect e;
	vrt_pass_open(&p, h->t, &(struct vrt_pass_options){ .label = "html: totals", .quiet = h->o->quiet,
							     .model = &h->end });
	while (vrt_pass_next(&p, &r, &e)) {
		if (h->oom)
			vrt_oom_search_record(h->oom, &r, p.rp.thread, p.events);
		if (h->leaks)
			vrt_leaks_feed_record(h->leaks, &h->end, &r, &e);
		note_stack_max(h, &e);
		if (!h->have_range && (h->end.set.events || r.op == VRT_OP_CP_BEGIN)) {
			h->from = vrt_ts_seconds(h->t, h->end.last_ts);
			h->have_range = true;
		}
	}
	int rc = vrt_pass_close(&p);
	if (h->leaks)
		vrt_leaks_feed_pass_end(h->leaks, &h->end);
	h->to = vrt_ts_seconds(h->t, h->end.last_ts);
	if (!h->have_range || h->to < h->from)
		h->from = h->to;
	/* A little of the time after the last event (when the process lived on), so the state it
	 * left shows as more than the last bucket's sliver; not past --until-mark's mark, where the
	 * analysis ends. */
	double end = vrt_settings.until_mark ? 0 : vrt_trace_end_s(h->t);
	double pad = (h->to - h->from) / 50;
	if (end > h->to)
		h->to += end - h->to < pad ? end - h->to : pad;
	return rc;
}

/* ---- pass 2: sites at each peak, and the top sites ---------------------------------------- */

struct group_ctx {
	const struct html *h;
	int series;
	struct vrt_sites *out;
};

static void group_visit(void *ctx, const struct vrt_item *it)
{
	struct group_ctx *g = ctx;
	if (series_of_item(g->h, it) != g->series)
		return;
	struct vrt_site *site = vrt_sites_get(g->out, site_stack(g->h, it->stack), NULL);
	if (site) {
		site->bytes += (int64_t)it->size;
		site->count++;
	}
}

static void group_series(const struct html *h, const struct vrt_model *m, int series, struct vrt_sites *out)
{
	struct group_ctx g = { h, series, out };
	vrt_model_each(m, group_visit, &g);
	vrt_sites_sort(out);
}

static int pass_peaks(struct html *h)
{
	for (int i = 0; i < h->n_series; i++)
		group_series(h, &h->end, i, &h->s[i].live_end);
	vrt_model_free(&h->end); /* its totals stay: one live set in memory at a time */
	struct vrt_model m;
	if (vrt_model_init(&m))
		return vrt_fail(VRT_E_NOMEM, "html");
	struct vrt_pass p;
	struct vrt_record r;
	struct vrt_effect e;
	int left = h->n_series;
	/* The OOM section's model is this one, up to the failure: this pass goes on to it. */
	h->oom_out = h->oom ? open_memstream(&h->oom_json, &h->oom_len) : NULL;
	bool oom = h->oom_out && vrt_oom_step(h->oom, h->t, &m, NULL, h->oom_out);
	vrt_pass_open(&p, h->t, &(struct vrt_pass_options){ .label = "html: peaks", .quiet = h->o->quiet, .model = &m });
	/* leaks' low points (a trace without a phase to follow) take this pass on to teardown. */
	while ((left || oom || (h->leaks && vrt_leaks_feed_wants(h->leaks, &m))) && vrt_pass_next(&p, &r, &e)) {
		if (oom)
			oom = vrt_oom_step(h->oom, h->t, &m, &r, h->oom_out);
		if (h->leaks)
			vrt_leaks_feed_record(h->leaks, &m, &r, &e);
		for (int i = 0; i < h->n_series; i++) {
			struct series *s = &h->s[i];
			/* The peak is the event that set it, once the total is back at that value (a
			 * checkpoint's items all share the event count of the record before them). */
			if (s->peak_taken || m.set.events != s->peak_event || series_total(&m, s) != s->peak)
				continue;
			group_series(h, &m, i, &s->at_peak);
			s->peak_taken = true;
			left--;
		}
	}
	int rc = vrt_pass_close(&p);
	if (h->leaks)
		vrt_leaks_feed_pass_end(h->leaks, &m);
	vrt_model_free(&m);
	return rc;
}

/* Index of a stack in the page's site table, adding it when new. */
static int site_of_stack(struct html *h, uint32_t stack)
{
	struct vrt_site *known = vrt_sites_get(&h->site_map, stack, NULL);
	if (!known)
		return -1;
	if (known->count)
		return (int)known->count - 1;
	struct site_def *v = realloc(h->sites, (size_t)(h->n_sites + 1) * sizeof(*v));
	if (!v)
		return -1;
	h->sites = v;
	h->sites[h->n_sites] = (struct site_def){ stack };
	known->count = (uint64_t)++h->n_sites;
	return h->n_sites - 1;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static int64_t stack_max_bytes(const struct html *h, const struct series *s, uint32_t stack)
{
	uint64_t key = (uint64_t)(s->slot * 8 + s->kind + 2) << 32 | stack;
	if (!h->smax_cap)
		return 0;
	size_t j = (size_t)(key * 0x9e3779b97f4a7c15ull >> 20) & (h->smax_cap - 1);
	for (; h->smax[j].key; j = (j + 1) & (h->smax_cap - 1))
		if (h->smax[j].key == key)
			return h->smax[j].max;
	return 0;
}

/* The series' stacks by their own highest bytes (pass 1), most first. */
static void sites_by_own_max(const struct html *h, const struct series *s, struct vrt_sites *out)
{
	uint64_t prefix = (uint64_t)(s->slot * 8 + s->kind + 2);
	for (size_t i = 0; i < h->smax_cap; i++) {
		const struct stack_max *x = &h->smax[i];
		if (!x->key || x->key >> 32 != prefix || x->max <= 0)
			continue;
		struct vrt_site *y = vrt_sites_get(out, (uint32_t)x->key, NULL);
		if (y)
			y->bytes = x->max;
	}
	vrt_sites_sort(out);
}

/* Appends a stack to the chosen ones unless it is there already. */
static void choose(uint32_t *chosen, int *n, uint32_t stack)
{
	for (int i = 0; i < *n; i++)
		if (chosen[i] == stack)
			return;
	chosen[(*n)++] = stack;
}

/* The N sites with the most bytes at the peak or at the end (whichever is more); when the
 * series has fewer, then the others that held the most at any time. */
static int choose_top(struct html *h, struct series *s)
{
	int want = h->o->sites, n = 0;
	uint32_t *chosen = calloc((size_t)want, sizeof(*chosen));
	struct vrt_sites both, more;
	vrt_sites_init(&both);
	vrt_sites_init(&more);
	const struct vrt_sites *from[2] = { &s->at_peak, &s->live_end };
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < from[k]->n; i++) {
			struct vrt_site *x = vrt_sites_get(&both, from[k]->v[i].stack, NULL);
			if (x && from[k]->v[i].bytes > x->bytes)
				x->bytes = from[k]->v[i].bytes;
		}
	vrt_sites_sort(&both);
	for (size_t i = 0; chosen && i < both.n && n < want && both.v[i].bytes > 0; i++)
		choose(chosen, &n, both.v[i].stack);
	if (chosen && n < want)
		sites_by_own_max(h, s, &more);
	for (size_t i = 0; chosen && i < more.n && n < want; i++)
		choose(chosen, &n, more.v[i].stack);
	vrt_sites_free(&both);
	vrt_sites_free(&more);
	s->n_top = n;
	s->top = calloc((size_t)n + 1, sizeof(*s->top));
	s->top_rank = calloc((size_t)n + 1, sizeof(*s->top_rank));
	s->site_id = calloc((size_t)n + 1, sizeof(*s->site_id));
	s->cur = calloc((size_t)n + 1, sizeof(*s->cur));
	int rc = chosen && s->top && s->top_rank && s->site_id && s->cur ? 0 : VRT_E_NOMEM;
	for (int i = 0; !rc && i < n; i++) {
		s->site_id[i] = site_of_stack(h, chosen[i]);
		s->top[i] = chosen[i];
		rc = s->site_id[i] < 0 ? VRT_E_NOMEM : 0;
	}
	/* top[] sorted by stack for lookup; top_rank[] maps back to the rank order. */
	if (!rc)
		qsort(s->top, (size_t)n, sizeof(*s->top), cmp_u32);
	for (int i = 0; !rc && i < n; i++)
		for (int j = 0; j < n; j++)
			if (chosen[j] == s->top[i])
				s->top_rank[i] = j;
	free(chosen);
	return rc;
}

/* Rank of a stack among a series' chosen sites, or -1 ("other"). */
static int rank_of(const struct series *s, uint32_t stack)
{
	int lo = 0, hi = s->n_top;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (s->top[mid] < stack)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->n_top && s->top[lo] == stack ? s->top_rank[lo] : -1;
}

/* ---- pass 3: buckets --------------------------------------------------------------------- */

static int64_t *row(const struct html *h, int b, int series)
{
	return &h->vals[((size_t)b * (size_t)h->n_series + (size_t)series) * (size_t)h->stride];
}

static int64_t *row_max(const struct html *h, int b, int series)
{
	return &h->bmax[(size_t)b * (size_t)h->n_series + (size_t)series];
}

static int buckets_init(struct html *h)
{
	h->wanted = h->o->buckets;
	h->cap = 2 * h->wanted;
	h->cur_b = -1;
	h->width = h->to > h->from ? (h->to - h->from) / h->wanted : 1e-6;
	h->stride = h->o->sites + 1;
	size_t cells = (size_t)h->cap * (size_t)(h->n_series ? h->n_series : 1);
	h->bmax = malloc(cells * sizeof(*h->bmax));
	h->vals = calloc(cells * (size_t)h->stride, sizeof(*h->vals));
	if (!h->bmax || !h->vals)
		return VRT_E_NOMEM;
	for (size_t i = 0; i < cells; i++)
		h->bmax[i] = -1; /* untouched */
	h->allocator = h->end.any_blocks;
	if (h->allocator && (vrt_frag_init(&h->frag, h->t, h->cap) || vrt_bands_init(&h->bands, TENSOR_BANDS)))
		return VRT_E_NOMEM;
	return 0;
}

/* The allocator's views follow the record pass 3 just applied (after its buckets rolled). */
static void track_allocator(struct html *h, const struct vrt_model *m, const struct vrt_record *r,
			    const struct vrt_effect *e)
{
	if (!h->allocator)
		return;
	vrt_frag_apply(&h->frag, m, r, e);
	vrt_bands_apply(&h->bands, h->t, m, e, vrt_ts_seconds(h->t, m->last_ts));
}

/* Halves the resolution: bucket i keeps whichever of 2i, 2i+1 rose higher. */
static void merge_pairs(struct html *h)
{
	for (int b = 0; b < h->cap / 2; b++)
		for (int s = 0; s < h->n_series; s++) {
			int src = *row_max(h, 2 * b + 1, s) > *row_max(h, 2 * b, s) ? 2 * b + 1 : 2 * b;
			*row_max(h, b, s) = *row_max(h, src, s);
			memmove(row(h, b, s), row(h, src, s), (size_t)h->stride * sizeof(int64_t));
		}
	for (int b = h->cap / 2; b < h->cap; b++)
		for (int s = 0; s < h->n_series; s++)
			*row_max(h, b, s) = -1;
	h->width *= 2;
	h->cur_b = h->cur_b < 0 ? -1 : h->cur_b / 2;
	if (h->allocator)
		vrt_frag_merge(&h->frag);
}

static int bucket_of(struct html *h, double now)
{
	for (;;) {
		double x = (now - h->from) / h->width;
		int b = x <= 0 ? 0 : x >= (double)h->cap ? h->cap : (int)x;
		if (b == h->wanted && now <= h->to)
			b--; /* the last event closes the last bucket (after a merge, b < wanted here) */
		if (b < h->cap)
			return b;
		merge_pairs(h);
	}
}

/* The state before this record, written into every bucket from the last one touched to b. */
static void roll_to(struct html *h, int b)
{
	for (int i = h->cur_b + 1; i <= b; i++)
		for (int k = 0; k < h->n_series; k++) {
			const struct series *s = &h->s[k];
			int64_t *v = row(h, i, k), sum = 0;
			for (int j = 0; j < s->n_top; j++)
				sum += v[j] = s->cur[j];
			v[h->stride - 1] = s->total - sum;
			*row_max(h, i, k) = s->total;
		}
	if (b > h->cur_b)
		h->cur_b = b;
	if (h->allocator)
		vrt_frag_roll(&h->frag, b);
}

static void resync_visit(void *ctx, const struct vrt_item *it)
{
	struct html *h = ctx;
	int k = series_of_item(h, it);
	int j = k < 0 ? -1 : rank_of(&h->s[k], site_stack(h, it->stack));
	if (j >= 0)
		h->s[k].cur[j] += (int64_t)it->size;
}

/* Recounts the chosen sites from the model: after a record whose effect names an item other
 * than the one whose bytes moved (a replaced allocation, a context reset, a VMM unmap). */
static void resync(struct html *h, const struct vrt_model *m)
{
	for (int k = 0; k < h->n_series; k++)
		memset(h->s[k].cur, 0, (size_t)h->s[k].n_top * sizeof(int64_t));
	vrt_model_each(m, resync_visit, h);
	h->resyncs++;
}

static void track(struct html *h, const struct vrt_model *m, const struct vrt_effect *e)
{
	int k = e->kind == VRT_EFFECT_NONE ? -1 : series_of_item(h, &e->item);
	if (e->delta != own_delta(e, k >= 0)) {
		resync(h, m);
		return;
	}
	int j = k < 0 || !e->delta ? -1 : rank_of(&h->s[k], site_stack(h, e->item.stack));
	if (j >= 0)
		h->s[k].cur[j] += e->delta;
}

static void sample(struct html *h, const struct vrt_model *m, int b)
{
	for (int k = 0; k < h->n_series; k++) {
		struct series *s = &h->s[k];
		s->total = series_total(m, s);
		int64_t *mx = row_max(h, b, k);
		if (s->total <= *mx)
			continue;
		*mx = s->total;
		int64_t *v = row(h, b, k), sum = 0;
		for (int j = 0; j < s->n_top; j++)
			sum += v[j] = s->cur[j];
		v[h->stride - 1] = s->total - sum;
	}
	if (h->allocator)
		vrt_frag_sample(&h->frag, b);
}

static int grow(void **v, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 16;
	void *nv = realloc(*v, nc * size);
	if (!nv)
		return VRT_E_NOMEM;
	*v = nv;
	*cap = nc;
	return 0;
}

/* Appends [start, end], or extends the last interval when the gap is under one bucket. */
static void add_interval(struct html *h, struct interval **iv, size_t *n, size_t *cap, double start, double end)
{
	if (*n && start - (*iv)[*n - 1].end < h->width) {
		struct interval *last = &(*iv)[*n - 1];
		last->end = end > last->end ? end : last->end;
		last->count++;
		return;
	}
	if (grow((void **)iv, cap, *n, sizeof(**iv)))
		return;
	(*iv)[(*n)++] = (struct interval){ start, end, 1 };
}

static struct phase_track *phase_named(struct html *h, uint32_t name)
{
	for (int i = 0; i < h->n_phases; i++)
		if (h->phases[i].name == name)
			return &h->phases[i];
	if (h->n_phases == MAX_PHASE_NAMES)
		return NULL;
	h->phases[h->n_phases] = (struct phase_track){ .name = name };
	return &h->phases[h->n_phases++];
}

static void note_marker(struct html *h, const struct vrt_record *r)
{
	double at = vrt_ts_seconds(h->t, r->ts);
	if (r->op == VRT_OP_PHASE_ENTER || r->op == VRT_OP_PHASE_EXIT) {
		struct phase_track *p = phase_named(h, (uint32_t)r->id);
		if (!p) {
			h->phases_dropped++;
		} else if (r->op == VRT_OP_PHASE_ENTER) {
			if (p->depth++ == 0)
				p->start = at;
		} else if (p->depth > 0 && --p->depth == 0) {
			add_interval(h, &p->iv, &p->n, &p->cap, p->start, at);
		}
	} else if (r->op == VRT_OP_MARK) {
		int i = 0;
		while (i < h->n_marks && h->marks[i].label != r->id)
			i++;
		if (i == h->n_marks && h->n_marks < MAX_MARK_LABELS)
			h->marks[h->n_marks++] = (struct mark_track){ .label = (uint32_t)r->id };
		if (i < h->n_marks)
			add_interval(h, &h->marks[i].at, &h->marks[i].n, &h->marks[i].cap, at, at);
		else
			h->marks_dropped++;
	} else if (r->op == VRT_OP_OOM) {
		if (h->n_ooms < MAX_OOMS)
			h->ooms[h->n_ooms++] = (struct oom_event){ at, r->size, r->device, r->api };
		else
			h->ooms_dropped++;
	}
}

static int pass_buckets(struct html *h)
{
	int rc = buckets_init(h);
	if (rc)
		return vrt_fail(rc, "html");
	struct vrt_model m;
	if (vrt_model_init(&m))
		return vrt_fail(VRT_E_NOMEM, "html");
	struct vrt_pass p;
	struct vrt_record r;
	struct vrt_effect e;
	vrt_pass_open(&p, h->t, &(struct vrt_pass_options){ .label = "html: timeline, leaks", .quiet = h->o->quiet, .model = &m });
	while (vrt_pass_next(&p, &r, &e)) {
		if (h->leaks)
			vrt_leaks_feed_record(h->leaks, &m, &r, &e);
		note_marker(h, &r);
		if (e.kind != VRT_EFFECT_NONE || e.delta) {
			int b = bucket_of(h, vrt_ts_seconds(h->t, m.last_ts));
			roll_to(h, b); /* before the change: buckets passed over keep the old state */
			track(h, &m, &e);
			track_allocator(h, &m, &r, &e);
			sample(h, &m, b);
		} else {
			track_allocator(h, &m, &r, &e); /* an OOM, the end of a checkpoint */
		}
	}
	rc = vrt_pass_close(&p);
	if (h->leaks)
		vrt_leaks_feed_pass_end(h->leaks, &m);
	if (h->allocator)
		vrt_frag_finish(&h->frag, &m);
	roll_to(h, bucket_of(h, h->to));
	for (int i = 0; i < h->n_phases; i++) /* still open at the end */
		if (h->phases[i].depth > 0)
			add_interval(h, &h->phases[i].iv, &h->phases[i].n, &h->phases[i].cap, h->phases[i].start, h->to);
	vrt_model_free(&m);
	return rc;
}

/* ---- leaks and oom, computed in this process ---------------------------------------------- */

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
		p++;
	return p;
}

/* The end of the JSON value at p (input from our own commands: well formed), or NULL. */
static const char *skip_value(const char *p, const char *end)
{
	p = skip_ws(p, end);
	int depth = 0;
	bool in_string = false;
	for (; p < end; p++) {
		char c = *p;
		if (in_string) {
			if (c == '\\')
				p++;
			else if (c == '"') {
				in_string = false;
				if (!depth)
					return p + 1;
			}
			continue;
		}
		if (c == '"')
			in_string = true;
		else if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']') {
			if (--depth <= 0)
				return depth < 0 ? p : p + 1;
		} else if (!depth && (c == ',' || c == ' ' || c == '\n'))
			return p;
	}
	return depth || in_string ? NULL : p;
}

/* Copies an array, keeping its first `keep` items; returns how many it had. */
static size_t copy_array(FILE *out, const char *p, const char *end, size_t keep)
{
	size_t n = 0;
	fputc('[', out);
	p = skip_ws(p + 1, end);
	while (p && p < end && *p != ']') {
		const char *e = skip_value(p, end);
		if (!e)
			break;
		if (n < keep)
			fprintf(out, "%s%.*s", n ? ", " : "", (int)(e - p), p);
		n++;
		p = skip_ws(e, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
	}
	fputc(']', out);
	return n;
}

/* The value of a top-level member of a JSON object from our own commands; false when absent. */
static bool member_of(const char *p, const char *end, const char *name, const char **v, size_t *v_len)
{
	p = skip_ws(p, end);
	if (p >= end || *p != '{')
		return false;
	size_t n = strlen(name);
	for (p = skip_ws(p + 1, end); p < end && *p == '"';) {
		const char *key = p, *key_end = skip_value(p, end);
		if (!key_end || (p = skip_ws(key_end, end)) >= end || *p != ':')
			return false;
		p = skip_ws(p + 1, end);
		const char *v_end = skip_value(p, end);
		if (!v_end)
			return false;
		if ((size_t)(key_end - key) == n + 2 && !strncmp(key + 1, name, n)) {
			*v = p;
			*v_len = (size_t)(v_end - p);
			return true;
		}
		p = skip_ws(v_end, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
	}
	return false;
}

static int64_t member_int(const char *p, const char *end, const char *name)
{
	const char *v;
	size_t len;
	char buf[32];
	if (!member_of(p, end, name, &v, &len) || len >= sizeof(buf))
		return 0;
	memcpy(buf, v, len);
	buf[len] = 0;
	return strtoll(buf, NULL, 10);
}

/* A site's survivors over the calls, as `leaks` prints them: one stack, label and verdict. */
struct survivor_group {
	const char *row, *row_end;   /* the row shown: the first with a chain of references, else the first */
	const char *verdict, *label; /* their JSON values, with their lengths */
	size_t verdict_len, label_len, order;
	int64_t stack, bytes, count, outlived, first, last;
	uint64_t calls;
	bool chain;
};

static bool same_text(const char *a, size_t a_len, const char *b, size_t b_len)
{
	return a_len == b_len && (!a_len || !memcmp(a, b, a_len));
}

static bool has_chain(const char *row, const char *end)
{
	const char *v;
	size_t len;
	return member_of(row, end, "held_by", &v, &len) && skip_ws(v + 1, v + len) < v + len - 1;
}

/* Adds one per-call row, of call `phase`, to its group (groups: open addressing by site, cap a
 * power of two): stacks that print alike are one site (keys; NULL: each stack its own), as `leaks`
 * lists them. Returns the group's slot; its calls are counted after (a call's rows are one per
 * stack of the site). */
static size_t group_row(struct survivor_group *groups, size_t cap, size_t *n, const char *row, const char *end,
			int64_t phase, struct vrt_site_keys *keys)
{
	struct survivor_group x = { .row = row, .row_end = end, .stack = member_int(row, end, "stack") };
	if (keys && x.stack >= 0 && x.stack <= UINT32_MAX)
		x.stack = vrt_site_keys_stack(keys, (uint32_t)x.stack);
	if (!member_of(row, end, "verdict", &x.verdict, &x.verdict_len))
		x.verdict_len = 0;
	if (!member_of(row, end, "label", &x.label, &x.label_len))
		x.label_len = 0;
	size_t j = (size_t)((uint64_t)x.stack * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
	for (; groups[j].row; j = (j + 1) & (cap - 1))
		if (groups[j].stack == x.stack && same_text(groups[j].verdict, groups[j].verdict_len, x.verdict, x.verdict_len) &&
		    same_text(groups[j].label, groups[j].label_len, x.label, x.label_len))
			break;
	struct survivor_group *g = &groups[j];
	if (!g->row) {
		*g = x;
		g->order = (*n)++;
		g->first = g->last = phase;
		g->chain = has_chain(row, end);
	} else if (!g->chain && has_chain(row, end)) {
		g->row = row, g->row_end = end, g->chain = true;
	}
	g->bytes += member_int(row, end, "bytes");
	g->count += member_int(row, end, "count");
	int64_t outlived = member_int(row, end, "outlived_invocations");
	g->outlived = outlived > g->outlived ? outlived : g->outlived;
	g->first = phase < g->first ? phase : g->first;
	g->last = phase > g->last ? phase : g->last;
	return j;
}

/* A group's slot and a call one of its rows was born in. */
struct group_call {
	size_t slot;
	int64_t phase;
};

static int by_slot_and_call(const void *a, const void *b)
{
	const struct group_call *x = a, *y = b;
	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	return x->phase < y->phase ? -1 : x->phase > y->phase;
}

/* Each group's calls: the distinct calls its rows were born in. */
static void count_calls(struct survivor_group *groups, struct group_call *seen, size_t n)
{
	qsort(seen, n, sizeof(*seen), by_slot_and_call);
	for (size_t i = 0; i < n; i++)
		if (!i || by_slot_and_call(&seen[i - 1], &seen[i]))
			groups[seen[i].slot].calls++;
}

static int by_group_bytes(const void *a, const void *b)
{
	const struct survivor_group *x = a, *y = b;
	if (x->bytes != y->bytes)
		return x->bytes > y->bytes ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* The group's row with its figures summed over the calls, and which calls they were born in. */
static void write_group(FILE *out, const struct survivor_group *g)
{
	const char *p = skip_ws(g->row, g->row_end), *end = g->row_end;
	fputc('{', out);
	bool first = true;
	for (p = skip_ws(p + 1, end); p < end && *p == '"'; first = false) {
		const char *key = p, *key_end = skip_value(p, end);
		p = skip_ws(key_end, end);
		p = skip_ws(p + 1, end);
		const char *v_end = skip_value(p, end);
		if (!key_end || !v_end)
			break;
		int len = (int)(key_end - key);
		fprintf(out, "%s%.*s: ", first ? "" : ", ", len, key);
		if (len == 7 && !strncmp(key, "\"bytes\"", 7))
			fprintf(out, "%lld", (long long)g->bytes);
		else if (len == 7 && !strncmp(key, "\"count\"", 7))
			fprintf(out, "%lld", (long long)g->count);
		else if (len == 22 && !strncmp(key, "\"outlived_invocations\"", 22))
			fprintf(out, "%lld", (long long)g->outlived);
		else
			fwrite(p, 1, (size_t)(v_end - p), out);
		p = skip_ws(v_end, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
	}
	fprintf(out, ", \"calls\": %llu, \"first_call\": %lld, \"last_call\": %lld}", (unsigned long long)g->calls,
		(long long)g->first, (long long)g->last);
}

/*
 * leaks --json's survivors (a row per site and call) grouped by site as `leaks` prints them,
 * the largest first, keeping `keep` groups; returns how many groups there were. Grouping comes
 * before the cut: a site that left a tensor in each of 1000 calls is one row of 1000, not its
 * first 50 calls. Returns (size_t)-1 when out of memory (the caller copies the rows instead).
 */
static size_t copy_survivor_groups(FILE *out, const char *p, const char *end, size_t keep, struct vrt_site_keys *keys)
{
	size_t rows = 0, cap = 16, n = 0;
	for (const char *q = skip_ws(p + 1, end); q && q < end && *q != ']'; rows++) {
		q = skip_value(q, end);
		q = q ? skip_ws(q, end) : NULL;
		if (q && q < end && *q == ',')
			q = skip_ws(q + 1, end);
	}
	while (cap < 2 * rows)
		cap *= 2;
	struct survivor_group *groups = calloc(cap, sizeof(*groups));
	struct group_call *seen = malloc((rows ? rows : 1) * sizeof(*seen));
	if (!groups || !seen) {
		free(groups);
		free(seen);
		return (size_t)-1;
	}
	size_t n_seen = 0;
	for (p = skip_ws(p + 1, end); p && p < end && *p != ']' && n_seen < rows;) {
		const char *e = skip_value(p, end);
		if (!e)
			break;
		int64_t phase = member_int(p, e, "phase_index");
		seen[n_seen++] = (struct group_call){ group_row(groups, cap, &n, p, e, phase, keys), phase };
		p = skip_ws(e, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
	}
	count_calls(groups, seen, n_seen);
	free(seen);
	size_t out_n = 0;
	for (size_t i = 0; i < cap; i++)
		if (groups[i].row)
			groups[out_n++] = groups[i];
	qsort(groups, out_n, sizeof(*groups), by_group_bytes);
	fputc('[', out);
	for (size_t i = 0; i < out_n && i < keep; i++) {
		fputs(i ? ", " : "", out);
		write_group(out, &groups[i]);
	}
	fputc(']', out);
	free(groups);
	return out_n;
}

static bool array_of_sites(const char *key, size_t len)
{
	static const char *const names[] = { "survivors", "growing", "top_sites" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (len == strlen(names[i]) + 2 && !strncmp(key + 1, names[i], len - 2))
			return true;
	return false;
}

/* Copies a top-level JSON object, cutting every array member short (a "<key>_omitted": N
 * member says how many items were left out), its survivors grouped by site (keys, as
 * copy_survivor_groups). Returns false when the input is not an object. */
static bool copy_capped(FILE *out, const char *json, size_t len, struct vrt_site_keys *keys)
{
	const char *p = skip_ws(json, json + len), *end = json + len;
	if (p >= end || *p != '{')
		return false;
	p = skip_ws(p + 1, end);
	fputc('{', out);
	for (bool first = true; p < end && *p == '"'; first = false) {
		const char *key = p, *key_end = skip_value(p, end);
		if (!key_end)
			return false;
		p = skip_ws(key_end, end);
		if (p >= end || *p != ':')
			return false;
		p = skip_ws(p + 1, end);
		const char *v_end = skip_value(p, end);
		if (!v_end)
			return false;
		size_t key_len = (size_t)(key_end - key);
		fprintf(out, "%s%.*s: ", first ? "" : ", ", (int)key_len, key);
		if (*p == '[') {
			size_t keep = array_of_sites(key, key_len) ? SECTION_SITE_ITEMS : SECTION_ARRAY_ITEMS;
			bool survivors = key_len == 11 && !strncmp(key, "\"survivors\"", 11);
			size_t n = survivors ? copy_survivor_groups(out, p, v_end, keep, keys) : (size_t)-1;
			if (n == (size_t)-1)
				n = copy_array(out, p, v_end, keep);
			if (n > keep)
				fprintf(out, ", %.*s_omitted\": %zu", (int)key_len - 1, key, n - keep);
		} else {
			fprintf(out, "%.*s", (int)(v_end - p), p);
		}
		p = skip_ws(v_end, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
	}
	fputc('}', out);
	return true;
}

/* `vramtrace leaks --json -q TRACE` as "leaks": {...}, computed on the trace already open and
 * cut short (copy_capped); null with a note why when it failed or its JSON is too large. */
static void embed_leaks(FILE *out, struct html *h, FILE *notes)
{
	char *text = NULL, *capped = NULL;
	size_t len = 0, capped_len = 0;
	FILE *json = open_memstream(&text, &len);
	int status = json && h->leaks ? vrt_leaks_feed_json(h->leaks, json) : VRT_EXIT_INTERNAL;
	if (json && fclose(json) && !status)
		status = VRT_EXIT_INTERNAL;
	bool too_large = !status && len > SECTION_OUTPUT_LIMIT;
	FILE *mem = !status && !too_large ? open_memstream(&capped, &capped_len) : NULL;
	bool ok = mem && copy_capped(mem, text, len, h->keys);
	if (mem)
		ok = !fclose(mem) && ok;
	fprintf(out, ", \"leaks\": ");
	if (ok)
		fwrite(capped, 1, capped_len, out);
	else
		fputs("null", out);
	free(text);
	free(capped);
	if (ok)
		return;
	char why[160];
	if (too_large)
		snprintf(why, sizeof(why), "`vramtrace leaks` wrote more than %u MiB; section left out",
			 SECTION_OUTPUT_LIMIT >> 20);
	else if (status)
		snprintf(why, sizeof(why), "`vramtrace leaks` failed (exit %d); section left out", status);
	else
		snprintf(why, sizeof(why), "`vramtrace leaks` gave no JSON object; section left out");
	fprintf(notes, "%s", ftell(notes) ? ", " : "");
	json_string(notes, why);
	if (!h->o->quiet)
		fprintf(stderr, "vramtrace: html: %s\n", why);
}

/* The OOM's JSON: pass_peaks wrote it when the trace has one (else a pass of its own does).
 * Returns 0 or a vrt_error; *found: whether the trace has an OOM. */
static int oom_json(struct html *h, char **json, size_t *len, bool *found)
{
	*found = h->oom && vrt_oom_search_found(h->oom);
	if (!h->oom)
		return VRT_E_NOMEM;
	if (!*found)
		return 0;
	if (vrt_oom_explained(h->oom)) {
		int rc = fclose(h->oom_out) ? VRT_E_NOMEM : 0;
		h->oom_out = NULL;
		*json = h->oom_json, *len = h->oom_len;
		h->oom_json = NULL;
		return rc;
	}
	FILE *mem = open_memstream(json, len);
	int rc = mem ? vrt_oom_json(h->t, h->oom, mem, found) : VRT_E_NOMEM;
	if (mem && fclose(mem) && !rc)
		rc = VRT_E_NOMEM;
	return rc;
}

/* `vramtrace oom --json` as "oom": {...}, computed in-process on the trace already open; null
 * when the trace has no out-of-memory event, or with a note why when it could not be explained. */
static void embed_oom(FILE *out, struct html *h, FILE *notes)
{
	char *json = NULL;
	size_t len = 0;
	bool found;
	int rc = oom_json(h, &json, &len, &found);
	fprintf(out, ", \"oom\": ");
	if (!rc && found)
		fwrite(json, 1, len, out);
	else
		fputs("null", out);
	free(json);
	if (!rc || !(found || rc == VRT_E_NOMEM))
		return;
	char why[160];
	snprintf(why, sizeof(why), "`vramtrace oom` failed (exit %d); section left out", vrt_exit_code(rc));
	fprintf(notes, "%s", ftell(notes) ? ", " : "");
	json_string(notes, why);
	if (!h->o->quiet)
		fprintf(stderr, "vramtrace: html: %s\n", why);
}

/* ---- the page's data --------------------------------------------------------------------- */

static void series_name(const struct series *s, char *buf, size_t len)
{
	const char *kind = s->kind < 0 ? "tensors" : vrt_kind_name((uint32_t)s->kind);
	if (s->slot == VRT_HOST_SLOT)
		snprintf(buf, len, "host.%s", kind);
	else
		snprintf(buf, len, "dev%d.%s", s->slot, kind);
}

static void write_process(FILE *out, const struct html *h)
{
	const struct vrt_trace *t = h->t;
	const struct vrt_file_header *hd = &t->hdr;
	char host[sizeof(hd->hostname) + 1];
	snprintf(host, sizeof(host), "%.*s", (int)sizeof(hd->hostname), hd->hostname);
	fputs("\"process\": {\"file\": ", out);
	json_string(out, t->path);
	fprintf(out, ", \"pid\": %d, \"ppid\": %d, \"rank\": %d, \"world_size\": %d, \"host\": ", hd->pid, hd->ppid,
		hd->rank, hd->world_size);
	json_string(out, host);
	fputs(", \"cmdline\": ", out);
	json_string(out, vrt_info(t, "cmdline"));
	fputs(", \"torch\": ", out);
	json_string(out, vrt_info(t, "torch"));
	double end_s = vrt_trace_end_s(t);
	end_s = end_s ? end_s : h->to;
	fprintf(out, ", \"started_unix_s\": %.3f, \"duration_s\": %.6f, \"events\": %llu, \"events_lost\": %llu, \"end\": ",
		(double)hd->start_realtime_ns / 1e9, end_s > h->to ? end_s : h->to, (unsigned long long)h->end.set.events,
		(unsigned long long)(t->state_valid ? hd->state.events_lost : 0));
	json_string(out, t->cut_short       ? vrt_end_text(t)
			 : t->state_valid ? vrt_end_reason_text(hd->state.end_reason)
					  : "unknown (state block damaged)");
	fprintf(out, ", \"end_code\": %d, \"end_detail\": %d, \"ring\": %s, \"history_lost\": %s, \"truncated\": %s}",
		t->state_valid ? (int)hd->state.end_reason : -1, hd->state.end_detail, hd->ring_size ? "true" : "false",
		t->history_lost ? "true" : "false", vrt_trace_cut(t) || t->corrupt_chunks ? "true" : "false");
}

struct frame_table {
	char **keys;             /* "function\x1flocation\x1fkind" */
	size_t n, cap;
	uint32_t *index;         /* open addressing: position + 1 */
	size_t index_cap;
};

static int frame_id(struct frame_table *ft, const char *key)
{
	if ((ft->n + 1) * 2 > ft->index_cap) {
		size_t cap = ft->index_cap ? ft->index_cap * 2 : 1024;
		uint32_t *ix = calloc(cap, sizeof(*ix));
		if (!ix)
			return -1;
		for (size_t i = 0; i < ft->n; i++) {
			size_t j = vrt_hash_string(ft->keys[i]) & (cap - 1);
			while (ix[j])
				j = (j + 1) & (cap - 1);
			ix[j] = (uint32_t)i + 1;
		}
		free(ft->index);
		ft->index = ix;
		ft->index_cap = cap;
	}
	size_t j = vrt_hash_string(key) & (ft->index_cap - 1);
	for (; ft->index[j]; j = (j + 1) & (ft->index_cap - 1))
		if (!strcmp(ft->keys[ft->index[j] - 1], key))
			return (int)ft->index[j] - 1;
	if (grow((void **)&ft->keys, &ft->cap, ft->n, sizeof(*ft->keys)))
		return -1;
	if (!(ft->keys[ft->n] = strdup(key)))
		return -1;
	ft->index[j] = (uint32_t)++ft->n;
	return (int)ft->n - 1;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

static void frame_key(const struct vrt_frame *f, char *buf, size_t len)
{
	switch (f->type) {
	case VRT_FT_PYTHON:
		snprintf(buf, len, "%s\x1f%s:%d\x1fp", f->function, f->file, f->line);
		break;
	case VRT_FT_LABEL:
		snprintf(buf, len, "%s\x1f\x1fl", f->function);
		break;
	case VRT_FT_NATIVE: /* the call site within the function, as a Python frame has its line */
		if (strcmp(f->function, "??"))
			snprintf(buf, len, "%s\x1f%s+0x%llx\x1fn", f->function, *f->module ? base_name(f->module) : "?",
				 (unsigned long long)f->offset);
		else
			snprintf(buf, len, "0x%llx\x1f%s\x1fn", (unsigned long long)f->address,
				 *f->module ? base_name(f->module) : "?");
		break;
	}
}

static bool same_frame(const struct vrt_frame *a, const struct vrt_frame *b)
{
	return a->type == b->type && a->function == b->function && a->file == b->file && a->line == b->line &&
	       a->address == b->address;
}

/* One site: frames outermost first (ids into the frame table), the headline's position. */
static void write_site(FILE *out, const struct vrt_trace *t, uint32_t stack, struct frame_table *ft)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	struct vrt_frame head;
	int n = stack ? vrt_stack_frames(t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES) : 0;
	bool has_head = stack && vrt_stack_headline(t, stack, &head);
	int shown = n < MAX_FRAMES_SHOWN ? n : MAX_FRAMES_SHOWN, head_at = -1;
	struct vrt_site site = { .stack = stack };
	const char *rule;
	fprintf(out, "{\"stack\": %u, \"category\": ", stack);
	json_string(out, stack ? vrt_site_category(t, &site, &rule) : "other");
	fputs(", \"frames\": [", out);
	char key[2048];
	if (n > shown) {
		snprintf(key, sizeof(key), "[%d outer frames not shown]\x1f\x1fl", n - shown);
		fprintf(out, "%d%s", frame_id(ft, key), shown ? ", " : "");
	}
	for (int i = shown - 1; i >= 0; i--) {
		frame_key(&frames[i], key, sizeof(key));
		fprintf(out, "%d%s", frame_id(ft, key), i ? ", " : "");
	}
	/* Position of the headline in the list written (outermost first), found from the inside. */
	for (int i = 0; has_head && i < shown; i++)
		if (same_frame(&frames[i], &head)) {
			head_at = (n > shown) + shown - 1 - i;
			break;
		}
	fprintf(out, "], \"headline\": %d}", head_at);
}

static void write_frames(FILE *out, struct frame_table *ft)
{
	fputs(", \"frames\": [", out);
	for (size_t i = 0; i < ft->n; i++) {
		char *k = ft->keys[i], *a = strchr(k, '\x1f'), *b = a ? strchr(a + 1, '\x1f') : NULL;
		if (!a || !b)
			continue;
		*a = *b = 0;
		fputs(i ? ", [" : "[", out);
		json_string(out, k);
		fputs(", ", out);
		json_string(out, a + 1);
		fprintf(out, ", \"%s\"]", b + 1);
		*a = *b = '\x1f';
	}
	fputc(']', out);
}

/* Per site (rank order, then "other"): the bucket values divided by unit, delta-coded. */
static void write_series_values(FILE *out, const struct html *h, int k)
{
	const struct series *s = &h->s[k];
	int used = h->cur_b + 1;
	int64_t unit = 0;
	for (int b = 0; b < used; b++)
		for (int j = 0; j < h->stride; j++)
			unit = vrt_gcd64(unit, row(h, b, k)[j]);
	if (unit <= 0)
		unit = 1;
	fprintf(out, ", \"unit\": %lld, \"values\": [", (long long)unit);
	for (int j = 0; j <= s->n_top; j++) {
		int col = j == s->n_top ? h->stride - 1 : j;
		fputs(j ? ", [" : "[", out);
		int64_t prev = 0;
		for (int b = 0; b < used; b++) {
			int64_t v = row(h, b, k)[col] / unit;
			fprintf(out, b ? ",%lld" : "%lld", (long long)(v - prev));
			prev = v;
		}
		fputc(']', out);
	}
	fputc(']', out);
}

static void write_series(FILE *out, const struct html *h)
{
	int used = h->cur_b + 1;
	fprintf(out, ", \"from\": %.9f, \"width\": %.9g, \"buckets\": %d, \"main\": %d, \"series\": [", h->from, h->width,
		used, h->main_series);
	for (int k = 0; k < h->n_series; k++) {
		const struct series *s = &h->s[k];
		char name[64];
		series_name(s, name, sizeof(name));
		int peak_b = 0;
		for (int b = 1; b < used; b++)
			if (*row_max(h, b, k) > *row_max(h, peak_b, k))
				peak_b = b;
		fprintf(out, "%s{\"name\": \"%s\", \"device\": %d, \"kind\": \"%s\", \"peak\": %lld, \"peak_s\": %.6f, "
			     "\"peak_bucket\": %d, \"at_end\": %lld, \"sites\": [",
			k ? ", " : "", name, s->slot == VRT_HOST_SLOT ? -1 : s->slot,
			s->kind < 0 ? "tensors" : vrt_kind_name((uint32_t)s->kind), (long long)s->peak, s->peak_s, peak_b,
			(long long)s->at_end);
		for (int j = 0; j < s->n_top; j++)
			fprintf(out, "%s%d", j ? ", " : "", s->site_id[j]);
		fputs("], \"site_peak\": [", out);
		for (int j = 0; j < s->n_top; j++) {
			const struct vrt_site *a = NULL, *e = NULL;
			for (size_t i = 0; i < s->at_peak.n && !a; i++)
				a = s->at_peak.v[i].stack == h->sites[s->site_id[j]].stack ? &s->at_peak.v[i] : NULL;
			for (size_t i = 0; i < s->live_end.n && !e; i++)
				e = s->live_end.v[i].stack == h->sites[s->site_id[j]].stack ? &s->live_end.v[i] : NULL;
			fprintf(out, "%s[%lld, %lld, %llu, %lld]", j ? ", " : "", (long long)(a ? a->bytes : 0),
				(long long)(e ? e->bytes : 0), (unsigned long long)(e ? e->count : a ? a->count : 0),
				(long long)stack_max_bytes(h, s, h->sites[s->site_id[j]].stack));
		}
		fputc(']', out);
		write_series_values(out, h, k);
		fputc('}', out);
	}
	fputc(']', out);
}

static void write_markers(FILE *out, const struct html *h)
{
	fputs(", \"phases\": [", out);
	for (int i = 0; i < h->n_phases; i++) {
		const struct phase_track *p = &h->phases[i];
		fputs(i ? ", {\"name\": " : "{\"name\": ", out);
		json_string(out, vrt_string(h->t, p->name));
		fputs(", \"intervals\": [", out);
		for (size_t k = 0; k < p->n; k++)
			fprintf(out, "%s[%.9g, %.9g, %u]", k ? ", " : "", p->iv[k].start, p->iv[k].end, p->iv[k].count);
		fputs("]}", out);
	}
	fputs("], \"marks\": [", out);
	bool first = true;
	for (int i = 0; i < h->n_marks; i++)
		for (size_t k = 0; k < h->marks[i].n; k++, first = false) {
			fprintf(out, "%s[%.9g, ", first ? "" : ", ", h->marks[i].at[k].start);
			json_string(out, vrt_string(h->t, h->marks[i].label));
			fprintf(out, ", %u]", h->marks[i].at[k].count);
		}
	fputs("], \"ooms\": [", out);
	for (int i = 0; i < h->n_ooms; i++) {
		const struct oom_event *e = &h->ooms[i];
		fprintf(out, "%s[%.9g, %llu, %d, ", i ? ", " : "", e->at, (unsigned long long)e->size, e->device);
		json_string(out, vrt_api_name(e->api));
		fputc(']', out);
	}
	fprintf(out, "], \"dropped\": {\"phases\": %llu, \"marks\": %llu, \"ooms\": %llu}",
		(unsigned long long)h->phases_dropped, (unsigned long long)h->marks_dropped,
		(unsigned long long)h->ooms_dropped);
}

/* The largest tensors' bands, by birth, each with its site in the page's table (added when new). */
static int band_sites(struct html *h)
{
	if (!h->allocator)
		return 0;
	vrt_bands_sort(&h->bands);
	h->band_site = calloc((size_t)h->bands.n + 1, sizeof(*h->band_site));
	if (!h->band_site)
		return VRT_E_NOMEM;
	for (int i = 0; i < h->bands.n; i++)
		if ((h->band_site[i] = site_of_stack(h, site_stack(h, h->bands.v[i].stack))) < 0)
			return VRT_E_NOMEM;
	return 0;
}

/* "allocator" (fragmentation.c) and "tensors": [born_s, died_s or null (lived to the end),
 * size, requested, site, device, seeded], both null without PyTorch blocks. */
static void write_allocator(FILE *out, const struct html *h)
{
	if (!h->allocator) {
		fputs(", \"allocator\": null, \"tensors\": null", out);
		return;
	}
	vrt_frag_json(&h->frag, out, h->cur_b + 1);
	fprintf(out, ", \"tensors\": {\"largest\": %d, \"bands\": [", TENSOR_BANDS);
	for (int i = 0; i < h->bands.n; i++) {
		const struct vrt_band *b = &h->bands.v[i];
		fprintf(out, "%s[%.9g, ", i ? ", " : "", b->born_s);
		if (b->died)
			fprintf(out, "%.9g", b->died_s);
		else
			fputs("null", out);
		fprintf(out, ", %llu, %llu, %d, %d, %s]", (unsigned long long)b->size, (unsigned long long)b->requested,
			h->band_site[i], b->device, b->seeded ? "true" : "false");
	}
	fputs("]}", out);
}

/* The whole data object, unescaped, into a memory buffer. */
static int build_data(struct html *h, char **data, size_t *len)
{
	char *notes_buf = NULL;
	size_t notes_len = 0;
	FILE *out = open_memstream(data, len), *notes = open_memstream(&notes_buf, &notes_len);
	if (!out || !notes) {
		if (out)
			fclose(out);
		if (notes)
			fclose(notes);
		return VRT_E_NOMEM;
	}
	fprintf(out, "{\"format\": 1, \"version\": \"%s\", \"generated_unix_s\": %lld, ",
#ifdef VRAMTRACE_VERSION
		VRAMTRACE_VERSION,
#else
		"0",
#endif
		(long long)time(NULL));
	write_process(out, h);
	fprintf(out, ", \"any_tensors\": %s, \"recounts\": %llu", h->end.any_blocks ? "true" : "false",
		(unsigned long long)h->resyncs);
	write_series(out, h);
	struct frame_table ft = { 0 };
	fputs(", \"sites\": [", out);
	for (int i = 0; i < h->n_sites; i++) {
		fputs(i ? ", " : "", out);
		write_site(out, h->t, h->sites[i].stack, &ft);
	}
	fputc(']', out);
	write_frames(out, &ft);
	for (size_t i = 0; i < ft.n; i++)
		free(ft.keys[i]);
	free(ft.keys);
	free(ft.index);
	write_markers(out, h);
	write_allocator(out, h);
	embed_leaks(out, h, notes);
	embed_oom(out, h, notes);
	fclose(notes);
	fprintf(out, ", \"notes\": [%s]}", notes_buf ? notes_buf : "");
	free(notes_buf);
	return fclose(out) ? VRT_E_NOMEM : 0;
}

/* ---- writing the page -------------------------------------------------------------------- */

/* JSON for inside <script>: '<', '>' and '&' only occur in strings there, as \u00XX. */
static void put_script_safe(FILE *out, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c == '<' || c == '>' || c == '&')
			fprintf(out, "\\u%04x", (unsigned char)c);
		else
			fputc(c, out);
	}
}

static void put_html_text(FILE *out, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '<': fputs("&lt;", out); break;
		case '>': fputs("&gt;", out); break;
		case '&': fputs("&amp;", out); break;
		case '"': fputs("&quot;", out); break;
		default: fputc(*s, out);
		}
	}
}

static void page_title(const struct html *h, char *buf, size_t len)
{
	const char *cmd = vrt_info(h->t, "cmdline");
	char who[64];
	vrt_process_label(h->t, who, sizeof(who));
	snprintf(buf, len, "vramtrace: %.160s (%s)", cmd && *cmd ? cmd : base_name(h->t->path), who);
}

/* The template with its two placeholders filled in. */
static void write_page(FILE *out, const struct html *h, const char *data, size_t data_len)
{
	char title[256];
	page_title(h, title, sizeof(title));
	const char *p = vrt_html_template;
	for (const char *at; (at = strchr(p, '@'));) {
		fwrite(p, 1, (size_t)(at - p), out);
		if (!strncmp(at, "@VRT_TITLE@", 11)) {
			put_html_text(out, title);
			p = at + 11;
		} else if (!strncmp(at, "@VRT_DATA@", 10)) {
			put_script_safe(out, data, data_len);
			p = at + 10;
		} else {
			fputc('@', out);
			p = at + 1;
		}
	}
	fputs(p, out);
}

/* ---- driver ------------------------------------------------------------------------------ */

static void html_free(struct html *h)
{
	if (h->keys)
		vrt_site_keys_free(h->keys);
	free(h->keys);
	vrt_oom_search_free(h->oom);
	vrt_leaks_feed_free(h->leaks);
	if (h->oom_out)
		fclose(h->oom_out);
	free(h->oom_json);
	for (int i = 0; i < h->n_series; i++) {
		struct series *s = &h->s[i];
		vrt_sites_free(&s->at_peak);
		vrt_sites_free(&s->live_end);
		free(s->top);
		free(s->top_rank);
		free(s->site_id);
		free(s->cur);
	}
	for (int i = 0; i < h->n_phases; i++)
		free(h->phases[i].iv);
	for (int i = 0; i < h->n_marks; i++)
		free(h->marks[i].at);
	free(h->sites);
	free(h->smax);
	vrt_sites_free(&h->site_map);
	free(h->bmax);
	free(h->vals);
	vrt_frag_free(&h->frag);
	vrt_bands_free(&h->bands);
	free(h->band_site);
	vrt_model_free(&h->end);
}

static int html_run(struct html *h, FILE *out)
{
	if (vrt_model_init(&h->end))
		return vrt_fail(VRT_E_NOMEM, "html");
	if ((h->keys = malloc(sizeof(*h->keys)))) /* NULL: sites by stack */
		vrt_site_keys_init(h->keys, h->t);
	h->oom = vrt_oom_search_new(0); /* NULL: the section is left out with a note */
	h->leaks = vrt_leaks_feed_new(h->t); /* NULL: likewise */
	int rc = pass_totals(h);
	if (rc)
		return rc;
	find_series(h);
	if ((rc = pass_peaks(h)))
		return rc;
	for (int i = 0; i < h->n_series; i++)
		if ((rc = choose_top(h, &h->s[i])))
			return vrt_fail(rc, "html");
	if ((rc = pass_buckets(h)))
		return rc;
	if ((rc = band_sites(h)))
		return vrt_fail(rc, "html");
	char *data = NULL;
	size_t len = 0;
	rc = build_data(h, &data, &len);
	if (rc) {
		free(data);
		return vrt_fail(rc, "html");
	}
	write_page(out, h, data, len);
	free(data);
	return 0;
}

/* Writes a new file beside PATH, renamed over it at the end (safe_output.c): an unwritable place
 * fails before the work, and a failure leaves any earlier report in place. */
static int html_to_file(struct html *h)
{
	struct vrt_safe_output out;
	int rc = vrt_safe_output_open(&out, h->o->out, h->t);
	if (rc)
		return rc;
	rc = html_run(h, out.f);
	if (rc)
		vrt_safe_output_abort(&out);
	else
		rc = vrt_safe_output_commit(&out);
	if (!rc && !h->o->quiet)
		fprintf(stderr, "vramtrace: wrote %s (%d series, %d sites, %d buckets)\n", h->o->out, h->n_series,
			h->n_sites, h->cur_b + 1);
	return rc;
}

int vrt_cmd_html(int argc, char **argv)
{
	struct html_options o = { .sites = 12, .buckets = 600 };
	const struct vrt_arg opts[] = {
		VRT_OPT_OUTPUT(&o.out), VRT_OPT_QUIET(&o.quiet), VRT_OPT_UNTIL_MARK,
		{ "--sites", NULL, VRT_ARG_INT, &o.sites, 1, MAX_SITES },
		{ "--buckets", NULL, VRT_ARG_INT, &o.buckets, 2, MAX_BUCKETS },
		VRT_OPT_END,
	};
	int n, rc = vrt_args_parse("html", argc, argv, opts, &o.trace, 1, &n);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!o.trace)
		return vrt_usage("html", "no trace file given");
	if (!o.out)
		return vrt_usage("html", "no output file given (-o REPORT.html)");
	char path[4096];
	struct vrt_trace t;
	rc = vrt_single_input("html", o.trace, NULL, NULL, path, sizeof(path));
	if (rc || (rc = vrt_open_or_fail(&t, o.trace = path)))
		return rc;
	vrt_warn_trace_state(&t, o.quiet);
	struct html *h = calloc(1, sizeof(*h));
	if (!h) {
		vrt_trace_close(&t);
		return vrt_fail(VRT_E_NOMEM, "html");
	}
	h->t = &t;
	h->o = &o;
	rc = strcmp(o.out, "-") ? html_to_file(h) : html_run(h, stdout); /* "-": main checks standard output */
	html_free(h);
	free(h);
	vrt_trace_close(&t);
	return rc;
}
