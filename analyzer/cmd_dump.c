/* SPDX-License-Identifier: MIT */
/*
 * vramtrace dump: every record, one per line. With --json, JSON Lines for programs (the Python
 * module's events table, export --format parquet): a "header" line, then per record an "event"
 * line with every field, preceded the first time an event names a stack by a "stack" line with
 * its frames (innermost first) and the index of its headline frame, and an "end" line. Integers stay integers: sizes and addresses
 * are exact.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "model.h"
#include "owners.h"
#include "pass.h"
#include "stacks.h"

struct dump_options {
	const char *path;
	bool stacks, tables, quiet, json;
};

static void print_header(const struct vrt_trace *t)
{
	const struct vrt_file_header *h = &t->hdr;
	char host[sizeof(h->hostname) + 1];
	snprintf(host, sizeof(host), "%.*s", (int)sizeof(h->hostname), h->hostname);
	printf("# vramtrace trace format %u.%u, pid %d, ppid %d, rank %d, host %s\n", h->version_major,
	       h->version_minor, h->pid, h->ppid, h->rank, vrt_escape(host));
	printf("# %s, ts unit %u ns, %zu chunks%s\n", h->ring_size ? "ring" : "keep-all", h->ts_unit_ns, t->n_chunks,
	       t->history_lost ? ", oldest history overwritten" : "");
	if (t->cut_short)
		printf("# end: %s (chunks up to %" PRIu64 " of %" PRIu64 " are in the file); %" PRIu64
		       " events written, %" PRIu64 " lost\n",
		       vrt_end_text(t), t->seq_found, h->state.last_chunk_seq, h->state.events_written, h->state.events_lost);
	else if (t->state_valid)
		printf("# end: %s (%d); %" PRIu64 " events written, %" PRIu64 " lost\n",
		       vrt_end_reason_text(h->state.end_reason), h->state.end_detail, h->state.events_written,
		       h->state.events_lost);
	for (size_t i = 0; i < t->tables.n_info; i++)
		printf("# %s = %s\n", vrt_string(t, t->tables.info_keys[i]), vrt_string(t, t->tables.info_values[i]));
}

static void print_stack(const struct vrt_trace *t, uint32_t stack)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = vrt_stack_frames(t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
	char line[1024];
	for (int i = 0; i < n; i++) {
		vrt_frame_format(&frames[i], line, sizeof(line));
		printf("    #%d %s\n", i, line);
	}
}

static void print_record(const struct vrt_trace *t, uint32_t thread, const struct vrt_record *r, bool stacks)
{
	printf("%.6f t%u %-12s", vrt_ts_seconds(t, r->ts), thread, vrt_op_name(r->op));
	switch (r->op) {
	case VRT_OP_MARK: case VRT_OP_PHASE_ENTER: case VRT_OP_PHASE_EXIT:
		printf(" \"%s\"", vrt_string(t, r->id));
		break;
	case VRT_OP_LOST:
		printf(" %" PRIu64 " events", r->id);
		break;
	case VRT_OP_MODE:
		printf(" mode=%" PRIu64 " cause=%" PRIu64, r->id, r->id2);
		break;
	case VRT_OP_CP_BEGIN:
		printf(" reason=%" PRIu64 " events=%" PRIu64, r->id, r->aux);
		break;
	case VRT_OP_CP_END:
		printf(" id=%" PRIu64, r->id);
		break;
	case VRT_OP_CP_PHASE:
		printf(" id=%" PRIu64 " \"%s\" entered=%" PRIu64 " depth=%" PRIu64, r->id, vrt_string(t, r->id), r->aux,
		       r->aux2);
		break;
	case VRT_OP_WALK:
		printf(" reason=%" PRIu64 " status=%" PRIu64 " born_after=%.6f took_us=%" PRIu64 " objects=%" PRIu64, r->id,
		       r->id2, vrt_ts_seconds(t, r->aux), r->aux2, r->size);
		break;
	case VRT_OP_OWNER:
		printf(" dev=%d addr=0x%" PRIx64 " size=%" PRIu64 " category=%" PRIu64 " status=%" PRIu64 " held_by ", r->device,
		       r->addr, r->size, r->id2, r->aux);
		vrt_chain_print(stdout, vrt_string(t, r->id), " -> ");
		break;
	case VRT_OP_OOM_LIMITS:
		printf(" dev=%d requested=%" PRIu64 " allowed=%" PRIu64 " free=%" PRIu64 " reserved=%" PRIu64
		       " allocated=%" PRIu64 " capped=%d", r->device, r->size, r->aux, r->aux2, r->id, r->id2, r->result);
		break;
	case VRT_OP_EXITING:
		printf(" stage=%" PRIu64, r->id);
		break;
	case VRT_OP_CONTEXT:
		printf(" dev=%d %s", r->device, r->id ? "created" : "reset");
		break;
	case VRT_OP_CAPTURE_BEGIN: case VRT_OP_CAPTURE_END:
		printf(" %s dev=%d stream=0x%" PRIx64, vrt_api_name(r->api), r->device, r->stream);
		if (r->result)
			printf(" result=%d", r->result);
		if (r->stack)
			printf(" stack=%u", r->stack);
		break;
	default:
		printf(" %s dev=%d %s addr=0x%" PRIx64 " size=%" PRIu64, vrt_api_name(r->api), r->device,
		       vrt_kind_name(r->kind), r->addr, r->size);
		if (r->aux)
			printf(" aux=%" PRIu64, r->aux);
		if (r->result)
			printf(" result=%d", r->result);
		if (r->stack)
			printf(" stack=%u", r->stack);
		if (r->stack2)
			printf(" alloc_stack=%u", r->stack2);
		if (r->op == VRT_OP_CP_LIVE) /* what made it live, and its second value (a handle's references) */
			printf(" made=%s y=%" PRIu64, vrt_op_name((uint32_t)r->id2), r->aux2);
	}
	putchar('\n');
	if (stacks && r->stack)
		print_stack(t, r->stack);
}

static void print_tables(const struct vrt_trace *t)
{
	const struct vrt_tables *tb = &t->tables;
	printf("# tables: %zu strings, %zu modules, %zu symbols, %zu python codes, %zu python frames, %zu stack "
	       "nodes, %zu threads\n",
	       tb->n_strings, tb->n_modules, tb->n_symbols, tb->n_pycodes, tb->n_pyframes, tb->n_nodes, tb->n_threads);
	for (size_t i = 1; i < tb->n_modules; i++) {
		const struct vrt_module *m = &tb->modules[i];
		if (!m->path)
			continue; /* an id no MODULE record defined */
		printf("module %zu %s base=0x%" PRIx64 " build-id=", i, vrt_string(t, m->path), m->base);
		for (uint32_t k = 0; k < m->build_id_len; k++)
			printf("%02x", m->build_id[k]);
		printf("%s\n", m->build_id_len ? "" : "-");
	}
	for (size_t i = 0; i < tb->n_threads; i++)
		if (tb->threads[i].tid)
			printf("thread %zu tid=%" PRIu64 " \"%s\"\n", i, tb->threads[i].tid, vrt_string(t, tb->threads[i].name));
}

/* ---- --json ------------------------------------------------------------------------------ */

static void json_header(const struct vrt_trace *t)
{
	const struct vrt_file_header *h = &t->hdr;
	char host[sizeof(h->hostname) + 1];
	snprintf(host, sizeof(host), "%.*s", (int)sizeof(h->hostname), h->hostname);
	printf("{\"type\": \"header\", \"format\": \"%u.%u\", \"pid\": %d, \"ppid\": %d, \"rank\": %d, "
	       "\"local_rank\": %d, \"world_size\": %d, \"host\": ",
	       h->version_major, h->version_minor, h->pid, h->ppid, h->rank, h->local_rank, h->world_size);
	json_string(stdout, host);
	printf(", \"ts_unit_ns\": %u, \"history_lost\": %s, \"info\": {", h->ts_unit_ns,
	       t->history_lost ? "true" : "false");
	for (size_t i = 0; i < t->tables.n_info; i++) {
		fputs(i ? ", " : "", stdout);
		json_string(stdout, vrt_string(t, t->tables.info_keys[i]));
		fputs(": ", stdout);
		json_string(stdout, vrt_string(t, t->tables.info_values[i]));
	}
	fputs("}}\n", stdout);
}

/* Which stacks have had their "stack" line: one bit per stack id (ids are below n_nodes). */
struct seen_stacks {
	uint8_t *bits;
	size_t n;
};

static void json_stack_once(const struct vrt_trace *t, struct seen_stacks *seen, uint32_t stack)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	if (!stack || stack >= seen->n || (seen->bits[stack / 8] & (1u << (stack % 8))))
		return;
	seen->bits[stack / 8] |= (uint8_t)(1u << (stack % 8));
	int n = vrt_stack_frames(t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
	/* headline: the index of the frame the reports name the stack by (-1 when empty). */
	printf("{\"type\": \"stack\", \"stack\": %u, \"headline\": %d, \"frames\": [", stack,
	       vrt_headline_index(frames, n));
	for (int i = 0; i < n; i++) {
		fputs(i ? ", " : "", stdout);
		vrt_frame_json(stdout, &frames[i]);
	}
	fputs("]}\n", stdout);
}

static bool has_text(uint8_t op)
{
	return op == VRT_OP_MARK || op == VRT_OP_PHASE_ENTER || op == VRT_OP_PHASE_EXIT || op == VRT_OP_OWNER;
}

static void json_record(const struct vrt_trace *t, struct seen_stacks *seen, uint64_t seq, uint32_t thread,
			const struct vrt_record *r)
{
	json_stack_once(t, seen, r->stack);
	json_stack_once(t, seen, r->stack2);
	printf("{\"type\": \"event\", \"seq\": %" PRIu64 ", \"time_s\": %.9f, \"thread\": %u, \"op\": \"%s\", "
	       "\"api\": \"%s\", \"device\": %d, \"kind\": \"%s\", \"addr\": %" PRIu64 ", \"size\": %" PRIu64
	       ", \"aux\": %" PRIu64 ", \"aux2\": %" PRIu64 ", \"stream\": %" PRIu64 ", \"id\": %" PRIu64
	       ", \"id2\": %" PRIu64 ", \"result\": %d, \"stack\": %u, \"alloc_stack\": %u, \"text\": ",
	       seq, vrt_ts_seconds(t, r->ts), thread, vrt_op_name(r->op), vrt_api_name(r->api), r->device,
	       vrt_kind_name(r->kind), r->addr, r->size, r->aux, r->aux2, r->stream, r->id, r->id2, r->result,
	       r->stack, r->stack2);
	if (has_text(r->op))
		json_string(stdout, vrt_string(t, r->id));
	else
		fputs("null", stdout);
	fputs("}\n", stdout);
}

static int dump_json(struct vrt_trace *t, const char *path)
{
	struct seen_stacks seen = { calloc(t->tables.n_nodes / 8 + 1, 1), t->tables.n_nodes };
	if (!seen.bits)
		return vrt_fail(VRT_E_NOMEM, "out of memory");
	json_header(t);
	struct vrt_pass p;
	struct vrt_record r;
	uint64_t seq = 0;
	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .label = "dump", .quiet = true }); /* its own output is the record list */
	while (vrt_pass_next(&p, &r, NULL))
		json_record(t, &seen, seq++, p.rp.thread, &r);
	int error = vrt_pass_finish(&p);
	printf("{\"type\": \"end\", \"events\": %" PRIu64 ", \"complete\": %s}\n", seq, error ? "false" : "true");
	free(seen.bits);
	return error ? vrt_fail(error, "%s: stopped at a bad record", path) : 0;
}

int vrt_cmd_dump(int argc, char **argv)
{
	struct dump_options o = { 0 };
	const struct vrt_arg opts[] = {
		VRT_OPT_JSON(&o.json), VRT_OPT_QUIET(&o.quiet), VRT_OPT_UNTIL_MARK,
		{ "--stacks", NULL, VRT_ARG_FLAG, &o.stacks },
		{ "--tables", NULL, VRT_ARG_FLAG, &o.tables },
		VRT_OPT_END,
	};
	int n, rc = vrt_args_parse("dump", argc, argv, opts, &o.path, 1, &n);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!o.path)
		return vrt_usage("dump", "no trace file given");
	char path[4096];
	struct vrt_trace t;
	rc = vrt_single_input("dump", o.path, NULL, NULL, path, sizeof(path));
	if (rc || (rc = vrt_open_or_fail(&t, o.path = path)))
		return rc;
	vrt_warn_trace_state(&t, o.quiet);
	if (o.json) {
		rc = dump_json(&t, o.path);
		vrt_trace_close(&t);
		return rc;
	}
	print_header(&t);
	if (o.tables)
		print_tables(&t);
	struct vrt_pass p;
	struct vrt_record r;
	vrt_pass_open(&p, &t, &(struct vrt_pass_options){ .label = "dump", .quiet = true });
	while (vrt_pass_next(&p, &r, NULL))
		print_record(&t, p.rp.thread, &r, o.stacks);
	rc = vrt_pass_finish(&p);
	rc = rc ? vrt_fail(rc, "%s: stopped at a bad record", o.path) : 0;
	vrt_trace_close(&t);
	return rc;
}
