/* SPDX-License-Identifier: MIT */
/*
 * Reports that other commands compose in-process, on a trace they already opened (html).
 * Each writes the same JSON its command's --json does (without the final newline) to a FILE:
 * one writer for the command and its caller, so the two cannot drift apart.
 */
#ifndef VRAMTRACE_REPORTS_H
#define VRAMTRACE_REPORTS_H

#include <stdbool.h>
#include <stdio.h>

#include "model.h"
#include "trace_reader.h"

/* The search for the OOM to explain (the default one: the last PyTorch failure, else the last
 * CUDA one; or the index-th, from 1), fed every record of a pass with its thread and the
 * number of events so far, this record's included. */
struct vrt_oom_search;
struct vrt_oom_search *vrt_oom_search_new(int index);
void vrt_oom_search_record(struct vrt_oom_search *s, const struct vrt_record *r, uint32_t thread, uint64_t events);
void vrt_oom_search_free(struct vrt_oom_search *s);
/* `vramtrace oom --json` (top 10 sites) for the OOM a whole pass fed to s found. *found:
 * whether the trace has one (nothing is written when not). Returns 0 or a vrt_error. */
int vrt_oom_json(struct vrt_trace *t, struct vrt_oom_search *s, FILE *out, bool *found);
bool vrt_oom_search_found(const struct vrt_oom_search *s);
/* The same, written during a model pass from the trace's start that the caller runs anyway: called
 * with the model before the first record (r NULL) and after each record applied. Once the model
 * stands just before the failure it writes the JSON to out and returns false; false too when the
 * search found no OOM. vrt_oom_explained says whether it wrote. */
bool vrt_oom_step(struct vrt_oom_search *s, struct vrt_trace *t, const struct vrt_model *m, const struct vrt_record *r,
		  FILE *out);
bool vrt_oom_explained(const struct vrt_oom_search *s);

/*
 * `vramtrace leaks --json -q` (default options: the phase leaks picks, else the low points), fed
 * by three passes the caller runs anyway, each from the trace's start with a model applied to
 * every record handed to vrt_leaks_feed_record: the first and third to the end, the second as
 * long as vrt_leaks_feed_wants says (the low points' first look goes on to teardown).
 * vrt_leaks_feed_pass_end after each, with the pass's model as it ended; then vrt_leaks_feed_json
 * writes the JSON and returns 0 or the exit code `leaks` would end with (no message).
 */
struct vrt_leaks_feed;
struct vrt_leaks_feed *vrt_leaks_feed_new(struct vrt_trace *t);
void vrt_leaks_feed_record(struct vrt_leaks_feed *f, const struct vrt_model *m, const struct vrt_record *r,
			   const struct vrt_effect *e);
bool vrt_leaks_feed_wants(const struct vrt_leaks_feed *f, const struct vrt_model *m);
void vrt_leaks_feed_pass_end(struct vrt_leaks_feed *f, const struct vrt_model *m);
int vrt_leaks_feed_json(struct vrt_leaks_feed *f, FILE *out);
void vrt_leaks_feed_free(struct vrt_leaks_feed *f);

#endif /* VRAMTRACE_REPORTS_H */
