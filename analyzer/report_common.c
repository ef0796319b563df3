/* SPDX-License-Identifier: MIT */
#include "report_common.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "owners.h"
#include "pass.h"
#include "vramtrace/error.h"

uint32_t vrt_trace_string_id(const struct vrt_trace *t, const char *s)
{
	for (size_t i = 1; i < t->tables.n_strings; i++)
		if (t->tables.strings[i] && !strcmp(t->tables.strings[i], s))
			return (uint32_t)i;
	return 0;
}

int vrt_check_until_mark(const struct vrt_trace *t, const char *path, const char *command, const char *label)
{
	if (!label || vrt_trace_string_id(t, label))
		return 0;
	fprintf(stderr, "vramtrace %s: %s: no mark labelled \"%s\" in this trace (--until-mark names a mark the "
			"program made: vramtrace mark, vramtrace.mark())\n", command, vrt_escape(path), vrt_escape(label));
	return VRT_EXIT_USAGE;
}

void vrt_clamp_time_to_trace(const struct vrt_trace *t, const char *path, const char *command, const char *option,
			     double *seconds, bool quiet)
{
	double end = vrt_trace_end_s(t);
	if (!end || *seconds <= end)
		return;
	if (!quiet)
		fprintf(stderr, "vramtrace %s: %s: %s %.3f s is after the trace's end: taken at its end (%.3f s)\n",
			command, vrt_escape(path), option, *seconds, end);
	*seconds = end;
}

int vrt_report_replay(struct vrt_trace *t, struct vrt_model *m, bool quiet)
{
	struct vrt_replay_options o = { .quiet = quiet };
	return vrt_report_replay_ex(t, m, &o);
}

int vrt_report_replay_ex(struct vrt_trace *t, struct vrt_model *m, struct vrt_replay_options *o)
{
	struct vrt_pass p;
	const struct vrt_record *r;
	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .quiet = o->quiet, .model = m,
						      .stop_at_teardown = o->stop_at_teardown });
	o->ooms = 0;
	while ((r = vrt_pass_take(&p, NULL))) {
		o->ooms += r->op == VRT_OP_OOM;
		if (o->owners)
			vrt_owners_apply(o->owners, r);
	}
	o->teardown_s = p.teardown_s;
	return vrt_pass_close(&p);
}

const char *vrt_device_name(int slot)
{
	static char names[VRT_MAX_DEVICES + 1][16];
	if (slot == VRT_HOST_SLOT)
		return "host";
	snprintf(names[slot], sizeof(names[slot]), "device %d", slot);
	return names[slot];
}

bool vrt_json_lists_processes(int n_args, const char *const *args, int n_traces)
{
	struct stat st;
	return n_traces > 1 || n_args > 1 || (n_args == 1 && !stat(args[0], &st) && S_ISDIR(st.st_mode));
}

const char *vrt_cache_label(int slot)
{
	static char labels[VRT_MAX_DEVICES + 1][96];
	snprintf(labels[slot], sizeof(labels[slot]), "[PyTorch allocator cache: reserved, no tensor] %s",
		 vrt_device_name(slot));
	return labels[slot];
}

struct group {
	const struct vrt_trace *t;
	struct vrt_sites *s;
	int slot, kind;
	int64_t torch_segments[VRT_MAX_DEVICES + 1], blocks[VRT_MAX_DEVICES + 1];
};

enum vrt_group_role vrt_group_role(const struct vrt_trace *t, const struct vrt_item *it, int slot, int kind)
{
	if (slot != -2 && vrt_device_slot(it->device) != slot)
		return VRT_GROUP_OUT;
	if (kind == -1) {
		if (it->space == VRT_SPACE_BLOCK)
			return VRT_GROUP_BLOCK;
		if (!vrt_item_counted(it))
			return VRT_GROUP_OUT;
		return it->kind == VRT_KIND_DEVICE && vrt_stack_is_torch_segment(t, it->stack) ? VRT_GROUP_SEGMENT
											     : VRT_GROUP_SITE;
	}
	return vrt_item_counted(it) && (kind == -2 || it->kind == kind) ? VRT_GROUP_SITE : VRT_GROUP_OUT;
}

/* A list of every kind (g->kind < 0) keeps each site's kinds, to say so. */
static void add(const struct group *g, const struct vrt_item *it)
{
	struct vrt_site *site = vrt_sites_get(g->s, it->stack, NULL);
	if (site) {
		site->bytes += (int64_t)it->size;
		site->count++;
		if (g->kind < 0)
			site->kinds |= vrt_group_kind_bit(it);
	}
}

static void visit(void *ctx, const struct vrt_item *it)
{
	struct group *g = ctx;
	int d = vrt_device_slot(it->device);
	switch (vrt_group_role(g->t, it, g->slot, g->kind)) {
	case VRT_GROUP_OUT:
		return;
	case VRT_GROUP_BLOCK:
		g->blocks[d] += (int64_t)it->size;
		break;
	case VRT_GROUP_SEGMENT:
		g->torch_segments[d] += (int64_t)it->size;
		return;
	case VRT_GROUP_SITE:
		break;
	}
	add(g, it);
}

void vrt_report_group_live(const struct vrt_trace *t, const struct vrt_model *m, struct vrt_sites *s, int slot,
			   int kind)
{
	struct group g = { .t = t, .s = s, .slot = slot, .kind = kind };
	vrt_model_each(m, visit, &g);
	for (int d = 0; kind == -1 && d <= VRT_MAX_DEVICES; d++)
		vrt_group_add_cache(s, d, g.torch_segments[d], g.blocks[d]);
	vrt_sites_sort(s);
}

void vrt_group_add_cache(struct vrt_sites *s, int slot, int64_t torch_segments, int64_t blocks)
{
	int64_t cache = torch_segments - blocks;
	if (cache <= 0)
		return;
	struct vrt_site *site = vrt_sites_get(s, 0, vrt_cache_label(slot));
	if (site) {
		site->bytes = cache;
		site->count = 1;
	}
}

struct torch_bytes {
	const struct vrt_trace *t;
	int64_t (*bytes)[VRT_KIND_LAST];
};

static void torch_visit(void *ctx, const struct vrt_item *it)
{
	struct torch_bytes *tb = ctx;
	if (vrt_item_counted(it) && it->kind < VRT_KIND_LAST && vrt_stack_is_torch_segment(tb->t, it->stack))
		tb->bytes[vrt_device_slot(it->device)][it->kind] += (int64_t)it->size;
}

void vrt_torch_segment_bytes(const struct vrt_trace *t, const struct vrt_model *m,
			     int64_t bytes[VRT_MAX_DEVICES + 1][VRT_KIND_LAST])
{
	memset(bytes, 0, sizeof(int64_t[VRT_MAX_DEVICES + 1][VRT_KIND_LAST]));
	vrt_model_each(m, torch_visit, &(struct torch_bytes){ t, bytes });
}
