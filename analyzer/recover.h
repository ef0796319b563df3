/* SPDX-License-Identifier: MIT */
/* Recovering a killed process's last events from its rings sidecar (cmd_recover.c). */
#ifndef VRAMTRACE_RECOVER_H
#define VRAMTRACE_RECOVER_H

#include <stdint.h>

struct vrt_recovery {
	uint64_t events;             /* records appended */
	uint64_t skipped;            /* raw events a recovery does not rebuild (retention findings, facts) */
	uint64_t damaged;            /* slots whose records stopped checking (the rest of that slot) */
	uint64_t unknown_stacks;     /* events whose interned stack the file does not define */
	uint64_t undescribed_python; /* Python frames shown as a label: never described in the file */
	uint32_t threads;            /* slots that held events */
};

/* Appends what TRACE.rings holds beyond the trace to path and removes the sidecar; end_signal
 * goes into a state block that still says "running" if the sidecar's process is signal_pid (0:
 * any; end_signal 0: unknown, the end stays "not closed"). 0, or an exit code after the message. */
int vrt_recover(const char *path, int end_signal, int signal_pid, struct vrt_recovery *out);
/* One line on stderr: what was recovered, and what could not be. */
void vrt_recovery_say(const char *path, const struct vrt_recovery *r);

#endif /* VRAMTRACE_RECOVER_H */
