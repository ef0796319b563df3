/* SPDX-License-Identifier: MIT */
/* Pieces several reports share: a full replay with progress, and grouping what is live. */
#ifndef VRAMTRACE_REPORT_COMMON_H
#define VRAMTRACE_REPORT_COMMON_H

#include "model.h"
#include "sites.h"

/* Replays the trace into m, to its end (or its --until-mark). Returns 0 or an exit code (after
 * printing why). */
int vrt_report_replay(struct vrt_trace *t, struct vrt_model *m, bool quiet);

struct vrt_owners;
struct vrt_replay_options {
	bool quiet;
	bool stop_at_teardown;      /* "the end" is where teardown began (EXITING), if the trace says */
	struct vrt_owners *owners;  /* fed every record, when not NULL */
	double teardown_s;          /* out: when teardown began (0: the trace does not say, or ran on) */
	uint64_t ooms;              /* out: out-of-memory records (as vramtrace oom counts them) */
};
int vrt_report_replay_ex(struct vrt_trace *t, struct vrt_model *m, struct vrt_replay_options *o);
/* The id of s among the trace's strings (a label, a phase or function name it recorded); 0 when
 * the trace has no such string. */
uint32_t vrt_trace_string_id(const struct vrt_trace *t, const char *s);
/* 0 when label is NULL or a string of the trace; else one line naming it, and the usage exit
 * code: a mistyped --until-mark must not read the whole trace and pass. */
int vrt_check_until_mark(const struct vrt_trace *t, const char *path, const char *command, const char *label);
/* A time past the trace's end is its end ("--at 1e9" for "at the end"): *seconds becomes the
 * end's, said in one line unless quiet. */
void vrt_clamp_time_to_trace(const struct vrt_trace *t, const char *path, const char *command, const char *option,
			     double *seconds, bool quiet);

/*
 * Groups what m holds into sites. slot: one device slot, or -2 for all. kind: a memory kind,
 * -2 for every counted CUDA allocation, or -1 for the tensor view: PyTorch blocks by stack, the
 * caching allocator's reserved-but-unused bytes as one pseudo-site per device, and every CUDA
 * allocation that did not come from PyTorch's allocator.
 */
void vrt_report_group_live(const struct vrt_trace *t, const struct vrt_model *m, struct vrt_sites *s, int slot,
			   int kind);
/* How an item counts in vrt_report_group_live's list of (slot, kind): the rule written once, for
 * the lists grouped from a live set and those followed as it changes (peak_sites.c). */
enum vrt_group_role {
	VRT_GROUP_OUT,     /* not in the list */
	VRT_GROUP_SITE,    /* at its stack's site */
	VRT_GROUP_BLOCK,   /* a tensor: at its stack's site, and in its slot's tensor bytes */
	VRT_GROUP_SEGMENT, /* a segment of PyTorch's allocator: in its slot's segment bytes, which the
			    * tensors' bytes leave as the cache's pseudo-site */
};
enum vrt_group_role vrt_group_role(const struct vrt_trace *t, const struct vrt_item *it, int slot, int kind);
/* The bit of a site's kinds (a list of every kind says which) that an item gives. */
static inline uint8_t vrt_group_kind_bit(const struct vrt_item *it)
{
	return (uint8_t)(1u << (it->space == VRT_SPACE_BLOCK ? VRT_KIND_DEVICE : it->kind));
}
/* The tensor view's pseudo-site of a slot: what PyTorch's segments hold beyond its tensors. */
void vrt_group_add_cache(struct vrt_sites *s, int slot, int64_t torch_segments, int64_t blocks);
/* Bytes of each device slot and kind held through PyTorch's caching allocator (its segments). */
void vrt_torch_segment_bytes(const struct vrt_trace *t, const struct vrt_model *m,
			     int64_t bytes[VRT_MAX_DEVICES + 1][VRT_KIND_LAST]);
const char *vrt_device_name(int slot);
/* Whether --json answers with {"processes": [...]}: for a directory or several arguments, however
 * many traces they hold (a run's directory with one trace has the shape of one with eight), and a
 * single process object for one trace file named. */
bool vrt_json_lists_processes(int n_args, const char *const *args, int n_traces);
const char *vrt_cache_label(int slot);

#endif /* VRAMTRACE_REPORT_COMMON_H */
