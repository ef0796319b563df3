/* SPDX-License-Identifier: MIT */
/*
 * Replaying a trace's caching-allocator requests through the allocator model (alloc_model.h):
 * every BLOCK_ALLOC (requested size, stream, device) and BLOCK_FREE in recorded order, the
 * empty_cache() calls the program made (told apart from the allocator's own frees), under a
 * setting, a per-process limit and a device size of one's choosing. Memory outside the
 * allocator stays as recorded.
 *
 * Replayed under the setting it was recorded with, the model must do what the allocator did:
 * the same cudaMalloc/cudaFree (cuMemMap/cuMemUnmap) at the same request, blocks at the same
 * addresses, the same peak. The replay checks that as it goes (struct vrt_replay_check).
 */
#ifndef VRAMTRACE_ALLOC_REPLAY_H
#define VRAMTRACE_ALLOC_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "alloc_model.h"
#include "model.h"
#include "trace_reader.h"

#define VRT_REPLAY_MAX_DEVICES 16

struct vrt_alloc_replay_options {
	const char *alloc_conf;   /* NULL: the setting the trace recorded */
	uint64_t allocator_limit; /* bytes the allocator may reserve; 0: the trace's own */
	uint64_t device_memory;   /* the device's size; 0: the trace's own */
	bool no_limit;            /* ignore the trace's own limit (what lifting it would do) */
	uint64_t until_event;     /* stop after the record with this event index (0: run to the end) */
	bool keep_going;          /* do not stop at the first request that fails */
};

/* Where the replay compares itself with the recording (only under the recorded setting). */
struct vrt_replay_check {
	uint64_t requests;          /* requests whose segment operations were compared */
	uint64_t recorded_ops, model_ops, mismatched_requests;
	uint64_t blocks, blocks_at_recorded_address;
	double first_mismatch_s;    /* < 0: none */
	char first_mismatch[400];
};

struct vrt_replay_device {
	int device;
	uint64_t peak_reserved, peak_allocated;         /* the model's */
	uint64_t recorded_peak_reserved, recorded_peak_allocated;
	uint64_t peak_reserved_ts;
	uint64_t unused_at_peak, largest_free_at_peak;  /* reserved - allocated, largest free block */
	struct vrt_am_stats stats;
	uint64_t reserved_now, allocated_now, recorded_reserved_now, releasable_now;
};

struct vrt_replay_failure {
	uint64_t ts, event, request, rounded, stream;
	uint64_t reserved, allocated, limit;
	uint32_t stack, thread;
	int device;
	bool by_limit; /* the per-process limit refused it, not the device */
};

struct vrt_alloc_replay {
	/* the setting replayed and what the trace says about itself */
	char conf[256], recorded_conf[256];
	struct vrt_am_config cfg;
	bool as_recorded;          /* the recorded setting, limit and device: the check applies */
	const char *trace_torch;   /* INFO torch, or NULL */
	bool other_release;        /* the trace's PyTorch is not the modelled release */
	uint64_t limit;            /* 0: none */
	const char *limit_source;
	uint64_t capacity;         /* 0: unlimited */
	const char *capacity_source;
	bool approximate;          /* the beginning of the allocator's history is missing */

	struct vrt_replay_device dev[VRT_REPLAY_MAX_DEVICES];
	int n_dev;
	uint64_t requests, frees, unknown_frees, empty_caches, recorded_ooms;

	bool failed;               /* a request that succeeded in the trace fails in the model */
	struct vrt_replay_failure fail;
	bool avoided_oom;          /* a request that failed in the trace fits: the replay stopped there */
	uint64_t avoided_oom_ts;
	bool stopped;              /* ended before the end of the trace (failure, avoided OOM, until_event) */
	bool until_reached;
	bool until_fits;           /* the request at until_event fitted */
	uint64_t stop_ts;
	struct vrt_replay_check check;
	uint64_t events;           /* trace records replayed */
	uint64_t model_events;     /* requests and frees given to the model */
	double model_seconds;      /* time spent in the model itself */
};

/* Replays t. 0, or a vrt_error; conf errors as VRT_E_USAGE with the reason in err. */
int vrt_alloc_replay_run(struct vrt_trace *t, const struct vrt_alloc_replay_options *o, struct vrt_alloc_replay *r,
			 char *err, size_t err_len);

#endif /* VRAMTRACE_ALLOC_REPLAY_H */
