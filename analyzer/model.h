/* SPDX-License-Identifier: MIT */
/*
 * Replaying a trace: an iterator over its event records in order, and the model of what is
 * alive that every report is computed from. Memory use is bounded by the live set and the
 * tables, never by the trace length.
 */
#ifndef VRAMTRACE_MODEL_H
#define VRAMTRACE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "live.h"
#include "trace_reader.h"

#define VRT_MAX_DEVICES 64
#define VRT_HOST_SLOT VRT_MAX_DEVICES /* totals index for device -1 (host) */

/* What one record did to the model. */
enum vrt_effect_kind { VRT_EFFECT_NONE, VRT_EFFECT_BORN, VRT_EFFECT_DIED, VRT_EFFECT_RESIZED };

struct vrt_effect {
	enum vrt_effect_kind kind;
	struct vrt_item item; /* copy of the item born, died or resized; unset with VRT_EFFECT_NONE */
	int64_t delta;        /* change of the counted total (bytes), 0 if not counted */
	bool tensor;          /* the counted total is the tensor layer */
	uint32_t others_ended; /* items other than its own that the record ended: an allocation it
				* replaced, a reset's, an unmap's further mappings and their handles */
};

/*
 * The live set (format/live.c: the rules the preload applies too) and what the reports read
 * from it as it changes: totals and peaks per device and kind, and the tensor layer's.
 */
#define VRT_MAX_CAPTURES 16

struct vrt_model {
	struct vrt_live_set set;
	/* Counted totals: memory actually held, per device slot (host = VRT_HOST_SLOT) and kind. */
	int64_t live[VRT_MAX_DEVICES + 1][VRT_KIND_LAST];
	int64_t peak[VRT_MAX_DEVICES + 1][VRT_KIND_LAST];
	uint64_t peak_ts[VRT_MAX_DEVICES + 1][VRT_KIND_LAST];
	uint64_t peak_event[VRT_MAX_DEVICES + 1][VRT_KIND_LAST];
	int64_t tensors[VRT_MAX_DEVICES + 1], tensor_peak[VRT_MAX_DEVICES + 1];
	uint64_t tensor_peak_ts[VRT_MAX_DEVICES + 1], tensor_peak_event[VRT_MAX_DEVICES + 1];
	uint64_t tensor_events[VRT_MAX_DEVICES + 1];
	uint64_t peak_raises; /* times a peak above rose */
	int64_t imported[VRT_MAX_DEVICES + 1], reserved_va;
	uint64_t last_ts;
	uint64_t lost;
	bool any_blocks;
	/* The streams capturing a CUDA graph now (CAPTURE_BEGIN to its CAPTURE_END) and the thread
	 * that began each: a birth on such a thread (a tensor block: on that stream) is made for the
	 * graph (vrt_item.captured). Past VRT_MAX_CAPTURES at once, the later ones are not followed. */
	struct vrt_capture { uint32_t thread; uint64_t stream; } captures[VRT_MAX_CAPTURES];
	int n_captures;
	uint32_t thread;           /* the record under way's thread: set by the pass (0 elsewhere) */
	struct vrt_effect *effect; /* the record under way's, while the set applies it */
	const struct vrt_model_observer *observer; /* NULL: none */
};

/* Told of what the model follows as it happens (peak_sites.c follows the sites at the peaks). */
struct vrt_model_observer {
	/* An item's bytes changed by `bytes` and the items by `items` (1 born, -1 ended, 0
	 * resized), after the model's totals followed. */
	void (*changed)(void *ctx, const struct vrt_item *it, int64_t bytes, int items);
	/* A record raised one or more peaks (once, after all its changes). */
	void (*peak_raised)(void *ctx, const struct vrt_model *m);
	void *ctx;
};

int vrt_model_init(struct vrt_model *m);
void vrt_model_free(struct vrt_model *m);
/* Applies one record; fills *e when non-NULL. Checkpoint records seed the model only while it
 * is empty (the start of a ring that wrapped); later ones are consistency points. */
void vrt_model_apply(struct vrt_model *m, const struct vrt_record *r, struct vrt_effect *e);
/* What vrt_model_apply would set any_blocks to, learnt without a live set (a cheap first pass). */
struct vrt_blocks_probe {
	uint64_t events;
	bool seeding, any_blocks;
};
void vrt_blocks_probe_apply(struct vrt_blocks_probe *p, const struct vrt_record *r);
/* Calls fn for every live item. */
void vrt_model_each(const struct vrt_model *m, void (*fn)(void *ctx, const struct vrt_item *it), void *ctx);
static inline int vrt_device_slot(int device)
{
	return device >= 0 && device < VRT_MAX_DEVICES ? device : VRT_HOST_SLOT;
}
/* Whether an effect's delta is its own item's change alone; false when other items moved too
 * (a replaced allocation, a context reset, an unmap that ended a VMM handle). */
bool vrt_effect_only_own(const struct vrt_effect *e);

/* Records decoded ahead at a time: a batch stays in L1 while it is handed out. */
#define VRT_REPLAY_BATCH 64

/*
 * Iterates the trace's records from trace->replay_from, chunk by chunk, in order. A chunk's
 * records come decoded by the reader's second thread with the chunk (vrt_trace_chunk_records),
 * else a batch at a time here (vrt_records_decode either way: checked as decoded); the records
 * before a bad one are handed out first, then the error, as when they were decoded one by one.
 * A batch never spans two chunks (records' bytes point into the chunk).
 */
struct vrt_replay {
	struct vrt_trace *trace;
	size_t chunk;
	struct vrt_records_cursor at; /* what is still to be decoded here (at.p NULL: nothing) */
	uint32_t thread;     /* thread index of the current record */
	int error;           /* first decoding error (the replay stops there) */
	uint64_t bad_chunks; /* chunks skipped because their payload failed its checks */
	/* progress */
	uint64_t bytes_done, bytes_total;
	/* the batch: records [next, n) of recs are still to be handed out; recs is the chunk's
	 * records decoded ahead, or `batch` */
	uint32_t next, n;
	const struct vrt_record *recs;
	const uint32_t *threads;
	int batch_error;        /* what stopped the batch, raised after its records */
	bool ended;             /* the end mark was decoded: nothing after it is handed out */
	uint32_t batch_threads[VRT_REPLAY_BATCH];
	struct vrt_record batch[VRT_REPLAY_BATCH];
};

void vrt_replay_begin(struct vrt_replay *rp, struct vrt_trace *t);
/* Decodes the next batch when the last one is handed out; false at the end, at the end mark or
 * at an error. */
bool vrt_replay_refill(struct vrt_replay *rp);

/* The next record, in the batch until the next one is decoded (THREAD records are consumed, not
 * returned); its thread is rp->thread. NULL at the end or on error. */
static inline const struct vrt_record *vrt_replay_take(struct vrt_replay *rp)
{
	if (rp->next == rp->n && !vrt_replay_refill(rp))
		return NULL;
	rp->thread = rp->threads[rp->next];
	return &rp->recs[rp->next++];
}

/* vrt_replay_take, copied into *r. */
static inline bool vrt_replay_next(struct vrt_replay *rp, struct vrt_record *r)
{
	const struct vrt_record *next = vrt_replay_take(rp);
	if (next)
		*r = *next;
	return next != NULL;
}

/* The record k after the current one when it is decoded already (in the batch), else NULL. */
static inline const struct vrt_record *vrt_replay_ahead(const struct vrt_replay *rp, uint32_t k)
{
	return rp->next - 1 + k < rp->n ? &rp->recs[rp->next - 1 + k] : NULL;
}

/* Seconds since the trace started, for a ts. */
double vrt_ts_seconds(const struct vrt_trace *t, uint64_t ts);
const char *vrt_kind_name(uint32_t kind);
const char *vrt_api_name(uint32_t api);
const char *vrt_op_name(uint32_t op);

#endif /* VRAMTRACE_MODEL_H */
