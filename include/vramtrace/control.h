/* SPDX-License-Identifier: MIT */
/*
 * The control channel between `vramtrace attach/mark/snapshot` and a traced process: one
 * SOCK_SEQPACKET message each way over the abstract Unix socket "\0vramtrace.<pid>". Any local
 * user can bind an abstract name, so neither side trusts the name: the server accepts only
 * peers with its own uid (SO_PEERCRED), and the client talks only to a server that is process
 * <pid> with that process's uid (SO_PEERCRED of its own connection). A server whose name is
 * taken listens at <dir>/ctl.<pid> instead, in the first directory of its own (owned by its
 * uid, closed to others) of vrt_ctl_fallback_dir's list; the client tries those after the
 * abstract name, with the same checks. Header-only so the client, the server and the fuzz
 * target share one parser.
 */
#ifndef VRAMTRACE_CONTROL_H
#define VRAMTRACE_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "vramtrace/error.h"

#define VRT_CTL_MAGIC 0x4c544356u /* "VCTL" */
#define VRT_CTL_VERSION 1
#define VRT_CTL_MAX_PAYLOAD 4096u
#define VRT_CTL_SOCKET_PREFIX "vramtrace."

enum vrt_ctl_type {
	VRT_CTL_STATUS = 1,   /* reply: a one-line status */
	VRT_CTL_START = 2,    /* switch to full tracing */
	VRT_CTL_ARM = 3,      /* back to armed (live set only) */
	VRT_CTL_MARK = 4,     /* payload: label */
	VRT_CTL_SNAPSHOT = 5, /* payload: absolute output path */
	VRT_CTL_STOP = 6,     /* finish the trace and stop tracing */
	VRT_CTL_PEEK = 7,     /* payload: absolute output path; a snapshot without a retention walk
				 (`vramtrace watch` takes one every few seconds) */
	VRT_CTL_REPLY = 128,  /* status: 0 or a vrt_error; payload: text */
};

struct vrt_ctl_header {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length; /* payload bytes that follow */
	int32_t status;  /* replies only */
};
_Static_assert(sizeof(struct vrt_ctl_header) == 16, "control header is 16 bytes");

struct vrt_ctl_msg {
	uint16_t type;
	int32_t status;
	char payload[VRT_CTL_MAX_PAYLOAD + 1]; /* NUL-terminated */
	uint32_t length;
	/* Filled by vrt_ctl_request: another process that answered at the abstract name (0: none),
	 * and where the reply came from when it was not the abstract name ("": it was). */
	int32_t impostor_pid;
	uint32_t impostor_uid;
	char via[108];
};

/* The directories a server whose abstract name is taken may listen in, in order of preference
 * (out is "" for one that does not apply to uid); false past the end of the list. Only root may
 * create in /run; /tmp and /dev/shm are sticky, and the directory must be the uid's own. */
static inline bool vrt_ctl_fallback_dir(int i, unsigned uid, char *out, size_t len)
{
	switch (i) {
	case 0: snprintf(out, len, "%s", uid ? "" : "/run/vramtrace"); return true;
	case 1: snprintf(out, len, "/tmp/vramtrace-%u", uid); return true;
	case 2: snprintf(out, len, "/dev/shm/vramtrace-%u", uid); return true;
	}
	return false;
}

/* A directory that is uid's alone: not a link, owned by uid, no access for group or others. */
static inline bool vrt_ctl_dir_private(const char *dir, unsigned uid)
{
	struct stat st;
	return !lstat(dir, &st) && S_ISDIR(st.st_mode) && st.st_uid == uid && !(st.st_mode & 077);
}

static inline int vrt_ctl_type_known(uint16_t type)
{
	return (type >= VRT_CTL_STATUS && type <= VRT_CTL_PEEK) || type == VRT_CTL_REPLY;
}

/* Validates one received datagram. Payloads are text: no NUL bytes inside. */
static inline int vrt_ctl_parse(const uint8_t *buf, size_t len, struct vrt_ctl_msg *out)
{
	struct vrt_ctl_header h;
	if (len < sizeof(h))
		return VRT_E_PROTO;
	memcpy(&h, buf, sizeof(h));
	if (h.magic != VRT_CTL_MAGIC || h.version != VRT_CTL_VERSION || !vrt_ctl_type_known(h.type))
		return VRT_E_PROTO;
	if (h.length > VRT_CTL_MAX_PAYLOAD || h.length != len - sizeof(h))
		return VRT_E_PROTO;
	if (memchr(buf + sizeof(h), 0, h.length))
		return VRT_E_PROTO;
	bool path = h.type == VRT_CTL_SNAPSHOT || h.type == VRT_CTL_PEEK;
	if ((h.type == VRT_CTL_MARK || path) && h.length == 0)
		return VRT_E_PROTO;
	if (path && buf[sizeof(h)] != '/')
		return VRT_E_PROTO;
	out->type = h.type;
	out->status = h.status;
	out->length = h.length;
	memcpy(out->payload, buf + sizeof(h), h.length);
	out->payload[h.length] = 0;
	return 0;
}

/* Encodes a message into buf (sizeof header + VRT_CTL_MAX_PAYLOAD); returns its length or <0. */
static inline long vrt_ctl_format(uint8_t *buf, uint16_t type, int32_t status, const char *payload)
{
	size_t n = payload ? strlen(payload) : 0;
	if (n > VRT_CTL_MAX_PAYLOAD)
		return VRT_E_ARG;
	struct vrt_ctl_header h = { VRT_CTL_MAGIC, VRT_CTL_VERSION, type, (uint32_t)n, status };
	memcpy(buf, &h, sizeof(h));
	if (n)
		memcpy(buf + sizeof(h), payload, n);
	return (long)(sizeof(h) + n);
}

#ifdef VRT_CTL_CLIENT
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* The effective uid of process pid (what SO_PEERCRED reports for it), from /proc. */
static inline bool vrt_ctl_process_uid(int pid, unsigned *uid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	bool found = false;
	unsigned real;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "Uid: %u %u", &real, uid) == 2;
	fclose(f);
	return found;
}

/*
 * Connects fd to addr and checks who answered: 0 when it is process pid with uid; VRT_E_PEER
 * (and the impostor in *reply) when another process holds the address; VRT_E_NOENT when nobody
 * listens there; VRT_E_PERM, VRT_E_IO otherwise.
 */
static inline int vrt_ctl_connect_verified(int fd, const struct sockaddr_un *addr, socklen_t alen, int pid,
					   unsigned uid, struct vrt_ctl_msg *reply)
{
	if (connect(fd, (const struct sockaddr *)addr, alen))
		return errno == ECONNREFUSED || errno == ENOENT ? VRT_E_NOENT : errno == EACCES ? VRT_E_PERM : VRT_E_IO;
	struct { /* struct ucred, which <sys/socket.h> declares only with _GNU_SOURCE */
		int32_t pid;
		uint32_t uid, gid;
	} cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len))
		return VRT_E_IO;
	if (cred.pid == pid && cred.uid == uid)
		return 0;
	reply->impostor_pid = cred.pid;
	reply->impostor_uid = cred.uid;
	return VRT_E_PEER;
}

/* A connected, verified socket to process pid's control server, or an error (see above). */
static inline int vrt_ctl_connect(int pid, struct vrt_ctl_msg *reply, int *out)
{
	unsigned uid;
	if (!vrt_ctl_process_uid(pid, &uid))
		return VRT_E_NOENT;
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int n = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, VRT_CTL_SOCKET_PREFIX "%d", pid);
	socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return VRT_E_IO;
	int rc = vrt_ctl_connect_verified(fd, &addr, alen, pid, uid, reply);
	char dir[64];
	for (int i = 0; (rc == VRT_E_NOENT || rc == VRT_E_PEER) && vrt_ctl_fallback_dir(i, uid, dir, sizeof(dir)); i++) {
		if (!dir[0] || !vrt_ctl_dir_private(dir, uid))
			continue;
		struct sockaddr_un path = { .sun_family = AF_UNIX };
		snprintf(path.sun_path, sizeof(path.sun_path), "%s/ctl.%d", dir, pid);
		int other = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (other < 0)
			break;
		int again = vrt_ctl_connect_verified(other, &path, (socklen_t)sizeof(path), pid, uid, reply);
		if (again == 0) {
			close(fd);
			fd = other;
			snprintf(reply->via, sizeof(reply->via), "%s", path.sun_path);
			rc = 0;
		} else {
			close(other);
		}
	}
	if (rc) {
		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

/*
 * Sends one request to process pid and waits up to timeout_ms for the reply. Returns 0 and
 * fills reply, or VRT_E_NOENT (no vramtrace in that process), VRT_E_PEER (another process holds
 * its socket: reply->impostor_* say which), VRT_E_PERM, VRT_E_PROTO, VRT_E_IO.
 */
static inline int vrt_ctl_request(int pid, uint16_t type, const char *payload, struct vrt_ctl_msg *reply,
				  int timeout_ms)
{
	uint8_t buf[sizeof(struct vrt_ctl_header) + VRT_CTL_MAX_PAYLOAD + 1];
	reply->impostor_pid = 0;
	reply->impostor_uid = 0;
	reply->via[0] = 0;
	long len = vrt_ctl_format(buf, type, 0, payload);
	if (len < 0)
		return (int)len;
	int fd, rc = vrt_ctl_connect(pid, reply, &fd);
	if (rc)
		return rc;
	if (send(fd, buf, (size_t)len, MSG_NOSIGNAL) != len)
		rc = VRT_E_IO;
	struct pollfd p = { fd, POLLIN, 0 };
	if (!rc && poll(&p, 1, timeout_ms) != 1)
		rc = VRT_E_IO;
	ssize_t got = rc ? -1 : recv(fd, buf, sizeof(buf) - 1, 0);
	if (!rc) /* the parse leaves impostor_* and via alone */
		rc = got <= 0 ? VRT_E_IO : vrt_ctl_parse(buf, (size_t)got, reply);
	if (!rc && reply->type != VRT_CTL_REPLY)
		rc = VRT_E_PROTO;
	close(fd);
	return rc;
}
#endif /* VRT_CTL_CLIENT */

#endif /* VRAMTRACE_CONTROL_H */
