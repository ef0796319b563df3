/* SPDX-License-Identifier: MIT */
#ifndef VRT_CONTROL_CLIENT_H
#define VRT_CONTROL_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VRT_NOT_TRACED "process %d is not traced: run `vramtrace attach %d` first"

/* "vramtrace: <message>" on stderr (the message says why); the exit code for err. */
int vrt_ctl_refuse(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A process id argument of command; a usage error otherwise. */
int vrt_ctl_parse_pid(const char *command, const char *s, int *pid);
/* The process exists and is ours (an exit code otherwise); a `vramtrace run` pid becomes its
 * child's. */
int vrt_ctl_check_process(int *pid);
/* path made absolute against our working directory (the process has its own). */
int vrt_ctl_absolute_path(const char *path, char *out, size_t len);
struct vrt_ctl_msg;
/* "process Q (uid U, comm)": who holds another process's control socket name (a static buffer). */
const char *vrt_ctl_impostor(const struct vrt_ctl_msg *m);
/* The socket name was taken, and the real server answered elsewhere: says so on stderr. */
void vrt_ctl_note_impostor(int pid, const struct vrt_ctl_msg *m);
/* One request; not_traced is the message for "no socket" (two %d: the pid). The reply is
 * printed unless quiet. 0 or an exit code. */
int vrt_ctl_client_request(int pid, uint16_t type, const char *payload, int timeout_ms, const char *not_traced,
			   bool quiet);

#endif
