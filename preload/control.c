/* SPDX-License-Identifier: MIT */
/*
 * The control socket: abstract "\0vramtrace.<pid>", SOCK_SEQPACKET, served by the collector
 * thread. Only a peer with our own uid is answered (SO_PEERCRED); anything malformed or slow is
 * dropped. One request, one reply, close. Any local user can bind the abstract name first: then
 * the socket is <dir>/ctl.<pid> in a directory of our own (include/vramtrace/control.h), and a
 * line on stderr says who took the name.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"
#include "collector.h"
#include "vramtrace/control.h"

static int listen_at(const struct sockaddr_un *addr, socklen_t len)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (bind(fd, (const struct sockaddr *)addr, len) || listen(fd, 4)) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Who holds an address: the pid and uid of its listener (SO_PEERCRED), or false. */
static bool holder(const struct sockaddr_un *addr, socklen_t len, struct ucred *cred)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	socklen_t cl = sizeof(*cred);
	bool known = fd >= 0 && !connect(fd, (const struct sockaddr *)addr, len) &&
		     !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &cl);
	if (fd >= 0)
		close(fd);
	return known;
}

/* The socket file of the fallback, removed at exit by the process that made it. */
static char fallback_path[108];
static pid_t fallback_owner;

static void remove_fallback(void)
{
	if (fallback_owner == getpid())
		unlink(fallback_path);
}

/* <dir>/ctl.<pid> in the first directory of our own that works; a stale socket of an earlier
 * process with our pid (nobody listening) is replaced. */
static int listen_fallback(char *where, size_t where_len)
{
	unsigned uid = (unsigned)geteuid();
	char dir[64];
	for (int i = 0; vrt_ctl_fallback_dir(i, uid, dir, sizeof(dir)); i++) {
		if (!dir[0])
			continue;
		if (mkdir(dir, 0700) && errno != EEXIST)
			continue;
		if (!vrt_ctl_dir_private(dir, uid))
			continue; /* someone else's, or open to others: not ours to use */
		struct sockaddr_un addr = { .sun_family = AF_UNIX };
		snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/ctl.%d", dir, (int)getpid());
		int fd = listen_at(&addr, sizeof(addr));
		struct ucred cred;
		if (fd < 0 && errno == EADDRINUSE && !holder(&addr, sizeof(addr), &cred) && !unlink(addr.sun_path))
			fd = listen_at(&addr, sizeof(addr));
		if (fd < 0)
			continue;
		snprintf(where, where_len, "%s", addr.sun_path);
		bool first = !fallback_path[0];
		snprintf(fallback_path, sizeof(fallback_path), "%s", addr.sun_path);
		fallback_owner = getpid();
		if (first)
			atexit(remove_fallback);
		return fd;
	}
	return -1;
}

/* Printed whatever VRAMTRACE_QUIET says: someone took this process's name. */
static void say_taken(const char *name, const struct ucred *who, const char *where)
{
	char line[512], holder_text[64] = "another process";
	if (who)
		snprintf(holder_text, sizeof(holder_text), "process %d (uid %u)", (int)who->pid, (unsigned)who->uid);
	int n = where ? snprintf(line, sizeof(line), "vramtrace[%d]: the control socket name @%s is taken by %s; "
				 "listening at %s instead\n", (int)getpid(), name, holder_text, where)
		      : snprintf(line, sizeof(line), "vramtrace[%d]: the control socket name @%s is taken by %s, and no "
				 "directory of ours could hold one instead: this process cannot be attached or marked\n",
				 (int)getpid(), name, holder_text);
	if (n > 0) {
		ssize_t ignored = write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
		(void)ignored;
	}
}

int vrt_control_listen(void)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int n = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, VRT_CTL_SOCKET_PREFIX "%d", (int)getpid());
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	int fd = listen_at(&addr, len);
	if (fd < 0 && errno == EADDRINUSE) {
		struct ucred cred;
		bool known = holder(&addr, len, &cred);
		char where[108];
		fd = listen_fallback(where, sizeof(where));
		say_taken(addr.sun_path + 1, known ? &cred : NULL, fd >= 0 ? where : NULL);
	}
	if (fd < 0)
		return -1;
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 512);
	if (high >= 0) {
		close(fd);
		fd = high;
	}
	return fd;
}

static bool same_user(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	return !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) && cred.uid == getuid();
}

/*
 * A refused peer's request is read (and dropped) before the refusal is sent: closing a socket
 * with unread data resets the connection, and the peer would read that instead of the reply.
 * The wait is short: a peer of another user must not hold up the collector.
 */
static void drop_request(int fd)
{
	struct pollfd p = { fd, POLLIN, 0 };
	char byte;
	if (poll(&p, 1, 100) == 1) {
		ssize_t ignored = recv(fd, &byte, 1, MSG_DONTWAIT | MSG_TRUNC); /* the whole datagram goes */
		(void)ignored;
	}
}

static const char *mode_name(int mode)
{
	return mode == VRT_MODE_FULL ? "full" : mode == VRT_MODE_ARMED ? "armed" : "off";
}

/* One line; `vramtrace attach` reads "mode full" and "attach failed:" from it after injecting. */
static int status_line(struct collector *c, char *reply, size_t reply_len)
{
	const char *why = vrt_attach_error();
	snprintf(reply, reply_len, "pid %d mode %s trace %.300s live %zu events %llu lost %llu%s%.200s", (int)getpid(),
		 mode_name(atomic_load(&vrt_mode)), c->path[0] ? c->path : "-", c->live.used,
		 (unsigned long long)c->events_written, (unsigned long long)c->events_lost,
		 why ? " attach failed: " : "", why ? why : "");
	return 0;
}

/*
 * Full tracing from now on. A payload names the trace file, for a process whose trace is not
 * open yet. A trace that was closed (attach --stop, or a write error) is not reopened: its
 * tables went into the old file, and a new file would lack them.
 */
/* Closed for good: attach --stop, or a write error (no file is reopened, see start). */
static bool trace_closed(const struct collector *c) { return c->output_failed && !c->writer; }

static int start(struct collector *c, const char *path, char *reply, size_t reply_len)
{
	if (trace_closed(c)) {
		snprintf(reply, reply_len, "this process's trace %.300s is closed (stopped, or a write failed); "
			 "a process is traced into one file only", c->path[0] ? c->path : "");
		return VRT_E_UNSUPPORTED;
	}
	if (path[0] && !c->writer)
		snprintf(vrt_cfg.output, sizeof(vrt_cfg.output), "%.4095s", path);
	vrt_collector_drain(c);
	bool injected = vrt_attach_injected() && atomic_load(&vrt_mode) != VRT_MODE_FULL && !c->writer;
	vrt_collector_set_mode(c, VRT_MODE_FULL, injected ? VRT_CAUSE_ATTACH : VRT_CAUSE_CONTROL);
	if (injected)
		vrt_attach_on_start(c);
	snprintf(reply, reply_len, "tracing everything to %.400s", c->path[0] ? c->path : "(no file: see stderr)");
	return c->writer ? 0 : VRT_E_IO;
}

/* Closes the trace; in an injected process also puts back every pointer attach rewrote, so
 * the program calls CUDA directly again. The library stays loaded (pointers handed out by
 * lookups while attached may still lead to it; they pass straight through). */
static int stop(struct collector *c, char *reply, size_t reply_len)
{
	vrt_collector_drain(c);
	vrt_output_finish(c, VRT_END_DETACHED, 0);
	atomic_store(&vrt_mode, VRT_MODE_OFF);
	int restored = vrt_attach_on_stop();
	int n = snprintf(reply, reply_len, "tracing stopped");
	if (c->path[0] && n > 0 && (size_t)n < reply_len)
		n += snprintf(reply + n, reply_len - (size_t)n, "; the trace %.300s is closed", c->path);
	if (restored && n > 0 && (size_t)n < reply_len)
		snprintf(reply + n, reply_len - (size_t)n, "; %d hooked call sites restored", restored);
	return 0;
}

/* A snapshot of a Python job says what holds what is live: its main thread walks at its next
 * safe point (pyreach.c) while we keep draining; bounded, since that thread may be in a long C
 * call, and then the snapshot goes without (the walk lands in the trace when it runs). */
static void walk_before_snapshot(struct collector *c)
{
	uint64_t ticket;
	if (atomic_load(&vrt_mode) != VRT_MODE_FULL || !vrt_python_walk_request(VRT_WALK_SNAPSHOT, &ticket))
		return;
	uint64_t deadline = vrt_now_ns() + 15000000000ull;
	while (!vrt_python_walk_done(ticket) && vrt_now_ns() < deadline) {
		vrt_collector_drain(c);
		vrt_collector_answer_query(c); /* the walk asks us what is live */
		struct timespec pause = { 0, 10000000 };
		nanosleep(&pause, NULL);
	}
	vrt_collector_drain(c);
}

static int handle(struct collector *c, const struct vrt_ctl_msg *m, char *reply, size_t reply_len)
{
	switch (m->type) {
	case VRT_CTL_STATUS:
		return status_line(c, reply, reply_len);
	case VRT_CTL_START:
		return start(c, m->payload, reply, reply_len);
	case VRT_CTL_ARM:
		vrt_collector_drain(c);
		vrt_output_flush(c);
		vrt_collector_set_mode(c, VRT_MODE_ARMED, VRT_CAUSE_CONTROL);
		snprintf(reply, reply_len, "armed: live set only");
		return 0;
	case VRT_CTL_MARK:
		if (atomic_load(&vrt_mode) != VRT_MODE_FULL && trace_closed(c)) { /* attach is refused too */
			snprintf(reply, reply_len, "tracing was stopped and its trace %.300s closed; a process is "
				 "traced into one file only", c->path[0] ? c->path : "");
			return VRT_E_UNSUPPORTED;
		}
		if (atomic_load(&vrt_mode) != VRT_MODE_FULL) { /* it would be dropped: say so */
			snprintf(reply, reply_len, "tracing is %s, not recording: run `vramtrace attach %d` first",
				 mode_name(atomic_load(&vrt_mode)), (int)getpid());
			return VRT_E_UNSUPPORTED;
		}
		vrt_emit_label(VRT_OP_MARK, m->payload);
		vrt_collector_drain(c);
		snprintf(reply, reply_len, "marked \"%.200s\"", m->payload);
		return 0;
	case VRT_CTL_SNAPSHOT:
		walk_before_snapshot(c);
		return vrt_output_snapshot(c, m->payload, reply, reply_len);
	case VRT_CTL_PEEK:
		return vrt_output_snapshot(c, m->payload, reply, reply_len);
	case VRT_CTL_STOP:
		return stop(c, reply, reply_len);
	}
	return VRT_E_PROTO;
}

void vrt_control_serve(struct collector *c, int listen_fd)
{
	int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	uint8_t buf[sizeof(struct vrt_ctl_header) + VRT_CTL_MAX_PAYLOAD + 1];
	struct pollfd p = { fd, POLLIN, 0 };
	struct vrt_ctl_msg msg;
	char reply[512] = "";
	int status = VRT_E_PERM;
	if (!same_user(fd)) {
		drop_request(fd);
		snprintf(reply, sizeof(reply), "refused: not the same user");
	} else if (poll(&p, 1, 1000) == 1) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
		status = n < 0 || (size_t)n > sizeof(buf) - 1 ? VRT_E_PROTO : vrt_ctl_parse(buf, (size_t)n, &msg);
		if (status)
			snprintf(reply, sizeof(reply), "malformed request");
		else
			status = handle(c, &msg, reply, sizeof(reply));
	}
	long len = vrt_ctl_format(buf, VRT_CTL_REPLY, status, reply);
	if (len > 0)
		send(fd, buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
}
