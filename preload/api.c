/* SPDX-License-Identifier: MIT */
/* The optional user API (include/vramtrace/vramtrace.h), also used by the Python module. */
#define _GNU_SOURCE
#define VRT_CTL_CLIENT
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
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
	/* The collector owns the file: ask it through our own control socket. PEEK, not SNAPSHOT:
	 * a SNAPSHOT makes the collector wait for a retention walk on the main thread, which may be
	 * this very thread, blocked here until the reply (15 s). A Python caller has walked already
	 * (vramtrace.snapshot); a C caller's program has nothing for a walk to name. */
	struct vrt_ctl_msg reply;
	int rc = vrt_ctl_request((int)getpid(), VRT_CTL_PEEK, path, &reply, 30000);
	return rc ? rc : reply.status;
}

/* ---- retention walks (python/vramtrace/_retention.py) ----------------------------------- */

static bool recording(void)
{
	return atomic_load(&vrt_state) == VRT_STATE_READY && atomic_load(&vrt_mode) == VRT_MODE_FULL;
}

VRT_EXPORT long vramtrace_live_query(unsigned long long born_ns, struct vramtrace_live_item *out, unsigned long cap)
{
	if (!recording() || (cap && !out))
		return VRT_E_UNSUPPORTED;
	return vrt_collector_query_live(born_ns, out, cap);
}

/* The records' fields travel in the event's general slots; collector.c's retention_fields maps
 * them to the layout. */
static void record(const struct vrt_event *ev, const char *text)
{
	int guard;
	if (!recording() || !(guard = vrt_enter()))
		return;
	vrt_emit_text(ev, text, text ? strlen(text) : 0);
	vrt_leave(guard);
}

VRT_EXPORT void vramtrace_record_owner(int device, unsigned long long addr, unsigned long long size, int category,
				       int status, const char *chain)
{
	struct vrt_event ev = { .op = VRT_OP_OWNER, .api = VRT_API_USER_API, .device = (int16_t)device, .addr = addr,
				.size = size, .aux = (uint64_t)category, .aux2 = (uint64_t)status };
	record(&ev, chain);
}

VRT_EXPORT void vramtrace_record_walk(int reason, int status, unsigned long long born_ns,
				      unsigned long long duration_ns, unsigned long long objects)
{
	struct vrt_event ev = { .op = VRT_OP_WALK, .api = VRT_API_USER_API, .aux = (uint64_t)reason,
				.aux2 = (uint64_t)status, .addr = born_ns, .size = objects,
				.stream = duration_ns / 1000 };
	record(&ev, NULL);
	if (reason == VRT_WALK_SNAPSHOT)
		vrt_python_walked_for_snapshot();
}

VRT_EXPORT void vramtrace_record_oom_limits(int device, unsigned long long requested, unsigned long long allowed,
					    unsigned long long device_free, unsigned long long reserved,
					    unsigned long long allocated, int capped)
{
	struct vrt_event ev = { .op = VRT_OP_OOM_LIMITS, .api = VRT_API_TORCH_OOM, .device = (int16_t)device,
				.size = requested, .aux = allowed, .aux2 = device_free, .addr = reserved,
				.stream = allocated, .result = capped ? 1 : 0 };
	record(&ev, NULL);
}

/* A fact about the process for the trace's INFO table (key: at most 127 bytes). */
/* The INFO record's text, "key\x1evalue"; false for a key the format refuses. */
static bool info_text(const char *key, const char *value, char text[VRT_TEXT_MAX + 1])
{
	if (!key || !value || strlen(key) >= 128 || strchr(key, '\x1e'))
		return false;
	size_t k = strlen(key), v = strnlen(value, VRT_TEXT_MAX - k - 1);
	memcpy(text, key, k);
	text[k] = '\x1e';
	memcpy(text + k + 1, value, v);
	text[k + 1 + v] = 0;
	return true;
}

/*
 * The process's facts are kept here as well as sent: the collector writes the kept ones when it
 * makes the file (vrt_info_write_kept), so a fact from before the trace began waits for it
 * instead of asking for a file. A process that never traces anything (a helper that imports
 * torch and makes no CUDA allocation) leaves none, and a forked child's file has its parent's
 * facts. Until the file exists a fact is only kept; after, it is also sent through the thread's
 * buffer as any record. Facts past INFO_KEPT_MAX or the arena are sent only (they ask for the
 * file then).
 */
#define INFO_KEPT_MAX 32
#define INFO_ARENA_BYTES 32768 /* no malloc: a hook may be where a fact is learned */
static pthread_mutex_t info_lock = PTHREAD_MUTEX_INITIALIZER;
static char info_arena[INFO_ARENA_BYTES];
static size_t info_arena_used;
static char *info_kept[INFO_KEPT_MAX];
static int info_kept_n;
static bool info_written; /* the file holds the kept facts: a new one is sent as well */
static uint64_t exiting_kept_ns; /* a teardown mark from before the trace began (0: none) */
static int exiting_kept_stage;

/* The lock, tried a bounded number of times: a signal handler's hook may interrupt its own
 * thread holding it. A thread that does not get it sends, as for a fact past the limit. */
static bool info_lock_try(void)
{
	for (int i = 0; i < 64; i++) {
		if (!pthread_mutex_trylock(&info_lock))
			return true;
		sched_yield();
	}
	return false;
}

/* Whether the fact still has to be sent through a buffer. */
static bool info_keep(const char *text)
{
	if (!info_lock_try())
		return true;
	size_t len = strlen(text) + 1;
	bool kept = info_kept_n < INFO_KEPT_MAX && len <= INFO_ARENA_BYTES - info_arena_used;
	if (kept) {
		info_kept[info_kept_n++] = memcpy(info_arena + info_arena_used, text, len);
		info_arena_used += len;
	}
	bool send = !kept || info_written;
	pthread_mutex_unlock(&info_lock);
	return send;
}

/* Whether the mark is kept rather than sent: nothing has asked for the file yet. */
static bool keep_exiting(int stage)
{
	if (!info_lock_try())
		return false;
	bool keep = !info_written && !vrt_collector_trace_begun();
	if (keep && !exiting_kept_ns) {
		exiting_kept_ns = vrt_now_ns();
		exiting_kept_stage = stage;
	}
	pthread_mutex_unlock(&info_lock);
	return keep;
}

void vrt_info_write_kept(const struct vrt_kept_writer *w, void *ctx)
{
	pthread_mutex_lock(&info_lock);
	for (int i = 0; i < info_kept_n; i++) {
		char *sep = strchr(info_kept[i], '\x1e');
		*sep = 0;
		w->fact(ctx, info_kept[i], sep + 1);
		*sep = '\x1e';
	}
	if (exiting_kept_ns)
		w->exiting(ctx, exiting_kept_ns, exiting_kept_stage);
	exiting_kept_ns = 0;
	info_written = true;
	pthread_mutex_unlock(&info_lock);
}

void vrt_info_after_fork(void)
{
	info_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER; /* maybe held by a thread gone here */
	info_written = false;                                  /* the child's file is a new one */
	exiting_kept_ns = 0;
}

VRT_EXPORT void vramtrace_record_exiting(int stage) { vrt_record_exiting(stage); }

/* The teardown mark. One from before the trace began is kept, as the facts are (above): no file
 * for it alone (a Python helper of the job that never touched CUDA), and the file a first
 * allocation in the teardown makes starts with it (what comes after is the teardown's). */
void vrt_record_exiting(int stage)
{
	if (atomic_load(&vrt_mode) == VRT_MODE_FULL && keep_exiting(stage))
		return;
	struct vrt_event ev = { .op = VRT_OP_EXITING, .api = VRT_API_USER_API, .aux = (uint64_t)stage };
	record(&ev, NULL);
	vrt_collector_wake(); /* what comes next may be a fast exit */
}

VRT_EXPORT void vramtrace_record_info(const char *key, const char *value)
{
	char text[VRT_TEXT_MAX + 1];
	struct vrt_event ev = { .op = VRT_OP_INFO, .api = VRT_API_USER_API };
	if (info_text(key, value, text) && info_keep(text)) /* kept while armed too: for an attach */
		record(&ev, text);
}

void vrt_emit_info(const char *key, const char *value)
{
	char text[VRT_TEXT_MAX + 1];
	struct vrt_event ev = { .op = VRT_OP_INFO, .api = VRT_API_USER_API };
	if (info_text(key, value, text) && info_keep(text))
		vrt_emit_text(&ev, text, strlen(text));
}
