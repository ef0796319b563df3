/* SPDX-License-Identifier: MIT */
/*
 * The client side of a running process's control socket (include/vramtrace/control.h), shared
 * by attach, mark, snapshot and watch: which process is meant, and one request to it, with what
 * the process says printed escaped (it is not ours).
 */
#define _GNU_SOURCE
#define VRT_CTL_CLIENT
#include "control_client.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "inject.h"
#include "paths.h"
#include "vramtrace/control.h"
#include "vramtrace/error.h"

/* "vramtrace: <message>" (which already says why) and the exit code for err. */
int vrt_ctl_refuse(int err, const char *fmt, ...)
		   {
		   va_list ap;
	fputs("vramtrace: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return vrt_exit_code(err);
}

int vrt_ctl_parse_pid(const char *command, const char *s, int *pid)
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
int vrt_ctl_check_process(int *pid)
{
	char why[512];
	int rc = vrt_process_owned(*pid, why, sizeof(why));
	if (!rc)
		*pid = through_launcher(*pid);
	return rc ? vrt_ctl_refuse(rc, "%s", why) : 0;
}

/* Makes path absolute against our working directory: the process has its own. */
int vrt_ctl_absolute_path(const char *path, char *out, size_t len)
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
const char *vrt_ctl_impostor(const struct vrt_ctl_msg *m)
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
void vrt_ctl_note_impostor(int pid, const struct vrt_ctl_msg *m)
{
	if (m->impostor_pid && m->via[0])
		fprintf(stderr, "vramtrace: note: @vramtrace.%d is held by %s, not by process %d: ignored it; process %d "
				"answered at %s\n", pid, vrt_ctl_impostor(m), pid, pid, vrt_escape(m->via));
}

/* Sends one request and reports the outcome; not_traced is the message for "no socket". What the
 * process says back is printed with its control characters escaped: it is not ours. */
int vrt_ctl_client_request(int pid, uint16_t type, const char *payload, int timeout_ms, const char *not_traced,
			   bool quiet)
			   {
			   struct vrt_ctl_msg reply;
	int rc = vrt_ctl_request(pid, type, payload, &reply, timeout_ms);
	if (rc == VRT_E_PEER)
		return vrt_ctl_refuse(rc, "process %d: its control socket @vramtrace.%d is held by %s, not by process %d: "
				      "refusing to talk to it", pid, pid, vrt_ctl_impostor(&reply), pid);
	if (rc == VRT_E_NOENT)
		return vrt_ctl_refuse(VRT_E_NOENT, not_traced, pid, pid);
	if (rc == VRT_E_PERM)
		return vrt_fail(rc, "process %d refused the request (not the same user)", pid);
	if (rc)
		return vrt_fail(rc, "no answer from process %d", pid);
	vrt_ctl_note_impostor(pid, &reply);
	if (reply.status)
		return vrt_ctl_refuse(reply.status, "process %d: %s", pid, vrt_escape(reply.payload));
	if (!quiet)
		printf("process %d: %s\n", pid, vrt_escape(reply.payload));
	return 0;
}

