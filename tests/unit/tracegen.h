/* SPDX-License-Identifier: MIT */
/*
 * Writes real trace files through the real writer (format/trace_writer.c) and remembers the
 * truth: every definition, every event, every chunk with its sequence number and place in the
 * file, which ring chunks later writes overwrote, and the live set. Tests then read the file
 * back with the real reader and compare. Also used by tests/fuzz/make_corpus.c for seeds.
 *
 * The chunk placement is not re-implemented here: after every vrt_writer_put the generator
 * reads the state block the writer just published (ring head, laps, log end, last seq) and
 * derives where the chunk (and, at a wrap, the consolidated tables and the padding) went.
 */
#ifndef VRT_TESTS_TRACEGEN_H
#define VRT_TESTS_TRACEGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace_writer.h"
#include "vramtrace/record.h"

struct vt_buf {
	uint8_t *data;
	size_t len, cap;
};

struct vt_chunk {
	uint64_t seq;
	uint64_t offset;   /* absolute offset of the chunk header */
	uint64_t span;     /* header + payload, 8-aligned */
	uint8_t type;
	bool in_ring;
	bool overwritten;  /* a later ring write (or a padding's reach) overlapped it */
	size_t first_event, n_events; /* EVENTS: the events it holds (indexes into events) */
	uint64_t cp_events;           /* CHECKPOINT: events written before it */
	uint64_t cp_first;            /* CHECKPOINT: seq of the checkpoint's first part */
	uint32_t cp_part, cp_parts;   /* CHECKPOINT: this part's index; parts written (0: cut short) */
};

struct vt_event {
	struct vrt_record r;
	uint32_t thread;
	uint64_t seq; /* of its chunk */
};

struct vt_live {
	uint64_t addr, size, ts;
	uint32_t stack;
	int32_t device;
	uint32_t kind, api;
};

struct vt_node {
	uint32_t parent;
	uint8_t kind;
	uint64_t value;
};

struct vt_gen {
	char path[4096];
	struct vrt_writer *w;
	int rfd;              /* read-only view of the file, for the state block */
	uint64_t ring_bytes;
	uint64_t rng;
	struct vt_buf pending, all, events;
	struct vrt_delta delta;
	uint32_t chunk_thread;
	/* truth */
	char **strings;       /* [id], id 0 unused */
	size_t n_strings;
	struct vt_node *nodes; /* [id], id 0 is the root */
	size_t n_nodes;
	struct vt_event *ev;
	size_t n_ev;
	struct vt_chunk *chunks;
	size_t n_chunks;
	struct vt_live *live;
	size_t n_live;
	uint64_t ts, next_addr;
	bool want_checkpoint;  /* the writer asked for one */
	size_t cp_part_bytes;  /* raw bytes per checkpoint part (0: vrt_writer_max_raw) */
	int error;             /* first error from the writer */
	uint32_t pool[256];    /* stacks to reuse: real programs allocate from few call sites */
	size_t n_pool;
	uint32_t *index;       /* hash of strings and nodes -> id (tagged), for deduplication */
	size_t index_cap, index_used;
	size_t cap_strings, cap_nodes, cap_ev, cap_chunks, cap_live;
};

/* Creates path (must not exist) and a writer on it; ring_bytes 0 keeps everything. */
int vt_gen_open(struct vt_gen *g, const char *path, uint64_t ring_bytes, uint64_t seed);
uint32_t vt_gen_string(struct vt_gen *g, const char *s);
uint32_t vt_gen_node(struct vt_gen *g, uint32_t parent, uint8_t kind, uint64_t value);
/* A random native+Python stack of depth 1..8, sharing prefixes with earlier ones. */
uint32_t vt_gen_random_stack(struct vt_gen *g);
/* n random events (allocations, frees, marks, thread switches) as one EVENTS chunk, preceded by
 * a TABLES chunk if definitions are pending; then a checkpoint if the writer asked for one. */
void vt_gen_events(struct vt_gen *g, size_t n);
/* One specific event record (added to the current, unflushed EVENTS buffer). */
void vt_gen_event(struct vt_gen *g, uint32_t thread, const struct vrt_record *r);
void vt_gen_flush(struct vt_gen *g);
/* A checkpoint in as many CHECKPOINT chunks as cp_part_bytes makes it. */
void vt_gen_checkpoint(struct vt_gen *g, uint32_t reason);
/* Only the first max_parts parts of one, as a process that dies while writing it leaves. */
void vt_gen_checkpoint_cut(struct vt_gen *g, uint32_t reason, size_t max_parts);
/* Ends the trace (exit status 0) and closes the writer. The truth stays for checking. */
void vt_gen_close(struct vt_gen *g);
void vt_gen_free(struct vt_gen *g);

/* The chunks a correct reader must find, in seq order: not PADDING, not overwritten. */
size_t vt_gen_expected_chunks(const struct vt_gen *g, const struct vt_chunk **out, size_t max);
const struct vt_chunk *vt_gen_chunk_by_seq(const struct vt_gen *g, uint64_t seq);

/* Sets the header's hostname (not covered by a checksum) so generated files are reproducible. */
int vt_set_hostname(const char *path, const char *name);

#endif /* VRT_TESTS_TRACEGEN_H */
