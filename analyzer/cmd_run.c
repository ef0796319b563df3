/* SPDX-License-Identifier: MIT */
/* vramtrace run: start a command with the preload, follow its exit code, name the trace. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "recover.h"
#include "paths.h"
#include "vramtrace/error.h"
#include "vramtrace/options.h"
#include "vramtrace/output_place.h"
#include "vramtrace/record.h"
#include "vramtrace/rings.h"

struct run_options {
	const char *output;
	const char *ring;
	const char *phases[32];
	int n_phases;
	const char *depth;
	const char *retain;
	bool armed, no_python, free_stacks, quiet, no_torch, force;
	char **command;
};

static int parse(int argc, char **argv, struct run_options *o)
{
	memset(o, 0, sizeof(*o));
	bool keep_all = false;
	const struct vrt_arg opts[] = {
		VRT_OPT_OUTPUT(&o->output), VRT_OPT_QUIET(&o->quiet),
		{ "--ring", NULL, VRT_ARG_TEXT, &o->ring },
		{ "--keep-all", NULL, VRT_ARG_FLAG, &keep_all },
		{ "--phase", NULL, VRT_ARG_TEXT, o->phases, 0, 0, &o->n_phases, 32 },
		{ "--depth", NULL, VRT_ARG_TEXT, &o->depth },
		{ "--retain", NULL, VRT_ARG_TEXT, &o->retain },
		{ "--armed", NULL, VRT_ARG_FLAG, &o->armed },
		{ "--no-python", NULL, VRT_ARG_FLAG, &o->no_python },
		{ "--no-torch", NULL, VRT_ARG_FLAG, &o->no_torch },
		{ "--free-stacks", NULL, VRT_ARG_FLAG, &o->free_stacks },
		{ "--force", "-f", VRT_ARG_FLAG, &o->force },
		VRT_OPT_END,
	};
	int rest, rc = vrt_args_parse_prefix("run", argc, argv, opts, &rest);
	if (rc)
		return rc;
	if (keep_all) /* the same as --ring 0, wherever it stands */
		o->ring = "0";
	o->command = argv + rest; /* "--" is optional before a command */
	if (!o->command || !o->command[0])
		return vrt_usage("run", "no command given: vramtrace run [options] -- COMMAND [ARGS...]");
	uint64_t size;
	if (o->ring && (vrt_parse_size(o->ring, &size) || (size && size < (4u << 20))))
		return vrt_usage("run", "--ring takes a size of 4M or more, such as 64M or 2G, or 0 (keep everything)");
	long long depth;
	if (o->depth && (rc = vrt_int_option("run", "--depth", o->depth, 0, 128, &depth)))
		return rc;
	char *end = NULL;
	if (o->retain && strcmp(o->retain, "on") && strcmp(o->retain, "off") &&
	    (strtod(o->retain, &end) <= 0 || end == o->retain || *end))
		return vrt_usage("run", "--retain takes on, off, or the most seconds one retention walk may take");
	return 0;
}

/* Whether a file can be made in dir: one is made (O_EXCL, so nothing is followed or replaced)
 * and removed. errno says why not. */
static bool takes_a_file(const char *dir)
{
	char probe[PATH_MAX];
	size_t n = strlen(dir);
	if (snprintf(probe, sizeof(probe), "%s%s.vramtrace-probe-XXXXXX", dir, n && dir[n - 1] == '/' ? "" : "/") >=
	    (int)sizeof(probe)) {
		errno = ENAMETOOLONG;
		return false;
	}
	int fd = mkstemp(probe);
	if (fd < 0)
		return false;
	close(fd);
	unlink(probe);
	return true;
}

/* A trace file we are about to (re)create: only ever remove our own regular file, and only
 * when asked to (-f): a second run to the same name must not destroy the first one's trace. */
static int prepare_output(const char *out, bool force, bool *is_dir)
{
	size_t n = strlen(out);
	struct stat st;
	*is_dir = (n && out[n - 1] == '/') || (!lstat(out, &st) && S_ISDIR(st.st_mode));
	if (*is_dir) {
		if (mkdir(out, 0700) && errno != EEXIST) {
			/* Before the job starts, as an existing trace without -f: nothing ran, one line. */
			vrt_fail(0, "cannot create directory %s: %s; the command was not run", out, strerror(errno));
			return VRT_EXIT_IO;
		}
		/* A directory that exists but takes no file (not ours to write, read-only, a pseudo file
		 * system) is found now, by creating a file in it, not by each process's preload: the
		 * job is not started, as when the directory cannot be made. A place the preload refuses
		 * anyway (another user can change it) is left to its one line. */
		char why[1200];
		if (vrt_output_place_ok(out, true, why, sizeof(why)) && !takes_a_file(out)) {
			vrt_fail(0, "cannot write in %s: %s; the command was not run", out, strerror(errno));
			return VRT_EXIT_IO;
		}
		return 0;
	}
	if (!lstat(out, &st)) {
		if (!S_ISREG(st.st_mode) || st.st_uid != getuid())
			return vrt_fail(VRT_E_PERM, "%s exists and is not a trace file of yours; choose another -o", out);
		if (!force)
			return vrt_usage("run", "%s exists: pass -f to replace it, or choose another -o", vrt_escape(out));
		unlink(out);
		char rings[PATH_MAX + 8]; /* a killed run's sidecar, never recovered: it goes with its trace */
		snprintf(rings, sizeof(rings), "%s%s", out, VRT_RINGS_SUFFIX);
		if (!lstat(rings, &st) && S_ISREG(st.st_mode) && st.st_uid == getuid())
			unlink(rings);
	}
	char dir[PATH_MAX], why[1200];
	snprintf(dir, sizeof(dir), "%s", out);
	char *slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir] = 0; /* "/x" -> "/" */
	if (vrt_output_place_ok(out, false, why, sizeof(why)) && !takes_a_file(slash ? dir : ".")) {
		vrt_fail(0, "cannot write %s: %s; the command was not run", out, strerror(errno));
		return VRT_EXIT_IO;
	}
	return 0;
}

static int configure_env(const struct run_options *o, const char *preload)
{
	(void)vrt_prepend_env("LD_PRELOAD", preload, ':');
	if (o->ring)
		setenv("VRAMTRACE_RING", o->ring, 1);
	if (o->armed)
		setenv("VRAMTRACE_MODE", "armed", 1);
	if (o->depth)
		setenv("VRAMTRACE_STACK_DEPTH", o->depth, 1);
	if (o->no_python)
		setenv("VRAMTRACE_PYTHON", "0", 1);
	if (o->no_torch)
		setenv("VRAMTRACE_TORCH", "0", 1);
	if (o->free_stacks)
		setenv("VRAMTRACE_FREE_STACKS", "1", 1);
	if (o->quiet)
		setenv("VRAMTRACE_QUIET", "1", 1);
	if (o->retain)
		setenv("VRAMTRACE_RETAIN", o->retain, 1);
	if (o->n_phases) {
		char list[1024] = "";
		for (int i = 0; i < o->n_phases; i++) {
			strncat(list, o->phases[i], sizeof(list) - strlen(list) - 2);
			if (i + 1 < o->n_phases)
				strcat(list, ",");
		}
		setenv("VRAMTRACE_PHASE", list, 1);
	}
	/* A Python job gets the phase hooks and the retention walks through a sitecustomize. Only
	 * the bootstrap goes on PYTHONPATH: the package's directory may be a whole site-packages,
	 * which must not shadow the job's own path. */
	char bootstrap[PATH_MAX], package[PATH_MAX];
	if (vrt_find_python_dirs(bootstrap, sizeof(bootstrap), package, sizeof(package))) {
		if (o->n_phases)
			return vrt_fail(VRT_E_NOENT, "--phase needs the vramtrace Python package, which is not installed "
						     "next to this binary");
		return 0;
	}
	setenv("VRAMTRACE_PYTHON_PACKAGE", package, 1);
	(void)vrt_prepend_env("PYTHONPATH", bootstrap, ':');
	return 0;
}

static pid_t child;
static struct timespec run_started; /* the coarse clock file times come from, before the job */

/* Whether a file was modified after the job started: to the nanosecond where its file system
 * keeps them, else (a time on a whole second) from the second before the start. */
static bool modified_since_start(const struct stat *st)
{
	if (st->st_mtim.tv_nsec == 0)
		return st->st_mtim.tv_sec >= run_started.tv_sec - 1;
	return st->st_mtim.tv_sec > run_started.tv_sec ||
	       (st->st_mtim.tv_sec == run_started.tv_sec && st->st_mtim.tv_nsec >= run_started.tv_nsec);
}

static void forward(int sig)
{
	if (child > 0)
		kill(child, sig);
}

static uint64_t monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Records how the process ended in a trace that does not say: its exit status, or the signal
 * that killed it before it could close its trace, and when (ended_ns: CLOCK_MONOTONIC, the
 * preload's clock too). An end the trace states is left alone, except an exit status the
 * preload could not know. Returns whether the file is a trace; *s is its state block then, and
 * *killed whether a signal ended the process before the preload closed the trace.
 */
static bool record_end(const char *path, int status, uint64_t ended_ns, struct vrt_file_state *s, bool *killed)
{
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	struct vrt_file_header h;
	bool trace = pread(fd, &h, sizeof(h), 0) == sizeof(h) && !memcmp(h.magic, VRT_FILE_MAGIC, VRT_FILE_MAGIC_LEN) &&
		     h.header_crc == vrt_crc32c(0, &h, offsetof(struct vrt_file_header, header_crc)) && h.ts_unit_ns &&
		     h.state.crc == vrt_crc32c(0, &h.state, offsetof(struct vrt_file_state, crc));
	if (!trace) {
		close(fd);
		return false;
	}
	*s = h.state;
	bool running = s->end_reason == VRT_END_RUNNING;
	if (WIFSIGNALED(status) && running) {
		*killed = true; /* the preload never closed it: what it had not written yet is not there */
		s->end_reason = VRT_END_KILLED;
		s->end_detail = WTERMSIG(status);
	} else if (WIFEXITED(status) && (running || (s->end_reason == VRT_END_EXIT && s->end_detail < 0))) {
		/* RUNNING here: it left through _exit(), skipping the preload's destructor. */
		s->end_reason = VRT_END_EXIT;
		s->end_detail = WEXITSTATUS(status);
	} else {
		close(fd);
		return true;
	}
	if (running && ended_ns > h.start_monotonic_ns)
		s->end_ts = (ended_ns - h.start_monotonic_ns) / h.ts_unit_ns;
	s->generation++;
	s->crc = vrt_crc32c(0, s, offsetof(struct vrt_file_state, crc));
	ssize_t ignored = pwrite(fd, s, sizeof(*s), VRT_STATE_OFFSET);
	(void)ignored;
	close(fd);
	return true;
}

/* Whether the preload could have created path: its directory is writable and searchable. */
static bool creatable(const char *path)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir] = 0; /* "/x" -> "/" */
	return !access(slash ? dir : ".", W_OK | X_OK);
}

/* PATH as a shell word the user can paste: bare when it is plain, else single-quoted. */
static const char *shell_word(const char *path)
{
	static char word[PATH_MAX * 4 + 3];
	const char *e = vrt_escape(path);
	if (*e && strspn(e, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/+-=:,@%") == strlen(e))
		return e;
	size_t o = 0;
	word[o++] = '\'';
	for (; *e && o + 6 < sizeof(word); e++) {
		if (*e == '\'') {
			memcpy(word + o, "'\\''", 4);
			o += 4;
		} else
			word[o++] = *e;
	}
	word[o++] = '\'';
	word[o] = 0;
	return word;
}

/* What to run next: leaks when phases were asked for, else report. */
static void print_next_step(const struct run_options *o, const char *path)
{
	fprintf(stderr, "vramtrace: next: vramtrace %s %s  (also: %s, oom, html -o report.html; vramtrace help)\n",
		o->n_phases ? "leaks" : "report", shell_word(path), o->n_phases ? "report" : "leaks");
}

/*
 * Traces in dir whose names begin with prefix, made since the run started (the job's other
 * processes: a launcher's children, a forked worker), but the file named skip (already said);
 * the first four are named ("trace: NAME (what)"). Returns how many; *first: the first's path.
 */
static int new_traces(const char *dir, const char *prefix, const char *skip, const char *what, char *first,
		      size_t first_len)
{
	const char *base = *dir ? dir : ".";
	DIR *d = opendir(base);
	if (!d)
		return 0;
	size_t d_len = strlen(base), p_len = strlen(prefix);
	const char *sep = base[d_len - 1] == '/' ? "" : "/";
	struct dirent *e;
	int found = 0;
	while ((e = readdir(d))) {
		char path[PATH_MAX];
		struct stat st;
		size_t n = strlen(e->d_name);
		if (strncmp(e->d_name, prefix, p_len) || n < p_len + 4 || strcmp(e->d_name + n - 4, ".vrt") ||
		    snprintf(path, sizeof(path), "%s%s%s", base, sep, e->d_name) >= (int)sizeof(path) ||
		    (skip && !strcmp(e->d_name, skip)) || lstat(path, &st) || !S_ISREG(st.st_mode) ||
		    st.st_uid != getuid() || !modified_since_start(&st))
			continue;
		if (!found++ && first)
			snprintf(first, first_len, "%s", path);
		if (found <= 4 && what)
			fprintf(stderr, "vramtrace: trace: %s (%s)\n", vrt_escape(path), what);
	}
	closedir(d);
	if (found > 4 && what)
		fprintf(stderr, "vramtrace: ... and %d more\n", found - 4);
	return found;
}

/* The default's traces that other processes of the job wrote (the command itself made no CUDA
 * allocation: a shell or launcher ran the program as its child). */
static bool print_childrens_traces(const struct run_options *o)
{
	char first[PATH_MAX] = "";
	int found = new_traces(".", "vramtrace.", NULL, "written by a process the command started", first,
			       sizeof(first));
	if (found)
		print_next_step(o, found == 1 ? first : ".");
	return found > 0;
}

/* -o FILE: what the command's other processes wrote beside it ("<stem>.<pid>.vrt"). */
static void print_siblings(const char *path)
{
	char dir[PATH_MAX], stem[PATH_MAX];
	const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path + 1) : 0, path);
	snprintf(stem, sizeof(stem), "%s", name);
	size_t n = strlen(stem);
	if (n > 4 && !strcmp(stem + n - 4, ".vrt"))
		stem[n - 4] = 0;
	strncat(stem, ".", sizeof(stem) - strlen(stem) - 1);
	new_traces(dir, stem, name, "beside it, from another process of the command", NULL, 0);
}

/* killed: the signal that ended the process before the preload closed the trace, or 0.
 * siblings: path is -o FILE, beside which the command's other processes write theirs. */
static void print_trace_written(const struct run_options *o, const char *path, const struct vrt_file_state *s,
				int killed, bool recovered, bool siblings)
{
	struct stat st;
	char size[32] = "";
	if (!stat(path, &st))
		vrt_fmt_bytes(size, sizeof(size), (int64_t)st.st_size);
	char lost[64] = "";
	if (s->events_lost)
		snprintf(lost, sizeof(lost), ", %llu lost", (unsigned long long)s->events_lost);
	fprintf(stderr, "vramtrace: trace: %s (%s%s%llu event%s%s)\n", vrt_escape(path), size, *size ? ", " : "",
		(unsigned long long)s->events_written, s->events_written == 1 ? "" : "s", lost);
	if (killed && recovered)
		fprintf(stderr, "vramtrace: note: the command was killed by signal %d (%s) before the trace was closed; "
				"its unwritten events were recovered from its thread buffers (above)\n", killed,
			strsignal(killed));
	else if (killed)
		fprintf(stderr, "vramtrace: note: the command was killed by signal %d (%s) before the trace was closed; "
				"its last events may be missing\n", killed, strsignal(killed));
	if (siblings)
		print_siblings(path);
	print_next_step(o, path);
}

/* A killed process's sidecar (include/vramtrace/rings.h): its unwritten events go into its trace
 * now. Returns whether there was one to recover. */
static bool recover_killed(const struct run_options *o, const char *path, int end_signal)
{
	char rings[PATH_MAX + 8];
	struct stat st;
	snprintf(rings, sizeof(rings), "%s%s", path, VRT_RINGS_SUFFIX);
	if (lstat(rings, &st) || !S_ISREG(st.st_mode))
		return false;
	struct vrt_recovery r;
	if (!vrt_recover(path, end_signal, (int)child, &r) && !o->quiet)
		vrt_recovery_say(path, &r);
	return true;
}

/* Whether the process that owns a sidecar is still running (another job writing into the same
 * directory): its trace is not ours to touch. */
static bool owner_running(const char *rings)
{
	struct vrt_rings_header h;
	int fd = open(rings, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	bool read_it = fd >= 0 && pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h);
	if (fd >= 0)
		close(fd);
	return read_it && h.pid > 0 && (!kill(h.pid, 0) || errno == EPERM);
}

/*
 * Every process of this run that was killed leaves its sidecar in the directory its trace went
 * to (DIR/, or the one of -o FILE: a launcher's workers write NAME.PID.vrt beside it, and the
 * first of them may have taken FILE itself): each one made since the run began by a process no
 * longer running is recovered (skip: a name not to look at). vrt_recover records the signal for
 * the child's own trace only.
 */
static void recover_dir(const struct run_options *o, const char *dir, int end_signal, const char *skip)
{
	DIR *d = opendir(*dir ? dir : ".");
	if (!d)
		return;
	struct dirent *e;
	size_t suffix = strlen(VRT_RINGS_SUFFIX), d_len = strlen(dir);
	const char *sep = !d_len || dir[d_len - 1] == '/' ? "" : "/";
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		char trace[PATH_MAX], rings[PATH_MAX];
		struct stat st;
		if (n <= suffix || strcmp(e->d_name + n - suffix, VRT_RINGS_SUFFIX) ||
		    snprintf(trace, sizeof(trace), "%s%s%.*s", dir, sep, (int)(n - suffix), e->d_name) >= (int)sizeof(trace) ||
		    snprintf(rings, sizeof(rings), "%s%s%s", dir, sep, e->d_name) >= (int)sizeof(rings) ||
		    lstat(rings, &st) || !modified_since_start(&st) || (skip && !strcmp(trace, skip)) || owner_running(rings))
			continue;
		(void)recover_killed(o, trace, end_signal);
	}
	closedir(d);
}

static void report_trace(const struct run_options *o, bool is_dir, int status, uint64_t ended_ns)
{
	char path[PATH_MAX];
	if (o->output && !is_dir)
		snprintf(path, sizeof(path), "%s", o->output);
	else
		snprintf(path, sizeof(path), "%s%svramtrace.%d.vrt", o->output ? o->output : ".",
			 o->output && o->output[strlen(o->output) - 1] != '/' ? "/" : o->output ? "" : "/", (int)child);
	struct vrt_file_state s;
	bool killed_before_close = false;
	bool trace = record_end(path, status, ended_ns, &s, &killed_before_close);
	bool recovered = false;
	if (!is_dir && trace && killed_before_close && (recovered = recover_killed(o, path, WTERMSIG(status)))) {
		bool again;
		(void)record_end(path, status, ended_ns, &s, &again); /* the counts now */
	}
	if (is_dir) {
		recover_dir(o, o->output, WIFSIGNALED(status) ? WTERMSIG(status) : 0, NULL);
	} else { /* the directory the trace is in */
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s", path);
		char *slash = strrchr(dir, '/');
		if (slash)
			slash[1] = 0;
		else
			dir[0] = 0;
		recover_dir(o, dir, WIFSIGNALED(status) ? WTERMSIG(status) : 0, NULL);
	}
	char why[1200];
	if (o->quiet)
		return;
	if (!trace && !vrt_output_place_ok(o->output ? o->output : ".", is_dir || !o->output, why, sizeof(why)))
		fprintf(stderr, "vramtrace: no trace was written: %s\n", why); /* the preload refused it too */
	else if (trace && s.end_reason == VRT_END_WRITE_FAILED) {
		fprintf(stderr, "vramtrace: trace: %s (cut short: writing it failed: %s)\n", vrt_escape(path),
			vrt_write_error_text(s.end_detail));
		print_next_step(o, path);
	} else if (trace) {
		print_trace_written(o, path, &s, killed_before_close ? WTERMSIG(status) : 0, recovered,
				    o->output && !is_dir);
	}
	else if (access(path, F_OK) == 0 && WIFSIGNALED(status))
		fprintf(stderr, "vramtrace: %s is not a complete trace: the command was killed by signal %d (%s) before "
				"its header was written\n", path, WTERMSIG(status), strsignal(WTERMSIG(status)));
	else if (access(path, F_OK) == 0)
		fprintf(stderr, "vramtrace: %s is not a complete trace: the preload could not write it (see above)\n",
			vrt_escape(path));
	else if (!creatable(path))
		fprintf(stderr, "vramtrace: no trace was written: %s cannot be created (%s)\n", vrt_escape(path), strerror(errno));
	else if (is_dir && new_traces(o->output, "vramtrace.", NULL, NULL, NULL, 0)) {
		fprintf(stderr, "vramtrace: traces: %s (one file per process)\n", vrt_escape(o->output));
		print_next_step(o, o->output);
	} else if (o->armed)
		fprintf(stderr, "vramtrace: no trace was written here: the command ran armed (live set only); "
				"`vramtrace attach PID` starts tracing it (into the place its -o names)\n");
	else if (WIFSIGNALED(status))
		fprintf(stderr, "vramtrace: no trace was written: the command was killed by signal %d (%s) before its "
				"trace's first write\n", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else if (o->output || !print_childrens_traces(o))
		fprintf(stderr, "vramtrace: no trace was written (the command made no CUDA allocation)\n");
}

/*
 * Where the job's processes write, as an absolute path: a relative one would be taken against
 * each process's working directory when it writes, and a job that changes directory first (a
 * launcher script's `cd`) would put its trace where neither the user nor the summary looks.
 * Without -o (and no VRAMTRACE_OUTPUT set): this directory, one file per process as before.
 */
static int set_output_env(const char *output)
{
	const char *given = output ? output : getenv("VRAMTRACE_OUTPUT");
	char cwd[PATH_MAX], absolute[PATH_MAX + 2];
	if (given && *given == '/')
		return setenv("VRAMTRACE_OUTPUT", given, 1) ? VRT_E_NOMEM : 0;
	if (!getcwd(cwd, sizeof(cwd)))
		return vrt_fail(VRT_E_IO, "cannot read the working directory: %s", strerror(errno));
	int n = given && *given ? snprintf(absolute, sizeof(absolute), "%s/%s", cwd, given)
				: snprintf(absolute, sizeof(absolute), "%s/", cwd);
	if (n < 0 || (size_t)n >= sizeof(absolute))
		return vrt_usage("run", "the trace's path is too long: choose a shorter -o");
	return setenv("VRAMTRACE_OUTPUT", absolute, 1) ? VRT_E_NOMEM : 0;
}

int vrt_cmd_run(int argc, char **argv)
{
	struct run_options o;
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc < 0 ? 0 : rc; /* -1: --help, printed */
	char preload[PATH_MAX];
	if (vrt_find_preload(preload, sizeof(preload)))
		return vrt_fail(VRT_E_NOENT, "cannot find libvramtrace.so next to this binary (set VRAMTRACE_PRELOAD)");
	bool is_dir = false;
	if (o.output && (rc = prepare_output(o.output, o.force, &is_dir)))
		return rc;
	if ((rc = set_output_env(o.output)))
		return rc;
	if ((rc = configure_env(&o, preload)))
		return rc;
	fflush(NULL);
	clock_gettime(CLOCK_REALTIME_COARSE, &run_started); /* never after a file time taken later */
	/* The child reports a failed exec through a close-on-exec pipe: a command that never ran
	 * gets one line ("cannot run"), not a second one about the trace it could not write. */
	int exec_failed[2];
	if (pipe2(exec_failed, O_CLOEXEC))
		return vrt_fail(VRT_E_IO, "pipe: %s", strerror(errno));
	child = fork();
	if (child < 0)
		return vrt_fail(VRT_E_IO, "fork: %s", strerror(errno));
	if (child == 0) {
		close(exec_failed[0]);
		execvp(o.command[0], o.command);
		int err = errno;
		ssize_t ignored = write(exec_failed[1], &err, sizeof(err));
		(void)ignored;
		_exit(127);
	}
	close(exec_failed[1]);
	int exec_errno = 0;
	ssize_t got;
	while ((got = read(exec_failed[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR)
		;
	close(exec_failed[0]);
	if (got == sizeof(exec_errno)) {
		while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
			;
		fprintf(stderr, "vramtrace: cannot run %s: %s\n", vrt_escape(o.command[0]), strerror(exec_errno));
		return exec_errno == ENOENT ? 127 : 126;
	}
	signal(SIGINT, forward);
	signal(SIGTERM, forward);
	signal(SIGHUP, forward);
	signal(SIGQUIT, forward);
	int status = 0;
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	report_trace(&o, is_dir, status, monotonic_ns());
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
