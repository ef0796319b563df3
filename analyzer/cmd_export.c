/* SPDX-License-Identifier: MIT */
/*
 * vramtrace export: the trace in other tools' formats.
 *  - memory-viz: PyTorch's memory snapshot (pickle), opened by pytorch.org/memory_viz.
 *    Tensors are the blocks when the trace has PyTorch block events; otherwise every CUDA
 *    allocation stands for a block in a segment of its own.
 *  - chrome: Chrome/Perfetto trace JSON, one counter track per device and kind, phases as
 *    slices, marks and OOMs as instants.
 *  - folded / folded-peak: "outer;...;inner bytes" lines for flamegraph.pl and speedscope.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "safe_output.h"
#include "model.h"
#include "pickle.h"
#include "report_common.h"
#include "series.h"
#include "sites.h"
#include "stacks.h"

struct export_options {
	const char *format, *path, *output;
	bool quiet;
	uint64_t max_events;
};

/* ---- folded ----------------------------------------------------------------------------- */

static void folded_frame(FILE *out, const struct vrt_frame *f)
{
	char buf[1024];
	vrt_frame_format(f, buf, sizeof(buf));
	for (char *p = buf; *p; p++)
		if (*p == ';' || *p == '\n')
			*p = ',';
	fputs(buf, out);
}

static void write_folded(FILE *out, const struct vrt_trace *t, const struct vrt_sites *s)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	for (size_t i = 0; i < s->n; i++) {
		const struct vrt_site *site = &s->v[i];
		if (site->bytes <= 0)
			continue;
		if (site->label) {
			fprintf(out, "%s %lld\n", site->label, (long long)site->bytes);
			continue;
		}
		int n = vrt_stack_frames(t, site->stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
		if (!n)
			fputs("[no stack]", out);
		for (int k = n - 1; k >= 0; k--) {
			folded_frame(out, &frames[k]);
			if (k)
				fputc(';', out);
		}
		fprintf(out, " %lld\n", (long long)site->bytes);
	}
}

/* The main series' peak: tensors when present, else the busiest device. */
static uint64_t main_peak_event(const struct vrt_model *m, int *slot)
{
	int64_t best = -1;
	uint64_t event = 0;
	for (int d = 0; d <= VRT_MAX_DEVICES; d++) {
		int64_t v = m->any_blocks ? m->tensor_peak[d] : m->peak[d][VRT_KIND_DEVICE];
		if (v > best) {
			best = v;
			event = m->any_blocks ? m->tensor_peak_event[d] : m->peak_event[d][VRT_KIND_DEVICE];
			*slot = d;
		}
	}
	return event;
}

static int export_folded(struct vrt_trace *t, FILE *out, bool at_peak, bool quiet)
{
	struct vrt_model m;
	if (vrt_model_init(&m))
		return VRT_EXIT_INTERNAL;
	int rc = vrt_report_replay(t, &m, quiet, NULL);
	struct vrt_sites s;
	vrt_sites_init(&s);
	if (!rc && at_peak) {
		int slot = 0;
		uint64_t target = main_peak_event(&m, &slot);
		vrt_model_free(&m);
		vrt_model_init(&m);
		struct vrt_replay rp;
		struct vrt_record r;
		vrt_replay_begin(&rp, t);
		while (m.events < target && vrt_replay_next(&rp, &r))
			vrt_model_apply(&m, &r, NULL);
		vrt_report_group_live(t, &m, &s, slot, m.any_blocks ? -1 : VRT_KIND_DEVICE);
	} else if (!rc) {
		vrt_report_group_live(t, &m, &s, -2, m.any_blocks ? -1 : -2);
	}
	if (!rc)
		write_folded(out, t, &s);
	vrt_sites_free(&s);
	vrt_model_free(&m);
	return rc;
}

/* ---- chrome ----------------------------------------------------------------------------- */

static int export_chrome(struct vrt_trace *t, FILE *out, bool quiet)
{
	struct vrt_model m;
	struct vrt_series s;
	double end = t->state_valid && t->hdr.state.end_ts ? vrt_ts_seconds(t, t->hdr.state.end_ts) : 1e308;
	if (vrt_model_init(&m) || vrt_series_init(&s, 4000, 0, end))
		return VRT_EXIT_INTERNAL;
	int pid = t->hdr.pid;
	fprintf(out, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
	fprintf(out, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": ", pid);
	char label[128];
	vrt_process_label(t, label, sizeof(label));
	json_string(out, label);
	fprintf(out, "}}");
	struct vrt_replay rp;
	struct vrt_record r;
	struct vrt_effect e;
	vrt_replay_begin(&rp, t);
	while (vrt_replay_next(&rp, &r)) {
		vrt_model_apply(&m, &r, &e);
		double now = vrt_ts_seconds(t, m.last_ts);
		if (e.kind != VRT_EFFECT_NONE)
			vrt_series_sample(&s, &m, now);
		const char *ph = r.op == VRT_OP_PHASE_ENTER ? "B" : r.op == VRT_OP_PHASE_EXIT ? "E" : NULL;
		if (ph || r.op == VRT_OP_MARK || r.op == VRT_OP_OOM) {
			fprintf(out, ",\n{\"name\": ");
			if (r.op == VRT_OP_OOM) {
				snprintf(label, sizeof(label), "OOM: %s on device %d", vrt_bytes((int64_t)r.size), r.device);
				json_string(out, label);
			} else {
				json_string(out, vrt_string(t, r.id));
			}
			fprintf(out, ", \"ph\": \"%s\", \"ts\": %.3f, \"pid\": %d, \"tid\": %u%s}", ph ? ph : "i",
				vrt_ts_seconds(t, r.ts) * 1e6, pid, rp.thread, ph ? "" : ", \"s\": \"p\"");
		}
	}
	vrt_series_finish(&s);
	char name[64];
	for (int b = 0; b < s.used; b++) {
		for (int i = 0; i < s.n_series; i++) {
			vrt_series_name(&s.keys[i], name, sizeof(name));
			fprintf(out, ",\n{\"name\": \"%s\", \"ph\": \"C\", \"ts\": %.3f, \"pid\": %d, \"args\": {\"bytes\": %lld}}",
				name, (s.from + b * s.width) * 1e6, pid, (long long)s.max[b * VRT_SERIES_MAX + i]);
		}
	}
	fprintf(out, "\n]}\n");
	vrt_series_free(&s);
	vrt_model_free(&m);
	if (rp.error)
		return vrt_fail(rp.error, "%s", t->path);
	(void)quiet;
	return 0;
}

/* ---- memory_viz ------------------------------------------------------------------------- */

static void pk_frames(FILE *out, const struct vrt_trace *t, uint32_t stack)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = stack ? vrt_stack_frames(t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES) : 0;
	pk_list_begin(out);
	for (int i = 0; i < n; i++) {
		pk_dict_begin(out);
		pk_key_str(out, "filename", frames[i].type == VRT_FT_PYTHON ? frames[i].file : frames[i].module);
		pk_key_int(out, "line", frames[i].line);
		pk_key_str(out, "name", frames[i].function);
		pk_dict_end(out);
	}
	pk_list_end(out);
}

/* The memory_viz action for what one record did, or NULL: device memory born or dead as the model
 * saw it (a handle's last release frees it, not every cuMemRelease; checkpointed items are born
 * at the start of the window), and OOMs. */
static const char *viz_action(const struct vrt_record *r, const struct vrt_effect *e, bool blocks)
{
	if (r->op == VRT_OP_OOM)
		return "oom";
	if (e->kind != VRT_EFFECT_BORN && e->kind != VRT_EFFECT_DIED)
		return NULL;
	const struct vrt_item *it = &e->item;
	bool born = e->kind == VRT_EFFECT_BORN;
	if (it->space == VRT_IS_BLOCK)
		return born ? "alloc" : "free_completed";
	if (!vrt_item_counted(it) || it->kind != VRT_KIND_DEVICE)
		return NULL;
	return born ? (blocks ? "segment_alloc" : "alloc") : (blocks ? "segment_free" : "free_completed");
}

/* The device a record's memory_viz entries belong to; -1: none (e->item is unset then). */
static int viz_device(const struct vrt_record *r, const struct vrt_effect *e)
{
	if (r->op == VRT_OP_OOM)
		return r->device;
	return e->kind == VRT_EFFECT_NONE ? -1 : e->item.device;
}

struct viz_entry {
	const char *action;
	uint64_t addr, size, stream, ts, device_free;
	uint32_t stack;
	bool oom;
};

static void pk_trace_entry(FILE *out, const struct vrt_trace *t, const struct viz_entry *v)
{
	pk_dict_begin(out);
	pk_key_str(out, "action", v->action);
	pk_key_int(out, "addr", (int64_t)v->addr);
	pk_key_int(out, "size", (int64_t)v->size);
	pk_key_int(out, "stream", (int64_t)v->stream);
	pk_key_int(out, "time_us", (int64_t)(vrt_ts_seconds(t, v->ts) * 1e6));
	if (v->oom)
		pk_key_int(out, "device_free", (int64_t)v->device_free);
	pk_str(out, "frames");
	pk_frames(out, t, v->stack);
	pk_dict_end(out);
}

/* Writes the entries for one record's effect; returns how many. A tensor whose real size became
 * known (BLOCK_SIZE) is freed at its estimated size and allocated again at the real one, since
 * memory_viz has no resize: the totals it draws stay those of the model. */
static int viz_entries(FILE *out, const struct vrt_trace *t, const struct vrt_record *r, const struct vrt_effect *e,
		       bool blocks)
{
	const struct vrt_item *it = &e->item;
	if (e->kind == VRT_EFFECT_RESIZED && it->space == VRT_IS_BLOCK) {
		struct viz_entry gone = { "free_completed", it->addr, it->size - (uint64_t)e->delta, it->stream, r->ts, 0,
					  it->stack, false };
		struct viz_entry again = gone;
		again.action = "alloc";
		again.size = it->size;
		pk_trace_entry(out, t, &gone);
		pk_trace_entry(out, t, &again);
		return 2;
	}
	const char *action = viz_action(r, e, blocks);
	if (!action)
		return 0;
	struct viz_entry v = { action, it->addr, it->size, it->stream, r->ts, 0, r->stack2, false };
	if (r->op == VRT_OP_OOM)
		v = (struct viz_entry){ action, r->aux, r->size, r->stream, r->ts, r->aux, r->stack ? r->stack : r->stack2,
					true };
	else if (e->kind == VRT_EFFECT_BORN)
		v.ts = it->ts, v.stack = it->stack;
	pk_trace_entry(out, t, &v);
	return 1;
}

struct viz_segments {
	FILE *out;
	const struct vrt_trace *t;
	bool blocks;
};

static void pk_block(FILE *out, const struct vrt_trace *t, const struct vrt_item *it)
{
	pk_dict_begin(out);
	pk_key_int(out, "address", (int64_t)it->addr);
	pk_key_int(out, "size", (int64_t)it->size);
	pk_key_int(out, "requested_size", (int64_t)(it->space == VRT_IS_BLOCK && it->aux ? it->aux : it->size));
	pk_key_str(out, "state", "active_allocated");
	pk_str(out, "frames");
	pk_frames(out, t, it->stack);
	pk_dict_end(out);
}

/* Without block events each live allocation is a segment holding one block. */
static void viz_segment(void *ctx, const struct vrt_item *it)
{
	struct viz_segments *v = ctx;
	if (!vrt_item_counted(it) || it->kind != VRT_KIND_DEVICE)
		return;
	pk_dict_begin(v->out);
	pk_key_int(v->out, "device", it->device < 0 ? 0 : it->device);
	pk_key_int(v->out, "address", (int64_t)it->addr);
	pk_key_int(v->out, "total_size", (int64_t)it->size);
	pk_key_int(v->out, "allocated_size", v->blocks ? 0 : (int64_t)it->size);
	pk_key_int(v->out, "active_size", v->blocks ? 0 : (int64_t)it->size);
	pk_key_int(v->out, "requested_size", v->blocks ? 0 : (int64_t)it->size);
	pk_key_int(v->out, "stream", (int64_t)it->stream);
	pk_key_str(v->out, "segment_type", it->size <= (2u << 20) ? "small" : "large");
	pk_str(v->out, "segment_pool_id");
	pk_tuple2_int(v->out, 0, 0);
	pk_str(v->out, "is_expandable");
	pk_bool(v->out, it->space == VRT_IS_HANDLE);
	pk_str(v->out, "frames");
	pk_frames(v->out, v->t, it->stack);
	pk_str(v->out, "blocks");
	pk_list_begin(v->out);
	if (!v->blocks)
		pk_block(v->out, v->t, it);
	pk_list_end(v->out);
	pk_dict_end(v->out);
}

/* With block events, the live tensors go in one list of "blocks" under a synthetic segment per
 * device; memory_viz only needs their addresses and sizes to draw the timeline's start. */
static void viz_tensor(void *ctx, const struct vrt_item *it)
{
	struct viz_segments *v = ctx;
	if (it->space == VRT_IS_BLOCK)
		pk_block(v->out, v->t, it);
}

/* One pass before writing: the state at the end into end (its any_blocks says whether the trace
 * has tensor events), and the devices that have memory_viz events (bit d for device d). */
static int viz_survey(struct vrt_trace *t, struct vrt_model *end, uint64_t *devices)
{
	struct vrt_replay rp;
	struct vrt_record r;
	struct vrt_effect e;
	*devices = 0;
	vrt_replay_begin(&rp, t);
	while (vrt_replay_next(&rp, &r)) {
		vrt_model_apply(end, &r, &e);
		int dev = viz_device(&r, &e);
		if (viz_action(&r, &e, false) && dev >= 0 && dev < 64)
			*devices |= 1ull << dev;
	}
	return rp.error ? vrt_fail(rp.error, "%s: stopped at a bad record", t->path) : 0;
}

/* One device's list of trace entries: a replay of the whole trace. With end, a replay that went
 * to the end of the trace hands its model over (the state at the end, for the segments). */
static int viz_device_trace(struct vrt_trace *t, FILE *out, const struct export_options *o, int dev, bool blocks,
			    struct vrt_model *end)
{
	struct vrt_model m;
	if (vrt_model_init(&m))
		return vrt_fail(VRT_E_NOMEM, "export");
	struct vrt_replay rp;
	struct vrt_record r;
	struct vrt_effect e;
	uint64_t written = 0;
	bool whole = true;
	pk_list_begin(out);
	vrt_replay_begin(&rp, t);
	while (vrt_replay_next(&rp, &r)) {
		if (written >= o->max_events) {
			whole = false;
			break;
		}
		vrt_model_apply(&m, &r, &e);
		if (viz_device(&r, &e) != dev)
			continue;
		if (e.kind == VRT_EFFECT_RESIZED && written + 2 > o->max_events) {
			whole = false;
			break; /* a resize is two entries: both or neither */
		}
		written += (uint64_t)viz_entries(out, t, &r, &e, blocks);
	}
	pk_list_end(out);
	if (end && whole && !rp.error) {
		vrt_model_free(end);
		*end = m;
	} else {
		vrt_model_free(&m);
	}
	if (written >= o->max_events && !o->quiet)
		fprintf(stderr, "vramtrace: device %d: only the first %llu events exported (--max-events)\n", dev,
			(unsigned long long)o->max_events);
	return 0;
}

/* The state at the end, when no device trace replayed that far. */
static int viz_end_state(struct vrt_trace *t, struct vrt_model *end)
{
	if (end->items)
		return 0;
	if (vrt_model_init(end))
		return vrt_fail(VRT_E_NOMEM, "export");
	struct vrt_replay rp;
	struct vrt_record r;
	vrt_replay_begin(&rp, t);
	while (vrt_replay_next(&rp, &r))
		vrt_model_apply(end, &r, NULL);
	return rp.error ? vrt_fail(rp.error, "%s: stopped at a bad record", t->path) : 0;
}

static int export_memory_viz(struct vrt_trace *t, FILE *out, const struct export_options *o)
{
	/* One live set in memory at a time: the survey's, each device trace's, then the end's. */
	struct vrt_model m;
	if (vrt_model_init(&m))
		return vrt_fail(VRT_E_NOMEM, "export");
	uint64_t devices = 0;
	int rc = viz_survey(t, &m, &devices);
	vrt_warn_model(t, &m, o->quiet);
	bool blocks = m.any_blocks;
	vrt_model_free(&m);
	if (!rc) {
		pk_begin(out);
		pk_dict_begin(out);
		pk_str(out, "device_traces");
		pk_list_begin(out);
	}
	/* One list per device up to the highest one used (memory_viz indexes them by device). */
	for (int dev = 0; !rc && dev < 64 && (devices >> dev); dev++)
		rc = viz_device_trace(t, out, o, dev, blocks, dev + 1 < 64 && (devices >> (dev + 1)) ? NULL : &m);
	if (!rc)
		rc = viz_end_state(t, &m);
	if (rc) {
		vrt_model_free(&m);
		return rc;
	}
	if (!devices) { /* one empty list: device 0 */
		pk_list_begin(out);
		pk_list_end(out);
	}
	pk_list_end(out);
	pk_str(out, "segments");
	pk_list_begin(out);
	struct viz_segments v = { out, t, blocks };
	vrt_model_each(&m, viz_segment, &v);
	if (blocks) {
		pk_dict_begin(out);
		pk_key_int(out, "device", 0);
		pk_key_int(out, "address", 0);
		pk_key_int(out, "total_size", 0);
		pk_key_str(out, "segment_type", "large");
		pk_str(out, "blocks");
		pk_list_begin(out);
		vrt_model_each(&m, viz_tensor, &v);
		pk_list_end(out);
		pk_dict_end(out);
	}
	pk_list_end(out);
	pk_dict_end(out);
	pk_end(out);
	vrt_model_free(&m);
	return rc;
}

int vrt_cmd_export(int argc, char **argv)
{
	struct export_options o = { .max_events = 2000000 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (vrt_is_help(a))
			return vrt_print_help("export");
		if ((!strcmp(a, "--format") || !strcmp(a, "-f")) && i + 1 < argc)
			o.format = argv[++i];
		else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && i + 1 < argc)
			o.output = argv[++i];
		else if (!strcmp(a, "--max-events") && i + 1 < argc) {
			long long v;
			int bad = vrt_int_option("export", a, argv[++i], 1, INT64_MAX, &v);
			if (bad)
				return bad;
			o.max_events = (uint64_t)v;
		}
		else if (!strcmp(a, "-q") || !strcmp(a, "--quiet"))
			o.quiet = true;
		else if (a[0] == '-' || o.path)
			return vrt_usage("export", "unexpected argument '%s'", a);
		else
			o.path = a;
	}
	if (!o.path || !o.format || !o.output)
		return vrt_usage("export", "need --format, a trace and -o FILE");
	bool viz = !strcmp(o.format, "memory-viz"), chrome = !strcmp(o.format, "chrome");
	bool folded = !strcmp(o.format, "folded"), peak = !strcmp(o.format, "folded-peak");
	if (!viz && !chrome && !folded && !peak)
		return vrt_usage("export", "unknown format '%s' (memory-viz, chrome, folded, folded-peak)", o.format);
	char path[4096];
	struct vrt_trace t;
	int rc = vrt_single_input("export", o.path, NULL, NULL, path, sizeof(path));
	if (rc || (rc = vrt_open_or_fail(&t, o.path = path)))
		return rc;
	vrt_warn_trace_state(&t, o.quiet);
	struct vrt_safe_output file = { .f = stdout };
	bool to_stdout = !strcmp(o.output, "-");
	if (!to_stdout && (rc = vrt_safe_output_open(&file, o.output, &t))) {
		vrt_trace_close(&t);
		return rc;
	}
	rc = viz ? export_memory_viz(&t, file.f, &o) : chrome ? export_chrome(&t, file.f, o.quiet)
						       : export_folded(&t, file.f, peak, o.quiet);
	if (!to_stdout && rc)
		vrt_safe_output_abort(&file);
	else if (!to_stdout)
		rc = vrt_safe_output_commit(&file);
	else if (fflush(stdout) && !rc)
		rc = vrt_fail(VRT_E_IO, "cannot write to standard output");
	vrt_trace_close(&t);
	return rc;
}
