/* SPDX-License-Identifier: MIT */
#include "buf.h"

#include <stdlib.h>
#include <string.h>

bool vrt_buf_grow(struct vrt_buf *b, size_t n)
{
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + n)
		cap *= 2;
	uint8_t *d = realloc(b->data, cap);
	if (!d)
		return false;
	b->data = d;
	b->cap = cap;
	return true;
}

void vrt_buf_free(struct vrt_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

bool vrt_buf_put_record(struct vrt_buf *b, const struct vrt_record *r, struct vrt_delta *d)
{
	if (!vrt_buf_reserve(b, VRT_RECORD_MAX_FIXED + r->bytes_len))
		return false;
	b->len = (size_t)(vrt_record_encode(b->data + b->len, r, d) - b->data);
	return true;
}
