/* SPDX-License-Identifier: MIT */
/* What every subcommand shares: option parsing helpers, messages, exit codes, inputs. */
#ifndef VRAMTRACE_CLI_H
#define VRAMTRACE_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trace_reader.h"

/* Exit codes (documented in docs/cli.md). */
enum vrt_exit {
	VRT_EXIT_OK = 0,
	VRT_EXIT_FINDINGS = 1, /* leaks --fail-on-growth found growth; oom found no out-of-memory event */
	VRT_EXIT_USAGE = 2,
	VRT_EXIT_BAD_TRACE = 3,
	VRT_EXIT_IO = 4,
	VRT_EXIT_INTERNAL = 5,
	VRT_EXIT_LIMIT = 6,    /* the analysis needed more memory than --max-memory allows */
};

struct vrt_command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
	const char *help; /* full --help text: usage, options, examples */
};

extern const struct vrt_command vrt_commands[];

/* Prints "vramtrace: <what>: <reason>" to stderr and returns the exit code for err. */
int vrt_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int vrt_usage(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int vrt_exit_code(int err);
bool vrt_is_help(const char *arg);
/* An option's number, checked whole: 0, or the usage error (naming the option) and its exit code. */
int vrt_int_option(const char *command, const char *option, const char *value, long long lo, long long hi,
		   long long *out);
int vrt_seconds_option(const char *command, const char *option, const char *value, double *out);
int vrt_print_help(const char *command);

void vrt_fmt_bytes(char *buf, size_t len, int64_t bytes);
/* "1.2 GiB"-style into a static rotating buffer, for printf arguments. */
const char *vrt_bytes(int64_t bytes);

/* The trace the command reads now (set by vrt_open_or_fail), for messages that name it. */
extern const char *vrt_current_trace;
/* Opens a trace, printing a clear message on failure (returns 0 or an exit code). */
int vrt_open_or_fail(struct vrt_trace *t, const char *path);
/* How the process ended, as reports say it: "unknown" when the trace was cut short. */
const char *vrt_end_text(const struct vrt_trace *t);
/* `"truncated": B, "completeness": {...}` for a --json output; events_read < 0: not counted. */
void vrt_json_completeness(FILE *out, const struct vrt_trace *t, int64_t events_read);
/* s with control characters and non-ASCII bytes as \xNN, for text that came from another
 * process (control replies, a header's host name); a rotating static buffer, 1 KiB at most. */
const char *vrt_escape(const char *s);
/* Warnings about a trace that was cut short, wrapped, or damaged; to stderr unless quiet. */
void vrt_warn_trace_state(const struct vrt_trace *t, bool quiet);
/* Why writing a trace failed, from its VRT_END_WRITE_FAILED end_detail (an errno or a vrt_error). */
const char *vrt_write_error_text(int32_t detail);

/* Expands arguments into trace files: directories give their *.vrt files (sorted by rank, pid). */
int vrt_collect_inputs(int argc, char **argv, char ***paths, int *n);
void vrt_free_inputs(char **paths, int n);
/* The one trace a command that reads one takes from arg, into out: arg itself, or the trace in
 * directory arg (pick, when given, chooses among its traces: the first it accepts, with a note
 * when there are more). 0, or an exit code after the message. */
int vrt_single_input(const char *command, const char *arg, bool (*pick)(const char *path, void *ctx), void *ctx,
		     char *out, size_t len);

/* Progress on a terminal, quiet otherwise. */
struct vrt_progress {
	bool enabled;
	const char *label;
	int last_percent;
	double started;
};
void vrt_progress_begin(struct vrt_progress *p, const char *label, bool quiet);
void vrt_progress_update(struct vrt_progress *p, uint64_t done, uint64_t total);
void vrt_progress_end(struct vrt_progress *p);
/* From now on progress goes to fd (a terminal), prefix before each label, even where the
 * command was asked to be quiet: html's forked leaks/oom analyses. */
void vrt_progress_to(int fd, const char *prefix);
/* The same for a terminal named by VRAMTRACE_PROGRESS_FD (main, at start). */
void vrt_progress_from_env(void);

double vrt_monotonic_seconds(void);
/* FNV-1a of a NUL-terminated string, for the reports' string-keyed tables. */
static inline uint64_t vrt_hash_string(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

/* The process label used when several traces are shown: "rank 1 (pid 123)" or "pid 123". */
void vrt_process_label(const struct vrt_trace *t, char *buf, size_t len);

#endif /* VRAMTRACE_CLI_H */
