/* SPDX-License-Identifier: MIT */
/*
 * Reports that other commands compose in-process, on a trace they already opened (html).
 * Each writes the same JSON its command's --json does (without the final newline), prints no
 * message and shows no progress.
 */
#ifndef VRAMTRACE_REPORTS_H
#define VRAMTRACE_REPORTS_H

#include <stdbool.h>
#include <stdio.h>

#include "trace_reader.h"

/* `vramtrace oom --json` (the default OOM, top 10 sites). *found: whether the trace has an
 * out-of-memory event (nothing is written when not). Returns 0 or a vrt_error. */
int vrt_oom_json(struct vrt_trace *t, FILE *out, bool *found);

#endif /* VRAMTRACE_REPORTS_H */
