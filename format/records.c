/* SPDX-License-Identifier: MIT */
#include "trace_reader.h"

#include <string.h>

#include "vramtrace/error.h"

/* The verdict on a record decoded by the generic path: 0 to hand it out, 1 to skip it (THREAD),
 * VRT_RECORDS_END_MARK, or an error. */
static int judge(const struct vrt_trace *t, const struct vrt_records_cursor *c, const struct vrt_record *r,
		 uint32_t *thread)
{
	if (r->op == VRT_OP_THREAD) {
		*thread = (uint32_t)r->id;
		return 1;
	}
	if (r->op == VRT_OP_MARK && t->end_mark && !strcmp(vrt_string(t, r->id), t->end_mark))
		return VRT_RECORDS_END_MARK;
	bool is_cp = r->op >= VRT_OP_CP_BEGIN && r->op <= VRT_OP_CP_END;
	bool in_cp = c->chunk_type == VRT_CHUNK_CHECKPOINT;
	if (is_cp != in_cp || (r->op >= VRT_OP_STRING && r->op <= VRT_OP_INFO))
		return VRT_E_RECORD; /* a record in the wrong kind of chunk */
	if ((r->stack && !vrt_stack_valid(t, r->stack)) || (r->stack2 && !vrt_stack_valid(t, r->stack2)))
		return VRT_E_RANGE;
	return 0;
}

/*
 * The hot event ops take the straight-line decoder and one compare for their stacks (no THREAD,
 * mark or checkpoint record is one of them); every other record the generic decoder and judge().
 * Flattened: the decoders are inlined into the loop however the compiler weighs them (a
 * link-time-optimized analyzer called the straight-line one out of line, ~8% slower).
 */
__attribute__((flatten)) uint32_t vrt_records_decode(const struct vrt_trace *t, struct vrt_records_cursor *c,
						     struct vrt_record *recs, uint32_t *threads, uint32_t max,
						     int *verdict)
{
	const uint8_t *p = c->p, *end = c->end;
	struct vrt_delta d = c->delta;
	uint32_t thread = c->thread, n = 0;
	/* A stack id is valid when it is 0 or below n_nodes: below stacks_end either way. */
	uint64_t stacks_end = t->tables.n_nodes ? t->tables.n_nodes : 1;
	bool in_cp = c->chunk_type == VRT_CHUNK_CHECKPOINT;
	int v = 0;
	while (n < max && p < end) {
		struct vrt_record *r = &recs[n];
		if (vrt_record_decode_hot(&p, end, r, &d)) {
			if (in_cp) {
				v = VRT_E_RECORD;
				break;
			}
			if (r->stack >= stacks_end || r->stack2 >= stacks_end) {
				v = VRT_E_RANGE;
				break;
			}
			threads[n++] = thread;
			continue;
		}
		if ((v = vrt_record_decode_generic(&p, end, r, &d)))
			break;
		v = judge(t, c, r, &thread);
		if (v == 1) {
			v = 0;
			continue;
		}
		if (v)
			break;
		threads[n++] = thread;
	}
	c->p = p;
	c->delta = d;
	c->thread = thread;
	*verdict = v;
	return n;
}
