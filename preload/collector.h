/* SPDX-License-Identifier: MIT */
/* The collector's state; shared by collector.c (drain), trace_output.c (file) and control.c. */
#ifndef VRAMTRACE_COLLECTOR_H
#define VRAMTRACE_COLLECTOR_H

#include <pthread.h>

#include "intern.h"
#include "internal.h"
#include "live.h"
#include "trace_writer.h"
#include "vramtrace/vramtrace.h"

struct phase_state {
	uint32_t name_id;
	uint64_t entered;
	int64_t depth;
};

struct collector {
	pthread_t thread;
	bool running;   /* changed under collector.c's lifecycle lock */
	_Atomic int wake_fd; /* eventfd: hooks and signal handlers write to wake us (-1: none yet) */
	int control_fd; /* listening socket, or -1 */
	_Atomic int stop;
	_Atomic int finished; /* the thread is done with the file and about to return */
	_Atomic int crash_signal;
	_Atomic int crash_done;
	int end_reason, end_detail;
	bool closed_file; /* the thread's last act was to close a trace file */
	bool reopen_file; /* restarted after a failed exec: continue in a new file */

	uint64_t t0_ns;  /* CLOCK_MONOTONIC at ts 0 */
	uint64_t t0_realtime_ns;
	struct vrt_writer *writer;
	bool output_failed;
	char path[4096];

	struct vrt_buf pending_tables, all_tables, events;
	struct vrt_intern intern;
	struct vrt_delta delta;
	uint32_t chunk_thread; /* thread of the last event in the current chunk, 0 = none yet */
	uint64_t events_written, events_lost;
	uint64_t last_oom_checkpoint_ns;

	struct vrt_live_set live;
	uint32_t py_codes_done, py_frames_done;
	uint64_t *symbolized; /* open-addressing set of return addresses already described */
	size_t symbolized_cap, symbolized_used;
	uint64_t *to_symbolize;
	size_t n_to_symbolize, cap_to_symbolize;
	uint32_t *threads_described; /* by thread index: name string id + 1, 0 = not yet */
	size_t cap_threads;
	struct phase_state *phases;
	size_t n_phases, cap_phases;
	uint32_t *phase_index; /* by name string id: position in phases + 1, 0 = none */
	size_t cap_phase_index;
	uint32_t before_tracing_stack; /* label stack for live items seen without a stack */
};

extern struct collector vrt_collector;

/* A CLOCK_MONOTONIC time as the trace's ts (units since t0; 0 for a time before it). */
static inline uint64_t vrt_ts_units(const struct collector *c, uint64_t ns)
{
	uint64_t since = ns > c->t0_ns ? ns - c->t0_ns : 0;
	/* The default unit as a constant: a multiply, not a 64-bit division, per event. */
	return vrt_cfg.ts_unit_ns == 1000 ? since / 1000 : since / (uint64_t)vrt_cfg.ts_unit_ns;
}

/* trace_output.c */
int vrt_output_open(struct collector *c);
/* Set once vrt_output_open made this process's file (read by other threads; reset at fork). */
extern _Atomic bool vrt_output_opened;
/* The file is open, or made now: 0, or an error (tracing has ended, its one line said why). */
static inline int vrt_output_ensure(struct collector *c) { return VRT_LIKELY(c->writer != NULL) ? 0 : vrt_output_open(c); }
void vrt_output_flush(struct collector *c);
void vrt_output_checkpoint(struct collector *c, int reason);
void vrt_output_finish(struct collector *c, int reason, int detail);
int vrt_output_snapshot(struct collector *c, const char *path, char *reply, size_t reply_len);

/* An EVENTS chunk is written once it holds this much (and at every drain). */
#define VRT_EVENTS_CHUNK_BYTES (1u << 20)
void vrt_output_events_full(struct collector *c);

/* Encodes r into the EVENTS chunk, after a THREAD record when thread (non-zero) is another than
 * the last one's. Inline: the collector's per-event path. */
static inline void vrt_output_event(struct collector *c, uint32_t thread, const struct vrt_record *r)
{
	if (VRT_UNLIKELY(!c->writer || !vrt_buf_reserve(&c->events, 2 * VRT_RECORD_MAX_FIXED)))
		return;
	uint8_t *p = c->events.data + c->events.len;
	if (thread && thread != c->chunk_thread) {
		p = vrt_record_encode_thread(p, thread);
		c->chunk_thread = thread;
	}
	p = vrt_record_encode(p, r, &c->delta);
	c->events.len = (size_t)(p - c->events.data);
	c->events_written++;
	if (VRT_UNLIKELY(c->events.len >= VRT_EVENTS_CHUNK_BYTES))
		vrt_output_events_full(c);
}

/* A thread's name is read when its first event is written, then again at its first event
 * VRT_THREAD_NAME_RECHECK_NS or more (by the events' clock) after the last read: threads often
 * rename themselves once after they start. */
#define VRT_THREAD_NAME_RECHECK_NS 2000000000ull
void vrt_output_name_thread(struct collector *c, struct vrt_tbuf *b, uint64_t ts_ns);
static inline void vrt_output_describe_thread(struct collector *c, struct vrt_tbuf *b, uint64_t ts_ns)
{
	bool named = b->index < c->cap_threads && c->threads_described[b->index];
	if (VRT_UNLIKELY(!named || ts_ns - b->name_checked_ns >= VRT_THREAD_NAME_RECHECK_NS))
		vrt_output_name_thread(c, b, ts_ns);
}
uint32_t vrt_output_label_stack(struct collector *c, const char *label);
/* One more INFO fact about the process (its tables; later values of a key win). */
void vrt_output_info(struct collector *c, const char *key, const char *value);

/* collector.c */
void vrt_collector_drain(struct collector *c);
/* Answers an application thread's question about the live set, if one is waiting. */
void vrt_collector_answer_query(struct collector *c);
/* From an application thread: the live buffers born at or after born_after_ns (vramtrace.h). */
long vrt_collector_query_live(uint64_t born_after_ns, struct vramtrace_live_item *out, size_t cap);
void vrt_collector_set_mode(struct collector *c, int mode, int cause);

/* control.c */
int vrt_control_listen(void);
void vrt_control_serve(struct collector *c, int listen_fd);

#endif /* VRAMTRACE_COLLECTOR_H */
