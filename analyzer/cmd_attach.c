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
#include "control_client.h"
#include "inject.h"
#include "paths.h"
#include "vramtrace/control.h"
#include "vramtrace/error.h"

#define ATTACH_WAIT_MS 15000

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
	const struct vrt_arg opts[] = {
		VRT_OPT_OUTPUT(&o->output),
		{ "--stop", NULL, VRT_ARG_FLAG, &o->stop },
		{ "--armed", NULL, VRT_ARG_FLAG, &o->armed },
		VRT_OPT_END,
	};
	int n, rc = vrt_args_parse("attach", argc, argv, opts, &pid, 1, &n);
	if (rc)
		return rc;
	if (!pid)
		return vrt_usage("attach", "which process? vramtrace attach [--stop|--armed] [-o PATH] PID");
	if (o->stop && o->armed)
		return vrt_usage("attach", "--stop and --armed do not go together");
	if (o->output && (o->stop || o->armed))
		return vrt_usage("attach", "-o names the trace of a new attach; it does not go with --stop or --armed");
	return vrt_ctl_parse_pid("attach", pid, &o->pid);
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
static int wait_until_tracing(int pid, const char *library, double started)
{
	double injected = vrt_monotonic_seconds();
	struct timespec pause = { 0, 50 * 1000000 };
	char trace[PATH_MAX] = "";
	for (int waited = 0; waited < ATTACH_WAIT_MS; waited += 50, nanosleep(&pause, NULL)) {
		struct vrt_ctl_msg reply;
		if (kill(pid, 0) && errno == ESRCH)
			return vrt_ctl_refuse(VRT_E_NOENT, "process %d ended before tracing started", pid);
		if (!vrt_inject_loaded(pid, library)) /* a launcher script that exec'd the real program */
			return vrt_ctl_refuse(VRT_E_IO, "process %d started a new program (exec) right after the attach: attach again",
					      pid);
		if (vrt_ctl_request(pid, VRT_CTL_STATUS, NULL, &reply, 2000))
			continue; /* not listening yet */
		const char *failed = strstr(reply.payload, " attach failed: ");
		if (failed)
			return vrt_ctl_refuse(VRT_E_IO, "process %d: %s", pid, vrt_escape(failed + 1));
		if (strstr(reply.payload, " mode full ") && field(reply.payload, " trace ", trace, sizeof(trace))) {
			vrt_ctl_note_impostor(pid, &reply);
			double now = vrt_monotonic_seconds();
			printf("process %d: libvramtrace.so injected in %.1f s, tracing %.1f s later; tracing everything to %s\n",
			       pid, injected - started, now - injected, vrt_escape(trace));
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
		return vrt_ctl_refuse(rc, "cannot attach to process %d: %s", o->pid, why);
	if (vrt_inject_loaded(o->pid, NULL))
		return vrt_ctl_refuse(VRT_E_UNSUPPORTED, "libvramtrace.so is loaded in process %d, but its control socket does "
				      "not answer: the process was started with VRAMTRACE_CONTROL=0 or VRAMTRACE_MODE=off, or "
				      "vramtrace disabled itself there (see its stderr); it cannot be attached", o->pid);
	if (vrt_find_preload(library, sizeof(library)))
		return vrt_fail(VRT_E_NOENT, "cannot find libvramtrace.so next to this binary (set VRAMTRACE_PRELOAD)");
	snprintf(name, sizeof(name), "vramtrace.%d.vrt", o->pid);
	if (vrt_ctl_absolute_path(o->output ? o->output : name, output, sizeof(output)))
		return vrt_fail(VRT_E_ARG, "output path too long");
	double started = vrt_monotonic_seconds();
	rc = vrt_inject(o->pid, library, output, why, sizeof(why));
	if (rc)
		return vrt_ctl_refuse(rc, "cannot attach to process %d: %s", o->pid, why);
	return wait_until_tracing(o->pid, library, started);
}

int vrt_cmd_attach(int argc, char **argv)
{
	struct attach_options o;
	int rc = parse_attach(argc, argv, &o);
	if (rc)
		return rc < 0 ? 0 : rc; /* -1: --help, printed */
	if ((rc = vrt_ctl_check_process(&o.pid)))
		return rc;
	struct vrt_ctl_msg status;
	rc = vrt_ctl_request(o.pid, VRT_CTL_STATUS, NULL, &status, 5000);
	if (rc == VRT_E_PEER) /* no vramtrace of that process answers; someone took its name */
		fprintf(stderr, "vramtrace: note: @vramtrace.%d is held by %s, not by process %d: ignored it\n", o.pid,
			vrt_ctl_impostor(&status), o.pid);
	if ((rc == VRT_E_NOENT || rc == VRT_E_PEER) && (o.stop || o.armed))
		return vrt_ctl_refuse(VRT_E_NOENT, "process %d is not traced: there is nothing to %s", o.pid,
				      o.stop ? "stop" : "arm");
	if (rc == VRT_E_NOENT || rc == VRT_E_PEER)
		return inject(&o);
	if (rc)
		return vrt_ctl_client_request(o.pid, VRT_CTL_STATUS, NULL, 5000, VRT_NOT_TRACED, false); /* says why */
	if (o.stop)
		return vrt_ctl_client_request(o.pid, VRT_CTL_STOP, NULL, 60000, VRT_NOT_TRACED, false);
	if (o.armed)
		return vrt_ctl_client_request(o.pid, VRT_CTL_ARM, NULL, 60000, VRT_NOT_TRACED, false);
	char output[PATH_MAX] = "";
	if (o.output && vrt_ctl_absolute_path(o.output, output, sizeof(output)))
		return vrt_fail(VRT_E_ARG, "output path too long");
	return vrt_ctl_client_request(o.pid, VRT_CTL_START, output[0] ? output : NULL, 60000, VRT_NOT_TRACED, false);
}

/* ---- mark ------------------------------------------------------------------------------- */

int vrt_cmd_mark(int argc, char **argv)
{
	int pid;
	if (argc > 1 && vrt_is_help(argv[1]))
		return vrt_print_help("mark");
	if (argc != 3)
		return vrt_usage("mark", "expected a process id and a label: vramtrace mark PID LABEL");
	int rc = vrt_ctl_parse_pid("mark", argv[1], &pid);
	if (rc || (rc = vrt_ctl_check_process(&pid)))
		return rc;
	if (!argv[2][0] || strlen(argv[2]) > 255)
		return vrt_usage("mark", "the label must be 1 to 255 bytes");
	return vrt_ctl_client_request(pid, VRT_CTL_MARK, argv[2], 10000, VRT_NOT_TRACED, false);
}

/* ---- snapshot --------------------------------------------------------------------------- */

int vrt_cmd_snapshot(int argc, char **argv)
{
	const char *pid_arg = NULL, *file = NULL;
	const struct vrt_arg opts[] = { VRT_OPT_OUTPUT(&file), VRT_OPT_END };
	int n, parsed = vrt_args_parse("snapshot", argc, argv, opts, &pid_arg, 1, &n);
	if (parsed)
		return parsed < 0 ? 0 : parsed;
	if (!pid_arg || !file)
		return vrt_usage("snapshot", "expected a process id and an output file: vramtrace snapshot PID -o FILE");
	int pid, rc = vrt_ctl_parse_pid("snapshot", pid_arg, &pid);
	if (rc || (rc = vrt_ctl_check_process(&pid)))
		return rc;
	char path[PATH_MAX];
	if (vrt_ctl_absolute_path(file, path, sizeof(path)))
		return vrt_fail(VRT_E_ARG, "output path too long");
	if (access(path, F_OK) == 0)
		return vrt_ctl_refuse(VRT_E_ARG, "%s exists; the snapshot is written only to a new file", path);
	return vrt_ctl_client_request(pid, VRT_CTL_SNAPSHOT, path, 300000, VRT_NOT_TRACED, false);
}
