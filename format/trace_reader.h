/* SPDX-License-Identifier: MIT */
/*
 * Reading a trace file: header, chunk discovery (log and ring, tolerant of a cut-short or
 * wrapped file), decompression, and the definitions (tables) every report needs.
 */
#ifndef VRAMTRACE_TRACE_READER_H
#define VRAMTRACE_TRACE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vramtrace/format.h"
#include "vramtrace/record.h"

struct vrt_chunk_ref {
	uint64_t offset; /* absolute offset of the chunk header */
	uint64_t seq;
	uint32_t stored, raw;
	uint8_t type;
};

struct vrt_module {
	uint32_t path;   /* string id */
	uint64_t base, span;
	uint8_t build_id[20];
	uint32_t build_id_len;
};

struct vrt_symbol_def {
	uint64_t addr;   /* return address as captured */
	uint32_t module, name; /* module id, string id (0: none) */
	uint64_t offset;
};

struct vrt_pycode_def {
	uint32_t filename, qualname, firstlineno;
};

struct vrt_pyframe_def {
	uint32_t code;
	int32_t lasti, line;
};

struct vrt_stack_node {
	uint32_t parent;
	uint8_t kind; /* enum vrt_frame_kind */
	uint64_t value;
};

struct vrt_thread_def {
	uint32_t name; /* string id */
	uint64_t tid;
};

struct vrt_tables {
	char **strings;       /* as shown: control characters escaped, cut at VRT_STRING_SHOWN */
	uint32_t *string_lens;
	size_t n_strings;
	struct vrt_module *modules;
	size_t n_modules;
	struct vrt_symbol_def *symbols; /* open addressing by addr */
	size_t symbols_cap, n_symbols;
	struct vrt_pycode_def *pycodes;
	size_t n_pycodes;
	struct vrt_pyframe_def *pyframes;
	size_t n_pyframes;
	struct vrt_stack_node *nodes;
	size_t n_nodes;
	struct vrt_thread_def *threads;
	size_t n_threads;
	uint32_t *info_keys, *info_values;
	size_t n_info;
};

/* A verdict of vrt_records_decode that is no error: the trace's end mark (--until-mark). */
#define VRT_RECORDS_END_MARK 2

/* Where decoding stands in a replayed chunk: p and end point into the chunk's data. */
struct vrt_records_cursor {
	const uint8_t *p, *end;
	struct vrt_delta delta;
	uint32_t thread;     /* the THREAD state at p */
	uint8_t chunk_type;  /* VRT_CHUNK_EVENTS or VRT_CHUNK_CHECKPOINT */
};

/* Records the second thread decodes ahead, at most, from a chunk's start: a chunk of the
 * collector's (1 MiB raw) holds fewer; the rest of a larger one is decoded by the replay. */
#define VRT_AHEAD_RECORDS 65536u

/* A chunk's first records, decoded with it on the reader's second thread. */
struct vrt_chunk_records {
	struct vrt_record *recs; /* VRT_AHEAD_RECORDS each, allocated on first use */
	uint32_t *threads;
	uint32_t n;
	bool valid;              /* these are the records of the chunk in the same buffers */
	int verdict;             /* vrt_records_decode's, at `rest` */
	struct vrt_records_cursor rest; /* where decoding stopped */
};

/* A chunk as read and as decoded, in buffers that grow to the largest chunk seen. */
struct vrt_chunk_buffers {
	uint8_t *raw, *stored;
	size_t raw_cap, stored_cap;
	struct vrt_chunk_records records;
};

struct vrt_chunk_ahead;

struct vrt_trace {
	char path[4096];
	int fd;                       /* -1 when not open */
	uint64_t size;                /* file size when opened: what the scan covered */
	struct vrt_file_header hdr;
	bool state_valid;
	struct vrt_chunk_ref *chunks; /* sorted by seq */
	size_t n_chunks;
	size_t replay_from;           /* first chunk to replay (a checkpoint after ring wrap) */
	bool history_lost;            /* the ring overwrote the beginning */
	uint64_t corrupt_chunks;      /* chunks whose header or payload failed a check */
	uint64_t garbage_bytes;       /* bytes skipped while resynchronising (holes included) */
	bool truncated;               /* the log ends in a partial chunk */
	/* The file holds less than its state block says was written: it was cut short (copied
	 * while written, truncated, a partial download). seq_found and end_found are what the
	 * chunks reach; the state block's last_chunk_seq and log_end what was written. */
	bool cut_short;
	uint64_t seq_found, end_found;
	bool changed;                 /* the file shrank or a checked chunk no longer checks */
	uint64_t tables_damaged_raw;  /* raw bytes of TABLES chunks skipped as damaged */
	struct vrt_tables tables;
	uint64_t serial;              /* distinct for every trace opened by this process */
	/* Every replay of the trace ends just before its first mark with this label (--until-mark):
	 * the analyses see the trace as ending there. NULL: at the end of the file. */
	const char *end_mark;
	void *dctx;
	struct vrt_chunk_buffers buf; /* the chunk vrt_trace_chunk handed out last */
	struct vrt_chunk_ahead *ahead; /* the second thread (vrt_trace_chunk_ahead); NULL until asked */
	bool ahead_off;               /* it could not be started: every chunk is decoded here */
};

/* Strings longer than this are cut for display when read ("...[cut: N bytes in all]"). */
#define VRT_STRING_SHOWN 4096

/* Opens, scans and loads the tables. On error *t is released and a vrt_error returned. Only a
 * regular file is opened (VRT_E_NOT_FILE otherwise; a FIFO is never waited on). */
int vrt_trace_open(struct vrt_trace *t, const char *path);
/* Whether the file lost any of what it held when opened (a last check, before results are given). */
bool vrt_trace_changed(struct vrt_trace *t);
/* What a reader should say about t's completeness: cut short, or ending in a partial chunk. */
static inline bool vrt_trace_cut(const struct vrt_trace *t) { return t->cut_short || t->truncated; }
void vrt_trace_close(struct vrt_trace *t);
/* Decodes chunk i; *data stays valid until the next call. VRT_E_CORRUPT etc. on bad chunks;
 * VRT_E_CHANGED when a chunk that checked at open no longer does (the file was rewritten). */
int vrt_trace_chunk(struct vrt_trace *t, size_t i, const uint8_t **data, size_t *len);
/* Starts decoding chunk i on the reader's second thread, so that the next vrt_trace_chunk(t, i)
 * finds it done (with the same result as decoding it there: data, length and error), and, for
 * a replayed chunk, its first VRT_AHEAD_RECORDS records (vrt_trace_chunk_records). At most one
 * chunk is decoded ahead: the thread's buffers are swapped with the trace's when it is taken,
 * so memory is that of two chunks and their records. Without the thread, vrt_trace_chunk
 * decodes it and the replay its records. */
void vrt_trace_chunk_ahead(struct vrt_trace *t, size_t i);
/* The records of the chunk vrt_trace_chunk handed out last, when the second thread decoded them
 * with it (an EVENTS or CHECKPOINT chunk asked for ahead, decoded whole); NULL when it did not.
 * Valid, as the chunk's data, until the next vrt_trace_chunk. */
const struct vrt_chunk_records *vrt_trace_chunk_records(const struct vrt_trace *t);

/*
 * Decodes up to max records at c into recs, each one's thread into threads; returns how many.
 * Checked in the same loop: opcode, field ranges, the kind of chunk a record is in, stack ids.
 * THREAD records are consumed, not returned. *verdict: 0 (max reached, or the chunk's end),
 * VRT_RECORDS_END_MARK (the end mark, not returned), or the vrt_error of the record it stopped
 * at (the records before it are returned). c is left after the last record decoded. The one
 * decoder of the replay, on either of the reader's threads (it reads only t's tables).
 */
uint32_t vrt_records_decode(const struct vrt_trace *t, struct vrt_records_cursor *c, struct vrt_record *recs,
			    uint32_t *threads, uint32_t max, int *verdict);

/*
 * The next unit of text at p (n > 0 bytes left) as every output shows text from others: its
 * length in bytes (a well-formed UTF-8 sequence, else 1) and whether it is written as \xNN per
 * byte: C0 and C1 controls, DEL, bidi controls, and bytes that are not UTF-8.
 */
size_t vrt_text_unit(const uint8_t *p, size_t n, bool *escape);

/* Table lookups: NULL / "" / 0 when undefined. */
const char *vrt_string(const struct vrt_trace *t, uint64_t id);
const struct vrt_symbol_def *vrt_symbol(const struct vrt_trace *t, uint64_t addr);
const char *vrt_info(const struct vrt_trace *t, const char *key);
const char *vrt_end_reason_text(uint32_t reason);
/* The same as a sentence's clause: "the process exited normally", "tracing was stopped ...". */
const char *vrt_end_sentence(uint32_t reason);
/* Every node below n_nodes has parent < id (load_tables refuses others, and zero-fills the ids
 * a trace skips), so a stack id below n_nodes walks to the root: the per-record check is one
 * compare. */
static inline bool vrt_stack_valid(const struct vrt_trace *t, uint64_t id) { return id < t->tables.n_nodes; }

#endif /* VRAMTRACE_TRACE_READER_H */
