/* SPDX-License-Identifier: MIT */
/*
 * What to change after an out-of-memory failure, measured at the failing request: for each
 * usual answer (lift the cap, expandable segments, max_split_size_mb, empty_cache(), activation
 * checkpointing, ZeRO-3, offloading parameters or the optimizer, a smaller batch) the bytes it
 * frees at that moment, whether the request and every one before it would then fit, and what
 * decided it: a replay of the allocator (alloc_replay.h), what a retention walk found the
 * tensors to be (identity), or the allocating stacks' rules (rule).
 */
#ifndef VRAMTRACE_REMEDIES_H
#define VRAMTRACE_REMEDIES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "categories.h"
#include "trace_reader.h"

#define VRT_MAX_REMEDIES 12

enum vrt_fit { VRT_FIT_UNKNOWN = -1, VRT_FIT_NO = 0, VRT_FIT_YES = 1 };

struct vrt_remedy {
	char name[64];
	int64_t frees_bytes;     /* memory it makes available at the failing request */
	enum vrt_fit fits;       /* the failing request, every request before it, and (where
				  * the trace tells) the rest of the failing call */
	const char *decided_by;  /* "replay", "identity" or "rule" */
	char detail[400];
};

struct vrt_remedy_input {
	uint64_t event;                    /* event index of the failing request (its OOM record) */
	int device;
	uint64_t requested;                /* bytes asked for (rounded as PyTorch reports it) */
	uint64_t device_free;              /* free on the device at the failure, 0 if unknown */
	const struct vrt_record *limits;   /* PyTorch's OOM_LIMITS for it (op 0: none) */
	const struct vrt_category *cats;   /* what was live at the failure, by category */
	int n_cats;
	bool walked;                       /* a retention walk at the failure decided them */
	uint32_t phase;                    /* string id of the innermost phase open then (0: none) */
	uint64_t phase_call;               /* which call of it */
};

struct vrt_remedies {
	struct vrt_remedy v[VRT_MAX_REMEDIES];
	int n;
	int64_t shortfall;                 /* bytes missing at the failing request (0: unknown) */
	bool replayed;                     /* the allocator replay reached the failing request */
	/* The per-process limit the replay ran under and where it came from (a record, PyTorch's own
	 * figures, or inferred); 0 when none. by_limit: the replay's failure was that limit's refusal. */
	uint64_t limit, reserved_at_failure;
	const char *limit_source;
	bool by_limit;
	char note[200];                    /* why it did not, when it did not */
	/* The rest of the failing call, projected from the last call of its phase before it
	 * (remedies.c: project_rest); call_rest -1: not known. A remedy fits only with room for it. */
	int64_t call_rest;
	double call_scale;
	uint64_t call_peak;                /* tensor bytes the call would have peaked at */
	size_t call_requests, last_call_requests;
	bool call_from_first;              /* projected from the first call: an estimate only */
	char call_label[100];              /* "call of PHASE" or "interval between marks" */
	/* The largest size (the number in the marks before the calls) whose projected peak fits,
	 * from the earlier calls' peaks against their sizes; -1: not known. */
	int64_t largest_size, failing_size;
	double size_slope, size_intercept;
	bool size_through_failure;         /* the line runs from the largest finished size to the
					    * failing size's need (the fit through all said it fits) */
};

void vrt_remedies_compute(struct vrt_trace *t, const struct vrt_remedy_input *in, struct vrt_remedies *out);
void vrt_remedies_print(const struct vrt_remedies *r, FILE *out);
/* ", \"shortfall_bytes\": N, \"remedies\": [...]" (inside an open JSON object). */
void vrt_remedies_json(const struct vrt_remedies *r, FILE *out);

#endif /* VRAMTRACE_REMEDIES_H */
