/* SPDX-License-Identifier: MIT */
/*
 * vramtrace attach / mark / snapshot: requests to a running process over its control socket
 * (include/vramtrace/control.h). A process without one (started without vramtrace) gets the
 * library injected by `attach` (inject.c), which then waits until the process reports that
 * tracing runs. Only processes of the same user are ever touched; nothing here raises
 * privileges.
 */
#define _GNU_SOURCE
#define VRT_CTL_CLIENT
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "inject.h"
#include "paths.h"
#include "vramtrace/control.h"
#include "vramtrace/error.h"

#define NOT_TRACED "process %d is not traced: run `vramtrace attach %d` first"
#define ATTACH_WAIT_MS 15000

/* ---- shared ----------------------------------------------------------------------------- */

/* "vramtrace: <message>" (which already says why) and the exit code for err. */
static int refuse(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(int err, const char *fmt, ...)
{
	va_list ap;
	fputs("vramtrace: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return vrt_exit_code(err);
}

static int parse_pid(const char *command, const char *s, int *pid)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (!*s || *end || v <= 0 || v > INT_MAX)
		return vrt_usage(command, "'%s' is not a process id", s);
	*pid = (int)v;
	return 0;
}

/*
 * `vramtrace run` itself is not the traced process: its one child is. Taking the launcher's pid
 * (the one a shell's `&` or `jobs -p` shows) for its child's saves a confusing injection into a
 * process that makes no CUDA call.
 */
static int through_launcher(int pid)
{
	char exe[PATH_MAX], self[PATH_MAX], path[96], children[256];
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	ssize_t a = readlink(path, exe, sizeof(exe) - 1), b = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (a <= 0 || b <= 0 || a != b || memcmp(exe, self, (size_t)a))
		return pid;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", pid, pid);
	FILE *f = fopen(path, "re");
	int child = 0, more = 0;
	if (f) {
		if (!fgets(children, sizeof(children), f) || sscanf(children, "%d %d", &child, &more) != 1)
			child = 0;
		fclose(f);
	}
	if (child <= 0)
		return pid;
	fprintf(stderr, "vramtrace: process %d is `vramtrace run`; using the program it runs, process %d\n", pid, child);
	return child;
}

/* The process exists and is ours: an exit code otherwise. Its control socket checks the same
 * (SO_PEERCRED), but a clear answer comes from here. A `vramtrace run` pid becomes its child's. */
static int check_process(int *pid)
{
	char why[512];
	int rc = vrt_process_owned(*pid, why, sizeof(why));
	if (!rc)
		*pid = through_launcher(*pid);
	return rc ? refuse(rc, "%s", why) : 0;
}

/* Makes path absolute against our working directory: the process has its own. */
static int absolute_path(const char *path, char *out, size_t len)
{
	char cwd[PATH_MAX];
	if (path[0] == '/')
		return snprintf(out, len, "%s", path) < (int)len ? 0 : VRT_E_ARG;
	if (!getcwd(cwd, sizeof(cwd)))
		return VRT_E_IO;
	while (path[0] == '.' && path[1] == '/')
		path += 2;
	return snprintf(out, len, "%s/%s", cwd, path) < (int)len ? 0 : VRT_E_ARG;
}

/* "process Q (uid U, comm)": who holds another process's control socket name. */
static const char *impostor(const struct vrt_ctl_msg *m)
{
	static char text[128];
	char path[64], comm[32] = "?";
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)m->impostor_pid);
	FILE *f = fopen(path, "re");
	if (f) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
	}
	snprintf(text, sizeof(text), "process %d (uid %u, %s)", (int)m->impostor_pid, (unsigned)m->impostor_uid,
		 vrt_escape(comm));
	return text;
}

/* The socket name was taken, and the real server (if any) answered elsewhere: say so. */
static void note_impostor(int pid, const struct vrt_ctl_msg *m)
{
	if (m->impostor_pid && m->via[0])
		fprintf(stderr, "vramtrace: note: @vramtrace.%d is held by %s, not by process %d: ignored it; process %d "
				"answered at %s\n", pid, impostor(m), pid, pid, vrt_escape(m->via));
}

/* Sends one request and reports the outcome; not_traced is the message for "no socket". What the
 * process says back is printed with its control characters escaped: it is not ours. */
static int request(int pid, uint16_t type, const char *payload, int timeout_ms, const char *not_traced)
{
	struct vrt_ctl_msg reply;
	int rc = vrt_ctl_request(pid, type, payload, &reply, timeout_ms);
	if (rc == VRT_E_PEER)
		return refuse(rc, "process %d: its control socket @vramtrace.%d is held by %s, not by process %d: "
			      "refusing to talk to it", pid, pid, impostor(&reply), pid);
	if (rc == VRT_E_NOENT)
		return refuse(VRT_E_NOENT, not_traced, pid, pid);
	if (rc == VRT_E_PERM)
		return vrt_fail(rc, "process %d refused the request (not the same user)", pid);
	if (rc)
		return vrt_fail(rc, "no answer from process %d", pid);
	note_impostor(pid, &reply);
	if (reply.status)
		return refuse(reply.status, "process %d: %s", pid, vrt_escape(reply.payload));
	printf("process %d: %s\n", pid, vrt_escape(reply.payload));
	return 0;
}

/* ---- attach ----------------------------------------------------------------------------- */

struct attach_options {
	bool stop, armed;
	const char *output;
	int pid;
};

static int parse_attach(int argc, char **argv, struct attach_options *o)
{
	memset(o, 0, sizeof(*o));
	const char *pid = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (vrt_is_help(a))
			return -1;
		if (!strcmp(a, "--stop"))
			o->stop = true;
		else if (!strcmp(a, "--armed"))
			o->armed = true;
		else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && i + 1 < argc)
			o->output = argv[++i];
		else if (a[0] != '-' && !pid)
			pid = a;
		else
			return vrt_usage("attach", "unexpected argument '%s'", a);
	}
	if (!pid)
		return vrt_usage("attach", "which process? vramtrace attach [--stop|--armed] [-o PATH] PID");
	if (o->stop && o->armed)
		return vrt_usage("attach", "--stop and --armed do not go together");
	if (o->output && (o->stop || o->armed))
		return vrt_usage("attach", "-o names the trace of a new attach; it does not go with --stop or --armed");
	return parse_pid("attach", pid, &o->pid);
}

static bool field(const char *status, const char *key, char *out, size_t len)
{
	const char *p = strstr(status, key);
	if (!p)
		return false;
	p += strlen(key);
	size_t n = strcspn(p, " ");
	snprintf(out, len, "%.*s", (int)n, p);
	return true;
}

/* After an injection: the library's worker starts the collector, hooks and switches to full
 * tracing on its own; wait until its STATUS says so, or says why not. */
static int wait_until_tracing(int pid, const char *library)
{
	struct timespec pause = { 0, 50 * 1000000 };
	char trace[PATH_MAX] = "";
	for (int waited = 0; waited < ATTACH_WAIT_MS; waited += 50, nanosleep(&pause, NULL)) {
		struct vrt_ctl_msg reply;
		if (kill(pid, 0) && errno == ESRCH)
			return refuse(VRT_E_NOENT, "process %d ended before tracing started", pid);
		if (!vrt_inject_loaded(pid, library)) /* a launcher script that exec'd the real program */
			return refuse(VRT_E_IO, "process %d started a new program (exec) right after the attach: attach again",
				      pid);
		if (vrt_ctl_request(pid, VRT_CTL_STATUS, NULL, &reply, 2000))
			continue; /* not listening yet */
		const char *failed = strstr(reply.payload, " attach failed: ");
		if (failed)
			return refuse(VRT_E_IO, "process %d: %s", pid, vrt_escape(failed + 1));
		if (strstr(reply.payload, " mode full ") && field(reply.payload, " trace ", trace, sizeof(trace))) {
			note_impostor(pid, &reply);
			printf("process %d: libvramtrace.so injected; tracing everything to %s\n", pid, vrt_escape(trace));
			return 0;
		}
	}
	return vrt_fail(VRT_E_IO, "libvramtrace.so was loaded into process %d, but tracing did not start within %d s",
			pid, ATTACH_WAIT_MS / 1000);
}

static int inject(const struct attach_options *o)
{
	char why[2048], library[PATH_MAX], output[PATH_MAX], name[64];
	int rc = vrt_inject_permitted(o->pid, why, sizeof(why));
	if (rc)
		return refuse(rc, "cannot attach to process %d: %s", o->pid, why);
	if (vrt_inject_loaded(o->pid, NULL))
		return refuse(VRT_E_UNSUPPORTED, "libvramtrace.so is loaded in process %d, but its control socket does "
			      "not answer: the process was started with VRAMTRACE_CONTROL=0 or VRAMTRACE_MODE=off, or "
			      "vramtrace disabled itself there (see its stderr); it cannot be attached", o->pid);
	if (vrt_find_preload(library, sizeof(library)))
		return vrt_fail(VRT_E_NOENT, "cannot find libvramtrace.so next to this binary (set VRAMTRACE_PRELOAD)");
	snprintf(name, sizeof(name), "vramtrace.%d.vrt", o->pid);
	if (absolute_path(o->output ? o->output : name, output, sizeof(output)))
		return vrt_fail(VRT_E_ARG, "output path too long");
	rc = vrt_inject(o->pid, library, output, why, sizeof(why));
	if (rc)
		return refuse(rc, "cannot attach to process %d: %s", o->pid, why);
	return wait_until_tracing(o->pid, library);
}

int vrt_cmd_attach(int argc, char **argv)
{
	struct attach_options o;
	int rc = parse_attach(argc, argv, &o);
	if (rc)
		return rc < 0 ? vrt_print_help("attach") : rc;
	if ((rc = check_process(&o.pid)))
		return rc;
	struct vrt_ctl_msg status;
	rc = vrt_ctl_request(o.pid, VRT_CTL_STATUS, NULL, &status, 5000);
	if (rc == VRT_E_PEER) /* no vramtrace of that process answers; someone took its name */
		fprintf(stderr, "vramtrace: note: @vramtrace.%d is held by %s, not by process %d: ignored it\n", o.pid,
			impostor(&status), o.pid);
	if ((rc == VRT_E_NOENT || rc == VRT_E_PEER) && (o.stop || o.armed))
		return refuse(VRT_E_NOENT, "process %d is not traced: there is nothing to %s", o.pid, o.stop ? "stop" : "arm");
	if (rc == VRT_E_NOENT || rc == VRT_E_PEER)
		return inject(&o);
	if (rc)
		return request(o.pid, VRT_CTL_STATUS, NULL, 5000, NOT_TRACED); /* reports the error */
	if (o.stop)
		return request(o.pid, VRT_CTL_STOP, NULL, 60000, NOT_TRACED);
	if (o.armed)
		return request(o.pid, VRT_CTL_ARM, NULL, 60000, NOT_TRACED);
	char output[PATH_MAX] = "";
	if (o.output && absolute_path(o.output, output, sizeof(output)))
		return vrt_fail(VRT_E_ARG, "output path too long");
	return request(o.pid, VRT_CTL_START, output[0] ? output : NULL, 60000, NOT_TRACED);
}

/* ---- mark ------------------------------------------------------------------------------- */

int vrt_cmd_mark(int argc, char **argv)
{
	int pid;
	if (argc > 1 && vrt_is_help(argv[1]))
		return vrt_print_help("mark");
	if (argc != 3)
		return vrt_usage("mark", "expected a process id and a label: vramtrace mark PID LABEL");
	int rc = parse_pid("mark", argv[1], &pid);
	if (rc || (rc = check_process(&pid)))
		return rc;
	if (!argv[2][0] || strlen(argv[2]) > 255)
		return vrt_usage("mark", "the label must be 1 to 255 bytes");
	return request(pid, VRT_CTL_MARK, argv[2], 10000, NOT_TRACED);
}

/* ---- snapshot --------------------------------------------------------------------------- */

int vrt_cmd_snapshot(int argc, char **argv)
{
	const char *pid_arg = NULL, *file = NULL;
	for (int i = 1; i < argc; i++) {
		if (vrt_is_help(argv[i]))
			return vrt_print_help("snapshot");
		if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && i + 1 < argc)
			file = argv[++i];
		else if (argv[i][0] != '-' && !pid_arg)
			pid_arg = argv[i];
		else
			return vrt_usage("snapshot", "unexpected argument '%s'", argv[i]);
	}
	if (!pid_arg || !file)
		return vrt_usage("snapshot", "expected a process id and an output file: vramtrace snapshot PID -o FILE");
	int pid, rc = parse_pid("snapshot", pid_arg, &pid);
	if (rc || (rc = check_process(&pid)))
		return rc;
	char path[PATH_MAX];
	if (absolute_path(file, path, sizeof(path)))
		return vrt_fail(VRT_E_ARG, "output path too long");
	if (access(path, F_OK) == 0)
		return refuse(VRT_E_ARG, "%s exists; the snapshot is written only to a new file", path);
	return request(pid, VRT_CTL_SNAPSHOT, path, 300000, NOT_TRACED);
}
