/* SPDX-License-Identifier: MIT */
/* The optional user API (include/vramtrace/vramtrace.h), also used by the Python module. */
#define _GNU_SOURCE
#define VRT_CTL_CLIENT
#include <stdio.h>
#include <unistd.h>

#include "collector.h"
#include "vramtrace/control.h"
#include "vramtrace/vramtrace.h"

static void label(uint8_t op, const char *text)
{
	int guard;
	if (!text || !(guard = vrt_enter()))
		return;
	vrt_emit_label(op, text);
	vrt_leave(guard);
}

VRT_EXPORT void vramtrace_mark(const char *text) { label(VRT_OP_MARK, text); }

VRT_EXPORT void vramtrace_phase_enter(const char *name)
{
	vrt_torch_settle(); /* exact tensor totals at the boundary */
	label(VRT_OP_PHASE_ENTER, name);
}

VRT_EXPORT void vramtrace_phase_exit(const char *name)
{
	vrt_torch_settle();
	label(VRT_OP_PHASE_EXIT, name);
}

VRT_EXPORT int vramtrace_enabled(void)
{
	return atomic_load(&vrt_state) == VRT_STATE_READY ? atomic_load(&vrt_mode) : 0;
}

VRT_EXPORT int vramtrace_snapshot(const char *path)
{
	if (!path || path[0] != '/' || atomic_load(&vrt_state) != VRT_STATE_READY)
		return VRT_E_ARG;
	/* The collector owns the file: ask it through our own control socket. */
	struct vrt_ctl_msg reply;
	int rc = vrt_ctl_request((int)getpid(), VRT_CTL_SNAPSHOT, path, &reply, 30000);
	return rc ? rc : reply.status;
}
