/* SPDX-License-Identifier: MIT */
/* Two decoded records equal field by field (their bytes by pointer: both point into one chunk). */
#ifndef VT_SAME_RECORD_H
#define VT_SAME_RECORD_H

#include <stdbool.h>

#include "vramtrace/record.h"

static inline bool same_record(const struct vrt_record *a, const struct vrt_record *b)
{
	return a->op == b->op && a->ts == b->ts && a->addr == b->addr && a->size == b->size && a->aux == b->aux &&
	       a->aux2 == b->aux2 && a->stream == b->stream && a->id == b->id && a->id2 == b->id2 &&
	       a->api == b->api && a->device == b->device && a->kind == b->kind && a->stack == b->stack &&
	       a->stack2 == b->stack2 && a->result == b->result && a->bytes_len == b->bytes_len &&
	       a->bytes == b->bytes;
}

#endif
