/* SPDX-License-Identifier: MIT */
/* vramtrace info: what a trace holds and how its process ended. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json.h"
#include "model.h"

static void print_text(const struct vrt_trace *t)
{
	const struct vrt_file_header *h = &t->hdr;
	const struct vrt_file_state *s = &h->state;
	char when[64] = "?";
	time_t secs = (time_t)(h->start_realtime_ns / 1000000000ull);
	struct tm tm;
	if (gmtime_r(&secs, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	printf("trace      %s (format %u.%u)\n", vrt_escape(t->path), h->version_major, h->version_minor);
	char host[sizeof(h->hostname) + 1];
	snprintf(host, sizeof(host), "%.*s", (int)sizeof(h->hostname), h->hostname);
	printf("process    pid %d, parent %d", h->pid, h->ppid);
	if (h->rank >= 0) /* -1: not a distributed job (no RANK in its environment) */
		printf(", rank %d of %d, local rank %d", h->rank, h->world_size, h->local_rank);
	printf(", host %s\n", vrt_escape(host));
	const char *cmd = vrt_info(t, "cmdline");
	printf("command    %s\n", cmd ? cmd : "?");
	const char *torch = vrt_info(t, "torch"); /* written by the preload when it recognised PyTorch */
	if (torch && *torch)
		printf("pytorch    %s\n", torch);
	printf("started    %s\n", when);
	if (t->cut_short) {
		printf("ended      unknown: the trace was cut short (the file holds chunks up to number %" PRIu64
		       " of the %" PRIu64 " written; it last said: %s)\n",
		       t->seq_found, s->last_chunk_seq, vrt_end_reason_text(s->end_reason));
		printf("events     %" PRIu64 " written, %" PRIu64 " lost; fewer are in the file\n", s->events_written,
		       s->events_lost);
	} else if (t->state_valid) {
		printf("ended      %s", vrt_end_reason_text(s->end_reason));
		if (s->end_reason == VRT_END_SIGNAL || s->end_reason == VRT_END_KILLED)
			printf(" (signal %d)", s->end_detail);
		else if (s->end_reason == VRT_END_EXIT && s->end_detail >= 0)
			printf(" (status %d)", s->end_detail);
		else if (s->end_reason == VRT_END_WRITE_FAILED)
			printf(" (%s)", vrt_write_error_text(s->end_detail));
		if (s->end_ts) /* 0: never closed (running, or killed): `report` reads how long it ran */
			printf(" after %.3f s\n", vrt_ts_seconds(t, s->end_ts));
		else
			putchar('\n');
		printf("events     %" PRIu64 " written, %" PRIu64 " lost\n", s->events_written, s->events_lost);
	} else {
		printf("ended      unknown: the state block is damaged\n");
	}
	printf("layout     %s, %zu chunks, %" PRIu64 " bytes%s%s%s%s\n",
	       h->ring_size ? "ring" : "keep-all", t->n_chunks, t->size, t->history_lost ? ", oldest history overwritten" : "",
	       t->cut_short ? ", cut short" : "", t->truncated ? ", ends in a partial chunk" : "",
	       t->corrupt_chunks ? ", damaged chunks skipped" : "");
	if (h->ring_size)
		printf("ring       %s, wrapped %" PRIu64 " times\n", vrt_bytes((int64_t)h->ring_size), s->ring_laps);
	const struct vrt_tables *tb = &t->tables;
	printf("tables     %zu stack nodes, %zu symbols, %zu modules, %zu Python frames, %zu threads\n", tb->n_nodes,
	       tb->n_symbols, tb->n_modules, tb->n_pyframes, tb->n_threads);
}

int vrt_cmd_info(int argc, char **argv)
{
	const char *path = NULL;
	bool json = false, quiet = false; /* info prints no notes or progress: -q is accepted as everywhere */
	const struct vrt_arg opts[] = { VRT_OPT_JSON(&json), VRT_OPT_QUIET(&quiet), VRT_OPT_END };
	int n, rc = vrt_args_parse("info", argc, argv, opts, &path, 1, &n);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!path)
		return vrt_usage("info", "no trace file given");
	char file[4096];
	struct vrt_trace t;
	rc = vrt_single_input("info", path, NULL, NULL, file, sizeof(file));
	if (rc || (rc = vrt_open_or_fail(&t, path = file)))
		return rc;
	if (!json) {
		print_text(&t);
	} else {
		const struct vrt_file_state *s = &t.hdr.state;
		printf("{\"file\": ");
		json_string(stdout, path);
		printf(", \"pid\": %d, \"parent\": %d, \"rank\": %d, \"local_rank\": %d, \"world_size\": %d, \"host\": ",
		       t.hdr.pid, t.hdr.ppid, t.hdr.rank, t.hdr.local_rank, t.hdr.world_size);
		char host[sizeof(t.hdr.hostname) + 1];
		snprintf(host, sizeof(host), "%.*s", (int)sizeof(t.hdr.hostname), t.hdr.hostname);
		json_string(stdout, host);
		const char *cmd = vrt_info(&t, "cmdline");
		printf(", \"cmdline\": ");
		if (cmd)
			json_string(stdout, cmd);
		else
			printf("null");
		const char *torch = vrt_info(&t, "torch");
		printf(", \"torch\": ");
		if (torch && *torch)
			json_string(stdout, torch);
		else
			printf("null");
		printf(", \"start_unix_s\": %.6f, \"duration_s\": ", (double)t.hdr.start_realtime_ns / 1e9);
		if (t.state_valid && !t.cut_short && s->end_reason != VRT_END_RUNNING)
			printf("%.6f", vrt_ts_seconds(&t, s->end_ts));
		else
			printf("null");
		/* exit_status/signal: what the text's "(status N)"/"(signal N)" say; null otherwise. */
		bool exited = t.state_valid && s->end_reason == VRT_END_EXIT && s->end_detail >= 0;
		bool signalled = t.state_valid && (s->end_reason == VRT_END_SIGNAL || s->end_reason == VRT_END_KILLED);
		printf(", \"exit_status\": ");
		exited ? printf("%d", s->end_detail) : printf("null");
		printf(", \"signal\": ");
		signalled ? printf("%d", s->end_detail) : printf("null");
		printf(", \"end_reason\": ");
		json_string(stdout, vrt_end_text(&t));
		printf(", \"end_code\": %u, \"end_detail\": %d, \"events_written\": %" PRIu64 ", \"events_lost\": %" PRIu64
		       ", \"ring\": %s, \"history_lost\": %s, \"chunks\": %zu, ",
		       t.state_valid ? s->end_reason : 0, s->end_detail, s->events_written, s->events_lost,
		       t.hdr.ring_size ? "true" : "false", t.history_lost ? "true" : "false", t.n_chunks);
		vrt_json_completeness(stdout, &t, -1);
		printf("}\n");
	}
	vrt_trace_close(&t);
	return 0;
}
