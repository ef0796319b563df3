/* SPDX-License-Identifier: MIT */
/* Writing an output file without trusting what its name points to (safe_output.c). */
#ifndef VRAMTRACE_SAFE_OUTPUT_H
#define VRAMTRACE_SAFE_OUTPUT_H

#include <stdio.h>
#include <sys/types.h>

#include "trace_reader.h"

struct vrt_safe_output {
	FILE *f;            /* write here */
	char path[4096];    /* what was asked for */
	char name[256];     /* its last component, in dir_fd */
	char temp[512];     /* the new file being written, in dir_fd ("" once renamed or removed) */
	int dir_fd;
	mode_t mode;        /* what the file gets: 0600, or the input trace's mode if stricter */
};

/* A new temporary beside path, for an output made from input (NULL: none). path itself may not
 * be a link, a directory, a device, a FIFO or a socket. 0, or an exit code after the message. */
int vrt_safe_output_open(struct vrt_safe_output *o, const char *path, const struct vrt_trace *input);
/* Writes out, sets the mode and renames over path; on failure removes the temporary. 0, or an
 * exit code after the message naming path. */
int vrt_safe_output_commit(struct vrt_safe_output *o);
/* Removes the temporary: path keeps what it held before. */
void vrt_safe_output_abort(struct vrt_safe_output *o);

#endif /* VRAMTRACE_SAFE_OUTPUT_H */
