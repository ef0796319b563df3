/* SPDX-License-Identifier: MIT */
/*
 * Places compressed chunks in a trace file: append-only log, or a bounded ring plus a log for
 * tables (docs/trace-format.md, "Ring"). Single-threaded: one owner calls everything.
 * Used by the preload's collector and by bench/ trace generators; knows nothing about events.
 */
#ifndef VRAMTRACE_TRACE_WRITER_H
#define VRAMTRACE_TRACE_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "vramtrace/format.h"

struct vrt_writer;

/* Serializes every definition written so far into buf (TABLES records); returns bytes or <0. */
typedef long (*vrt_tables_dump_fn)(void *ctx, uint8_t **buf);

struct vrt_writer_options {
	int fd;                  /* an open, empty, writable file; the writer owns it from now on */
	uint64_t ring_bytes;     /* 0: keep everything */
	uint32_t ts_unit_ns;
	uint32_t flags;          /* enum vrt_file_flags, VRT_FILE_RING is set by the writer */
	int32_t pid, ppid, rank, local_rank, world_size;
	uint64_t start_realtime_ns;
	uint64_t start_monotonic_ns;
	int zstd_level;          /* 0: the writer's default (1) */
	vrt_tables_dump_fn dump_tables; /* required with a ring */
	void *dump_ctx;
};

enum vrt_writer_hint {
	VRT_HINT_CHECKPOINT = 1, /* a new ring segment began: write a checkpoint chunk next */
};

int vrt_writer_open(struct vrt_writer **out, const struct vrt_writer_options *opt);
/* Compresses raw and writes it as one chunk; returns 0 or a hint (>0), or an error (<0):
 * VRT_E_IO leaves errno as the failed write set it. */
int vrt_writer_put(struct vrt_writer *w, enum vrt_chunk_type type, const void *raw, size_t raw_len);
/* The largest raw payload sure to make one chunk, whatever it compresses to (a ring's chunks
 * span at most a quarter of it). */
size_t vrt_writer_max_raw(const struct vrt_writer *w);
/*
 * Writes raw as n chunks of one type, back to back: part i is raw[ends[i-1], ends[i]) (part 0
 * starts at 0), at most vrt_writer_max_raw bytes. In a ring, parts that together span more than
 * half of it are refused (VRT_E_SIZE) before any is written, and *ring_needed (if not NULL) gets
 * the ring size that would take them. Returns like vrt_writer_put; after an I/O error, the
 * parts before the failed one are in the file.
 */
int vrt_writer_put_parts(struct vrt_writer *w, enum vrt_chunk_type type, const void *raw, const size_t *ends,
			 size_t n, uint64_t *ring_needed);
void vrt_writer_count_events(struct vrt_writer *w, uint64_t written, uint64_t lost);
uint64_t vrt_writer_events_written(const struct vrt_writer *w); /* as last counted */
void vrt_writer_set_end(struct vrt_writer *w, uint32_t reason, int32_t detail, uint64_t end_ts);
/* Rewrites the state block; called after put() by the writer itself, exposed for set_end. */
int vrt_writer_sync(struct vrt_writer *w);
/* The file descriptor (for snapshots: copy, then append). */
int vrt_writer_fd(const struct vrt_writer *w);
/* The sequence number the next chunk written will have (or a later one: a ring's wrap writes
 * padding and tables first). */
uint64_t vrt_writer_next_seq(const struct vrt_writer *w);
uint64_t vrt_writer_file_bytes(const struct vrt_writer *w);
void vrt_writer_close(struct vrt_writer *w);

/* Opens path for a new trace: O_EXCL|O_NOFOLLOW, mode 0600; if it exists, tries NAME.1.vrt,
 * NAME.2.vrt... for a path NAME.vrt (path.1, path.2... for any other path). Writes the chosen
 * name to chosen (if not NULL). Returns fd or a negative vrt_error. */
int vrt_trace_create(const char *path, char *chosen, size_t chosen_len);

#endif /* VRAMTRACE_TRACE_WRITER_H */
