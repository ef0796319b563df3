/* SPDX-License-Identifier: MIT */
/* Shared by the trace fuzz targets: open a trace, replay it fully, walk every stack. */
#ifndef VRT_FUZZ_TRACE_H
#define VRT_FUZZ_TRACE_H

#include "fuzz_common.h"
#include "model.h"
#include "trace_reader.h"

static inline void vrt_fuzz_walk_stack(const struct vrt_trace *t, uint32_t id)
{
	/* As the reports do: bounded walk to the root, looking every frame up. */
	for (int guard = 0; id && id < t->tables.n_nodes && guard < 4096; guard++) {
		const struct vrt_stack_node *nd = &t->tables.nodes[id];
		if (nd->kind == VRT_FRAME_NATIVE) {
			const struct vrt_symbol_def *s = vrt_symbol(t, nd->value);
			if (s)
				(void)vrt_string(t, s->name);
		} else if (nd->kind == VRT_FRAME_LABEL) {
			(void)vrt_string(t, nd->value);
		}
		if (nd->parent >= id)
			break;
		id = nd->parent;
	}
}

static inline void vrt_fuzz_each_item(void *ctx, const struct vrt_item *it)
{
	vrt_fuzz_walk_stack(ctx, it->stack);
}

/*
 * Whether an input is worth a run: it decodes to at most VRT_FUZZ_MAX_DECODED bytes. Kilobytes
 * of zstd can declare gigabytes of records (tests/fuzz/bad's bombs); the analyzer bounds what
 * they cost with its --max-memory budget (budget.c, checked by check_bad.py), which is not in
 * the fuzz targets, and a fuzz run must not spend its minutes on one input.
 */
#define VRT_FUZZ_MAX_DECODED (10u << 20)

static inline bool vrt_fuzz_affordable(const char *path)
{
	struct vrt_trace t;
	if (vrt_trace_open(&t, path))
		return true; /* refused at open: cheap whatever it is */
	uint64_t raw = 0;
	for (size_t i = 0; i < t.n_chunks; i++)
		raw += t.chunks[i].raw;
	vrt_trace_close(&t);
	return raw <= VRT_FUZZ_MAX_DECODED;
}

/* Opens path as a trace and replays all of it; returns the open status. */
static inline int vrt_fuzz_read_trace(const char *path)
{
	struct vrt_trace t;
	int rc = vrt_trace_open(&t, path);
	if (rc)
		return rc;
	for (size_t i = 0; i < t.n_chunks; i++) {
		const uint8_t *p;
		size_t len;
		(void)vrt_trace_chunk(&t, i, &p, &len);
	}
	(void)vrt_info(&t, "cmdline");
	struct vrt_model m;
	if (vrt_model_init(&m) == 0) {
		struct vrt_replay rp;
		struct vrt_record r;
		vrt_replay_begin(&rp, &t);
		while (vrt_replay_next(&rp, &r)) {
			vrt_model_apply(&m, &r, NULL);
			vrt_fuzz_walk_stack(&t, r.stack);
			vrt_fuzz_walk_stack(&t, r.stack2);
			if (r.op == VRT_OP_MARK || r.op == VRT_OP_PHASE_ENTER)
				(void)vrt_string(&t, r.id);
		}
		vrt_model_each(&m, vrt_fuzz_each_item, &t);
		vrt_model_free(&m);
	}
	vrt_trace_close(&t);
	return 0;
}

#endif /* VRT_FUZZ_TRACE_H */
