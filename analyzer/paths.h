/* SPDX-License-Identifier: MIT */
/* Where the pieces installed beside the vramtrace binary are: build tree, prefix, or wheel. */
#ifndef VRAMTRACE_PATHS_H
#define VRAMTRACE_PATHS_H

#include <stddef.h>

/* libvramtrace.so: $VRAMTRACE_PRELOAD, else searched relative to this executable. */
int vrt_find_preload(char *out, size_t len);
/* The sitecustomize bootstrap directory and the directory holding the vramtrace package. */
int vrt_find_python_dirs(char *bootstrap, size_t blen, char *package, size_t plen);
/* value, then the variable's old value after sep (or value alone): for LD_PRELOAD and PYTHONPATH
 * handed to a program this binary starts. setenv's result. */
int vrt_prepend_env(const char *name, const char *value, char sep);

#endif /* VRAMTRACE_PATHS_H */
