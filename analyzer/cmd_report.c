/* SPDX-License-Identifier: MIT */
/*
 * vramtrace report: per device and kind, the peak and when it happened, what is live at the end,
 * and the top sites live at the end and at the peak. With tensor events, sites are tensors and
 * the caching allocator's unused reserve is its own line.
 */
#include <stdlib.h>
#include <string.h>

#include "categories.h"
#include "cli.h"
#include "json.h"
#include "model.h"
#include "owners.h"
#include "peak_sites.h"
#include "report_common.h"
#include "sites.h"
#include "stacks.h"

struct report_options {
	bool json, quiet;
	int top, frames;
};

struct peak_target {
	int slot, kind;  /* kind -1: the tensor layer */
	struct vrt_sites sites;
	bool taken;
};

struct report {
	struct vrt_trace *t;
	struct vrt_model end;
	struct vrt_sites live_at_end;
	struct peak_target peaks[VRT_MAX_DEVICES + 1][VRT_KIND_LAST + 1];
	int64_t torch_segments[VRT_MAX_DEVICES + 1][VRT_KIND_LAST];
	int n_peaks;
	double seconds;
	double teardown_s;          /* where "the end" was measured, when the trace says teardown began */
	struct vrt_owners owners;   /* the retention walks, for what is live at the end */
	struct vrt_category cats[VRT_MAX_DEVICES + 1][VRT_MAX_CATEGORIES]; /* what is live at the end */
	int n_cats[VRT_MAX_DEVICES + 1];
	struct vrt_roots roots[VRT_MAX_DEVICES]; /* with a walk: what holds each device's memory at the end */
	uint64_t lost; /* events lost while recording: the state block's count, or the LOST records' */
	uint64_t ooms; /* out-of-memory records up to the end */
};

static void collect_peaks(struct report *r)
{
	struct vrt_model *m = &r->end;
	for (int d = 0; d <= VRT_MAX_DEVICES; d++)
		for (int k = 0; k <= VRT_KIND_LAST; k++) {
			struct peak_target *p = &r->peaks[d][k];
			bool tensor = k == VRT_KIND_LAST;
			int64_t peak = tensor ? m->tensor_peak[d] : m->peak[d][k];
			*p = (struct peak_target){ d, tensor ? -1 : k };
			vrt_sites_init(&p->sites);
			if (peak > 0)
				r->n_peaks++;
			else
				p->taken = true;
		}
}

/* The sites at each peak, as followed through the pass (peak_sites.h). */
static int take_peaks(struct report *r, const struct vrt_peak_sites *ps)
{
	for (int d = 0; d <= VRT_MAX_DEVICES; d++)
		for (int k = 0; k <= VRT_KIND_LAST; k++) {
			struct peak_target *p = &r->peaks[d][k];
			if (p->taken)
				continue;
			int rc = vrt_peak_sites_take(ps, p->slot, p->kind, &p->sites);
			if (rc)
				return vrt_fail(rc, "report");
			p->taken = true;
		}
	return 0;
}

/* For the text, read as lines: stacks that print alike are one site (sites.h); --json keeps each
 * stack. Short of memory, a list stays by stack. */
static void fold_printed(struct report *r)
{
	(void)vrt_sites_fold_printed(r->t, &r->live_at_end);
	for (int d = 0; d <= VRT_MAX_DEVICES; d++)
		for (int k = 0; k <= VRT_KIND_LAST; k++)
			(void)vrt_sites_fold_printed(r->t, &r->peaks[d][k].sites);
}

/* What is live at the end, by what it is, per device: the last retention walk decides what it
 * found, the stacks' rules the rest. Computed while the end's live set is in memory. */
static void categorize_end(struct report *r)
{
	vrt_categorize_slots(r->t, &r->end, r->owners.walks ? &r->owners.last : NULL, r->cats, r->n_cats, r->roots);
	for (int d = 0; d < VRT_MAX_DEVICES; d++)
		vrt_roots_sort(&r->roots[d]);
}

static void print_categories(const struct report *r)
{
	for (int d = 0; d <= VRT_MAX_DEVICES; d++) {
		const struct vrt_category *cats = r->cats[d];
		if (!r->n_cats[d])
			continue;
		printf("\nlive at the end on %s, by what it is (the last retention walk at %.3f s, else the stacks' rules):\n",
		       d == VRT_HOST_SLOT ? "the host (pinned)" : vrt_device_name(d), vrt_ts_seconds(r->t, r->owners.last.ts));
		for (int i = 0; i < r->n_cats[d]; i++)
			printf("  %-16s %10s   %s\n", cats[i].name, vrt_bytes(cats[i].bytes),
			       cats[i].identity == cats[i].bytes ? "by identity"
			       : cats[i].identity                ? "partly by identity"
								 : "by rule");
		if (d < VRT_MAX_DEVICES)
			vrt_roots_print(stdout, &r->roots[d], "kept alive by (what that walk found holding it):\n");
	}
}

static void json_categories_at_end(const struct report *r)
{
	printf(", \"categories_at_end\": [");
	bool first = true;
	for (int d = 0; d <= VRT_MAX_DEVICES; d++)
		for (int i = 0; i < r->n_cats[d]; i++) {
			const struct vrt_category *c = &r->cats[d][i];
			printf("%s{\"device\": %d, \"name\": ", first ? "" : ", ", d == VRT_HOST_SLOT ? -1 : d);
			json_string(stdout, c->name);
			printf(", \"bytes\": %lld, \"identity_bytes\": %lld, \"decided_by\": \"%s\"}", (long long)c->bytes,
			       (long long)c->identity, 2 * c->identity >= c->bytes ? "identity" : "rule");
			first = false;
		}
	printf("], \"kept_alive_at_end\": [");
	bool first_root = true;
	for (int d = 0; d < VRT_MAX_DEVICES; d++) {
		int64_t held = 0;
		for (int k = 0; k < VRT_HELD_KINDS; k++)
			held += r->roots[d].by_status[k];
		if (!held)
			continue;
		printf("%s{\"device\": %d", first_root ? "" : ", ", d);
		vrt_roots_json(stdout, &r->roots[d]);
		printf("}");
		first_root = false;
	}
	printf("], \"teardown_s\": ");
	if (r->teardown_s)
		printf("%.6f", r->teardown_s);
	else
		fputs("null", stdout);
}

/* What an attach could not attribute (its seed's one frame, preload/attach.c) is no site: say
 * what it is, once, under the list. */
static void explain_before_attach(const struct vrt_trace *t, const struct vrt_sites *shown, int top)
{
	for (size_t i = 0; i < shown->n && i < (size_t)top; i++)
		if (!shown->v[i].label && vrt_stack_mentions(t, shown->v[i].stack, "[allocated before attach, unattributed]")) {
			printf("  (allocated before attach, unattributed: device memory in use at the attach that PyTorch's "
			       "allocator did not hold - the CUDA context, library workspaces and handles such as cuBLAS's "
			       "and NCCL's, cudaMalloc calls made before it; no stack of it can be known)\n");
			return;
		}
}

/* What a peak is of, in words: "device 0 memory", "pinned host memory", "device 0 tensors"
 * (the table above names kinds by their identifiers; a heading is a phrase). */
static const char *peak_subject(int slot, int kind, char *buf, size_t len)
{
	const char *dev = vrt_device_name(slot);
	bool host = slot == VRT_HOST_SLOT;
	if (kind < 0)
		snprintf(buf, len, "%s tensors", dev);
	else if (kind == VRT_KIND_DEVICE)
		snprintf(buf, len, "%s memory", dev);
	else if (kind == VRT_KIND_HOST_PINNED)
		snprintf(buf, len, "pinned host memory");
	else if (kind == VRT_KIND_MANAGED)
		snprintf(buf, len, "managed memory%s%s", host ? "" : " on ", host ? "" : dev);
	else if (kind == VRT_KIND_ARRAY)
		snprintf(buf, len, "CUDA arrays%s%s", host ? "" : " on ", host ? "" : dev);
	else
		snprintf(buf, len, "%s %s", dev, vrt_kind_name((uint32_t)kind));
	return buf;
}

static void print_text(struct report *r, const struct report_options *o)
{
	struct vrt_trace *t = r->t;
	struct vrt_model *m = &r->end;
	char who[64];
	vrt_process_label(t, who, sizeof(who));
	const char *cmd = vrt_info(t, "cmdline");
	printf("vramtrace report: %s (%s%s%s)\n", vrt_escape(t->path), who, cmd ? ": " : "", cmd ? cmd : "");
	const struct vrt_file_state *st = &t->hdr.state;
	if (t->cut_short)
		printf("%llu events over %.3f s; the trace was cut short (%llu of the %llu events written are in the file): "
		       "how the process ended is unknown\n",
		       (unsigned long long)m->set.events, r->seconds, (unsigned long long)m->set.events,
		       (unsigned long long)st->events_written);
	else
		printf("%llu events over %.3f s; %s\n", (unsigned long long)m->set.events, r->seconds,
		       t->state_valid ? vrt_end_sentence(st->end_reason) : "how the process ended is unknown");
	if (r->ooms)
		printf("it ran out of memory: %llu out-of-memory event%s; `vramtrace oom %s` explains %s\n",
		       (unsigned long long)r->ooms, r->ooms == 1 ? "" : "s", vrt_escape(t->path),
		       r->ooms == 1 ? "it" : "the last");
	if (r->teardown_s)
		printf("\"at the end\" below is where teardown began (%.3f s): what the interpreter freed after that, the "
		       "program did not\n", r->teardown_s);
	putchar('\n');
	/* Figures from a trace that misses events are bounds, and say so where they are shown. */
	char peak_note[64] = "";
	if (vrt_trace_cut(t))
		snprintf(peak_note, sizeof(peak_note), "  (the trace ends early: as of its end)");
	else if (r->lost)
		snprintf(peak_note, sizeof(peak_note), "  (%llu events lost)", (unsigned long long)r->lost);
	printf("memory held, per device and kind (CUDA allocations):\n");
	for (int d = 0; d <= VRT_MAX_DEVICES; d++)
		for (int k = 0; k < VRT_KIND_LAST; k++) {
			if (!m->peak[d][k])
				continue;
			printf("  %-9s %-12s peak %10s at %8.3f s    live at end %10s%s\n", vrt_device_name(d),
			       vrt_kind_name((uint32_t)k), vrt_bytes(m->peak[d][k]), vrt_ts_seconds(t, m->peak_ts[d][k]),
			       vrt_bytes(m->live[d][k]), peak_note);
		}
	if (m->any_blocks) {
		printf("\ntensors (PyTorch caching-allocator blocks):\n");
		for (int d = 0; d < VRT_MAX_DEVICES; d++)
			if (m->tensor_peak[d])
				printf("  %-9s peak %10s at %8.3f s    live at end %10s    %llu events%s\n",
				       vrt_device_name(d), vrt_bytes(m->tensor_peak[d]), vrt_ts_seconds(t, m->tensor_peak_ts[d]),
				       vrt_bytes(m->tensors[d]), (unsigned long long)m->tensor_events[d], peak_note);
	}
	if (r->owners.walks)
		print_categories(r);
	printf("\ntop sites by bytes live at the end%s:\n", m->any_blocks ? " (tensors, allocator cache, other CUDA)" : "");
	for (size_t i = 0; i < r->live_at_end.n && i < (size_t)o->top; i++)
		vrt_site_print(stdout, t, &r->live_at_end.v[i], o->frames);
	if (!r->live_at_end.n)
		printf("  nothing\n");
	explain_before_attach(t, &r->live_at_end, o->top);
	for (int d = 0; d <= VRT_MAX_DEVICES; d++)
		for (int k = 0; k <= VRT_KIND_LAST; k++) {
			struct peak_target *p = &r->peaks[d][k];
			if (!p->sites.n || (k == VRT_KIND_LAST) != (p->kind < 0))
				continue;
			/* With tensors, the device-memory peak is explained by the tensor view. */
			if (m->any_blocks && p->kind == VRT_KIND_DEVICE)
				continue;
			/* At the tensors' peak the list is what was live then, as at the end: tensors, the
			 * allocator's cache and other CUDA allocations (a pre-attach pseudo-site too). */
			char what[64];
			printf("\ntop sites at the peak of %s (%s at %.3f s%s):\n", peak_subject(d, p->kind, what, sizeof(what)),
			       vrt_bytes(p->kind < 0 ? m->tensor_peak[d] : m->peak[d][p->kind]),
			       vrt_ts_seconds(t, p->kind < 0 ? m->tensor_peak_ts[d] : m->peak_ts[d][p->kind]),
			       p->kind < 0 ? "; live then: tensors, allocator cache, other CUDA" : "");
			for (size_t i = 0; i < p->sites.n && i < (size_t)o->top; i++)
				vrt_site_print(stdout, t, &p->sites.v[i], o->frames);
		}
}

static void json_sites(FILE *out, const struct vrt_trace *t, const struct vrt_sites *s, int top)
{
	fputc('[', out);
	for (size_t i = 0; i < s->n && i < (size_t)top; i++) {
		if (i)
			fputs(", ", out);
		vrt_site_json(out, t, &s->v[i], false);
	}
	fputc(']', out);
}

static void print_json(struct report *r, const struct report_options *o)
{
	struct vrt_trace *t = r->t;
	struct vrt_model *m = &r->end;
	printf("{\"file\": ");
	json_string(stdout, t->path);
	printf(", \"pid\": %d, \"rank\": %d, \"events\": %llu, \"duration_s\": %.6f, \"end\": ", t->hdr.pid,
	       t->hdr.rank, (unsigned long long)m->set.events, r->seconds);
	json_string(stdout, vrt_end_text(t));
	printf(", \"events_lost\": %llu, \"out_of_memory_events\": %llu, ", (unsigned long long)r->lost,
	       (unsigned long long)r->ooms);
	vrt_json_completeness(stdout, t, (int64_t)m->set.events);
	printf(", \"devices\": [");
	bool first = true;
	for (int d = 0; d <= VRT_MAX_DEVICES; d++)
		for (int k = 0; k < VRT_KIND_LAST; k++) {
			if (!m->peak[d][k])
				continue;
			printf("%s{\"device\": %d, \"kind\": \"%s\", \"peak_bytes\": %lld, \"peak_time_s\": %.6f, "
			       "\"live_bytes_at_end\": %lld, \"pytorch_allocator_bytes\": %lld, \"top_at_peak\": ",
			       first ? "" : ", ", d == VRT_HOST_SLOT ? -1 : d, vrt_kind_name((uint32_t)k),
			       (long long)m->peak[d][k], vrt_ts_seconds(t, m->peak_ts[d][k]), (long long)m->live[d][k],
			       (long long)r->torch_segments[d][k]);
			json_sites(stdout, t, &r->peaks[d][k].sites, o->top);
			putchar('}');
			first = false;
		}
	printf("]");
	if (m->any_blocks) {
		printf(", \"tensors\": [");
		first = true;
		for (int d = 0; d < VRT_MAX_DEVICES; d++) {
			if (!m->tensor_peak[d] && !m->tensor_events[d])
				continue;
			printf("%s{\"device\": %d, \"peak_bytes\": %lld, \"peak_time_s\": %.6f, \"live_bytes_at_end\": %lld, "
			       "\"events\": %llu, \"top_at_peak\": ",
			       first ? "" : ", ", d, (long long)m->tensor_peak[d], vrt_ts_seconds(t, m->tensor_peak_ts[d]),
			       (long long)m->tensors[d], (unsigned long long)m->tensor_events[d]);
			json_sites(stdout, t, &r->peaks[d][VRT_KIND_LAST].sites, o->top);
			putchar('}');
			first = false;
		}
		printf("]");
	}
	printf(", \"live_at_end\": ");
	json_sites(stdout, t, &r->live_at_end, o->top);
	json_categories_at_end(r);
	printf("}");
}

/* printed: reports written so far (a --json list opens with the first, whichever file it is). */
static int report_one(const char *path, const struct report_options *o, bool many, int *printed)
{
	bool first = !*printed;
	struct vrt_trace t;
	int rc = vrt_open_or_fail(&t, path);
	if (rc)
		return rc;
	vrt_warn_trace_state(&t, o->quiet);
	struct report *r = calloc(1, sizeof(*r));
	struct vrt_peak_sites *at_peaks = vrt_peak_sites_new(&t);
	if (!r || !at_peaks || vrt_model_init(&r->end)) {
		free(r);
		vrt_peak_sites_free(at_peaks);
		vrt_trace_close(&t);
		return vrt_fail(VRT_E_NOMEM, "report");
	}
	r->t = &t;
	vrt_peak_sites_follow(at_peaks, &r->end);
	struct vrt_replay_options ro = { .quiet = o->quiet, .stop_at_teardown = true,
					 .owners = &r->owners };
	rc = vrt_report_replay_ex(&t, &r->end, &ro);
	r->teardown_s = ro.teardown_s;
	r->ooms = ro.ooms;
	if (!rc) {
		r->seconds = vrt_ts_seconds(&t, r->end.last_ts);
		r->lost = t.state_valid && t.hdr.state.events_lost > r->end.lost ? t.hdr.state.events_lost : r->end.lost;
		collect_peaks(r);
		vrt_sites_init(&r->live_at_end);
		vrt_report_group_live(&t, &r->end, &r->live_at_end, -2, r->end.any_blocks ? -1 : -2);
		vrt_torch_segment_bytes(&t, &r->end, r->torch_segments);
		categorize_end(r);
		rc = take_peaks(r, at_peaks);
	}
	if (!rc) {
		if (o->json) {
			if (many)
				fputs(first ? "{\"processes\": [" : ", ", stdout);
			print_json(r, o);
		} else {
			if (!first)
				printf("\n");
			fold_printed(r);
			print_text(r, o);
		}
		++*printed;
	}
	for (int d = 0; d <= VRT_MAX_DEVICES; d++)
		for (int k = 0; k <= VRT_KIND_LAST; k++)
			vrt_sites_free(&r->peaks[d][k].sites);
	vrt_sites_free(&r->live_at_end);
	vrt_model_free(&r->end);
	vrt_owners_free(&r->owners);
	free(r);
	vrt_peak_sites_free(at_peaks);
	vrt_trace_close(&t);
	return rc;
}

int vrt_cmd_report(int argc, char **argv)
{
	struct report_options o = { .top = 10, .frames = 8 };
	const char *files[256];
	int n_files, rc;
	const struct vrt_arg opts[] = {
		VRT_OPT_JSON(&o.json), VRT_OPT_QUIET(&o.quiet), VRT_OPT_TOP(&o.top), VRT_OPT_FRAMES(&o.frames),
		VRT_OPT_UNTIL_MARK, VRT_OPT_WIDTH, VRT_OPT_END,
	};
	if ((rc = vrt_args_parse("report", argc, argv, opts, files, 256, &n_files)))
		return rc < 0 ? 0 : rc;
	if (!n_files)
		return vrt_usage("report", "no trace file given");
	char **paths;
	int n;
	rc = vrt_collect_inputs(n_files, files, &paths, &n);
	if (rc)
		return vrt_fail(rc, "no trace files in the arguments");
	int worst = 0, printed = 0;
	bool many = vrt_json_lists_processes(n_files, files, n);
	for (int i = 0; i < n; i++) {
		rc = report_one(paths[i], &o, many, &printed);
		worst = rc > worst ? rc : worst;
	}
	if (o.json && printed) /* JSON on stdout, or nothing: the errors went to stderr */
		fputs(many ? "]}\n" : "\n", stdout);
	vrt_free_inputs(paths, n);
	return worst;
}
