/* SPDX-License-Identifier: MIT */
/*
 * Late attach: libvramtrace.so dlopen'ed into a running process by `vramtrace attach`
 * (analyzer/inject.c), then started by vramtrace_attach_start(). Private to lifecycle.c,
 * attach.c, got.c and control.c.
 *
 * In a late load nothing resolved before us goes through our exported definitions (we are last
 * in the global scope, and RTLD_NEXT from us reaches only our own dependencies), so hooking is
 * done by rewriting the pointers callers already hold: GOT slots (got.c) and PyTorch's driver
 * table (attach.c). Every rewrite is recorded so `attach --stop` can put it back.
 */
#ifndef VRAMTRACE_PRELOAD_ATTACH_H
#define VRAMTRACE_PRELOAD_ATTACH_H

#include <stdbool.h>

struct collector;

/* ---- lifecycle.c ------------------------------------------------------------------------ */

/* True when the constructor found us dlopen'ed into a running process, not LD_PRELOADed. */
bool vrt_loaded_late(void);
/* Everything the constructor does after the configuration: buffers, collector, handlers.
 * Tracing starts in initial_mode (enum vrt_mode). 0, or -1 with the preload disabled. */
int vrt_lifecycle_begin(int initial_mode);

/* ---- attach.c --------------------------------------------------------------------------- */

/* True once vramtrace_attach_start() ran in this process (the library was injected). */
bool vrt_attach_injected(void);
/* Collector thread, on START: the seed records for memory allocated before the injection
 * (once; later STARTs do nothing). */
void vrt_attach_on_start(struct collector *c);
/* Collector thread, on STOP: puts every rewritten pointer back; returns how many. */
int vrt_attach_on_stop(void);
/* Why the injected attach failed, or NULL. */
const char *vrt_attach_error(void);

/* ---- got.c ------------------------------------------------------------------------------ */

/* Rewrites the GOT slots of every loaded object that hold a tracked API or dlsym. Returns the
 * number of slots rewritten. */
int vrt_got_patch_all(void);
/* Replaces *slot with value (making its page writable for the store if it is not), remembering
 * the old value. False if the slot could not be written or the registry is full. */
bool vrt_patch_pointer(void **slot, void *value);
/* Restores every remembered slot that still holds what we wrote; returns how many. */
int vrt_patch_restore_all(void);

#endif /* VRAMTRACE_PRELOAD_ATTACH_H */
