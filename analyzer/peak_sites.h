/* SPDX-License-Identifier: MIT */
/*
 * What was live at each peak, grouped by site, learnt in the pass that finds the peaks: for every
 * device slot and kind, and each slot's tensor view (kind -1), the list vrt_report_group_live
 * would make of the live set just after the record that set that peak, without a second pass to
 * the record (memray's high-water mark aggregation). Each list keeps its sites as they are now
 * and as they were at its last peak, and which sites changed since; a record that raises the
 * peak has those copied over. A site is copied at most once a peak and only for a change since
 * the last one: one site update an item change, however many peaks there are.
 *
 * The model drives it (its observer): every change of an item's bytes, then once a record with
 * the peaks as they stand after it. A peak set inside a checkpoint (the items a
 * wrapped ring or an attach starts from) is therefore the checkpoint's state at that record,
 * which an event count cannot name. Memory: per list in use, two site tables bounded by the
 * stacks the list has held.
 */
#ifndef VRAMTRACE_PEAK_SITES_H
#define VRAMTRACE_PEAK_SITES_H

#include <stdint.h>

#include "model.h"
#include "sites.h"

struct vrt_peak_sites;

/* NULL when memory runs out. t's stacks tell PyTorch's segments apart (the tensor view). */
struct vrt_peak_sites *vrt_peak_sites_new(const struct vrt_trace *t);
void vrt_peak_sites_free(struct vrt_peak_sites *ps);

/* From now on follows m (m->observer): ps must outlive m's records, and m be new. */
void vrt_peak_sites_follow(struct vrt_peak_sites *ps, struct vrt_model *m);

/* Adds to `out` (empty) the sites of (slot, kind) at its last peak, as vrt_report_group_live
 * lists them: the tensor view with its cache pseudo-site, most bytes first. 0, or VRT_E_NOMEM
 * when the lists could not be kept (then nothing is added). */
int vrt_peak_sites_take(const struct vrt_peak_sites *ps, int slot, int kind, struct vrt_sites *out);

#endif /* VRAMTRACE_PEAK_SITES_H */
