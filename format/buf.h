/* SPDX-License-Identifier: MIT */
/*
 * A growable byte buffer, and a record encoded at its end: what the collector's tables and
 * checkpoints and the recovery's chunks are built in before the writer takes them.
 */
#ifndef VRAMTRACE_BUF_H
#define VRAMTRACE_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vramtrace/record.h"

struct vrt_buf {
	uint8_t *data;
	size_t len, cap;
};

/* Room for n more bytes; false when out of memory (the buffer is as it was). Inline: the
 * collector asks once per event; vrt_buf_grow is the rare rest. */
bool vrt_buf_grow(struct vrt_buf *b, size_t n);
static inline bool vrt_buf_reserve(struct vrt_buf *b, size_t n) { return b->len + n <= b->cap || vrt_buf_grow(b, n); }
void vrt_buf_free(struct vrt_buf *b);
/* Encodes r at the end of b with the chunk's delta state d; false when out of memory. */
bool vrt_buf_put_record(struct vrt_buf *b, const struct vrt_record *r, struct vrt_delta *d);

#endif /* VRAMTRACE_BUF_H */
