/* SPDX-License-Identifier: MIT */
/*
 * vramtrace diff: bytes live by site in two traces, or at two times of one trace. Sites of two
 * traces are matched by what their frames say (functions, files, lines, libraries), not by ids
 * or addresses, which differ from run to run.
 */
#include <stdlib.h>
#include <string.h>

#include "category_diff.h"
#include "cli.h"
#include "json.h"
#include "model.h"
#include "pass.h"
#include "report_common.h"
#include "sites.h"
#include "stacks.h"

struct side {
	const char *path;
	double at; /* seconds, or < 0 for the end */
	struct vrt_trace trace;
	struct vrt_sites sites;
};

struct row {
	char *key;
	int64_t a, b;
	uint32_t stack_a, stack_b;
	const char *label;
};

static char *site_key(const struct vrt_trace *t, const struct vrt_site *s)
{
	if (s->label)
		return strdup(s->label);
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = vrt_stack_frames(t, s->stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
	size_t cap = 256, len = 0;
	char *key = malloc(cap);
	if (!key)
		return NULL;
	key[0] = 0;
	for (int i = 0; i < n; i++) {
		const struct vrt_frame *f = &frames[i];
		const char *mod = strrchr(f->module, '/');
		for (;;) { /* C++ names run to kilobytes: print in place, grow and print again if cut */
			size_t room = cap - len;
			int m = f->type == VRT_FT_PYTHON
					? snprintf(key + len, room, "%s@%s:%d|", f->function, f->file, f->line)
					: snprintf(key + len, room, "%s@%s|", f->function, mod ? mod + 1 : f->module);
			if (m >= 0 && (size_t)m < room) {
				len += (size_t)m;
				break;
			}
			char *nk = m < 0 ? NULL : realloc(key, cap = (len + (size_t)m + 1) * 2);
			if (!nk) {
				free(key);
				return NULL;
			}
			key = nk;
		}
	}
	return key;
}

static int load_side(struct side *s, bool quiet)
{
	int rc = vrt_open_or_fail(&s->trace, s->path);
	if (rc)
		return rc;
	vrt_warn_trace_state(&s->trace, quiet);
	if (s->at >= 0)
		vrt_clamp_time_to_trace(&s->trace, s->path, "diff", "--at", &s->at, quiet);
	struct vrt_model m;
	if (vrt_model_init(&m))
		return VRT_EXIT_INTERNAL;
	struct vrt_pass p;
	struct vrt_record r;
	vrt_pass_open(&p, &s->trace, &(struct vrt_pass_options){ .label = "diff", .quiet = quiet, .model = &m,
								 .until_time = s->at >= 0, .until_s = s->at });
	while (vrt_pass_next(&p, &r, NULL))
		;
	rc = vrt_pass_close(&p);
	vrt_sites_init(&s->sites);
	vrt_report_group_live(&s->trace, &m, &s->sites, -2, m.any_blocks ? -1 : -2);
	vrt_model_free(&m);
	return rc;
}

static int cmp_rows(const void *x, const void *y)
{
	const struct row *a = x, *b = y;
	int64_t da = llabs(a->b - a->a), db = llabs(b->b - b->a);
	return da > db ? -1 : da < db ? 1 : strcmp(a->key, b->key);
}

/* The row for key, added when new: an open-addressing index of row numbers (+1), so that two
 * traces of tens of thousands of sites match in linear time (keys are kilobytes long and share
 * their allocator frames). Takes key; NULL when out of memory. */
static struct row *row_of(struct row *rows, size_t *n, uint32_t *index, size_t index_cap, char *key)
{
	uint64_t h = vrt_hash_string(key);
	for (size_t i = (size_t)h & (index_cap - 1);; i = (i + 1) & (index_cap - 1)) {
		if (!index[i]) {
			index[i] = (uint32_t)++*n;
			rows[*n - 1] = (struct row){ .key = key };
			return &rows[*n - 1];
		}
		struct row *r = &rows[index[i] - 1];
		if (!strcmp(r->key, key)) {
			free(key);
			return r;
		}
	}
}

static size_t build_rows(struct side *sa, struct side *sb, struct row **out)
{
	size_t cap = sa->sites.n + sb->sites.n + 1, n = 0, index_cap = 16;
	while (index_cap < cap * 2)
		index_cap *= 2;
	struct row *rows = calloc(cap, sizeof(*rows));
	uint32_t *index = calloc(index_cap, sizeof(*index));
	if (!rows || !index || cap > UINT32_MAX) {
		free(rows);
		free(index);
		*out = NULL;
		return 0;
	}
	for (int side = 0; side < 2; side++) {
		struct side *s = side ? sb : sa;
		for (size_t i = 0; i < s->sites.n; i++) {
			char *key = site_key(&s->trace, &s->sites.v[i]);
			if (!key)
				continue;
			struct row *r = row_of(rows, &n, index, index_cap, key);
			r->label = s->sites.v[i].label;
			*(side ? &r->b : &r->a) += s->sites.v[i].bytes;
			*(side ? &r->stack_b : &r->stack_a) = s->sites.v[i].stack;
		}
	}
	free(index);
	if (n)
		qsort(rows, n, sizeof(*rows), cmp_rows);
	*out = rows;
	return n;
}

static void print_row(struct side *sa, struct side *sb, const struct row *r, bool json, bool first)
{
	const struct vrt_trace *t = r->stack_b ? &sb->trace : &sa->trace;
	struct vrt_site s = { .stack = r->stack_b ? r->stack_b : r->stack_a, .label = r->label, .bytes = r->b - r->a, .count = 1 };
	if (json) {
		printf("%s{\"bytes_a\": %lld, \"bytes_b\": %lld, \"delta\": %lld, \"site\": ", first ? "" : ", ",
		       (long long)r->a, (long long)r->b, (long long)(r->b - r->a));
		vrt_site_json(stdout, t, &s, false);
		putchar('}');
		return;
	}
	struct vrt_frame head;
	char line[1024];
	if (r->label)
		snprintf(line, sizeof(line), "%s", r->label);
	else {
		vrt_stack_headline(t, s.stack, &head);
		vrt_frame_fit(&head, line, sizeof(line), vrt_room(vrt_text_width(), 39));
	}
	char delta[40];
	snprintf(delta, sizeof(delta), "%s%s", r->b >= r->a ? "+" : "", vrt_bytes(r->b - r->a));
	printf("  %11s %10s -> %-10s %s\n", delta, vrt_bytes(r->a), vrt_bytes(r->b), line);
}

int vrt_cmd_diff(int argc, char **argv)
{
	struct side a = { .at = -1, .trace.fd = -1 }, b = { .at = -1, .trace.fd = -1 };
	bool json = false, quiet = false, by_category = false;
	int top = 10, n_at = 0, n_traces, rc;
	double at[2] = { -1, -1 };
	const char *by = "site", *traces[2] = { NULL, NULL };
	const struct vrt_arg opts[] = {
		VRT_OPT_JSON(&json), VRT_OPT_QUIET(&quiet), VRT_OPT_TOP(&top), VRT_OPT_UNTIL_MARK, VRT_OPT_WIDTH,
		{ "--at", NULL, VRT_ARG_SECONDS, at, 0, 0, &n_at, 2 },
		{ "--by", NULL, VRT_ARG_TEXT, &by },
		VRT_OPT_END,
	};
	if ((rc = vrt_args_parse("diff", argc, argv, opts, traces, 2, &n_traces)))
		return rc < 0 ? 0 : rc;
	if (strcmp(by, "site") && strcmp(by, "category"))
		return vrt_usage("diff", "--by takes site or category, not '%s'", vrt_escape(by));
	by_category = !strcmp(by, "category");
	a.path = traces[0];
	b.path = traces[1];
	if (!a.path || (!b.path && n_at != 2))
		return vrt_usage("diff", "give two traces, or one trace and --at twice");
	if (!b.path)
		b.path = a.path;
	a.at = at[0];
	b.at = b.path == a.path ? at[1] : n_at ? at[1] : -1;
	char path_a[4096], path_b[4096];
	bool same = b.path == a.path;
	rc = vrt_single_input("diff", a.path, NULL, NULL, path_a, sizeof(path_a));
	if (!rc && !same)
		rc = vrt_single_input("diff", b.path, NULL, NULL, path_b, sizeof(path_b));
	if (!rc) {
		a.path = path_a;
		b.path = same ? path_a : path_b;
		if (by_category)
			return vrt_category_diff(a.path, a.at, b.path, b.at, json, quiet);
		rc = load_side(&a, quiet);
	}
	if (!rc)
		rc = load_side(&b, quiet);
	if (!rc) {
		struct row *rows = NULL;
		size_t n = build_rows(&a, &b, &rows);
		if (json) {
			printf("{\"a\": ");
			json_string(stdout, a.path);
			printf(", \"b\": ");
			json_string(stdout, b.path);
			printf(", \"total_a\": %lld, \"total_b\": %lld, \"completeness_a\": {",
			       (long long)vrt_sites_total(&a.sites), (long long)vrt_sites_total(&b.sites));
			vrt_json_completeness(stdout, &a.trace, -1);
			printf("}, \"completeness_b\": {");
			vrt_json_completeness(stdout, &b.trace, -1);
			printf("}, \"truncated\": %s, \"sites\": [",
			       vrt_trace_cut(&a.trace) || vrt_trace_cut(&b.trace) ? "true" : "false");
		}
		else {
			char when_a[48] = "", when_b[48] = "";
			if (a.at >= 0)
				snprintf(when_a, sizeof(when_a), " (at %.3f s)", a.at);
			if (b.at >= 0)
				snprintf(when_b, sizeof(when_b), " (at %.3f s)", b.at);
			printf("vramtrace diff: %s%s -> %s%s\n  total %s -> %s\n\n", vrt_escape(a.path), when_a, vrt_escape(b.path), when_b,
			       vrt_bytes(vrt_sites_total(&a.sites)), vrt_bytes(vrt_sites_total(&b.sites)));
		}
		for (size_t i = 0, shown = 0; i < n && shown < (size_t)top; i++) {
			if (rows[i].a == rows[i].b)
				continue;
			print_row(&a, &b, &rows[i], json, shown == 0);
			shown++;
		}
		if (json)
			printf("]}\n");
		for (size_t i = 0; i < n; i++)
			free(rows[i].key);
		free(rows);
	}
	vrt_sites_free(&a.sites);
	vrt_sites_free(&b.sites);
	if (a.trace.fd >= 0)
		vrt_trace_close(&a.trace);
	if (b.trace.fd >= 0)
		vrt_trace_close(&b.trace);
	return rc;
}
