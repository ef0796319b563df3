/* SPDX-License-Identifier: MIT */
/*
 * The hot path's native unwinder: return addresses from the objects' own call-frame
 * information (.eh_frame), one table probe and at most two loads a frame, where libunwind's
 * unw_backtrace spends ~90 instructions a frame (bench/NOTES.md).
 *
 * Each return address gets a shape once: where its caller's frame is (the CFA is RSP or RBP
 * plus an offset, the return address is just below it, RBP is restored from a slot or left as
 * it is), read from the FDE that covers it through its object's .eh_frame_hdr search table, and
 * kept in a process-wide table that readers probe without a lock. A stack holding anything else
 * - a signal frame, a CFA computed by an expression or from another register, code without an
 * FDE, a return address kept elsewhere, a search table not in the usual encoding - is handed to
 * libunwind whole (vrt_unwind returns -1), so every stack is either walked the way libunwind
 * walks it or walked by libunwind. tests/unit/test_unwind.c holds the two to equal output.
 *
 * Reads stay inside the calling thread's own stack, between its stack pointer and the top: the
 * thread's descriptor, which glibc places above a thread's stack, or __libc_stack_end for the
 * process's first thread. A stack pointer anywhere else (a coroutine's stack, sigaltstack)
 * goes to libunwind, which trusts the frames as they are.
 *
 * Shapes are keyed by address, and an unloaded object's addresses can come back holding other
 * code: every shape carries the epoch it was read in, and dlclose starts a new one
 * (vrt_unwind_forget), after which older shapes are read again before use.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "unwind.h"

/* glibc >= 2.35's _dl_find_object, resolved at run time (older glibcs lack it); same layout. */
struct found_object {
	unsigned long long flags;
	void *map_start, *map_end;
	struct link_map *link_map;
	void *eh_frame; /* the object's PT_GNU_EH_FRAME segment: .eh_frame_hdr */
	unsigned long long reserved[7];
};
typedef int (*find_object_fn)(void *pc, struct found_object *out);
static find_object_fn find_object;

extern void *__libc_stack_end;

/* ---- shapes ---------------------------------------------------------------------------------- */

enum {
	SHAPE_KNOWN = 1u << 0,     /* the slot is written */
	SHAPE_WALKABLE = 1u << 1,  /* else: this frame is libunwind's */
	SHAPE_CFA_RBP = 1u << 2,   /* the CFA is RBP + offset, else RSP + offset */
	SHAPE_OUTERMOST = 1u << 3, /* the return address is undefined: the stack ends here */
	SHAPE_RBP_SAVED = 1u << 4, /* the caller's RBP is at CFA + 8 * rbp_slot */
	SHAPE_RBP_LOST = 1u << 5,  /* the caller's RBP cannot be known */
};

/* flags (8 bits) | rbp_slot (int8) << 8 | epoch (16 bits) << 16 | cfa offset (int32) << 32 */
static uint64_t shape_pack(unsigned flags, int rbp_slot, uint32_t epoch, int32_t cfa_off)
{
	return (uint64_t)(flags & 0xff) | (uint64_t)(uint8_t)(int8_t)rbp_slot << 8 | (uint64_t)(epoch & 0xffff) << 16 |
	       (uint64_t)(uint32_t)cfa_off << 32;
}

static unsigned shape_flags(uint64_t s) { return (unsigned)(s & 0xff); }
static int shape_rbp_slot(uint64_t s) { return (int8_t)(uint8_t)(s >> 8); }
static uint32_t shape_epoch(uint64_t s) { return (uint32_t)(s >> 16) & 0xffff; }
static int32_t shape_cfa_off(uint64_t s) { return (int32_t)(uint32_t)(s >> 32); }

/* 2 MiB in one huge page where the kernel gives one (vrt_unwind_init): a walk probes a slot per
 * frame not in its memo, each in a line of its own, and after the application's own work
 * between two allocations those probes miss the caches; one TLB entry then serves them all
 * instead of one a page. Without huge pages, reserved and touched as used. */
#define SHAPE_SLOTS (1u << 17)
#define SHAPE_PROBES 32

struct shape_slot {
	_Atomic uint64_t ip;    /* 0: empty; set once, never changed */
	_Atomic uint64_t shape; /* 0 until written; rewritten only with a newer epoch */
};

static struct shape_slot *shapes;
static _Atomic uint32_t epoch = 1;

static uint32_t slot_of(uint64_t ip) { return (uint32_t)((ip * 0x9e3779b97f4a7c15ull) >> (64 - 17)); }

/* The shape known for ip in the current epoch, or 0. */
static uint64_t shape_find(uint64_t ip, uint32_t now)
{
	for (uint32_t i = 0, at = slot_of(ip); i < SHAPE_PROBES; i++, at = (at + 1) & (SHAPE_SLOTS - 1)) {
		uint64_t key = atomic_load_explicit(&shapes[at].ip, memory_order_acquire);
		if (key == ip) {
			uint64_t s = atomic_load_explicit(&shapes[at].shape, memory_order_acquire);
			return s && shape_epoch(s) == (now & 0xffff) ? s : 0;
		}
		if (!key)
			return 0;
	}
	return 0;
}

/* Keeps s for ip if there is room; two threads keeping the same ip store the same shape. */
static void shape_keep(uint64_t ip, uint64_t s)
{
	for (uint32_t i = 0, at = slot_of(ip); i < SHAPE_PROBES; i++, at = (at + 1) & (SHAPE_SLOTS - 1)) {
		uint64_t key = atomic_load_explicit(&shapes[at].ip, memory_order_acquire);
		if (!key && atomic_compare_exchange_strong(&shapes[at].ip, &key, ip))
			key = ip;
		if (key == ip) {
			atomic_store_explicit(&shapes[at].shape, s, memory_order_release);
			return;
		}
	}
}

/* ---- reading .eh_frame ------------------------------------------------------------------------ */

enum {
	PE_OMIT = 0xff,
	PE_ABSPTR = 0x00, PE_ULEB128 = 0x01, PE_UDATA2 = 0x02, PE_UDATA4 = 0x03, PE_UDATA8 = 0x04,
	PE_SLEB128 = 0x09, PE_SDATA2 = 0x0a, PE_SDATA4 = 0x0b, PE_SDATA8 = 0x0c,
	PE_PCREL = 0x10, PE_DATAREL = 0x30,
};

/* A byte range being read: p moves forward, never past end. */
struct cursor {
	const uint8_t *p, *end;
};

static bool get_u8(struct cursor *c, uint8_t *v)
{
	if (c->p >= c->end)
		return false;
	*v = *c->p++;
	return true;
}

static bool get_bytes(struct cursor *c, void *v, size_t n)
{
	if ((size_t)(c->end - c->p) < n)
		return false;
	memcpy(v, c->p, n);
	c->p += n;
	return true;
}

static bool get_uleb(struct cursor *c, uint64_t *v)
{
	uint64_t r = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		uint8_t b;
		if (!get_u8(c, &b))
			return false;
		r |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = r;
			return true;
		}
	}
	return false;
}

static bool get_sleb(struct cursor *c, int64_t *v)
{
	uint64_t r = 0;
	int shift = 0;
	uint8_t b;
	do {
		if (shift >= 64 || !get_u8(c, &b))
			return false;
		r |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
	} while (b & 0x80);
	if (shift < 64 && (b & 0x40))
		r |= ~0ull << shift;
	*v = (int64_t)r;
	return true;
}

/* A pointer in encoding enc; datarel is relative to data_base (the search table's). */
static bool get_encoded(struct cursor *c, uint8_t enc, uintptr_t data_base, uintptr_t *v)
{
	uintptr_t at = (uintptr_t)c->p;
	uint64_t u = 0;
	int64_t s = 0;
	bool ok;
	switch (enc & 0x0f) {
	case PE_ABSPTR: case PE_UDATA8: ok = get_bytes(c, &u, 8); break;
	case PE_UDATA2: { uint16_t x; ok = get_bytes(c, &x, 2); u = x; break; }
	case PE_UDATA4: { uint32_t x; ok = get_bytes(c, &x, 4); u = x; break; }
	case PE_ULEB128: ok = get_uleb(c, &u); break;
	case PE_SDATA2: { int16_t x; ok = get_bytes(c, &x, 2); u = (uint64_t)(int64_t)x; break; }
	case PE_SDATA4: { int32_t x; ok = get_bytes(c, &x, 4); u = (uint64_t)(int64_t)x; break; }
	case PE_SDATA8: ok = get_bytes(c, &u, 8); break;
	case PE_SLEB128: ok = get_sleb(c, &s); u = (uint64_t)s; break;
	default: return false;
	}
	if (!ok)
		return false;
	switch (enc & 0x70) {
	case 0: break;
	case PE_PCREL: u += at; break;
	case PE_DATAREL: if (!data_base) return false; u += data_base; break;
	default: return false; /* textrel, funcrel, aligned: not used by x86-64 toolchains */
	}
	if (enc & 0x80) /* indirect */
		return false;
	*v = (uintptr_t)u;
	return true;
}

/* The .eh_frame_hdr of the object holding pc, or NULL. */
struct phdr_search {
	uintptr_t pc;
	const uint8_t *hdr;
};

static int search_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct phdr_search *s = arg;
	const uint8_t *hdr = NULL;
	bool holds = false;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t start = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && s->pc >= start && s->pc < start + ph->p_memsz)
			holds = true;
		else if (ph->p_type == PT_GNU_EH_FRAME)
			hdr = (const uint8_t *)start;
	}
	if (!holds)
		return 0;
	s->hdr = hdr;
	return 1;
}

static const uint8_t *eh_frame_hdr_of(uintptr_t pc)
{
	if (find_object) {
		struct found_object o;
		return find_object((void *)pc, &o) == 0 ? o.eh_frame : NULL;
	}
	struct phdr_search s = { pc, NULL };
	dl_iterate_phdr(search_object, &s);
	return s.hdr;
}

/* The FDE covering pc, through the binary search table of .eh_frame_hdr; NULL if none. */
static const uint8_t *find_fde(uintptr_t pc)
{
	const uint8_t *hdr = eh_frame_hdr_of(pc);
	if (!hdr || hdr[0] != 1 || hdr[3] != (PE_DATAREL | PE_SDATA4))
		return NULL;
	struct cursor c = { hdr + 4, hdr + 4 + 16 };
	uintptr_t eh_frame, count;
	if (!get_encoded(&c, hdr[1], (uintptr_t)hdr, &eh_frame) || !get_encoded(&c, hdr[2], (uintptr_t)hdr, &count))
		return NULL;
	const int32_t *table = (const int32_t *)(const void *)c.p; /* (start, fde) pairs, from hdr */
	if (!count || pc < (uintptr_t)hdr + table[0])
		return NULL;
	size_t lo = 0, hi = count;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if ((uintptr_t)hdr + table[2 * mid] <= pc)
			lo = mid;
		else
			hi = mid;
	}
	return hdr + table[2 * lo + 1];
}

/* What the CFI says at one address, for the registers the walk uses. */
enum rule { RULE_SAME, RULE_OFFSET, RULE_UNDEFINED, RULE_OTHER };

enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };

struct row {
	int cfa_reg; /* -1: an expression */
	int64_t cfa_off;
	enum rule rbp, ra;
	int64_t rbp_off, ra_off;
};

struct cie {
	uint64_t code_align;
	int64_t data_align;
	uint64_t ra_reg;
	uint8_t fde_enc;
	bool augmented, signal_frame;
	struct cursor initial; /* the CIE's initial instructions */
};

static bool parse_cie(const uint8_t *at, struct cie *cie)
{
	uint32_t len;
	memcpy(&len, at, 4);
	if (len == 0 || len == 0xffffffffu)
		return false;
	struct cursor c = { at + 8, at + 4 + len };
	uint8_t version;
	if (!get_u8(&c, &version) || (version != 1 && version != 3))
		return false;
	const char *aug = (const char *)c.p;
	size_t aug_len = strnlen(aug, (size_t)(c.end - c.p));
	if (aug_len == (size_t)(c.end - c.p))
		return false;
	c.p += aug_len + 1;
	*cie = (struct cie){ .fde_enc = PE_ABSPTR };
	if (!get_uleb(&c, &cie->code_align) || !get_sleb(&c, &cie->data_align))
		return false;
	if (version == 1) {
		uint8_t r;
		if (!get_u8(&c, &r))
			return false;
		cie->ra_reg = r;
	} else if (!get_uleb(&c, &cie->ra_reg)) {
		return false;
	}
	if (aug[0] == 'z') {
		uint64_t n;
		if (!get_uleb(&c, &n) || n > (uint64_t)(c.end - c.p))
			return false;
		struct cursor a = { c.p, c.p + n };
		c.p += n;
		cie->augmented = true;
		for (const char *k = aug + 1; *k; k++) {
			uint8_t enc;
			uintptr_t ignored;
			if (*k == 'R') {
				if (!get_u8(&a, &cie->fde_enc))
					return false;
			} else if (*k == 'L') {
				if (!get_u8(&a, &enc))
					return false;
			} else if (*k == 'P') { /* the personality routine: skipped (any base will do) */
				if (!get_u8(&a, &enc) || !get_encoded(&a, enc & 0x7f, 1, &ignored))
					return false;
			} else if (*k == 'S') {
				cie->signal_frame = true;
			} else if (*k != 'B' && *k != 'G') {
				return false;
			}
		}
	} else if (aug[0]) {
		return false; /* "eh" and other pre-'z' forms */
	}
	cie->initial = c;
	return cie->ra_reg == REG_RA;
}

#define STATE_STACK 8

struct interp {
	struct row row, initial, saved[STATE_STACK];
	int n_saved;
	uintptr_t loc, target;
	const struct cie *cie;
};

static void set_rule(struct interp *in, uint64_t reg, enum rule r, int64_t off)
{
	if (reg == REG_RBP) {
		in->row.rbp = r;
		in->row.rbp_off = off;
	} else if (reg == REG_RA) {
		in->row.ra = r;
		in->row.ra_off = off;
	} else if (reg == REG_RSP && r != RULE_SAME) {
		in->row.cfa_reg = -2; /* RSP restored from memory: not a plain frame */
	}
}

static void restore_rule(struct interp *in, uint64_t reg)
{
	if (reg == REG_RBP)
		set_rule(in, reg, in->initial.rbp, in->initial.rbp_off);
	else if (reg == REG_RA)
		set_rule(in, reg, in->initial.ra, in->initial.ra_off);
}

/* Whether an advance by delta code units still stays at or before the target. */
static bool advance(struct interp *in, uint64_t delta)
{
	uint64_t step = delta * in->cie->code_align;
	if (in->loc + step > in->target)
		return false;
	in->loc += step;
	return true;
}

static bool skip_block(struct cursor *c)
{
	uint64_t n;
	if (!get_uleb(c, &n) || n > (uint64_t)(c->end - c->p))
		return false;
	c->p += n;
	return true;
}

/* One instruction; 0 to go on, 1 when the row for the target is complete, -1 on what the walk
 * cannot take (the frame then goes to libunwind). */
static int step_instruction(struct interp *in, struct cursor *c)
{
	uint8_t op;
	if (!get_u8(c, &op))
		return 1; /* end of the instructions: the row holds */
	uint64_t reg, u, delta;
	int64_t s;
	switch (op >> 6) {
	case 1: return advance(in, op & 0x3f) ? 0 : 1;
	case 2:
		if (!get_uleb(c, &u))
			return -1;
		set_rule(in, op & 0x3f, RULE_OFFSET, (int64_t)u * in->cie->data_align);
		return 0;
	case 3: restore_rule(in, op & 0x3f); return 0;
	}
	switch (op) {
	case 0x00: return 0; /* nop */
	case 0x02: { uint8_t d; if (!get_u8(c, &d)) return -1; return advance(in, d) ? 0 : 1; }
	case 0x03: { uint16_t d; if (!get_bytes(c, &d, 2)) return -1; return advance(in, d) ? 0 : 1; }
	case 0x04: { uint32_t d; if (!get_bytes(c, &d, 4)) return -1; return advance(in, d) ? 0 : 1; }
	case 0x05: /* offset_extended */
		if (!get_uleb(c, &reg) || !get_uleb(c, &u))
			return -1;
		set_rule(in, reg, RULE_OFFSET, (int64_t)u * in->cie->data_align);
		return 0;
	case 0x11: /* offset_extended_sf */
		if (!get_uleb(c, &reg) || !get_sleb(c, &s))
			return -1;
		set_rule(in, reg, RULE_OFFSET, s * in->cie->data_align);
		return 0;
	case 0x06: if (!get_uleb(c, &reg)) return -1; restore_rule(in, reg); return 0;
	case 0x07: if (!get_uleb(c, &reg)) return -1; set_rule(in, reg, RULE_UNDEFINED, 0); return 0;
	case 0x08: if (!get_uleb(c, &reg)) return -1; set_rule(in, reg, RULE_SAME, 0); return 0;
	case 0x09: /* register: one register saved in another */
		if (!get_uleb(c, &reg) || !get_uleb(c, &u))
			return -1;
		set_rule(in, reg, RULE_OTHER, 0);
		return 0;
	case 0x0a:
		if (in->n_saved == STATE_STACK)
			return -1;
		in->saved[in->n_saved++] = in->row;
		return 0;
	case 0x0b:
		if (!in->n_saved)
			return -1;
		in->row = in->saved[--in->n_saved];
		return 0;
	case 0x0c: /* def_cfa */
		if (!get_uleb(c, &reg) || !get_uleb(c, &u))
			return -1;
		in->row.cfa_reg = (int)(reg < 64 ? reg : 63);
		in->row.cfa_off = (int64_t)u;
		return 0;
	case 0x12: /* def_cfa_sf */
		if (!get_uleb(c, &reg) || !get_sleb(c, &s))
			return -1;
		in->row.cfa_reg = (int)(reg < 64 ? reg : 63);
		in->row.cfa_off = s * in->cie->data_align;
		return 0;
	case 0x0d: if (!get_uleb(c, &reg)) return -1; in->row.cfa_reg = (int)(reg < 64 ? reg : 63); return 0;
	case 0x0e: if (!get_uleb(c, &u)) return -1; in->row.cfa_off = (int64_t)u; return 0;
	case 0x13: if (!get_sleb(c, &s)) return -1; in->row.cfa_off = s * in->cie->data_align; return 0;
	case 0x0f: in->row.cfa_reg = -1; return skip_block(c) ? 0 : -1; /* def_cfa_expression */
	case 0x10: case 0x16: /* expression, val_expression */
		if (!get_uleb(c, &reg))
			return -1;
		set_rule(in, reg, RULE_OTHER, 0);
		return skip_block(c) ? 0 : -1;
	case 0x14: case 0x15: /* val_offset(_sf): the value itself, not a slot */
		if (!get_uleb(c, &reg) || (op == 0x14 ? !get_uleb(c, &u) : !get_sleb(c, &s)))
			return -1;
		set_rule(in, reg, RULE_OTHER, 0);
		return 0;
	case 0x2e: return get_uleb(c, &u) ? 0 : -1; /* GNU_args_size */
	case 0x2f: /* GNU_negative_offset_extended */
		if (!get_uleb(c, &reg) || !get_uleb(c, &u))
			return -1;
		set_rule(in, reg, RULE_OFFSET, -(int64_t)u * in->cie->data_align);
		return 0;
	case 0x01: /* set_loc */
		if (!get_encoded(c, in->cie->fde_enc, 0, &delta))
			return -1;
		if (delta > in->target)
			return 1;
		in->loc = delta;
		return 0;
	default: return -1;
	}
}

static int run_instructions(struct interp *in, struct cursor c)
{
	for (int steps = 0; steps < 100000; steps++) {
		int r = step_instruction(in, &c);
		if (r)
			return r;
	}
	return -1;
}

/* The row of the CFI table for address target, or false if it cannot be read. */
static bool row_at(uintptr_t target, struct row *out, bool *signal_frame)
{
	const uint8_t *fde = find_fde(target);
	if (!fde)
		return false;
	uint32_t len, cie_off;
	memcpy(&len, fde, 4);
	memcpy(&cie_off, fde + 4, 4);
	if (len == 0 || len == 0xffffffffu || cie_off == 0)
		return false;
	struct cie cie;
	if (!parse_cie(fde + 4 - cie_off, &cie))
		return false;
	struct cursor c = { fde + 8, fde + 4 + len };
	uintptr_t start, range;
	if (!get_encoded(&c, cie.fde_enc, 0, &start) || !get_encoded(&c, cie.fde_enc & 0x0f, 0, &range))
		return false;
	if (target < start || target - start >= range)
		return false;
	if (cie.augmented && !skip_block(&c))
		return false;
	struct interp in = { .row = { .cfa_reg = -1, .rbp = RULE_SAME, .ra = RULE_SAME },
			     .loc = start, .target = target, .cie = &cie };
	if (run_instructions(&in, cie.initial) < 0)
		return false;
	in.initial = in.row;
	in.n_saved = 0;
	in.loc = start;
	if (run_instructions(&in, c) < 0)
		return false;
	*out = in.row;
	*signal_frame = cie.signal_frame;
	return true;
}

/* The shape of the frame that return address ip is in. */
static uint64_t shape_read(uint64_t ip, uint32_t now)
{
	struct row r;
	bool signal_frame;
	unsigned flags = SHAPE_KNOWN;
	int rbp_slot = 0;
	if (!row_at((uintptr_t)ip - 1, &r, &signal_frame) || signal_frame)
		return shape_pack(flags, 0, now, 0);
	if (r.ra == RULE_UNDEFINED)
		return shape_pack(flags | SHAPE_WALKABLE | SHAPE_OUTERMOST, 0, now, 0);
	bool cfa_plain = (r.cfa_reg == REG_RSP || r.cfa_reg == REG_RBP) && r.cfa_off >= 0 && r.cfa_off <= INT32_MAX;
	bool ra_plain = r.ra == RULE_OFFSET && r.ra_off == -8;
	if (r.rbp == RULE_OFFSET && r.rbp_off % 8 == 0 && r.rbp_off / 8 >= INT8_MIN && r.rbp_off / 8 <= INT8_MAX) {
		flags |= SHAPE_RBP_SAVED;
		rbp_slot = (int)(r.rbp_off / 8);
	} else if (r.rbp == RULE_UNDEFINED) {
		flags |= SHAPE_RBP_LOST;
	} else if (r.rbp != RULE_SAME) {
		return shape_pack(flags, 0, now, 0);
	}
	if (!cfa_plain || !ra_plain)
		return shape_pack(flags, 0, now, 0);
	flags |= SHAPE_WALKABLE | (r.cfa_reg == REG_RBP ? SHAPE_CFA_RBP : 0);
	return shape_pack(flags, rbp_slot, now, (int32_t)r.cfa_off);
}

static uint64_t shape_of(uint64_t ip, uint32_t now)
{
	uint64_t s = shape_find(ip, now);
	if (__builtin_expect(s != 0, 1))
		return s;
	s = shape_read(ip, now);
	shape_keep(ip, s);
	return s;
}

/* ---- the walk -------------------------------------------------------------------------------- */

#ifdef VRT_UNWIND_COUNTS
static _Atomic uint64_t counts[sizeof(struct vrt_unwind_counts) / 8];
#define COUNT(field, n) \
	atomic_fetch_add_explicit(&counts[offsetof(struct vrt_unwind_counts, field) / 8], (uint64_t)(n), memory_order_relaxed)

void vrt_unwind_counts(struct vrt_unwind_counts *out)
{
	uint64_t *v = (uint64_t *)out;
	for (size_t i = 0; i < sizeof(*out) / 8; i++)
		v[i] = atomic_load_explicit(&counts[i], memory_order_relaxed);
}

/* A measurement build says what it counted when the process ends. */
__attribute__((destructor)) static void print_counts(void)
{
	struct vrt_unwind_counts c;
	vrt_unwind_counts(&c);
	if (getenv("VRT_UNWIND_COUNTS_PRINT"))
		fprintf(stderr, "vrt_unwind_counts walks=%llu followed=%llu moved=%llu met_again=%llu probed=%llu\n",
			(unsigned long long)c.walks, (unsigned long long)c.followed, (unsigned long long)c.moved,
			(unsigned long long)c.met_again, (unsigned long long)c.probed);
}
#else
#define COUNT(field, n) ((void)0)
#endif

#define THREAD_STACK_SPAN (64ull << 20)
static uintptr_t main_stack_span = 8ull << 20;

/* The top of the stack sp is on, if it is the thread's own stack (see the top of the file). */
static uintptr_t stack_top(uintptr_t sp)
{
	uintptr_t self = (uintptr_t)pthread_self();
	if (sp < self && self - sp <= THREAD_STACK_SPAN)
		return self;
	uintptr_t main_top = ((uintptr_t)__libc_stack_end | 4095) + 1;
	if (__libc_stack_end && sp < main_top && main_top - sp <= main_stack_span)
		return main_top;
	return 0;
}

/*
 * One frame of a walk: where it was (ip, sp, and rbp as it was there), and what its shape made
 * of it (its CFA, the slot its caller's RBP came from), relative to sp.
 */
struct frame {
	uint64_t ip, sp, rbp;
	uint32_t cfa_off; /* CFA - sp */
	int8_t rbp_slot;  /* SHAPE_RBP_SAVED: the caller's RBP is at CFA + 8 * rbp_slot */
	uint8_t flags;    /* its shape's */
};

/*
 * A frame as the memo keeps it, 24 bytes: the low half of its sp, and its rbp above its sp where
 * its CFA comes from RBP (rbp is read from the memo nowhere else). The memo is used only by walks
 * that start less than 4 GiB below the top of the stack (walk), so two sps of its walks are equal
 * when their low halves are; rbp is compared at its full width, so an offset that does not fit
 * (an RBP past the CFA) only makes the frame one the memo does not know.
 */
struct memo_frame {
	uint64_t ip;
	uint32_t sp_lo;     /* (uint32_t)sp */
	uint32_t rbp_off;   /* SHAPE_CFA_RBP: rbp - sp */
	uint32_t cfa_off;
	int8_t rbp_slot;
	uint8_t flags;
};
_Static_assert(sizeof(struct memo_frame) == 24, "eight memo frames in three cache lines");

/*
 * The thread's last walk (two buffers: the last, and the one the next walk writes). A frame
 * whose ip, sp and (where its CFA comes from RBP) rbp equal one of the last walk's has that
 * frame's CFA and RBP slot, since both follow from those three and the ip's shape (unchanged in
 * the same epoch): the walk takes them from there instead of the shape table. Only what is read
 * from the stack is read again - the return address, the saved RBP - so a frame whose caller
 * changed is followed into its new caller. A loop allocating from one site walks its whole
 * stack this way, and says so (same_as_last) for the caller to keep what it made of it.
 *
 * The same holds relative to sp: CFA - sp follows from the ip's shape alone, or from it and
 * RBP - sp where the CFA comes from RBP. So where the walk starts at another depth (the same
 * inner functions under other callers: an allocator's frames under each operator), its first
 * frames are still the last walk's, moved, while their ips (and RBP - sp) agree
 * (follow_moved); only the frames from the first that differs to where the walks meet again
 * at the same addresses (last_frame) probe the shape table.
 *
 * A real step's own work evicts the memo between two walks, so what a walk reads of it is what
 * it pays (callgrind's cache simulation, bench/NOTES.md): 24 bytes a frame.
 */
struct vrt_unwind_memo {
	uint32_t epoch;
	int max;
	int n[2];
	int last;
	uintptr_t top; /* of the stack its walks were on */
	struct memo_frame frames[2][VRT_UNWIND_MAX];
};

size_t vrt_unwind_memo_size(void) { return sizeof(struct vrt_unwind_memo); }

/* One buffer of the memo: a walk's frames, on the stack whose top is top. */
struct walk_buf {
	struct memo_frame *frames;
	uintptr_t top;
};

static struct walk_buf memo_buf(struct vrt_unwind_memo *m, int which, uintptr_t top)
{
	return (struct walk_buf){ m->frames[which], top };
}

static void buf_put(struct walk_buf b, int n, const struct frame *f)
{
	uint32_t rbp_off = (f->flags & SHAPE_CFA_RBP) ? (uint32_t)(f->rbp - f->sp) : 0;
	b.frames[n] = (struct memo_frame){ f->ip, (uint32_t)f->sp, rbp_off, f->cfa_off, f->rbp_slot, f->flags };
}

/* The frame at ip from its shape; false if the walk cannot take it. */
static bool frame_from_shape(struct frame *f, uint32_t now, uintptr_t top)
{
	uint64_t s = shape_of(f->ip, now);
	unsigned flags = shape_flags(s);
	f->flags = (uint8_t)flags;
	f->cfa_off = 0;
	f->rbp_slot = 0;
	if (!(flags & SHAPE_WALKABLE))
		return false;
	if (flags & SHAPE_OUTERMOST)
		return true;
	uintptr_t cfa = ((flags & SHAPE_CFA_RBP) ? f->rbp : f->sp) + (uintptr_t)(intptr_t)shape_cfa_off(s);
	if (cfa < f->sp + 8 || cfa > top || cfa - f->sp > UINT32_MAX)
		return false;
	f->cfa_off = (uint32_t)(cfa - f->sp);
	if (flags & SHAPE_RBP_SAVED) {
		uintptr_t slot = cfa + (uintptr_t)((intptr_t)shape_rbp_slot(s) * 8);
		if (slot < f->sp || slot + 8 > top)
			return false;
		f->rbp_slot = (int8_t)shape_rbp_slot(s);
	}
	return true;
}

/* A walk's position: the frame it is at. */
struct state {
	uintptr_t ip, sp, rbp;
};

/* Whether the walk is at the memo's frame o. */
static bool same_frame(const struct memo_frame *o, const struct state *at)
{
	return o->sp_lo == (uint32_t)at->sp && o->ip == at->ip &&
	       (!(o->flags & SHAPE_CFA_RBP) || at->sp + o->rbp_off == at->rbp);
}

/* To the caller of the frame at sp whose CFA and RBP slot o gives: reads what the stack holds now. */
static void step(struct state *at, uint64_t sp, const struct memo_frame *o)
{
	uintptr_t cfa = sp + o->cfa_off;
	at->ip = *(const uintptr_t *)(cfa - 8);
	if (o->flags & SHAPE_RBP_SAVED)
		at->rbp = *(const uintptr_t *)(cfa + (uintptr_t)((intptr_t)o->rbp_slot * 8));
	else if (o->flags & SHAPE_RBP_LOST)
		at->rbp = 0;
	at->sp = cfa;
}

static void step_frame(struct state *at, const struct frame *f)
{
	struct memo_frame o = { .cfa_off = f->cfa_off, .rbp_slot = f->rbp_slot, .flags = f->flags };
	step(at, f->sp, &o);
}

/*
 * The walk while it is the last walk, frame for frame from the first: the memo's CFAs and
 * slots, what the stack holds now. Returns the frames followed; *ended when the stack ends
 * there (an outermost frame, or no caller past the last frame).
 */
__attribute__((no_sanitize_address)) static int follow(struct walk_buf last, int n_last, struct state *at,
						       uint64_t *out, bool *ended)
{
	*ended = false;
	for (int n = 0; n < n_last; n++) {
		const struct memo_frame *o = &last.frames[n];
		if (!same_frame(o, at))
			return n;
		out[n] = at->ip;
		if (o->flags & SHAPE_OUTERMOST) {
			*ended = true;
			return n + 1;
		}
		step(at, at->sp, o);
	}
	*ended = !at->ip;
	return n_last;
}

/* Whether frame f, taken from a walk at another depth, stays inside the stack (frame_from_shape's
 * checks that depend on where the frame is: the rest held where the walk took it from). */
static bool fits(const struct frame *f, uintptr_t top)
{
	uintptr_t cfa = f->sp + f->cfa_off;
	if (cfa > top)
		return false;
	return !(f->flags & SHAPE_RBP_SAVED) || cfa + (uintptr_t)((intptr_t)f->rbp_slot * 8) + 8 <= top;
}

/*
 * follow for a walk that starts where the last one did not (see the memo): frame n is the last
 * walk's frame n moved while the ips agree, and RBP - sp where the CFA comes from RBP. Writes
 * each frame followed to next, since they are not the last walk's.
 */
__attribute__((no_sanitize_address)) static int follow_moved(struct walk_buf last, int n_last, struct state *at,
							     uintptr_t top, struct walk_buf next, uint64_t *out,
							     bool *ended)
{
	*ended = false;
	for (int n = 0; n < n_last; n++) {
		const struct memo_frame *o = &last.frames[n];
		if (o->ip != at->ip || ((o->flags & SHAPE_CFA_RBP) && o->rbp_off != at->rbp - at->sp))
			return n;
		struct frame f = { .ip = at->ip, .sp = at->sp, .rbp = at->rbp,
				   .cfa_off = o->cfa_off, .rbp_slot = o->rbp_slot, .flags = o->flags };
		if (!(f.flags & SHAPE_OUTERMOST) && !fits(&f, top))
			return n;
		buf_put(next, n, &f);
		out[n] = at->ip;
		if (f.flags & SHAPE_OUTERMOST) {
			*ended = true;
			return n + 1;
		}
		step_frame(at, &f);
	}
	*ended = !at->ip;
	return n_last;
}

/* The last walk's frame at this position, if the walk is at that frame again (see the memo). */
static const struct memo_frame *last_frame(struct walk_buf last, int n_last, int *k, const struct state *at)
{
	int i = *k;
	uint32_t top = (uint32_t)last.top, at_below = top - (uint32_t)at->sp; /* below 4 GiB (walk) */
	while (i < n_last && top - last.frames[i].sp_lo > at_below)
		i++;
	*k = i;
	return i < n_last && same_frame(&last.frames[i], at) ? &last.frames[i] : NULL;
}

/* From the caller's frame outward; the frame pointer of vrt_unwind is the way in. */
__attribute__((no_sanitize_address)) static int walk(struct vrt_unwind_memo *m, struct state at, uint64_t *out,
						     int max, bool *same_as_last)
{
	*same_as_last = false;
	uintptr_t top = stack_top(at.sp);
	if (!top || !shapes || max > VRT_UNWIND_MAX)
		return -1;
	uint32_t now = atomic_load_explicit(&epoch, memory_order_acquire);
	/* The memo keeps the low halves of sps: walks that start 4 GiB or more below the top of the
	 * stack (a main stack of such a size) go without it. stack_top gives the same top for every
	 * walk of a thread; checked all the same, so that the halves are never read against another. */
	if (top - at.sp > UINT32_MAX)
		m = NULL;
	bool have_last = m && m->epoch == now && m->max == max && m->top == top;
	struct walk_buf last = have_last ? memo_buf(m, m->last, top) : (struct walk_buf){ NULL, top };
	int n_last = have_last ? m->n[m->last] : 0;
	struct walk_buf next = m ? memo_buf(m, m->last ^ 1, top) : (struct walk_buf){ NULL, top };
	int n = 0, k = 0;
	bool ended = false;
	if (have_last) {
		n = follow(last, n_last, &at, out, &ended);
		COUNT(followed, n);
		/* follow stops short of n_last (<= max) only at a frame that differs, and not ended */
		if (ended || n == max) {
			COUNT(walks, 1);
			*same_as_last = true;
			return n;
		}
		if (n) { /* the frames followed are the new walk's */
			memcpy(next.frames, last.frames, sizeof(*next.frames) * (size_t)n);
		} else {
			n = follow_moved(last, n_last, &at, top, next, out, &ended);
			COUNT(moved, n);
			if (ended || n == max) {
				*same_as_last = true;
				goto kept;
			}
		}
		k = n;
	}
	while (!ended && n < max && at.ip) {
		const struct memo_frame *o = have_last ? last_frame(last, n_last, &k, &at) : NULL;
		struct frame f = { .ip = at.ip, .sp = at.sp, .rbp = at.rbp };
		if (o) {
			f.cfa_off = o->cfa_off;
			f.rbp_slot = o->rbp_slot;
			f.flags = o->flags;
			COUNT(met_again, 1);
		} else if (!frame_from_shape(&f, now, top)) {
			return -1;
		} else {
			COUNT(probed, 1);
		}
		if (m)
			buf_put(next, n, &f);
		out[n++] = at.ip;
		if (f.flags & SHAPE_OUTERMOST)
			break;
		step_frame(&at, &f);
	}
kept:
	COUNT(walks, 1);
	if (m) {
		m->last ^= 1;
		m->n[m->last] = n;
		m->epoch = now;
		m->max = max;
		m->top = top;
	}
	return n;
}

__attribute__((noinline, no_sanitize_address)) int vrt_unwind(struct vrt_unwind_memo *memo, uint64_t *out, int max,
							       bool *same_as_last)
{
	/* The frame pointer this function keeps (taking its address makes the compiler keep one)
	 * gives the caller's state: its return address above it, its RBP below, its CFA after. */
	const uintptr_t *fp = __builtin_frame_address(0);
	struct state at = { fp[1], (uintptr_t)(fp + 2), fp[0] };
	return walk(memo, at, out, max, same_as_last);
}

void vrt_unwind_forget(void) { atomic_fetch_add_explicit(&epoch, 1, memory_order_acq_rel); }

bool vrt_unwind_init(void *dl_find_object)
{
	find_object = (find_object_fn)dl_find_object;
	struct rlimit rl;
	if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > main_stack_span)
		main_stack_span = rl.rlim_cur;
	if (shapes)
		return true;
	/* Twice the table, trimmed to its aligned half: a huge page needs a 2 MiB boundary. */
	size_t bytes = sizeof(struct shape_slot) * SHAPE_SLOTS;
	char *mem = mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mem == MAP_FAILED)
		return false;
	char *at = (char *)(((uintptr_t)mem + bytes - 1) & ~(uintptr_t)(bytes - 1));
	if (at > mem)
		munmap(mem, (size_t)(at - mem));
	munmap(at + bytes, (size_t)(mem + 2 * bytes - (at + bytes)));
	madvise(at, bytes, MADV_HUGEPAGE); /* a hint: where refused, 4 KiB pages as before */
	shapes = (struct shape_slot *)at;
	return true;
}
