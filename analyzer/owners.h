/* SPDX-License-Identifier: MIT */
/*
 * What the retention walks found (VRT_OP_OWNER, closed by VRT_OP_WALK; docs/trace-format.md,
 * "Retention"): which Python object owns a live buffer, what kind of thing it is, and the chain
 * of references that keeps it alive. Fed record by record during a replay; the latest closed
 * walk answers questions about live items.
 */
#ifndef VRAMTRACE_OWNERS_H
#define VRAMTRACE_OWNERS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"

struct vrt_owner {
	uint64_t addr, size;
	int16_t device;
	uint8_t category; /* enum vrt_owner_category */
	uint8_t status;   /* enum vrt_owner_status */
	uint32_t chain;   /* string id, 0: none */
};

/* One closed walk; its owners sorted by (device, addr). */
struct vrt_walk {
	uint64_t ts, born_after; /* ts units; it asked about buffers born at or after born_after */
	uint32_t reason, status; /* enum vrt_walk_reason, enum vrt_walk_status */
	uint64_t objects, duration_us;
	struct vrt_owner *v;
	size_t n;
};

/* Walks kept besides the latest, closed since the reader last settled (vrt_owners_settle). */
#define VRT_EARLIER_WALKS 3

struct vrt_owners {
	struct vrt_walk last;  /* the latest closed walk (ts 0: none yet) */
	struct vrt_walk earlier[VRT_EARLIER_WALKS]; /* the ones before it, oldest first */
	size_t n_earlier;
	struct vrt_owner *pending;
	size_t n_pending, cap_pending;
	uint64_t walks, timed_out;
	uint64_t walk_us, walk_objects_max; /* what the walks cost the traced process */
};

/* How much of a live item the latest walk explains. */
enum vrt_held {
	VRT_HELD_OFF = 0,         /* no walk asked about it (retention off, or none since its birth) */
	VRT_HELD_FOUND = 1,       /* a Python owner reachable from a root */
	VRT_HELD_UNREACHABLE = 2, /* a Python owner that no root reaches: a cycle, or native code */
	VRT_HELD_NOT_PYTHON = 3,  /* the walk looked and no Python object owns it */
	VRT_HELD_TIMED_OUT = 4,   /* the walk asked about it but stopped before it was done */
};
#define VRT_HELD_KINDS 5

void vrt_owners_init(struct vrt_owners *o);
void vrt_owners_free(struct vrt_owners *o);
/* dst as a copy of src, that owns its own walks: 0, or VRT_E_NOMEM with dst empty. */
int vrt_owners_copy(struct vrt_owners *dst, const struct vrt_owners *src);
void vrt_owners_apply_owner(struct vrt_owners *o, const struct vrt_record *r);
void vrt_owners_apply_walk(struct vrt_owners *o, const struct vrt_record *r);
/* Feeds one replayed record; true when it closed a walk (o->last is then that walk). Inline:
 * a replay asks it of every record, and nearly none is OWNER or WALK. */
static inline bool vrt_owners_apply(struct vrt_owners *o, const struct vrt_record *r)
{
	if (r->op == VRT_OP_OWNER)
		vrt_owners_apply_owner(o, r);
	else if (r->op == VRT_OP_WALK)
		vrt_owners_apply_walk(o, r);
	return r->op == VRT_OP_WALK;
}

/* The owners of w whose buffers lie inside it, and what w says of it; they are the first n
 * entries of w->v from first. */
enum vrt_held vrt_owners_of(const struct vrt_walk *w, const struct vrt_item *it, const struct vrt_owner **first,
			    size_t *n);
/* What the walks closed since the last settle say of it: the latest that answers (found,
 * unreachable, not Python), else the latest that ran out of time before it got there, else off;
 * *walk: that walk (NULL with off). A walk cut short, or skipped by its budget, does not hide
 * the answer of one before it (an OOM's walk, a snapshot's). */
enum vrt_held vrt_owners_explain(const struct vrt_owners *o, const struct vrt_item *it, const struct vrt_walk **walk);
/* The walks so far have been asked about every live item: keep only the latest. */
void vrt_owners_settle(struct vrt_owners *o);
const char *vrt_held_name(enum vrt_held h);
/* "parameters", "gradients", "optimizer_state", "activations"; NULL for VRT_OWNER_OTHER. */
const char *vrt_owner_category_name(unsigned category);

/* A chain's steps joined by sep, control characters escaped. */
void vrt_chain_print(FILE *out, const char *chain, const char *sep);
/* The chain as a JSON list of strings, root first. */
void vrt_chain_json(FILE *out, const char *chain);

/*
 * The chains that hold a group of items, with the bytes each holds: the few largest, and what
 * the rest hold together. Summed over items with vrt_held_add.
 */
#define VRT_HELD_CHAINS 4
struct vrt_held_by {
	uint32_t chain[VRT_HELD_CHAINS];
	int64_t bytes[VRT_HELD_CHAINS];
	int64_t other_chains;          /* bytes held by chains beyond the few kept */
	int64_t by_status[VRT_HELD_KINDS];
	int64_t by_category[5];        /* enum vrt_owner_category, decided by identity */
};

/* Adds what w says of it (its size counted once) to h. */
void vrt_held_add(struct vrt_held_by *h, const struct vrt_walk *w, const struct vrt_item *it);
void vrt_held_merge(struct vrt_held_by *into, const struct vrt_held_by *h);
/* The status that describes the group: found if any chain was, else the largest. */
enum vrt_held vrt_held_status(const struct vrt_held_by *h);
/* The category identity decided for most of its bytes (-1: none), and those bytes. */
int vrt_held_category(const struct vrt_held_by *h, int64_t *bytes);

/*
 * Where the chains that hold the survivors start: the first step of each chain (the root and
 * the way to the first object a person would name), with a root's numbered entries folded into
 * one ("_forward_hooks[1]" and "[48]" are both "_forward_hooks[*]": one fix frees them all).
 * Each item's bytes are counted once; items no chain explains are counted by their status.
 */
#define VRT_ROOTS 32
#define VRT_ROOT_TEXT 240
struct vrt_root {
	char text[VRT_ROOT_TEXT]; /* as recorded (escape it to print) */
	int64_t bytes;
	uint64_t chains;          /* distinct owners folded into it */
};
struct vrt_roots {
	struct vrt_root v[VRT_ROOTS];
	size_t n;
	int64_t other;              /* bytes of roots beyond the VRT_ROOTS kept */
	int64_t by_status[VRT_HELD_KINDS]; /* every item added, by what the walk said */
	int64_t unchained[VRT_HELD_KINDS]; /* those of them no chain names (in no root above) */
};

void vrt_roots_add(struct vrt_roots *r, const struct vrt_trace *t, const struct vrt_walk *w, const struct vrt_item *it);
/* Largest first. */
void vrt_roots_sort(struct vrt_roots *r);
/* The root's text, control characters escaped. */
void vrt_root_print(FILE *out, const struct vrt_root *root);
/* What keeps the items added alive, by where their chains start (r sorted by vrt_roots_sort):
 * heading, then the three largest roots, the rest in one line, and what no chain explains by
 * what the walk said: the one line a person acts on (remove that hook, clear that registry).
 * Nothing where nothing was added. */
void vrt_roots_print(FILE *out, const struct vrt_roots *r, const char *heading);
/* The same as JSON members: , "kept_alive_by": [...], "kept_alive_other_roots_bytes": ...,
 * "kept_alive_by_status": {...}, "kept_alive_without_chain": {...}. */
void vrt_roots_json(FILE *out, const struct vrt_roots *r);

#endif /* VRAMTRACE_OWNERS_H */
