/* SPDX-License-Identifier: MIT */
#include "chrome_trace.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "model.h"
#include "pass.h"
#include "series.h"
#include "stacks.h"

/* A frame of stackFrames: its parent's id and its text, hashed; 0 marks an empty slot. */
struct node {
	uint64_t key;
	uint32_t id;
};

/* A trace stack's innermost frame in stackFrames; stack 0 marks an empty slot. */
struct leaf {
	uint32_t stack, id;
};

struct chrome {
	struct vrt_trace *t;
	FILE *out;
	const struct vrt_chrome_options *o;
	int pid;
	/* stackFrames entries, written as they are first used: frames are shared between stacks */
	FILE *frames;
	char *frames_text;
	size_t frames_len;
	struct node *nodes;
	size_t nodes_cap, n_nodes;
	struct leaf *leaves;
	size_t leaves_cap, n_leaves;
	uint64_t allocations, written;
};

static uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return h ? h : 1;
}

/* Both tables are open addressing, at most half full, their sizes powers of two. */
static void put_node(struct node *nodes, size_t cap, struct node n)
{
	size_t i = n.key & (cap - 1);
	while (nodes[i].key)
		i = (i + 1) & (cap - 1);
	nodes[i] = n;
}

static void put_leaf(struct leaf *leaves, size_t cap, struct leaf l)
{
	size_t i = mix(l.stack) & (cap - 1);
	while (leaves[i].stack)
		i = (i + 1) & (cap - 1);
	leaves[i] = l;
}

static bool grow_nodes(struct chrome *c)
{
	if ((c->n_nodes + 1) * 2 <= c->nodes_cap)
		return true;
	size_t cap = c->nodes_cap ? c->nodes_cap * 2 : 1024;
	struct node *v = calloc(cap, sizeof(*v));
	if (!v)
		return false;
	for (size_t i = 0; i < c->nodes_cap; i++)
		if (c->nodes[i].key)
			put_node(v, cap, c->nodes[i]);
	free(c->nodes);
	c->nodes = v;
	c->nodes_cap = cap;
	return true;
}

static bool grow_leaves(struct chrome *c)
{
	if ((c->n_leaves + 1) * 2 <= c->leaves_cap)
		return true;
	size_t cap = c->leaves_cap ? c->leaves_cap * 2 : 1024;
	struct leaf *v = calloc(cap, sizeof(*v));
	if (!v)
		return false;
	for (size_t i = 0; i < c->leaves_cap; i++)
		if (c->leaves[i].stack)
			put_leaf(v, cap, c->leaves[i]);
	free(c->leaves);
	c->leaves = v;
	c->leaves_cap = cap;
	return true;
}

/* The id of frame f under parent (0: a root), added to stackFrames when new; 0 when out of memory. */
static uint32_t frame_id(struct chrome *c, uint32_t parent, const struct vrt_frame *f)
{
	char text[1024];
	vrt_frame_format(f, text, sizeof(text));
	uint64_t key = mix(vrt_hash_string(text) ^ mix(parent));
	if (!grow_nodes(c))
		return 0;
	size_t i = key & (c->nodes_cap - 1);
	for (; c->nodes[i].key; i = (i + 1) & (c->nodes_cap - 1))
		if (c->nodes[i].key == key)
			return c->nodes[i].id;
	uint32_t id = (uint32_t)++c->n_nodes;
	c->nodes[i] = (struct node){ key, id };
	fprintf(c->frames, "%s\"%u\": {\"name\": ", id > 1 ? ",\n" : "", id);
	json_string(c->frames, text);
	fprintf(c->frames, ", \"category\": \"%s\"", f->type == VRT_FT_PYTHON ? "python" : "native");
	if (parent)
		fprintf(c->frames, ", \"parent\": \"%u\"", parent);
	fputc('}', c->frames);
	return id;
}

/* The stackFrames id of a trace stack's innermost frame (0: no frames). */
static uint32_t stack_id(struct chrome *c, uint32_t stack)
{
	if (!stack || !grow_leaves(c))
		return 0;
	size_t i = mix(stack) & (c->leaves_cap - 1);
	for (; c->leaves[i].stack; i = (i + 1) & (c->leaves_cap - 1))
		if (c->leaves[i].stack == stack)
			return c->leaves[i].id;
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = vrt_stack_frames(c->t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
	uint32_t id = 0;
	for (int k = n - 1; k >= 0; k--) /* from the root in */
		id = frame_id(c, id, &frames[k]);
	c->leaves[i] = (struct leaf){ stack, id };
	c->n_leaves++;
	return id;
}

/* The process by its command line, rank and pid; ranks sort in order when traces are merged. */
static void write_process(struct chrome *c)
{
	const struct vrt_trace *t = c->t;
	const char *cmd = vrt_info(t, "cmdline");
	char name[320], who[64];
	if (t->hdr.rank >= 0)
		snprintf(who, sizeof(who), "rank %d, pid %d", t->hdr.rank, t->hdr.pid);
	else
		snprintf(who, sizeof(who), "pid %d", t->hdr.pid);
	if (cmd && *cmd) { /* the program by its name, not its path */
		const char *space = strchr(cmd, ' '), *slash = cmd;
		for (const char *q = cmd; *q && q != space; q++)
			slash = *q == '/' ? q + 1 : slash;
		snprintf(name, sizeof(name), "%.200s%s (%s)", slash, strlen(slash) > 200 ? "\u2026" : "", who);
	} else {
		snprintf(name, sizeof(name), "%s", who);
	}
	fprintf(c->out, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": ", c->pid);
	json_string(c->out, name);
	fprintf(c->out, "}}");
	if (t->hdr.rank >= 0)
		fprintf(c->out, ",\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"args\": "
				"{\"sort_index\": %d}}", c->pid, t->hdr.rank);
}

static void write_threads(struct chrome *c)
{
	const struct vrt_tables *tb = &c->t->tables;
	for (size_t i = 0; i < tb->n_threads; i++) { /* the tid of an event is the trace's thread index */
		if (!tb->threads[i].tid)
			continue;
		fprintf(c->out, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %zu, \"args\": {\"name\": ",
			c->pid, i);
		char thread[160];
		const char *name = vrt_string(c->t, tb->threads[i].name);
		snprintf(thread, sizeof(thread), "%s (tid %llu)", name && *name ? name : "thread",
			 (unsigned long long)tb->threads[i].tid);
		json_string(c->out, thread);
		fprintf(c->out, "}}");
	}
}

/* An allocation (a tensor, or a CUDA allocation) as an instant on its thread, with its stack. */
static void write_allocation(struct chrome *c, const struct vrt_item *it, uint32_t thread)
{
	bool tensor = it->space == VRT_SPACE_BLOCK;
	if (!tensor && !vrt_item_counted(it))
		return;
	if (c->allocations++ >= (uint64_t)c->o->allocations)
		return;
	c->written++;
	char head_text[1024] = "";
	struct vrt_frame head;
	if (it->stack && vrt_stack_headline(c->t, it->stack, &head) >= 0)
		vrt_frame_format(&head, head_text, sizeof(head_text));
	uint32_t sf = stack_id(c, it->stack);
	fprintf(c->out, ",\n{\"name\": \"%s %s\", \"cat\": \"%s\", \"ph\": \"i\", \"s\": \"t\", \"ts\": %.3f, "
			"\"pid\": %d, \"tid\": %u",
		tensor ? "tensor" : vrt_api_name(it->api), vrt_bytes((int64_t)it->size), tensor ? "tensor" : "cuda",
		vrt_ts_seconds(c->t, it->ts) * 1e6, c->pid, thread);
	if (sf)
		fprintf(c->out, ", \"sf\": \"%u\"", sf);
	fprintf(c->out, ", \"args\": {\"bytes\": %llu, \"device\": %d, \"kind\": \"%s\", \"site\": ",
		(unsigned long long)it->size, it->device, vrt_kind_name(it->kind));
	json_string(c->out, head_text);
	fputs("}}", c->out);
}

/* Phases as slices; marks and OOMs as instants on the whole process. */
static void write_instant(struct chrome *c, const struct vrt_record *r, uint32_t thread)
{
	const char *ph = r->op == VRT_OP_PHASE_ENTER ? "B" : r->op == VRT_OP_PHASE_EXIT ? "E" : NULL;
	if (!ph && r->op != VRT_OP_MARK && r->op != VRT_OP_OOM)
		return;
	fprintf(c->out, ",\n{\"name\": ");
	if (r->op == VRT_OP_OOM) {
		char label[128];
		snprintf(label, sizeof(label), "OOM: %s on device %d", vrt_bytes((int64_t)r->size), r->device);
		json_string(c->out, label);
	} else {
		json_string(c->out, vrt_string(c->t, r->id));
	}
	fprintf(c->out, ", \"ph\": \"%s\", \"ts\": %.3f, \"pid\": %d, \"tid\": %u%s}", ph ? ph : "i",
		vrt_ts_seconds(c->t, r->ts) * 1e6, c->pid, thread, ph ? "" : ", \"s\": \"p\"");
}

/* A counter point where the value changes only: a flat stretch is one point, not one per
 * bucket. Each bucket's highest value, so every peak is drawn. */
static void write_counters(struct chrome *c, const struct vrt_series *s)
{
	char name[64];
	int64_t shown[VRT_SERIES_MAX];
	for (int i = 0; i < s->n_series; i++)
		shown[i] = -1;
	for (int b = 0; b < s->used; b++) {
		for (int i = 0; i < s->n_series; i++) {
			int64_t v = s->max[b * VRT_SERIES_MAX + i];
			if (v == shown[i] && b != s->used - 1)
				continue;
			shown[i] = v;
			vrt_series_name(&s->keys[i], name, sizeof(name));
			fprintf(c->out, ",\n{\"name\": \"%s\", \"ph\": \"C\", \"ts\": %.3f, \"pid\": %d, \"args\": {\"bytes\": %lld}}",
				name, (s->from + b * s->width) * 1e6, c->pid, (long long)v);
		}
	}
}

static int replay(struct chrome *c, struct vrt_series *s)
{
	struct vrt_model m;
	if (vrt_model_init(&m))
		return VRT_EXIT_INTERNAL;
	struct vrt_pass p;
	struct vrt_record r;
	struct vrt_effect e;
	vrt_pass_open(&p, c->t, &(struct vrt_pass_options){ .label = "export", .quiet = c->o->quiet, .model = &m });
	while (vrt_pass_next(&p, &r, &e)) {
		if (e.kind != VRT_EFFECT_NONE)
			vrt_series_sample(s, &m, vrt_ts_seconds(c->t, m.last_ts));
		if (e.kind == VRT_EFFECT_BORN)
			write_allocation(c, &e.item, p.rp.thread);
		write_instant(c, &r, p.rp.thread);
	}
	int rc = vrt_pass_close(&p);
	vrt_model_free(&m);
	return rc;
}

static void write_other_data(struct chrome *c, const struct vrt_series *s)
{
	fprintf(c->out, ",\n\"otherData\": {\"trace\": ");
	json_string(c->out, c->t->path);
	fprintf(c->out, ", \"allocations\": %llu, \"allocations_with_stacks\": %llu, \"counter_step_s\": %.9f}",
		(unsigned long long)c->allocations, (unsigned long long)c->written, s->width);
}

int vrt_export_chrome(struct vrt_trace *t, FILE *out, const struct vrt_chrome_options *o)
{
	struct chrome c = { .t = t, .out = out, .o = o, .pid = t->hdr.pid };
	struct vrt_series s;
	/* before a --until-mark, the end is that mark, found on the way: the series widens to it */
	double end = t->end_mark ? 0 : vrt_trace_end_s(t);
	end = end ? end : 1e308;
	c.frames = open_memstream(&c.frames_text, &c.frames_len);
	if (!c.frames || vrt_series_init(&s, o->points, 0, end)) {
		if (c.frames)
			fclose(c.frames);
		free(c.frames_text);
		return vrt_fail(VRT_E_NOMEM, "export");
	}
	fprintf(out, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
	write_process(&c);
	write_threads(&c);
	int rc = replay(&c, &s);
	vrt_series_finish(&s);
	write_counters(&c, &s);
	fprintf(out, "\n],\n\"stackFrames\": {");
	if (fclose(c.frames))
		rc = rc ? rc : vrt_fail(VRT_E_NOMEM, "export");
	else if (c.frames_len)
		fprintf(out, "\n%s\n", c.frames_text);
	fputc('}', out);
	write_other_data(&c, &s);
	fprintf(out, "}\n");
	if (!rc && !o->quiet && c.allocations > c.written)
		fprintf(stderr, "vramtrace: note: the first %llu of the %llu allocations are events with their stacks "
				"(--max-events); the counters hold every one\n",
			(unsigned long long)c.written, (unsigned long long)c.allocations);
	free(c.frames_text);
	free(c.nodes);
	free(c.leaves);
	vrt_series_free(&s);
	return rc;
}
