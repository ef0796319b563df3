/* SPDX-License-Identifier: MIT */
/* The hot path's native unwinder (unwind.c); libunwind takes every stack it returns -1 for. */
#ifndef VRAMTRACE_PRELOAD_UNWIND_H
#define VRAMTRACE_PRELOAD_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VRT_UNWIND_MAX 160 /* frames one walk gives at most */

/* A thread's last walk, which the next one follows where it can (unwind.c). Zeroed memory of
 * vrt_unwind_memo_size() bytes is an empty one. */
struct vrt_unwind_memo;
size_t vrt_unwind_memo_size(void);

/* dl_find_object: glibc's _dl_find_object, or NULL (older glibc: dl_iterate_phdr is used). */
bool vrt_unwind_init(void *dl_find_object);
/*
 * Return addresses from the caller's frame outward, as unw_backtrace gives them (the first is
 * in the caller); at most max. -1: a frame this walk does not take (use libunwind). memo: the
 * calling thread's own, or NULL; *same_as_last: the stack is the one its last walk gave.
 */
int vrt_unwind(struct vrt_unwind_memo *memo, uint64_t *out, int max, bool *same_as_last);
/* An object was unloaded: shapes read before are read again before use. */
void vrt_unwind_forget(void);

#ifdef VRT_UNWIND_COUNTS
/* Where the walks' frames came from, summed over the process: built into the unit test and
 * measurement builds only (-DVRT_UNWIND_COUNTS), never into the preload the tool ships. */
struct vrt_unwind_counts {
	uint64_t walks;     /* that vrt_unwind finished (not handed to libunwind) */
	uint64_t followed;  /* frames that were the last walk's, at the same address */
	uint64_t moved;     /* frames that were the last walk's, at another depth */
	uint64_t met_again; /* frames found in the last walk after a frame that was not */
	uint64_t probed;    /* frames whose shape came from the shape table */
};
void vrt_unwind_counts(struct vrt_unwind_counts *out);
#endif

#endif
