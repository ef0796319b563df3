/* SPDX-License-Identifier: MIT */
/*
 * preload/stack_hash.h: the 64-bit name the thread's stack cache keys stacks by. A stack that
 * differs from another in any frame, in the order of two frames, in its length or in where the
 * native frames end and the Python frames begin must get another name (else an event would be
 * recorded with the other stack's id), and names must spread over the cache's index bits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../preload/stack_hash.h"

#define N_NATIVE 47
#define N_PYTHON 21

static int failures;

#define CHECK(cond, ...)                                                                            \
	do {                                                                                        \
		if (!(cond)) {                                                                      \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                        \
			fprintf(stderr, __VA_ARGS__);                                               \
			fputc('\n', stderr);                                                        \
			failures++;                                                                 \
		}                                                                                   \
	} while (0)

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Return addresses as a real process has them: a few libraries, close together. */
static uint64_t return_address(void) { return 0x7f3a10000000ull + (next() % 3) * 0x1000000 + next() % 0x20000; }

static uint64_t H(const uint64_t *n, int nn, const uint32_t *p, int np) { return vrt_hash_frames_inline(n, nn, p, np); }

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(void)
{
	uint64_t native[N_NATIVE + 1];
	uint32_t python[N_PYTHON + 1];
	for (int i = 0; i < N_NATIVE + 1; i++)
		native[i] = return_address();
	for (int i = 0; i < N_PYTHON + 1; i++)
		python[i] = (uint32_t)(next() % 5000);
	uint64_t base = H(native, N_NATIVE, python, N_PYTHON);
	CHECK(base == H(native, N_NATIVE, python, N_PYTHON), "not deterministic");
	CHECK(H(NULL, 0, NULL, 0) != 0, "0 names an empty cache slot");

	/* One frame changed: every position, small and large changes (a Python line within the
	 * same function is the next frame id; a call site is the next instruction). */
	const uint64_t deltas[] = { 1, 2, 5, 0x10, 0x1000, 0x1000000 };
	for (int i = 0; i < N_NATIVE; i++)
		for (size_t d = 0; d < sizeof(deltas) / sizeof(deltas[0]); d++) {
			uint64_t saved = native[i];
			native[i] += deltas[d];
			CHECK(H(native, N_NATIVE, python, N_PYTHON) != base, "native frame %d + %#llx: same name", i,
			      (unsigned long long)deltas[d]);
			native[i] = saved;
		}
	for (int i = 0; i < N_PYTHON; i++)
		for (uint32_t d = 1; d < 4; d++) {
			uint32_t saved = python[i];
			python[i] += d;
			CHECK(H(native, N_NATIVE, python, N_PYTHON) != base, "python frame %d + %u: same name", i, d);
			python[i] = saved;
		}
	/* Two frames swapped, at every position. */
	for (int i = 0; i + 1 < N_NATIVE; i++) {
		uint64_t t = native[i];
		native[i] = native[i + 1];
		native[i + 1] = t;
		CHECK(H(native, N_NATIVE, python, N_PYTHON) != base, "native frames %d,%d swapped: same name", i, i + 1);
		native[i + 1] = native[i];
		native[i] = t;
	}
	for (int i = 0; i + 1 < N_PYTHON; i++) {
		uint32_t t = python[i];
		python[i] = python[i + 1];
		python[i + 1] = t;
		CHECK(H(native, N_NATIVE, python, N_PYTHON) != base, "python frames %d,%d swapped: same name", i, i + 1);
		python[i + 1] = python[i];
		python[i] = t;
	}
	/* Shorter or longer (recursion one level deeper: the same frame once more). */
	for (int n = 0; n <= N_NATIVE + 1; n++)
		CHECK(n == N_NATIVE || H(native, n, python, N_PYTHON) != base, "%d native frames: same name", n);
	for (int n = 0; n <= N_PYTHON + 1; n++)
		CHECK(n == N_PYTHON || H(native, N_NATIVE, python, n) != base, "%d python frames: same name", n);
	uint64_t rec[8] = { 0x401000, 0x401000, 0x401000, 0x401000, 0x401000, 0x401000, 0x401000, 0x401000 };
	for (int n = 1; n < 8; n++)
		CHECK(H(rec, n, NULL, 0) != H(rec, n - 1, NULL, 0), "recursion %d vs %d deep: same name", n, n - 1);
	uint32_t prec[8] = { 7, 7, 7, 7, 7, 7, 7, 7 };
	for (int n = 1; n < 8; n++)
		CHECK(H(NULL, 0, prec, n) != H(NULL, 0, prec, n - 1), "python recursion %d vs %d: same name", n, n - 1);
	/* The same frames split differently between native and Python. */
	uint64_t two[2] = { 7, 9 };
	uint32_t two32[2] = { 7, 9 };
	CHECK(H(two, 2, NULL, 0) != H(NULL, 0, two32, 2), "native 7,9 and python 7,9: same name");
	CHECK(H(two, 1, two32 + 1, 1) != H(two, 2, NULL, 0), "native 7 + python 9 and native 7,9: same name");

	/* 200k random stacks of 1-48 frames: no two share a name, and the cache's 1024 slots
	 * (the low 10 bits) fill evenly (expected 195 each; +-60% is far outside chance). */
	enum { STACKS = 200000, SLOTS = 1024 };
	uint64_t *names = malloc(STACKS * sizeof(uint64_t));
	static unsigned per_slot[SLOTS];
	for (int s = 0; s < STACKS; s++) {
		int nn = 1 + (int)(next() % 48), np = (int)(next() % 21);
		for (int i = 0; i < nn; i++)
			native[i % N_NATIVE] = return_address();
		for (int i = 0; i < np; i++)
			python[i] = (uint32_t)(next() % 5000);
		names[s] = H(native, nn < N_NATIVE ? nn : N_NATIVE, python, np);
		per_slot[names[s] & (SLOTS - 1)]++;
	}
	qsort(names, STACKS, sizeof(uint64_t), cmp);
	int dup = 0;
	for (int s = 1; s < STACKS; s++)
		dup += names[s] == names[s - 1];
	/* random stacks can repeat for real (1-frame stacks of the same address): allow those few */
	CHECK(dup < 20, "%d names shared among %d random stacks", dup, STACKS);
	for (int i = 0; i < SLOTS; i++)
		CHECK(per_slot[i] > 78 && per_slot[i] < 312, "cache slot %d got %u of %d stacks", i, per_slot[i], STACKS);
	free(names);
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	else
		printf("stack hash: ok\n");
	return failures ? 1 : 0;
}
