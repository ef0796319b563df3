/* SPDX-License-Identifier: MIT */
/*
 * The range set of analyzer/fragmentation.c (the allocator's segments and the free ranges
 * between tensors) against a brute force: every address of a small space holds the tag of the
 * range over it (0: none), and a range is a maximal run of one tag. Random adds (of empty
 * stretches), removes, lookups and the longest range, checked after every operation.
 */
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fragmentation.h"
#include "vt.h"

/* The command table main.c defines (the reader library's help printer reads it). */
const struct vrt_command vrt_commands[] = { { NULL, NULL, NULL, NULL } };

#define SPACE 2048

static uint8_t ref[SPACE];
static uint32_t rng = 12345;

static uint32_t rnd(uint32_t n)
{
	rng = rng * 1103515245u + 12345u;
	return (rng >> 8) % n;
}

static uint64_t ref_longest(void)
{
	uint64_t best = 0, run = 0;
	for (int i = 0; i < SPACE; i++) {
		run = ref[i] && i && ref[i] == ref[i - 1] ? run + 1 : ref[i] ? 1 : 0;
		best = run > best ? run : best;
	}
	return best;
}

/* The tag of the run holding all of [a, b), or 0. */
static uint8_t ref_holding(int a, int b)
{
	for (int i = a; i < b; i++)
		if (!ref[i] || ref[i] != ref[a])
			return 0;
	return ref[a];
}

static void test_against_brute_force(void)
{
	struct vrt_ranges s;
	vrt_ranges_init(&s, 7);
	memset(ref, 0, sizeof(ref));
	for (int step = 0; step < 20000; step++) {
		int a = (int)rnd(SPACE), b = a + 1 + (int)rnd(step % 3 ? 64 : 600);
		b = b > SPACE ? SPACE : b;
		uint8_t tag = (uint8_t)(1 + rnd(3));
		int op = (int)rnd(4);
		if (op == 0) {
			bool empty = true;
			for (int i = a; i < b; i++)
				empty = empty && !ref[i];
			if (empty) {
				vrt_ranges_add(&s, (uint64_t)a, (uint64_t)b, tag);
				memset(ref + a, tag, (size_t)(b - a));
			}
		} else if (op == 1) {
			uint64_t held = 0;
			for (int i = a; i < b; i++)
				held += ref[i] != 0;
			VT_EQ(vrt_ranges_remove(&s, (uint64_t)a, (uint64_t)b), held);
			memset(ref + a, 0, (size_t)(b - a));
		} else {
			uint64_t got = 0;
			bool any = false;
			for (int i = a; i < b; i++)
				any = any || ref[i];
			VT_EQ(vrt_ranges_holding(&s, (uint64_t)a, (uint64_t)b, &got) ? got : 0, (uint64_t)ref_holding(a, b));
			VT_EQ(vrt_ranges_overlap(&s, (uint64_t)a, (uint64_t)b), any);
		}
		VT_EQ(vrt_ranges_longest(&s), ref_longest());
		VT_CHECK(!s.error);
	}
	vrt_ranges_free(&s);
}

int main(void)
{
	VT_RUN(test_against_brute_force);
	return vt_summary();
}
