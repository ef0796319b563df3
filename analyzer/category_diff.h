/* SPDX-License-Identifier: MIT */
/*
 * diff --by category: what was live by category in two traces (a batch that fits, one that
 * fails), each at its own moment: its out-of-memory error when it has one, else its peak, or
 * the time given. Growth per category reads off directly which kind of memory a change grew.
 */
#ifndef VRAMTRACE_CATEGORY_DIFF_H
#define VRAMTRACE_CATEGORY_DIFF_H

#include <stdbool.h>

/* at < 0: the trace's own moment (OOM, else peak). Returns 0 or an exit code. */
int vrt_category_diff(const char *path_a, double at_a, const char *path_b, double at_b, bool json, bool quiet);

#endif /* VRAMTRACE_CATEGORY_DIFF_H */
