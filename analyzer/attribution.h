/* SPDX-License-Identifier: MIT */
/*
 * Where in the user's code a stack's memory comes from: the innermost Python frame outside the
 * standard library and installed packages (site-packages, dist-packages), and the library
 * function it called into when a library did the allocating ("train -> Module.cuda"). Reports
 * name that frame first; `leaks` merges a function's lines into a range and looks through
 * allocation helpers that many callers share.
 */
#ifndef VRAMTRACE_ATTRIBUTION_H
#define VRAMTRACE_ATTRIBUTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stacks.h"

struct vrt_attribution {
	struct vrt_frame user;   /* the user frame (type LABEL with "[no stack]" when there is none) */
	struct vrt_frame entry;  /* the outermost library frame the user frame called, when one did the
				    allocating (entry.type is LABEL otherwise) */
	struct vrt_frame inner;  /* the innermost Python frame (the library line that allocated) */
	bool has_user, has_entry, python;
	bool backward;           /* no user frame, on autograd's engine: the user's backward() called it */
};

/* True for a Python frame of the user's own code (not the standard library, not a package):
 * the trace's own list of library paths when it has one ("python.library_paths"), else the
 * usual places (site-packages, dist-packages, lib/pythonX.Y). */
bool vrt_frame_is_user_code(const struct vrt_frame *f);
/* The trace whose library paths vrt_frame_is_user_code uses (the one being read). */
void vrt_attribution_use(const struct vrt_trace *t);
/* Attributes stack, looking through its skip innermost user frames (helpers). */
void vrt_attribute(const struct vrt_trace *t, uint32_t stack, int skip, struct vrt_attribution *a);
/* "Engine.__init__", "train -> Module.cuda", or a native frame's name: what a headline names. */
void vrt_attribution_name(const struct vrt_attribution *a, char *buf, size_t len);
/* The same place as a key: equal for stacks that a headline counts together. */
void vrt_attribution_key(const struct vrt_attribution *a, char *buf, size_t len);

/*
 * A headline's shares: the bytes of sites grouped by where they are attributed, a function's
 * lines merged into a range, the largest first.
 */
struct vrt_share {
	char name[256];  /* vrt_attribution_name */
	char file[256];  /* basename of the user frame's file ("" without one) */
	int first_line, last_line;
	char in[256];    /* for a library entry: where the library allocated ("module.py:1097") */
	int64_t bytes;
};

struct vrt_shares {
	struct vrt_share *v;
	size_t n;
	int64_t total;
};

/* Groups (stack, bytes) pairs; a user function that allocates for two or more different callers
 * is a helper, and its callers are named instead. A pair with 0 bytes is only evidence of
 * another caller (an allocation that did not survive), never a share. */
int vrt_shares_build(const struct vrt_trace *t, const uint32_t *stacks, const int64_t *bytes, size_t n,
		     struct vrt_shares *out);
void vrt_shares_free(struct vrt_shares *s);
/* "78% from Engine.__init__ (leak_repro.py:52-55), 22% from train -> Module.cuda
 * (leak_repro.py:99, in module.py:1097)": at most max shares. */
void vrt_shares_format(const struct vrt_shares *s, int max, char *buf, size_t len);

#endif /* VRAMTRACE_ATTRIBUTION_H */
