/* SPDX-License-Identifier: MIT */
/* vramtrace timeline: live bytes over time, per device and kind, as a chart or as CSV. */
#include <stdlib.h>
#include <string.h>

#include "charset.h"
#include "cli.h"
#include "model.h"
#include "pass.h"
#include "report_common.h"
#include "series.h"

struct timeline_options {
	bool csv, quiet;
	int buckets;
	double from, to;
	const char *path;
};

#define MAX_MARKS 256

struct marks {
	double at[MAX_MARKS];
	char kind[MAX_MARKS]; /* 'm' mark, '[' phase entry */
	int n;
};

/* The chart's columns: --width or the terminal's (vrt_text_width), 100 in a pipe or a file;
 * 40 at least, the labels take 24. */
static int chart_width(void)
{
	int width = vrt_text_width();
	return !width ? 100 : width < 40 ? 40 : width;
}

static int fill(struct vrt_trace *t, const struct timeline_options *o, struct vrt_series *s, struct marks *mk)
{
	struct vrt_model m;
	if (vrt_model_init(&m))
		return VRT_EXIT_INTERNAL;
	struct vrt_pass p;
	struct vrt_record r;
	struct vrt_effect e;
	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .label = "timeline", .quiet = o->quiet, .model = &m });
	while (vrt_pass_next(&p, &r, &e)) {
		/* Checkpoint items carry their birth times; the model's clock is the last event's. */
		double now = vrt_ts_seconds(t, m.last_ts);
		if (e.kind != VRT_EFFECT_NONE)
			vrt_series_sample(s, &m, now);
		if ((r.op == VRT_OP_MARK || r.op == VRT_OP_PHASE_ENTER) && mk->n < MAX_MARKS && now >= o->from &&
		    now <= o->to) {
			mk->at[mk->n] = now;
			mk->kind[mk->n++] = r.op == VRT_OP_MARK ? 'm' : '[';
		}
	}
	int rc = vrt_pass_close(&p);
	vrt_model_free(&m);
	vrt_series_finish(s);
	return rc;
}

static void print_csv(const struct vrt_series *s)
{
	char name[64];
	printf("time_s");
	for (int i = 0; i < s->n_series; i++) {
		vrt_series_name(&s->keys[i], name, sizeof(name));
		printf(",%s", name);
	}
	putchar('\n');
	for (int b = 0; b < s->used; b++) {
		printf("%.6f", s->from + (b + 1) * s->width);
		for (int i = 0; i < s->n_series; i++)
			printf(",%lld", (long long)s->max[b * VRT_SERIES_MAX + i]);
		putchar('\n');
	}
}

/* Resamples buckets [start, used) to `cols` columns, keeping each column's maximum. */
static void columns(const struct vrt_series *s, int start, int series, int cols, int64_t *out)
{
	int n = s->used - start;
	for (int c = 0; c < cols; c++) {
		int b0 = start + c * n / cols, b1 = start + (c + 1) * n / cols;
		if (b1 <= b0)
			b1 = b0 + 1;
		int64_t v = 0;
		for (int b = b0; b < b1 && b < s->used; b++)
			if (s->max[b * VRT_SERIES_MAX + series] > v)
				v = s->max[b * VRT_SERIES_MAX + series];
		out[c] = v;
	}
}

/* The first bucket with memory live or a mark in it: the time before the first allocation
 * (a Python job's imports) is left out of the chart unless --from asked for it. */
static int first_busy_bucket(const struct vrt_series *s, const struct marks *mk)
{
	int first = s->used;
	for (int b = 0; b < s->used && b < first; b++)
		for (int i = 0; i < s->n_series; i++)
			if (s->max[b * VRT_SERIES_MAX + i] > 0) {
				first = b;
				break;
			}
	for (int i = 0; i < mk->n; i++) {
		int b = s->width > 0 ? (int)((mk->at[i] - s->from) / s->width) : 0;
		if (b >= 0 && b < first)
			first = b;
	}
	return first < s->used ? first : 0;
}

static void print_chart(const struct vrt_trace *t, const struct vrt_series *s, const struct marks *mk, int width,
			bool from_given)
{
	static const char *const blocks[] = { " ", "\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587",
					      "\u2588" };
	static const char *const ascii[] = { " ", "_", ".", "-", "~", "=", "+", "*", "#" }; /* charset.h */
	const char *const *levels = vrt_charset_utf8() ? blocks : ascii;
	int start = from_given ? 0 : first_busy_bucket(s, mk);
	int cols = width - 24;
	if (cols < 10)
		cols = 10;
	if (cols > s->used - start && s->used - start > 0)
		cols = s->used - start;
	double from = s->from + start * s->width, span = (s->used - start) * s->width;
	printf("vramtrace timeline: %s, %.3f s from %.3f s, %d columns of %.3f s (each shows its highest value)\n\n",
	       vrt_escape(t->path), span, from, cols, cols ? span / cols : 0);
	int64_t *v = calloc((size_t)cols, sizeof(int64_t));
	if (!v)
		return;
	char name[64];
	for (int i = 0; i < s->n_series; i++) {
		columns(s, start, i, cols, v);
		int64_t top = 0;
		for (int c = 0; c < cols; c++)
			top = v[c] > top ? v[c] : top;
		vrt_series_name(&s->keys[i], name, sizeof(name));
		printf("%-22s ", name);
		for (int c = 0; c < cols; c++)
			fputs(levels[top ? (int)((v[c] * 8 + top - 1) / top) : 0], stdout);
		printf("\n%-22s peak %s\n", "", vrt_bytes(top));
	}
	if (mk->n) {
		char *row = malloc((size_t)cols + 1);
		if (row) {
			memset(row, ' ', (size_t)cols);
			row[cols] = 0;
			for (int i = 0; i < mk->n; i++) {
				int c = span > 0 ? (int)((mk->at[i] - from) / span * cols) : 0;
				if (c >= 0 && c < cols)
					row[c] = row[c] == ' ' || row[c] == mk->kind[i] ? mk->kind[i] : '*';
			}
			printf("%-22s %s\n", "phases [ / marks m", row);
			free(row);
		}
	}
	char left[32];
	int n = snprintf(left, sizeof(left), "%.3f s", from);
	printf("%-22s %s%*s%.3f s\n", "", left, cols - n - 12 > 0 ? cols - n - 12 : 1, "", from + span);
	free(v);
}

int vrt_cmd_timeline(int argc, char **argv)
{
	struct timeline_options o = { .from = 0, .to = 1e308 };
	const struct vrt_arg opts[] = {
		VRT_OPT_QUIET(&o.quiet), VRT_OPT_UNTIL_MARK, VRT_OPT_WIDTH,
		{ "--csv", NULL, VRT_ARG_FLAG, &o.csv },
		{ "--buckets", NULL, VRT_ARG_INT, &o.buckets, 1, 1000000 },
		{ "--from", NULL, VRT_ARG_SECONDS, &o.from },
		{ "--to", NULL, VRT_ARG_SECONDS, &o.to },
		VRT_OPT_END,
	};
	int n, rc = vrt_args_parse("timeline", argc, argv, opts, &o.path, 1, &n);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!o.path)
		return vrt_usage("timeline", "no trace file given");
	if (o.to <= o.from)
		return vrt_usage("timeline", "--from must be below --to");
	int width = chart_width();
	if (!o.buckets) /* text: finer than the columns, so that the part left out before the first
			 * allocation does not take the chart's resolution with it */
		o.buckets = o.csv ? 100 : width * 16 < 4096 ? width * 16 : 4096;
	char path[4096];
	struct vrt_trace t;
	rc = vrt_single_input("timeline", o.path, NULL, NULL, path, sizeof(path));
	if (rc || (rc = vrt_open_or_fail(&t, o.path = path)))
		return rc;
	vrt_warn_trace_state(&t, o.quiet);
	double end = vrt_trace_end_s(&t);
	if (end && o.from > end && !o.quiet) /* what it ended holding, flat: a mistyped time, likely */
		fprintf(stderr, "vramtrace timeline: %s: --from %.3f s is after the trace's end (%.3f s): the chart holds "
			"what it held at its end\n", vrt_escape(o.path), o.from, end);
	/* before a --until-mark the trace's end is that mark, found on the way: the series widens */
	double to = o.to < 1e300 ? o.to : end > o.from && !t.end_mark ? end : 1e308;
	struct vrt_series s;
	struct marks mk = { .n = 0 };
	rc = vrt_series_init(&s, o.buckets, o.from, to);
	if (rc)
		rc = vrt_fail(rc, "timeline");
	else
		rc = fill(&t, &o, &s, &mk);
	if (!rc && o.csv)
		print_csv(&s);
	else if (!rc)
		print_chart(&t, &s, &mk, width, o.from > 0);
	vrt_series_free(&s);
	vrt_trace_close(&t);
	return rc;
}
