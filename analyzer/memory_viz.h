/* SPDX-License-Identifier: MIT */
/* PyTorch's memory snapshot, pickled, from a trace (memory_viz.c). */
#ifndef VRAMTRACE_MEMORY_VIZ_H
#define VRAMTRACE_MEMORY_VIZ_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "trace_reader.h"

/* Writes the snapshot to out; at most max_events trace entries per device. 0 or an exit code. */
int vrt_export_memory_viz(struct vrt_trace *t, FILE *out, uint64_t max_events, bool quiet);

#endif /* VRAMTRACE_MEMORY_VIZ_H */
