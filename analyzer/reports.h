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

/* `vramtrace leaks --json -q` (default options: the phase leaks picks, else the low points) on
 * the trace, its passes' progress named "html: leaks" unless quiet. Returns 0 or the exit code
 * `leaks` would end with (its message then on stderr, as the command gives it). */
int vrt_leaks_json(struct vrt_trace *t, bool quiet, FILE *out);

#endif /* VRAMTRACE_REPORTS_H */
