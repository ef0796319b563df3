/* SPDX-License-Identifier: MIT */
/*
 * Loading libvramtrace.so into a running process that was started without it, with ptrace
 * (x86-64 Linux only; no gdb needed). Used by `vramtrace attach` when the process has no
 * control socket.
 */
#ifndef VRAMTRACE_INJECT_H
#define VRAMTRACE_INJECT_H

#include <stdbool.h>
#include <stddef.h>

/* The process exists and belongs to this user (real uid): 0, or a vrt_error with why filled. */
int vrt_process_owned(int pid, char *why, size_t len);

/*
 * Whether this user may ptrace pid here: same user (never escalates), not a set-id process,
 * and kernel.yama.ptrace_scope allowing it. 0, or a vrt_error with the reason and how to
 * allow it in why.
 */
int vrt_inject_permitted(int pid, char *why, size_t len);

/*
 * Stops one thread of pid where it waits in a system call, calls dlopen(library) and then
 * vramtrace_attach_start(output) on it, puts its registers and the stack bytes it used back
 * exactly, and lets it go: the interrupted call restarts as if nothing happened. output must be
 * absolute. 0, or a vrt_error with why filled.
 */
int vrt_inject(int pid, const char *library, const char *output, char *why, size_t len);

/* Whether library (the file, whatever the path; NULL: any libvramtrace*) is mapped in pid. */
bool vrt_inject_loaded(int pid, const char *library);

#endif /* VRAMTRACE_INJECT_H */
