/* SPDX-License-Identifier: MIT */
#include "category_diff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "categories.h"
#include "cli.h"
#include "json.h"
#include "model.h"
#include "owners.h"
#include "pass.h"
#include "report_common.h"
#include "vramtrace/error.h"

enum moment { AT_OOM, AT_PEAK, AT_TIME };

struct side {
	const char *path;
	double at;
	struct vrt_trace t;
	bool open;
	enum moment moment;
	uint64_t event;         /* records applied at the moment */
	int slot;
	double time_s;
	struct vrt_category cats[VRT_MAX_CATEGORIES];
	int n_cats;
	int64_t live;
	bool walked;
};

/* The moment: the last PyTorch out-of-memory error, else the peak of tensors (of device memory
 * without tensor events), on the device it happened on. */
static int find_moment(struct side *s, bool quiet)
{
	struct vrt_model m;
	int rc = vrt_model_init(&m);
	if (rc)
		return rc;
	struct vrt_pass p;
	struct vrt_record r;
	uint64_t oom_event = 0;
	int oom_slot = -1;
	double oom_s = 0;
	vrt_pass_open(&p, &s->t, &(struct vrt_pass_options){ .label = "diff", .quiet = quiet, .model = &m });
	while (vrt_pass_next(&p, &r, NULL)) {
		if (r.op == VRT_OP_OOM && r.api == VRT_API_TORCH_OOM) {
			oom_event = m.set.events - 1; /* the state just before it */
			oom_slot = vrt_device_slot(r.device);
			oom_s = vrt_ts_seconds(&s->t, r.ts);
		}
	}
	if (oom_slot >= 0) {
		s->moment = AT_OOM;
		s->event = oom_event;
		s->slot = oom_slot;
		s->time_s = oom_s;
	} else {
		int best = 0;
		int64_t peak = -1;
		for (int d = 0; d < VRT_MAX_DEVICES; d++) {
			int64_t p = m.any_blocks ? m.tensor_peak[d] : m.peak[d][VRT_KIND_DEVICE];
			if (p > peak) {
				peak = p;
				best = d;
			}
		}
		s->moment = AT_PEAK;
		s->slot = best;
		s->event = m.any_blocks ? m.tensor_peak_event[best] : m.peak_event[best][VRT_KIND_DEVICE];
		s->time_s = vrt_ts_seconds(&s->t, m.any_blocks ? m.tensor_peak_ts[best] : m.peak_ts[best][VRT_KIND_DEVICE]);
	}
	rc = vrt_pass_finish(&p);
	vrt_model_free(&m);
	return rc;
}

/* Replays to the moment and sorts what was live there into categories; at an OOM with the
 * retention walk PyTorch's observer ran right after it, by identity. */
static int categorize_at(struct side *s, bool quiet)
{
	struct vrt_model m;
	struct vrt_owners owners;
	int rc = vrt_model_init(&m);
	if (rc)
		return rc;
	vrt_owners_init(&owners);
	struct vrt_pass p; /* the model follows only up to the moment: it is applied here */
	struct vrt_record r;
	bool past = false, oom_seen = false;
	vrt_pass_open(&p, &s->t, &(struct vrt_pass_options){ .label = "diff", .quiet = quiet });
	while (vrt_pass_next(&p, &r, NULL)) {
		bool event = r.op < VRT_OP_CP_BEGIN;
		if (!past) {
			if (s->moment == AT_TIME)
				past = event && vrt_ts_seconds(&s->t, r.ts) > s->at;
			else
				past = event && m.set.events >= s->event;
			if (!past) {
				vrt_model_apply(&m, &r, NULL);
				continue;
			}
			if (s->moment != AT_OOM)
				break;
		}
		/* after the OOM, the walk its observer ran, up to the next failure */
		if (r.op == VRT_OP_OOM && r.api == VRT_API_TORCH_OOM) {
			if (oom_seen)
				break;
			oom_seen = true;
		}
		if (vrt_owners_apply(&owners, &r) && owners.last.reason == VRT_WALK_OOM) {
			s->walked = true;
			break;
		}
	}
	if (s->moment == AT_TIME)
		s->time_s = s->at;
	int slot = s->moment == AT_TIME ? -1 : s->slot;
	if (slot < 0) { /* at a time: the device holding the most */
		int64_t most = -1;
		for (int d = 0; d < VRT_MAX_DEVICES; d++)
			if (m.live[d][VRT_KIND_DEVICE] > most) {
				most = m.live[d][VRT_KIND_DEVICE];
				slot = d;
			}
	}
	s->slot = slot;
	s->live = m.live[slot][VRT_KIND_DEVICE] + m.live[slot][VRT_KIND_MANAGED];
	vrt_categorize(&s->t, &m, s->walked ? &owners.last : NULL, slot, m.any_blocks, false, s->cats, &s->n_cats, NULL);
	rc = vrt_pass_finish(&p);
	rc = rc ? rc : m.set.error;
	vrt_owners_free(&owners);
	vrt_model_free(&m);
	return rc;
}

static int load(struct side *s, bool quiet)
{
	int rc = vrt_open_or_fail(&s->t, s->path);
	if (rc)
		return rc;
	s->open = true;
	vrt_warn_trace_state(&s->t, quiet);
	if (s->at >= 0) {
		vrt_clamp_time_to_trace(&s->t, s->path, "diff", "--at", &s->at, quiet);
		s->moment = AT_TIME;
	} else if ((rc = find_moment(s, quiet))) {
		return vrt_fail(rc, "%s", s->path);
	}
	rc = categorize_at(s, quiet);
	return rc ? vrt_fail(rc, "%s", s->path) : 0;
}

static const struct vrt_category *find(const struct side *s, const char *name)
{
	for (int i = 0; i < s->n_cats; i++)
		if (!strcmp(s->cats[i].name, name))
			return &s->cats[i];
	return NULL;
}

struct row {
	const char *name;
	int64_t a, b;
	const struct vrt_category *ca, *cb;
};

static int cmp_rows(const void *x, const void *y)
{
	const struct row *p = x, *q = y;
	int64_t dp = llabs(p->b - p->a), dq = llabs(q->b - q->a);
	return dp > dq ? -1 : dp < dq ? 1 : strcmp(p->name, q->name);
}

static int build_rows(const struct side *a, const struct side *b, struct row *rows)
{
	int n = 0;
	for (int k = 0; k < 2; k++) {
		const struct side *s = k ? b : a;
		for (int i = 0; i < s->n_cats; i++) {
			int j = 0;
			while (j < n && strcmp(rows[j].name, s->cats[i].name))
				j++;
			if (j == n && n < 2 * VRT_MAX_CATEGORIES)
				rows[n++] = (struct row){ .name = s->cats[i].name };
		}
	}
	for (int j = 0; j < n; j++) {
		rows[j].ca = find(a, rows[j].name);
		rows[j].cb = find(b, rows[j].name);
		rows[j].a = rows[j].ca ? rows[j].ca->bytes : 0;
		rows[j].b = rows[j].cb ? rows[j].cb->bytes : 0;
	}
	qsort(rows, (size_t)n, sizeof(*rows), cmp_rows);
	return n;
}

static const char *moment_text(const struct side *s)
{
	return s->moment == AT_OOM ? "its out-of-memory error" : s->moment == AT_PEAK ? "its peak" : "the time given";
}

static const char *moment_key(const struct side *s)
{
	return s->moment == AT_OOM ? "oom" : s->moment == AT_PEAK ? "peak" : "time";
}

static const char *how(const struct vrt_category *c)
{
	if (!c)
		return "";
	return c->identity && 2 * c->identity >= c->bytes ? "identity" : "rule";
}

static void print_text(const struct side *a, const struct side *b, const struct row *rows, int n)
{
	printf("vramtrace diff by category: %s (at %s, %.3f s) -> %s (at %s, %.3f s)\n\n", vrt_escape(a->path), moment_text(a),
	       a->time_s, vrt_escape(b->path), moment_text(b), b->time_s);
	printf("  %-18s %12s %12s %12s  %s\n", "category", "A", "B", "change", "decided by (A, B)");
	for (int i = 0; i < n; i++) {
		char delta[40];
		snprintf(delta, sizeof(delta), "%s%s", rows[i].b >= rows[i].a ? "+" : "", vrt_bytes(rows[i].b - rows[i].a));
		printf("  %-18s %12s %12s %12s  %s%s%s\n", rows[i].name, vrt_bytes(rows[i].a), vrt_bytes(rows[i].b), delta,
		       how(rows[i].ca), rows[i].ca && rows[i].cb ? ", " : "", how(rows[i].cb));
	}
	char total[40];
	snprintf(total, sizeof(total), "%s%s", b->live >= a->live ? "+" : "", vrt_bytes(b->live - a->live));
	printf("  %-18s %12s %12s %12s\n", "live on the device", vrt_bytes(a->live), vrt_bytes(b->live), total);
	if (!n)
		return;
	int64_t rest = 0;
	for (int i = 1; i < n; i++)
		rest = llabs(rows[i].b - rows[i].a) > rest ? llabs(rows[i].b - rows[i].a) : rest;
	printf("\n%s %s %s", rows[0].name, rows[0].b >= rows[0].a ? "grows by" : "shrinks by", vrt_bytes(llabs(rows[0].b - rows[0].a)));
	if (rows[0].a)
		printf(" (x%.2f)", (double)rows[0].b / (double)rows[0].a);
	if (n > 1)
		printf("; every other category changes by at most %s", vrt_bytes(rest));
	printf(".\n");
}

static void json_side(const struct side *s)
{
	printf("{\"file\": ");
	json_string(stdout, s->path);
	printf(", \"at\": \"%s\", \"time_s\": %.6f, \"device\": %d, \"live_bytes\": %lld, \"retention_walk\": %s}",
	       moment_key(s), s->time_s, s->slot == VRT_HOST_SLOT ? -1 : s->slot, (long long)s->live,
	       s->walked ? "true" : "false");
}

static void print_json(const struct side *a, const struct side *b, const struct row *rows, int n)
{
	printf("{\"by\": \"category\", \"a\": ");
	json_side(a);
	printf(", \"b\": ");
	json_side(b);
	printf(", \"categories\": [");
	for (int i = 0; i < n; i++) {
		printf("%s{\"name\": ", i ? ", " : "");
		json_string(stdout, rows[i].name);
		printf(", \"bytes_a\": %lld, \"bytes_b\": %lld, \"delta\": %lld, \"decided_by_a\": \"%s\", "
		       "\"decided_by_b\": \"%s\"}",
		       (long long)rows[i].a, (long long)rows[i].b, (long long)(rows[i].b - rows[i].a), how(rows[i].ca),
		       how(rows[i].cb));
	}
	printf("]}\n");
}

int vrt_category_diff(const char *path_a, double at_a, const char *path_b, double at_b, bool json, bool quiet)
{
	struct side *s = calloc(2, sizeof(*s));
	if (!s)
		return vrt_fail(VRT_E_NOMEM, "diff");
	s[0].path = path_a;
	s[0].at = at_a;
	s[1].path = path_b;
	s[1].at = at_b;
	int rc = load(&s[0], quiet);
	if (!rc)
		rc = load(&s[1], quiet);
	if (!rc) {
		struct row rows[2 * VRT_MAX_CATEGORIES];
		int n = build_rows(&s[0], &s[1], rows);
		if (json)
			print_json(&s[0], &s[1], rows, n);
		else
			print_text(&s[0], &s[1], rows, n);
	}
	for (int k = 0; k < 2; k++)
		if (s[k].open)
			vrt_trace_close(&s[k].t);
	free(s);
	return rc;
}
