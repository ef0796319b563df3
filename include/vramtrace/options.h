/* SPDX-License-Identifier: MIT */
/*
 * Every VRAMTRACE_* environment variable, defined once. The preload parses them (preload/config.c),
 * `vramtrace help env` prints them, and tests/e2e/test_docs.py checks the README table against this.
 *
 * X(id, name, type, default, min, max, help)
 *   type: VRT_OPT_STRING, VRT_OPT_SIZE (bytes, K/M/G suffix), VRT_OPT_INT, VRT_OPT_BOOL, VRT_OPT_MODE
 */
#ifndef VRAMTRACE_OPTIONS_H
#define VRAMTRACE_OPTIONS_H

#include <stdint.h>
#include <stdlib.h>

enum vrt_opt_type { VRT_OPT_STRING, VRT_OPT_SIZE, VRT_OPT_INT, VRT_OPT_BOOL, VRT_OPT_MODE };

#define VRT_OPTIONS(X)                                                                                   \
	X(OUTPUT, "VRAMTRACE_OUTPUT", VRT_OPT_STRING, "", 0, 0,                                          \
	  "trace file, or a directory (existing, or ending in /) that gets one file per process that "  \
	  "allocates")                                                                                   \
	X(MODE, "VRAMTRACE_MODE", VRT_OPT_MODE, "full", 0, 2,                                            \
	  "full: record everything; armed: keep only the live set until `vramtrace attach`; off")       \
	X(RING, "VRAMTRACE_RING", VRT_OPT_SIZE, "256M", 0, (1ll << 40),                                 \
	  "bound the trace to a ring of this many bytes (plus tables); 0 keeps everything")             \
	X(STACK_DEPTH, "VRAMTRACE_STACK_DEPTH", VRT_OPT_INT, "48", 0, 128,                               \
	  "native frames captured per event; 0 disables native stacks")                                 \
	X(PYTHON, "VRAMTRACE_PYTHON", VRT_OPT_BOOL, "1", 0, 1,                                           \
	  "capture Python frames of the allocating thread")                             \
	X(PYTHON_DEPTH, "VRAMTRACE_PYTHON_DEPTH", VRT_OPT_INT, "64", 0, 256,                             \
	  "Python frames captured per event")                                                            \
	X(FAST_UNWIND, "VRAMTRACE_FAST_UNWIND", VRT_OPT_BOOL, "1", 0, 1,                                 \
	  "walk native stacks from the call-frame tables directly; 0 walks each with libunwind "         \
	  "(same frames, slower)")                                                                       \
	X(FREE_STACKS, "VRAMTRACE_FREE_STACKS", VRT_OPT_BOOL, "0", 0, 1,                                 \
	  "also capture a stack for every free (costs as much as an allocation)")                       \
	X(FLUSH_MS, "VRAMTRACE_FLUSH_MS", VRT_OPT_INT, "100", 1, 10000,                                  \
	  "longest time an event waits in memory before it is written (bounds loss on SIGKILL)")        \
	X(TS_UNIT_NS, "VRAMTRACE_TS_UNIT_NS", VRT_OPT_INT, "1000", 1, 1000000,                           \
	  "timestamp resolution in nanoseconds")                                                        \
	X(THREAD_BUFFER, "VRAMTRACE_THREAD_BUFFER", VRT_OPT_SIZE, "1M", 65536, (1ll << 30),               \
	  "per-thread event buffer")                                                                    \
	X(RINGS, "VRAMTRACE_RINGS", VRT_OPT_INT, "256", 0, 4096,                                         \
	  "thread buffers kept in TRACE.rings beside the trace, so that a SIGKILL loses no event a "    \
	  "thread published (`vramtrace recover`); 0 keeps them in private memory")                     \
	X(FULL_WAIT_MS, "VRAMTRACE_FULL_WAIT_MS", VRT_OPT_INT, "1000", 0, 10000,                          \
	  "a thread whose buffer is full waits up to this long for the writer to make room, then "       \
	  "drops (and counts) events until it has; 0 drops at once")                                    \
	X(PHASE, "VRAMTRACE_PHASE", VRT_OPT_STRING, "", 0, 0,                                            \
	  "comma-separated Python functions (name or module:qualname) whose calls become phases")       \
	X(NVTX, "VRAMTRACE_NVTX", VRT_OPT_BOOL, "1", 0, 1,                                               \
	  "record NVTX ranges as phases (sets NVTX_INJECTION64_PATH unless another tool owns it)")      \
	X(TORCH, "VRAMTRACE_TORCH", VRT_OPT_BOOL, "1", 0, 1,                                             \
	  "record PyTorch caching-allocator blocks (tensors) when the PyTorch build is recognised")     \
	X(CONTROL, "VRAMTRACE_CONTROL", VRT_OPT_BOOL, "1", 0, 1,                                         \
	  "listen for `vramtrace attach/mark/snapshot` on an abstract socket (same user only)")         \
	X(FOLLOW_FORK, "VRAMTRACE_FOLLOW_FORK", VRT_OPT_BOOL, "1", 0, 1,                                 \
	  "trace forked children into their own files")                                                 \
	X(QUIET, "VRAMTRACE_QUIET", VRT_OPT_BOOL, "0", 0, 1,                                             \
	  "print nothing on stderr except the one line when the preload disables itself")              \
	X(RETAIN, "VRAMTRACE_RETAIN", VRT_OPT_STRING, "on", 0, 0,                                        \
	  "retention walks in Python programs (what holds surviving memory): on, off, or the most "      \
	  "seconds one walk may take; together they take about 1% of the run at most")

enum vrt_option_id {
#define VRT_OPT_ENUM(id, name, type, def, min, max, help) VRT_OPTION_##id,
	VRT_OPTIONS(VRT_OPT_ENUM)
#undef VRT_OPT_ENUM
	VRT_OPTION_COUNT
};

/* "64M", "2G", "1048576", "256MiB" -> bytes. 0 on success, -1 for anything else. */
static inline int vrt_parse_size(const char *s, uint64_t *out)
{
	char *end;
	if (!s || *s < '0' || *s > '9')
		return -1;
	unsigned long long v = strtoull(s, &end, 10);
	unsigned shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	}
	if (shift && (*end == 'i' || *end == 'I'))
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end || (shift && v > (~0ull >> shift)))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

#endif /* VRAMTRACE_OPTIONS_H */
