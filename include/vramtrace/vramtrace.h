/* SPDX-License-Identifier: MIT */
/*
 * Optional API for programs that can be edited. Every function is exported by libvramtrace.so;
 * declare-and-check keeps a program working when the preload is absent:
 *
 *     #include <vramtrace/vramtrace.h>
 *     if (vramtrace_phase_enter) vramtrace_phase_enter("train");
 *
 * All calls are cheap, never block on I/O, and are no-ops while tracing is off.
 */
#ifndef VRAMTRACE_VRAMTRACE_H
#define VRAMTRACE_VRAMTRACE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Records a point in time with a label (at most 255 bytes are kept). */
__attribute__((weak)) void vramtrace_mark(const char *label);
/* Opens and closes a phase on the calling thread; phases nest. */
__attribute__((weak)) void vramtrace_phase_enter(const char *name);
__attribute__((weak)) void vramtrace_phase_exit(const char *name);
/* Writes the live set and the retained history to path now (mode 0600). 0 on success. */
__attribute__((weak)) int vramtrace_snapshot(const char *path);
/* 2 while recording everything, 1 while armed, 0 when off or disabled. */
__attribute__((weak)) int vramtrace_enabled(void);

#ifdef __cplusplus
}
#endif

#endif /* VRAMTRACE_VRAMTRACE_H */
