/* SPDX-License-Identifier: MIT */
/*
 * Turning a stack id into frames: native frames symbolized from the trace's own tables
 * (demangled), Python frames from the code tables, and the two spliced together where the
 * interpreter's eval frames are.
 */
#ifndef VRAMTRACE_STACKS_H
#define VRAMTRACE_STACKS_H

#include <stdbool.h>
#include <stdio.h>

#include "trace_reader.h"

enum vrt_frame_type { VRT_FT_NATIVE, VRT_FT_PYTHON, VRT_FT_LABEL };

struct vrt_frame {
	enum vrt_frame_type type;
	const char *function; /* demangled; "??" when unknown */
	const char *file;     /* Python file, or "" */
	int line;             /* Python line, or 0 */
	const char *module;   /* shared object path; "<python>" for Python frames */
	uint64_t address;     /* native return address */
	uint64_t offset;      /* from the function start */
};

#define VRT_MAX_FRAMES 512

enum vrt_stack_view {
	VRT_VIEW_MERGED, /* native with Python spliced in at the eval frames */
	VRT_VIEW_PYTHON, /* Python frames only (native when there are none) */
	VRT_VIEW_NATIVE, /* native frames only */
};

/* Frames innermost first; returns the count (0 for the empty stack). */
int vrt_stack_frames(const struct vrt_trace *t, uint32_t stack, enum vrt_stack_view view, struct vrt_frame *out,
		     int max);
/* The frame a person should see first: the innermost Python frame, or the innermost native
 * frame outside the CUDA libraries and the allocator. */
int vrt_stack_headline(const struct vrt_trace *t, uint32_t stack, struct vrt_frame *out);
/* Index in frames of the one that says why the memory was taken: the first Python frame, else
 * the first native one past the allocation plumbing (CUDA, the caching allocator); -1 if n is 0. */
int vrt_headline_index(const struct vrt_frame *frames, int n);
/* PyTorch's operator dispatch and TensorIterator set-up: true of a frame no reader needs. */
bool vrt_frame_is_dispatch(const struct vrt_frame *f);
/* "function (file:line)" or "function (module+0x..)" */
/* A Python file as text lines show it: a library's from its import root (stacks.c). */
const char *vrt_display_path(const char *file);
void vrt_frame_format(const struct vrt_frame *f, char *buf, size_t len);
/* The same in at most columns columns (0: no limit), cut with a visible "\u2026": a C++
 * signature's argument list first, then the middle of the function's name, so that the
 * function's own name and the file:line or module part stay whole while they fit. */
void vrt_frame_fit(const struct vrt_frame *f, char *buf, size_t len, int columns);
void vrt_frame_json(FILE *out, const struct vrt_frame *f);
/* A demangled copy of a symbol name from t's string table, cached while t is the trace read. */
const char *vrt_demangle(const struct vrt_trace *t, const char *name);
/* True when a frame's function, file or module contains needle (ignoring ASCII case): of a stack,
 * or of frames vrt_stack_frames gave. */
bool vrt_stack_mentions(const struct vrt_trace *t, uint32_t stack, const char *needle);
bool vrt_frames_mention(const struct vrt_frame *frames, int n, const char *needle);
/* The same for many needles: the frames' function, module and file names in ASCII lower case,
 * each ended by VRT_TEXT_END_MARK, built once and searched by vrt_text_mentions, which answers
 * for needles without the mark (one with it could match across two names: search the frames).
 * Valid until the next call; NULL without memory. */
#define VRT_TEXT_END_MARK '\x02'
const char *vrt_frames_text(const struct vrt_frame *frames, int n);
bool vrt_text_mentions(const char *text, const char *needle);
/* Whether any of the frames is a Python frame. */
bool vrt_frames_have_python(const struct vrt_frame *frames, int n);

#endif /* VRAMTRACE_STACKS_H */
