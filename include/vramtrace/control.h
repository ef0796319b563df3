/* SPDX-License-Identifier: MIT */
/*
 * The control channel between `vramtrace attach/mark/snapshot` and a traced process: one
 * SOCK_SEQPACKET message each way over the abstract Unix socket "\0vramtrace.<pid>". The server
 * accepts only peers with its own uid (SO_PEERCRED). Header-only so the client, the server and
 * the fuzz target share one parser.
 */
#ifndef VRAMTRACE_CONTROL_H
#define VRAMTRACE_CONTROL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
};

static inline int vrt_ctl_type_known(uint16_t type)
{
	return (type >= VRT_CTL_STATUS && type <= VRT_CTL_STOP) || type == VRT_CTL_REPLY;
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
	if ((h.type == VRT_CTL_MARK || h.type == VRT_CTL_SNAPSHOT) && h.length == 0)
		return VRT_E_PROTO;
	if (h.type == VRT_CTL_SNAPSHOT && buf[sizeof(h)] != '/')
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
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/*
 * Sends one request to process pid and waits up to timeout_ms for the reply. Returns 0 and
 * fills reply, or VRT_E_NOENT (no vramtrace in that process), VRT_E_PERM, VRT_E_PROTO, VRT_E_IO.
 */
static inline int vrt_ctl_request(int pid, uint16_t type, const char *payload, struct vrt_ctl_msg *reply,
				  int timeout_ms)
{
	uint8_t buf[sizeof(struct vrt_ctl_header) + VRT_CTL_MAX_PAYLOAD + 1];
	long len = vrt_ctl_format(buf, type, 0, payload);
	if (len < 0)
		return (int)len;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return VRT_E_IO;
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int n = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, VRT_CTL_SOCKET_PREFIX "%d", pid);
	socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	int rc = 0;
	if (connect(fd, (struct sockaddr *)&addr, alen))
		rc = errno == ECONNREFUSED || errno == ENOENT ? VRT_E_NOENT : errno == EACCES ? VRT_E_PERM : VRT_E_IO;
	else if (send(fd, buf, (size_t)len, MSG_NOSIGNAL) != len)
		rc = VRT_E_IO;
	struct pollfd p = { fd, POLLIN, 0 };
	if (!rc && poll(&p, 1, timeout_ms) != 1)
		rc = VRT_E_IO;
	ssize_t got = rc ? -1 : recv(fd, buf, sizeof(buf) - 1, 0);
	if (!rc)
		rc = got <= 0 ? VRT_E_IO : vrt_ctl_parse(buf, (size_t)got, reply);
	if (!rc && reply->type != VRT_CTL_REPLY)
		rc = VRT_E_PROTO;
	close(fd);
	return rc;
}
#endif /* VRT_CTL_CLIENT */

#endif /* VRAMTRACE_CONTROL_H */
