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

#include "trace_reader.h"

#define VRT_MAX_DEVICES 64
#define VRT_HOST_SLOT VRT_MAX_DEVICES /* totals index for device -1 (host) */
/* The most bytes all live items together may hold (64 PiB, far beyond any machine). Items that
 * would cross it come from a damaged trace and are not taken in, so that every sum of live sizes
 * (the model's totals, the reports' per-site sums) fits an int64_t with room to scale (the
 * timeline's chart multiplies by 8). */
#define VRT_HELD_MAX (1ull << 56)

enum vrt_item_space {
	VRT_IS_ADDR = 1,
	VRT_IS_HANDLE = 2,
	VRT_IS_MAP = 3,
	VRT_IS_VA = 4,
	VRT_IS_BLOCK = 5,
	VRT_IS_IMPORT = 6,
};

/*
 * One live item, as the model hands it out (vrt_model_each, effects). The model stores items
 * packed (64 bytes, model.c) and unpacks this view on demand: aux2 is the offset in the handle of
 * a MAP and 0 otherwise; stream is 0 for spaces whose records carry none (HANDLE, MAP, VA,
 * IMPORT); refs and maps count for a HANDLE only (1 and 0 otherwise).
 */
struct vrt_item {
	uint64_t addr, size, ts, aux, aux2, stream;
	uint64_t born_event;  /* event index of its birth */
	uint64_t born_phase;  /* global phase-invocation counter at birth (see leaks) */
	uint32_t stack;
	uint32_t refs, maps;  /* HANDLE */
	uint16_t api;
	int16_t device;
	uint8_t space, op, kind;
	uint8_t seeded;       /* came from a checkpoint or seed: born before the retained history */
};

/* What one record did to the model. */
enum vrt_effect_kind { VRT_EFFECT_NONE, VRT_EFFECT_BORN, VRT_EFFECT_DIED, VRT_EFFECT_RESIZED };

struct vrt_effect {
	enum vrt_effect_kind kind;
	struct vrt_item item; /* copy of the item born, died or resized; unset with VRT_EFFECT_NONE */
	int64_t delta;        /* change of the counted total (bytes), 0 if not counted */
	bool tensor;          /* the counted total is the tensor layer */
};

struct vrt_live;

/*
 * The live set: items in one dense array (the order vrt_model_each walks; a death moves the last
 * item into its place) and an open-addressing index of item positions by (space, address), at
 * most half full. Memory: 64 bytes per item plus 8 to 16 of index, 24 while the index doubles
 * (VRT_MODEL_BYTES_PER_ITEM bounds it).
 */
#define VRT_MODEL_BYTES_PER_ITEM 88

struct vrt_model {
	struct vrt_live *items;
	uint32_t *index;        /* item position + 1; 0: empty */
	size_t cap;             /* index slots, a power of two */
	size_t used, items_cap; /* live items; room in items */
	int error;              /* VRT_E_NOMEM once an item could not be stored: the model is incomplete */
	/* Counted totals: memory actually held, per device slot (host = VRT_HOST_SLOT) and kind. */
	int64_t live[VRT_MAX_DEVICES + 1][VRT_KIND_LAST];
	int64_t peak[VRT_MAX_DEVICES + 1][VRT_KIND_LAST];
	uint64_t peak_ts[VRT_MAX_DEVICES + 1][VRT_KIND_LAST];
	uint64_t peak_event[VRT_MAX_DEVICES + 1][VRT_KIND_LAST];
	int64_t tensors[VRT_MAX_DEVICES + 1], tensor_peak[VRT_MAX_DEVICES + 1];
	uint64_t tensor_peak_ts[VRT_MAX_DEVICES + 1], tensor_peak_event[VRT_MAX_DEVICES + 1];
	uint64_t tensor_events[VRT_MAX_DEVICES + 1];
	int64_t imported[VRT_MAX_DEVICES + 1], reserved_va;
	uint64_t events;      /* event records applied */
	uint64_t phase_seq;   /* phase invocations entered so far, all names */
	uint64_t last_ts;
	uint64_t unknown_frees, lost;
	uint64_t held;        /* sum of the sizes of all live items, every space: <= VRT_HELD_MAX */
	uint64_t implausible; /* allocations and resizes refused: their size would cross VRT_HELD_MAX */
	bool any_blocks;
	bool seeding;         /* inside a checkpoint whose items are to be taken in */
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
int vrt_device_slot(int device);
bool vrt_item_counted(const struct vrt_item *it); /* holds memory (not a mapping or a VA range) */
/* Whether an effect's delta is its own item's change alone; false when other items moved too
 * (a replaced allocation, a context reset, an unmap that ended a VMM handle). */
bool vrt_effect_only_own(const struct vrt_effect *e);

/* Iterates the trace's records from trace->replay_from, chunk by chunk, in order. */
struct vrt_replay {
	struct vrt_trace *trace;
	size_t chunk;
	const uint8_t *p, *end;
	struct vrt_delta delta;
	uint32_t thread;     /* thread index of the current record */
	uint8_t chunk_type;
	int error;           /* first decoding error (the replay stops there) */
	uint64_t bad_chunks; /* chunks skipped because their payload failed its checks */
	/* progress */
	uint64_t bytes_done, bytes_total;
};

void vrt_replay_begin(struct vrt_replay *rp, struct vrt_trace *t);
/* Next record (THREAD records are consumed, not returned). false at the end or on error. */
bool vrt_replay_next(struct vrt_replay *rp, struct vrt_record *r);

/* Seconds since the trace started, for a ts. */
double vrt_ts_seconds(const struct vrt_trace *t, uint64_t ts);
const char *vrt_kind_name(uint32_t kind);
const char *vrt_api_name(uint32_t api);
const char *vrt_op_name(uint32_t op);

#endif /* VRAMTRACE_MODEL_H */
