/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attribution.h"
#include "report_common.h"
#include "vramtrace/error.h"
#include "vramtrace/rings.h"

int vrt_exit_code(int err)
{
	switch (err) {
	case VRT_OK: return VRT_EXIT_OK;
	case VRT_E_MAGIC: case VRT_E_VERSION: case VRT_E_TRUNCATED: case VRT_E_CORRUPT: case VRT_E_DECOMPRESS:
	case VRT_E_RECORD: case VRT_E_RANGE: case VRT_E_SIZE: case VRT_E_EMPTY:
		return VRT_EXIT_BAD_TRACE;
	case VRT_E_IO: case VRT_E_NOENT: case VRT_E_PERM: case VRT_E_PROTO: case VRT_E_UNSUPPORTED: case VRT_E_CHANGED:
	case VRT_E_NOT_FILE: case VRT_E_PEER:
		return VRT_EXIT_IO;
	case VRT_E_ARG:
		return VRT_EXIT_USAGE;
	}
	return VRT_EXIT_INTERNAL;
}

/*
 * A message for the terminal: what it quotes (a file name from a directory others write in, an
 * argument) may hold controls. Shown as the trace's strings are (vrt_text_unit), the newline
 * excepted; the rest (the messages' own "…") as it is.
 */
static void put_message(FILE *out, const char *fmt, va_list ap)
{
	char text[8192];
	vsnprintf(text, sizeof(text), fmt, ap);
	const uint8_t *p = (const uint8_t *)text, *end = p + strlen(text);
	while (p < end) {
		bool escape;
		size_t n = vrt_text_unit(p, (size_t)(end - p), &escape);
		for (size_t i = 0; i < n; i++) {
			if (escape && *p != '\n')
				fprintf(out, "\\x%02x", p[i]);
			else
				fputc(p[i], out);
		}
		p += n;
	}
}

int vrt_fail(int err, const char *fmt, ...)
{
	va_list ap;
	fputs("vramtrace: ", stderr);
	va_start(ap, fmt);
	put_message(stderr, fmt, ap);
	va_end(ap);
	if (err)
		fprintf(stderr, ": %s", vrt_strerror(err));
	fputc('\n', stderr);
	return vrt_exit_code(err);
}

int vrt_usage(const char *command, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "vramtrace %s: ", command);
	va_start(ap, fmt);
	put_message(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'vramtrace %s --help'.\n", command);
	return VRT_EXIT_USAGE;
}

int vrt_int_option(const char *command, const char *option, const char *value, long long lo, long long hi,
		   long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(value, &end, 10);
	if (!*value || *end || errno || v < lo || v > hi)
		return vrt_usage(command, "%s takes a whole number from %lld to %lld, not '%s'", option, lo, hi, value);
	*out = v;
	return 0;
}

int vrt_seconds_option(const char *command, const char *option, const char *value, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(value, &end);
	if (!*value || *end || errno || !(v >= 0) || v > 1e15) /* !(v >= 0): NaN too */
		return vrt_usage(command, "%s takes a time in seconds (0 or more, such as 12.5), not '%s'", option, value);
	*out = v;
	return 0;
}

bool vrt_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

struct vrt_cli_settings vrt_settings = { .width = -1 };

static const struct vrt_arg *find_arg(const struct vrt_arg *opts, const char *a)
{
	for (; opts->name; opts++)
		if (!strcmp(a, opts->name) || (opts->alias && !strcmp(a, opts->alias)))
			return opts;
	return NULL;
}

static int take_value(const char *command, const struct vrt_arg *o, const char *a, const char *value)
{
	int slot = 0;
	if (o->count) {
		if (*o->count >= o->max)
			return vrt_usage(command, "%s is given at most %d times", a, o->max);
		slot = (*o->count)++;
	}
	long long v;
	int rc = 0;
	switch (o->type) {
	case VRT_ARG_FLAG:
		((bool *)o->to)[slot] = true;
		break;
	case VRT_ARG_TEXT:
		((const char **)o->to)[slot] = value;
		break;
	case VRT_ARG_INT:
		if (!(rc = vrt_int_option(command, a, value, o->lo, o->hi, &v)))
			((int *)o->to)[slot] = (int)v;
		break;
	case VRT_ARG_SECONDS:
		rc = vrt_seconds_option(command, a, value, &((double *)o->to)[slot]);
		break;
	}
	return rc;
}

/* The options of argv[1..]: with prefix, they end at "--" or at the first argument that is not
 * one, and *rest is where they ended; otherwise every other argument is a positional one. */
static int parse(const char *command, int argc, char **argv, const struct vrt_arg *opts, bool prefix,
		 const char **positional, int max, int *n_positional)
{
	bool options = true;
	*n_positional = 0;
	vrt_settings.command = command;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (options && !strcmp(a, "--")) {
			options = false;
			if (prefix) {
				*n_positional = i + 1;
				return 0;
			}
			continue;
		}
		if (options && vrt_is_help(a)) {
			vrt_print_help(command);
			return -1;
		}
		if (!options || a[0] != '-' || !a[1]) { /* "-": a value such as standard output, not an option */
			if (prefix) {
				*n_positional = i;
				return 0;
			}
			if (*n_positional >= max)
				return vrt_usage(command, "unexpected argument '%s'", vrt_escape(a));
			positional[(*n_positional)++] = a;
			continue;
		}
		const struct vrt_arg *o = find_arg(opts, a);
		if (!o)
			return vrt_usage(command, "unknown option '%s'", vrt_escape(a));
		const char *value = NULL;
		if (o->type != VRT_ARG_FLAG && i + 1 >= argc)
			return vrt_usage(command, "%s takes a value", a);
		if (o->type != VRT_ARG_FLAG)
			value = argv[++i];
		int rc = take_value(command, o, a, value);
		if (rc)
			return rc;
	}
	if (prefix)
		*n_positional = argc;
	return 0;
}

int vrt_args_parse(const char *command, int argc, char **argv, const struct vrt_arg *opts, const char **positional,
		   int max, int *n_positional)
{
	return parse(command, argc, argv, opts, false, positional, max, n_positional);
}

int vrt_args_parse_prefix(const char *command, int argc, char **argv, const struct vrt_arg *opts, int *rest)
{
	return parse(command, argc, argv, opts, true, NULL, 0, rest);
}

int vrt_text_width(void)
{
	if (vrt_settings.width >= 0)
		return vrt_settings.width;
	if (!isatty(STDOUT_FILENO))
		return 0;
	struct winsize ws;
	if (!ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_col > 0)
		return ws.ws_col;
	const char *columns = getenv("COLUMNS");
	long n = columns ? strtol(columns, NULL, 10) : 0;
	return n > 0 && n < 100000 ? (int)n : 80;
}

int vrt_print_help(const char *command)
{
	for (const struct vrt_command *c = vrt_commands; c->name; c++)
		if (!strcmp(c->name, command)) {
			fputs(c->help, stdout);
			return VRT_EXIT_OK;
		}
	return VRT_EXIT_USAGE;
}

void vrt_fmt_bytes(char *buf, size_t len, int64_t bytes)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)(bytes < 0 ? -bytes : bytes);
	int u = 0;
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	const char *sign = bytes < 0 ? "-" : "";
	if (!u)
		snprintf(buf, len, "%s%lld B", sign, (long long)(bytes < 0 ? -bytes : bytes));
	else
		snprintf(buf, len, "%s%.*f %s", sign, v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
}

const char *vrt_bytes(int64_t bytes)
{
	static char ring[16][32];
	static int next;
	char *b = ring[next++ % 16];
	vrt_fmt_bytes(b, 32, bytes);
	return b;
}

static const char *file_type(const char *path)
{
	struct stat st;
	if (stat(path, &st))
		return "not a regular file";
	return S_ISDIR(st.st_mode)    ? "a directory"
	       : S_ISFIFO(st.st_mode) ? "a FIFO"
	       : S_ISCHR(st.st_mode)  ? "a character device"
	       : S_ISBLK(st.st_mode)  ? "a block device"
	       : S_ISSOCK(st.st_mode) ? "a socket"
				      : "not a regular file";
}

const char *vrt_current_trace;

int vrt_open_or_fail(struct vrt_trace *t, const char *path)
{
	vrt_current_trace = path;
	int rc = vrt_trace_open(t, path);
	if (!rc && (rc = vrt_check_until_mark(t, path, vrt_settings.command, vrt_settings.until_mark))) {
		vrt_trace_close(t);
		return rc;
	}
	if (!rc) {
		t->end_mark = vrt_settings.until_mark;
		vrt_attribution_use(t);
		return 0;
	}
	struct stat st;
	if (rc == VRT_E_MAGIC && !stat(path, &st) && S_ISREG(st.st_mode) && !st.st_size) {
		/* the preload names its file with O_EXCL, then writes the header: a kill can fall between */
		vrt_fail(0, "%s is empty: its process was killed (or its disk was full) before the trace's header "
			    "was written; it holds nothing", path);
		return vrt_exit_code(rc);
	}
	if (rc == VRT_E_MAGIC)
		return vrt_fail(rc, "%s", path);
	if (rc == VRT_E_VERSION)
		return vrt_fail(rc, "%s (this vramtrace reads format %d.x)", path, VRT_FORMAT_MAJOR);
	if (rc == VRT_E_NOT_FILE) {
		vrt_fail(0, "%s is %s, not a trace file: traces are read from regular files", path, file_type(path));
		return vrt_exit_code(rc);
	}
	if (rc == VRT_E_CHANGED)
		return vrt_fail(rc, "%s", path);
	if (rc == VRT_E_NOENT) { /* the code also means "no such process"; here it is a file */
		vrt_fail(0, "cannot read %s: no such file", path);
		return vrt_exit_code(rc);
	}
	return vrt_fail(rc, "cannot read %s", path);
}

const char *vrt_escape(const char *s)
{
	static char ring[4][1024];
	static int next;
	char *b = ring[next++ % 4];
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p && o + 5 < sizeof(ring[0]); p++) {
		if (*p < 0x20 || *p == 0x7f || *p >= 0x80) /* a peer's text is ASCII; anything else is shown, not sent */
			o += (size_t)snprintf(b + o, sizeof(ring[0]) - o, "\\x%02x", *p);
		else
			b[o++] = (char)*p;
	}
	b[o] = 0;
	return b;
}

double vrt_trace_end_s(const struct vrt_trace *t)
{
	return t->state_valid && t->hdr.state.end_ts ? vrt_ts_seconds(t, t->hdr.state.end_ts) : 0;
}

const char *vrt_end_text(const struct vrt_trace *t)
{
	if (t->cut_short)
		return "unknown: the trace was cut short";
	return t->state_valid ? vrt_end_reason_text(t->hdr.state.end_reason) : "unknown";
}

void vrt_json_completeness(FILE *out, const struct vrt_trace *t, int64_t events_read)
{
	const struct vrt_file_state *s = &t->hdr.state;
	fprintf(out, "\"truncated\": %s, \"completeness\": {\"cut_short\": %s, \"partial_chunk\": %s, "
		     "\"damaged_chunks\": %llu, \"history_lost\": %s, \"chunks_written\": %llu, \"chunks_found\": %llu, "
		     "\"events_written\": %llu, \"events_lost\": %llu",
		vrt_trace_cut(t) ? "true" : "false", t->cut_short ? "true" : "false", t->truncated ? "true" : "false",
		(unsigned long long)t->corrupt_chunks, t->history_lost ? "true" : "false",
		(unsigned long long)(t->state_valid ? s->last_chunk_seq : 0), (unsigned long long)t->seq_found,
		(unsigned long long)(t->state_valid ? s->events_written : 0),
		(unsigned long long)(t->state_valid ? s->events_lost : 0));
	if (events_read >= 0)
		fprintf(out, ", \"events_read\": %lld", (long long)events_read);
	fputc('}', out);
}

const char *vrt_write_error_text(int32_t detail)
{
	if (detail == VRT_E_SIZE) /* the writer's only size refusal: a checkpoint over half the ring */
		return "the live set outgrew the ring; run with a larger --ring";
	return detail > 0 ? strerror(detail) : vrt_strerror(detail);
}

void vrt_warn_trace_state(const struct vrt_trace *t, bool quiet)
{
	if (quiet)
		return;
	const struct vrt_file_state *s = &t->hdr.state;
	if (!t->state_valid)
		fprintf(stderr, "vramtrace: warning: %s: the state block is damaged; reading what the chunks hold\n",
			t->path);
	else if (t->cut_short)
		fprintf(stderr, "vramtrace: warning: %s: the trace was cut short: the file holds chunks up to number %llu of "
				"the %llu written (%llu of %llu bytes); reports cover what it holds, and how the process "
				"ended is unknown\n",
			vrt_escape(t->path), (unsigned long long)t->seq_found, (unsigned long long)s->last_chunk_seq,
			(unsigned long long)(t->end_found < t->size ? t->end_found : t->size),
			(unsigned long long)s->log_end);
	else if (s->end_reason == VRT_END_WRITE_FAILED)
		fprintf(stderr, "vramtrace: warning: %s: the trace was cut short at %.3f s: writing it failed (%s); "
				"the process went on untraced\n",
			vrt_escape(t->path), (double)s->end_ts * t->hdr.ts_unit_ns / 1e9, vrt_write_error_text(s->end_detail));
	else if (s->end_reason != VRT_END_EXIT)
		fprintf(stderr, "vramtrace: note: %s: %s%s\n", vrt_escape(t->path), vrt_end_sentence(s->end_reason),
			s->end_reason == VRT_END_SIGNAL || s->end_reason == VRT_END_KILLED ? " (see `vramtrace info`)" : "");
	char rings[sizeof(t->path) + 8];
	struct stat st;
	snprintf(rings, sizeof(rings), "%s%s", t->path, VRT_RINGS_SUFFIX);
	if (t->state_valid && (s->end_reason == VRT_END_RUNNING || s->end_reason == VRT_END_KILLED) &&
	    !lstat(rings, &st) && S_ISREG(st.st_mode) && t->hdr.pid > 0 && kill(t->hdr.pid, 0) && errno == ESRCH)
		fprintf(stderr, "vramtrace: warning: %s: its process's last events are still in %s: `vramtrace recover "
				"%s` adds them\n",
			vrt_escape(t->path), vrt_escape(rings), vrt_escape(t->path));
	if (t->history_lost && t->replay_from >= t->n_chunks)
		fprintf(stderr, "vramtrace: warning: %s: the ring overwrote the oldest history and holds no whole "
				"checkpoint (one was being written when the trace ended): there is nothing to replay; "
				"a larger --ring keeps one\n",
			t->path);
	else if (t->history_lost)
		fprintf(stderr, "vramtrace: note: %s: the ring overwrote the oldest history; reports cover the retained "
				"window (live set and stacks are exact)\n",
			t->path);
	if (t->truncated || t->corrupt_chunks)
		fprintf(stderr, "vramtrace: warning: %s: %s; reading up to the last complete chunk\n", vrt_escape(t->path),
			t->corrupt_chunks ? "damaged chunks were skipped" : "the file ends in a partial chunk");
	if (t->state_valid && s->events_lost)
		fprintf(stderr, "vramtrace: warning: %s: %llu events were lost while recording\n", vrt_escape(t->path),
			(unsigned long long)s->events_lost);
}

/* ---- inputs ----------------------------------------------------------------------------- */

struct input {
	char *path;
	long rank, pid;
};

static int cmp_input(const void *a, const void *b)
{
	const struct input *x = a, *y = b;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return strcmp(x->path, y->path);
}

static long number_after(const char *name, const char *tag)
{
	const char *p = strstr(name, tag);
	return p ? strtol(p + strlen(tag), NULL, 10) : -1;
}

/* NAME.vrt, or NAME.vrt.N: older preloads added ".N" after the extension when a name was taken. */
static bool trace_name(const char *name)
{
	size_t len = strlen(name), digits = 0;
	while (digits < len && name[len - 1 - digits] >= '0' && name[len - 1 - digits] <= '9')
		digits++;
	if (digits && digits < len && name[len - 1 - digits] == '.')
		len -= digits + 1;
	return len > 4 && !strncmp(name + len - 4, ".vrt", 4);
}

/* The traces in a directory: regular files only. The preload never makes a link, so a link
 * there was planted or made by hand; name it to read it. */
static int add_dir(const char *dir, struct input **in, int *n, int *cap)
{
	DIR *d = opendir(dir);
	if (!d)
		return VRT_E_IO;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (!trace_name(e->d_name))
			continue;
		const char *sep = dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/";
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode)) {
			fprintf(stderr, "vramtrace: note: %s%s%s is not a regular file; skipped\n", dir, sep, e->d_name);
			continue;
		}
		if (*n == *cap) {
			*cap = *cap ? *cap * 2 : 16;
			struct input *ni = realloc(*in, (size_t)*cap * sizeof(**in));
			if (!ni) {
				closedir(d);
				return VRT_E_NOMEM;
			}
			*in = ni;
		}
		struct input *it = &(*in)[(*n)++];
		if (asprintf(&it->path, "%s%s%s", dir, sep, e->d_name) < 0)
			it->path = NULL;
		long rank = number_after(e->d_name, "rank");
		it->rank = rank < 0 ? 1L << 30 : rank;
		it->pid = number_after(e->d_name, "vramtrace.");
	}
	closedir(d);
	return 0;
}

int vrt_collect_inputs(int argc, const char *const *argv, char ***paths, int *n_out)
{
	struct input *in = NULL;
	int n = 0, cap = 0;
	for (int i = 0; i < argc; i++) {
		struct stat st;
		if (!stat(argv[i], &st) && S_ISDIR(st.st_mode)) {
			int before = n;
			int rc = add_dir(argv[i], &in, &n, &cap);
			if (rc)
				return rc;
			if (n > before) /* qsort's array must not be NULL, even empty */
				qsort(in + before, (size_t)(n - before), sizeof(*in), cmp_input);
			continue;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			struct input *ni = realloc(in, (size_t)cap * sizeof(*in));
			if (!ni)
				return VRT_E_NOMEM;
			in = ni;
		}
		in[n++] = (struct input){ strdup(argv[i]), 0, 0 };
	}
	*paths = calloc((size_t)n + 1, sizeof(char *));
	if (!*paths)
		return VRT_E_NOMEM;
	for (int i = 0; i < n; i++)
		(*paths)[i] = in[i].path;
	free(in);
	*n_out = n;
	return n ? 0 : VRT_E_NOENT;
}

int vrt_single_input(const char *command, const char *arg, bool (*pick)(const char *path, void *ctx), void *ctx,
		     char *out, size_t len)
{
	struct stat st;
	if (stat(arg, &st) || !S_ISDIR(st.st_mode)) {
		if (snprintf(out, len, "%s", arg) >= (int)len)
			return vrt_fail(VRT_E_ARG, "%s: path too long", arg);
		return 0;
	}
	char **paths;
	const char *one[] = { arg };
	int n, rc = vrt_collect_inputs(1, one, &paths, &n);
	if (rc == VRT_E_NOENT) {
		vrt_fail(0, "%s holds no traces (*.vrt)", arg);
		return vrt_exit_code(rc);
	}
	if (rc)
		return vrt_fail(rc, "%s", arg);
	int chosen = -1, matches = 0;
	for (int i = 0; i < n; i++) {
		if (pick && !pick(paths[i], ctx))
			continue;
		if (!matches++)
			chosen = i;
	}
	if (!pick && n > 1) {
		fprintf(stderr, "vramtrace: %s holds %d traces; `%s` reads one: name it (report and leaks read them all):\n",
			arg, n, command);
		for (int i = 0; i < n; i++)
			fprintf(stderr, "  %s\n", paths[i]);
		rc = VRT_EXIT_USAGE;
	} else if (chosen < 0) {
		vrt_fail(0, "no trace in %s has what `%s` looks for", arg, command);
		rc = VRT_EXIT_FINDINGS;
	} else if (snprintf(out, len, "%s", paths[chosen]) >= (int)len) {
		rc = vrt_fail(VRT_E_ARG, "%s: path too long", paths[chosen]);
	} else if (matches > 1) {
		fprintf(stderr, "vramtrace: note: %d traces in %s qualify; reading the first, %s\n", matches, arg, out);
	}
	vrt_free_inputs(paths, n);
	return rc;
}

void vrt_free_inputs(char **paths, int n)
{
	for (int i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
}

/* ---- progress --------------------------------------------------------------------------- */

double vrt_monotonic_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Where progress goes: stderr, or (vrt_progress_to) a terminal the caller still has while our
 * stderr is a pipe it reads, with the caller's name before each label. */
static int progress_fd = STDERR_FILENO;
static const char *progress_prefix = "";
static bool progress_forced;

void vrt_progress_to(int fd, const char *prefix)
{
	progress_fd = fd;
	progress_prefix = prefix;
	progress_forced = true;
}

/* Seconds before a bar shows (VRAMTRACE_PROGRESS_DELAY, default 0.5: a quick command draws
 * none); the time left shows from 4 times that. */
static double progress_delay(void)
{
	static double delay = -1;
	if (delay < 0) {
		const char *v = getenv("VRAMTRACE_PROGRESS_DELAY");
		char *end;
		double d = v && *v ? strtod(v, &end) : 0.5;
		delay = v && *v && (*end || d < 0 || d > 3600) ? 0.5 : d;
	}
	return delay;
}

/* VRAMTRACE_PROGRESS_FD: a terminal the caller handed down (the Python module, whose stderr
 * pipe it reads for messages). Anything but an open terminal is ignored. */
void vrt_progress_from_env(void)
{
	const char *v = getenv("VRAMTRACE_PROGRESS_FD");
	char *end;
	long fd = v && *v ? strtol(v, &end, 10) : -1;
	if (fd < 3 || fd > 1 << 20 || *end || fcntl((int)fd, F_GETFD) < 0 || !isatty((int)fd))
		return;
	vrt_progress_to((int)fd, "vramtrace ");
}

void vrt_progress_begin(struct vrt_progress *p, const char *label, bool quiet)
{
	p->enabled = (progress_forced || !quiet) && isatty(progress_fd);
	p->label = label;
	p->last_percent = -1;
	p->started = vrt_monotonic_seconds();
}

void vrt_progress_update(struct vrt_progress *p, uint64_t done, uint64_t total)
{
	if (!p->enabled || !total)
		return;
	int percent = (int)(done * 100 / total);
	if (percent == p->last_percent || vrt_monotonic_seconds() - p->started < progress_delay())
		return;
	p->last_percent = percent;
	char bar[41];
	int filled = percent * 40 / 100;
	for (int i = 0; i < 40; i++)
		bar[i] = i < filled ? '#' : '.';
	bar[40] = 0;
	/* what is left at the pace so far, once there is a pace to go by */
	double elapsed = vrt_monotonic_seconds() - p->started;
	char eta[32] = "";
	if (elapsed >= 4 * progress_delay() && percent > 0 && percent < 100)
		snprintf(eta, sizeof(eta), " ~%.0f s left", elapsed * (100 - percent) / percent);
	dprintf(progress_fd, "\r%s%s [%s] %3d%%%-14s", progress_prefix, p->label, bar, percent, eta);
}

void vrt_progress_end(struct vrt_progress *p)
{
	if (p->enabled && p->last_percent >= 0)
		dprintf(progress_fd, "\r%*s\r", 76 + (int)(strlen(p->label) + strlen(progress_prefix)), "");
}

void vrt_process_label(const struct vrt_trace *t, char *buf, size_t len)
{
	if (t->hdr.rank >= 0)
		snprintf(buf, len, "rank %d (pid %d)", t->hdr.rank, t->hdr.pid);
	else
		snprintf(buf, len, "pid %d", t->hdr.pid);
}

int64_t vrt_gcd64(int64_t a, int64_t b)
{
	a = a < 0 ? -a : a;
	b = b < 0 ? -b : b;
	while (b) {
		int64_t r = a % b;
		a = b;
		b = r;
	}
	return a;
}
