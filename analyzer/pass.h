/* SPDX-License-Identifier: MIT */
/*
 * One pass over a trace: the iterator every report's replay loop is written with. Each
 * command keeps its own loop body,
 *
 *	struct vrt_pass p;
 *	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .label = "leaks", .model = &m });
 *	while (vrt_pass_next(&p, &r, &e)) { ... }
 *	rc = vrt_pass_close(&p);
 *
 * and the pass owns what the loops share: the model (applied before a record is handed out),
 * the stop conditions (the start of teardown, a time; --until-mark ends the trace itself), the progress line, the
 * error text and the model's warnings. Memory: the model's, never the trace's length.
 */
#ifndef VRAMTRACE_PASS_H
#define VRAMTRACE_PASS_H

#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "model.h"

struct vrt_pass_options {
	const char *label;          /* the progress line's name ("leaks"); NULL: "reading" */
	bool quiet;                 /* no progress line and no warnings */
	struct vrt_model *model;    /* applied to every record handed out; NULL: records only */
	bool stop_at_teardown;      /* the pass ends before EXITING (teardown_s says when) */
	bool until_time;            /* the pass ends before the first event after until_s */
	double until_s;             /* seconds since the trace started */
	bool simulation;            /* a replay of the caching allocator under changed settings (whatif,
				     * oom's remedies): counted apart from the reports' passes */
};

struct vrt_pass {
	struct vrt_trace *t;
	struct vrt_pass_options o;
	struct vrt_replay rp;
	uint64_t records;           /* records handed out */
	uint64_t events;            /* event records among them (checkpoints are not events) */
	bool stopped;               /* ended at the mark or at teardown, not at the trace's end */
	double teardown_s;          /* when teardown began, when the pass stopped there */
	struct vrt_progress progress;
};

/* Starts a pass from the trace's first replayed chunk. Counted (VRAMTRACE_DEBUG_PASSES). */
void vrt_pass_open(struct vrt_pass *p, struct vrt_trace *t, const struct vrt_pass_options *o);
/* The next record, with the model already applied (*e its effect, when e is not NULL). false
 * at the end, at a stop condition, or at a bad record (vrt_pass_close says which). */
bool vrt_pass_next(struct vrt_pass *p, struct vrt_record *r, struct vrt_effect *e);
/* vrt_pass_next without the copy: the record in the pass's batch, valid until the next call;
 * NULL where vrt_pass_next returns false. */
const struct vrt_record *vrt_pass_take(struct vrt_pass *p, struct vrt_effect *e);
/* Ends the pass: clears the progress line, warns once per trace about what the model refused,
 * and turns a bad record into its message. Returns 0 or an exit code (after the message). */
int vrt_pass_close(struct vrt_pass *p);
/* Ends the pass as vrt_pass_close does, without the message: the vrt_error (0: none), for a
 * caller that words its own. */
int vrt_pass_finish(struct vrt_pass *p);
/* Ends a pass whose errors are not its own to report (another pass over the same chunks
 * reports them): clears the progress line only. */
void vrt_pass_abandon(struct vrt_pass *p);

/* Passes opened by this process so far, allocator simulations not counted (the test of html's
 * pass budget reads them: VRAMTRACE_DEBUG_PASSES). */
uint64_t vrt_pass_count(void);

#endif /* VRAMTRACE_PASS_H */
