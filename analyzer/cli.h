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

/*
 * One option parser for every command: a table of the options a command takes, and the
 * spellings every command shares (VRT_OPT_QUIET ...), so that an option means the same thing
 * wherever it is accepted. "--name=value" is split by main before a command sees it.
 */
enum vrt_arg_type {
	VRT_ARG_FLAG,    /* bool *: set when given */
	VRT_ARG_TEXT,    /* const char **: the value */
	VRT_ARG_INT,     /* int *: a whole number from lo to hi */
	VRT_ARG_SECONDS, /* double *: a time in seconds, 0 or more */
};

struct vrt_arg {
	const char *name;  /* "--top" */
	const char *alias; /* "-q", or NULL */
	enum vrt_arg_type type;
	void *to;
	int lo, hi;        /* VRT_ARG_INT */
	int *count, max;   /* repeatable (count not NULL): `to` is an array of max values */
};

/* What shared options set for the whole command rather than for one report: every trace the
 * command opens through vrt_open_or_fail ends at until_mark (html's leaks and OOM sections
 * included: they ride its passes), and frames are cut to vrt_text_width(). They hold for the
 * process: one that runs several commands (tests/fuzz/fuzz_reports.c) resets them in between. */
struct vrt_cli_settings {
	const char *command;    /* the command parsing its options, for messages */
	const char *until_mark; /* --until-mark LABEL, or NULL */
	int width;              /* --width N (0: no limit), or -1: not given */
};
extern struct vrt_cli_settings vrt_settings;

#define VRT_OPT_QUIET(dst)   { "--quiet", "-q", VRT_ARG_FLAG, (dst), 0, 0, NULL, 0 }
#define VRT_OPT_JSON(dst)    { "--json", NULL, VRT_ARG_FLAG, (dst), 0, 0, NULL, 0 }
#define VRT_OPT_TOP(dst)     { "--top", NULL, VRT_ARG_INT, (dst), 1, 1000000, NULL, 0 }
#define VRT_OPT_FRAMES(dst)  { "--frames", NULL, VRT_ARG_INT, (dst), 0, VRT_MAX_FRAMES, NULL, 0 }
#define VRT_OPT_OUTPUT(dst)  { "--output", "-o", VRT_ARG_TEXT, (dst), 0, 0, NULL, 0 }
#define VRT_OPT_UNTIL_MARK   { "--until-mark", NULL, VRT_ARG_TEXT, &vrt_settings.until_mark, 0, 0, NULL, 0 }
#define VRT_OPT_WIDTH        { "--width", NULL, VRT_ARG_INT, &vrt_settings.width, 0, 100000, NULL, 0 }
#define VRT_OPT_END          { NULL, NULL, VRT_ARG_FLAG, NULL, 0, 0, NULL, 0 }

/*
 * Parses argv[1..] by opts (ended by VRT_OPT_END): the other arguments, up to max of them, go to
 * positional (n_positional says how many); after "--" every argument is one. -h/--help prints
 * the command's help. Returns 0 to go on, -1 after --help (the command exits 0), or the usage
 * error's exit code after its message, which names the option or argument.
 */
int vrt_args_parse(const char *command, int argc, char **argv, const struct vrt_arg *opts, const char **positional,
		   int max, int *n_positional);
/* The same for a command that runs another (run): the options end at "--" or at the first
 * argument that is not one, and *rest is the index of what follows them. */
int vrt_args_parse_prefix(const char *command, int argc, char **argv, const struct vrt_arg *opts, int *rest);
/* The columns frame lines are cut to (0: no limit): --width when given; else, on a terminal,
 * its width (TIOCGWINSZ, else $COLUMNS, else 80); else none, so that pipes and files get every
 * line whole. */
int vrt_text_width(void);
/* The columns left of width after used of them (0: width 0, no limit); never fewer than 8. */
static inline int vrt_room(int width, int used) { return !width ? 0 : width - used > 8 ? width - used : 8; }

void vrt_fmt_bytes(char *buf, size_t len, int64_t bytes);
/* The greatest common divisor of |a| and |b| (0 and 0: 0): the unit a series' bytes share. */
int64_t vrt_gcd64(int64_t a, int64_t b);
/* "1.2 GiB"-style into a static rotating buffer, for printf arguments. */
const char *vrt_bytes(int64_t bytes);

/* The trace the command reads now (set by vrt_open_or_fail), for messages that name it. */
extern const char *vrt_current_trace;
/* Opens a trace, printing a clear message on failure (returns 0 or an exit code). */
int vrt_open_or_fail(struct vrt_trace *t, const char *path);
/* How the process ended, as reports say it: "unknown" when the trace was cut short. */
const char *vrt_end_text(const struct vrt_trace *t);
/* When the process ended, in trace seconds, as its state block says; 0 when it does not (never
 * closed, a damaged or cut-short state). */
double vrt_trace_end_s(const struct vrt_trace *t);
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
int vrt_collect_inputs(int argc, const char *const *argv, char ***paths, int *n);
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
 * command was asked to be quiet (the Python module's reports, through VRAMTRACE_PROGRESS_FD). */
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
