/* SPDX-License-Identifier: MIT */
/*
 * The rings sidecar, TRACE.rings (issue 22, item 6; docs/trace-format.md, "The rings sidecar"):
 * the preload's per-thread event buffers live in this file, mapped MAP_SHARED, so that what a
 * thread published survives a SIGKILL in the page cache; `vramtrace recover` appends what the
 * trace does not hold yet. Shared by the preload (preload/tbuf.c maps slots, trace_output.c
 * makes the file) and the analyzer (analyzer/cmd_recover.c reads it).
 *
 * Layout: a VRT_RINGS_HEADER_SIZE header, then n_slots slots of slot_size bytes each. A slot is
 * the preload's buffer header (slot_header bytes; the fields below at fixed offsets) followed by
 * its ring of `capacity` bytes of raw records (struct vrt_raw in preload/internal.h, layout
 * VRT_RINGS_RAW_LAYOUT): published bytes run from the durable tail to head.
 */
#ifndef VRAMTRACE_RINGS_H
#define VRAMTRACE_RINGS_H

#include <stdint.h>

#define VRT_RINGS_MAGIC "VRTRINGS"
#define VRT_RINGS_VERSION 1
#define VRT_RINGS_RAW_LAYOUT 1 /* struct vrt_raw: 80-byte header, then u64 native, u32 Python frames */
#define VRT_RINGS_HEADER_SIZE 8192u
#define VRT_RINGS_MAX_SLOTS 4096u
#define VRT_RINGS_SUFFIX ".rings"

struct vrt_rings_header {
	char magic[8];           /* VRT_RINGS_MAGIC */
	uint32_t version;        /* VRT_RINGS_VERSION */
	uint32_t raw_layout;     /* VRT_RINGS_RAW_LAYOUT */
	uint32_t n_slots;        /* <= VRT_RINGS_MAX_SLOTS */
	uint32_t slot_header;    /* bytes before a slot's ring */
	uint64_t slot_size;      /* slot_header + capacity */
	uint64_t capacity;       /* ring bytes per slot, a power of two */
	int32_t pid;
	uint32_t ts_unit_ns;     /* as the trace's header */
	uint64_t start_monotonic_ns; /* as the trace's header: raw timestamps are CLOCK_MONOTONIC ns */
	uint32_t next_slot;      /* slots handed out at least once (atomic in the preload) */
	uint8_t reserved[1024 - 60];
	uint8_t in_use[VRT_RINGS_MAX_SLOTS]; /* at offset 1024: 1 while a thread owns the slot */
	uint8_t reserved_tail[VRT_RINGS_HEADER_SIZE - 1024 - VRT_RINGS_MAX_SLOTS];
};
_Static_assert(sizeof(struct vrt_rings_header) == VRT_RINGS_HEADER_SIZE, "rings header size");

/* Offsets of a slot's fields (little-endian; the preload's struct vrt_tbuf is asserted to match). */
#define VRT_RINGS_OFF_HEAD 0          /* u64: bytes published by the owning thread */
#define VRT_RINGS_OFF_TAIL 64         /* u64: bytes durable in the trace (the producer's free space ends here) */
#define VRT_RINGS_OFF_PENDING_TAIL 72 /* u64: tail once the EVENTS chunk numbered >= pending_seq is written */
#define VRT_RINGS_OFF_PENDING_SEQ 80  /* u64: 0 = none */
#define VRT_RINGS_OFF_CAPACITY 144    /* u64 */
#define VRT_RINGS_OFF_INDEX 152       /* u32: the thread's index in the trace */
#define VRT_RINGS_OFF_TID 156         /* i32 */

/* One raw record in a ring, layout VRT_RINGS_RAW_LAYOUT (the preload's struct vrt_raw, asserted
 * equal in preload/tbuf.c). Variable length: this header, then n_native u64 return addresses and
 * n_python u32 Python frame ids (or a NUL-terminated label), padded to 8 bytes; len counts it
 * all. op 0 pads to the ring's end. */
struct vrt_rings_raw {
	uint16_t len;
	uint8_t op, kind;
	uint16_t api;
	int16_t device;
	uint8_t n_native, n_python;
	uint16_t flags;     /* 1: frames follow (stack_id 0); 2: a label follows */
	int32_t result;
	uint32_t stack_id;  /* a stack the collector interned (a trace's STACK id); 0: none */
	uint64_t ts_ns;     /* CLOCK_MONOTONIC */
	uint64_t addr, size, aux, aux2, stream;
	uint64_t stack_hash;
};
_Static_assert(sizeof(struct vrt_rings_raw) == 80, "raw record header is 80 bytes");
#define VRT_RINGS_RAW_FRAMES 1u
#define VRT_RINGS_RAW_LABEL 2u
#define VRT_RINGS_PY_EVAL_BOUNDARY 0xffffffffu /* a Python frame id: an eval-call boundary */

#endif /* VRAMTRACE_RINGS_H */
