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

/*
 * For vramtrace's own Python package (retention walks, python/vramtrace/_retention.py): what is
 * live, and what the walk found. Not meant for programs; they may change with the trace format.
 */
struct vramtrace_live_item {
	unsigned long long addr, size;
	unsigned long long born_ns; /* CLOCK_MONOTONIC, to the trace's time unit */
	short device;               /* -1: host memory */
	unsigned char kind;         /* enum vrt_mem_kind */
	unsigned char tensor;       /* 1: a PyTorch tensor block; 0: a CUDA allocation or mapping */
	unsigned int pad;
};
/* Copies the live buffers born at or after born_ns (CLOCK_MONOTONIC; 0: all) into out, at most
 * cap; returns how many there are (more than cap: ask again with more room), or a negative
 * vrt_error. Waits for the collector (at most a few seconds). Only while recording everything. */
__attribute__((weak)) long vramtrace_live_query(unsigned long long born_ns, struct vramtrace_live_item *out,
						unsigned long cap);
/* One OWNER record: chain is the reference chain's steps separated by U+001F. */
__attribute__((weak)) void vramtrace_record_owner(int device, unsigned long long addr, unsigned long long size,
						  int category, int status, const char *chain);
/* The WALK record that closes a walk's OWNER records. */
__attribute__((weak)) void vramtrace_record_walk(int reason, int status, unsigned long long born_ns,
						 unsigned long long duration_ns, unsigned long long objects);
/* A fact about the process for the trace's INFO table ("python.library_paths"...). */
__attribute__((weak)) void vramtrace_record_info(const char *key, const char *value);
/* Teardown begins (EXITING): stage is enum vrt_exiting. */
__attribute__((weak)) void vramtrace_record_exiting(int stage);
/* What PyTorch reported with an out-of-memory error (OOM_LIMITS). */
__attribute__((weak)) void vramtrace_record_oom_limits(int device, unsigned long long requested,
						       unsigned long long allowed, unsigned long long device_free,
						       unsigned long long reserved, unsigned long long allocated,
						       int capped);

#ifdef __cplusplus
}
#endif

#endif /* VRAMTRACE_VRAMTRACE_H */
