/* SPDX-License-Identifier: MIT */
/* `export --format chrome`: the trace as Chrome/Perfetto trace-event JSON. */
#ifndef VRAMTRACE_CHROME_TRACE_H
#define VRAMTRACE_CHROME_TRACE_H

#include <stdbool.h>
#include <stdio.h>

#include "trace_reader.h"

/* Counter resolution: the trace's span in at least this many steps (the default of --points). */
#define VRT_CHROME_POINTS 20000
/* Allocations written as events with their stacks (the default of --max-events). */
#define VRT_CHROME_ALLOCATIONS 100000

struct vrt_chrome_options {
	int points;      /* counter steps: the span in points..2*points buckets; a point where a value changes */
	int allocations; /* the first this many allocations are events with their stack */
	bool quiet;
};

/*
 * Writes {"traceEvents": [...], "stackFrames": {...}, "otherData": {...}}: the process named by
 * its command line and rank, its threads by name, one counter track per device and kind,
 * phases as slices, marks and OOMs as instants, and each allocation as an instant on the
 * thread that made it, with its size, its site (the frame reports name it by) and its stack
 * ("sf", an id in stackFrames, whose frames are shared between stacks). 0 or an exit code.
 */
int vrt_export_chrome(struct vrt_trace *t, FILE *out, const struct vrt_chrome_options *o);

#endif /* VRAMTRACE_CHROME_TRACE_H */
