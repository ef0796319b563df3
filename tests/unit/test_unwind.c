/* SPDX-License-Identifier: MIT */
/*
 * preload/unwind.c against libunwind: for every stack shape here the fast walk either gives
 * exactly the return addresses unw_backtrace gives, or says -1 (then libunwind takes it).
 * Built -O2 -fomit-frame-pointer, so most frames have an RSP-based CFA; the VLA frames keep a
 * frame pointer and an RBP-based CFA; qsort and bsearch put libc's frames in between; a thread
 * walks up to its descriptor, the main thread to __libc_stack_end; a signal handler's stack
 * holds a signal frame, which only libunwind takes. Each thread walks with its memo of the last
 * walk (the fast path for a repeated stack): a stack walked again says so, and a frame whose
 * caller changed under an unchanged inner part (twin callers with equal frames, alternating) is
 * followed into the new caller; the same inner frames at another depth are the last walk's moved,
 * but not a frame-pointer frame whose RBP - sp changed (a VLA of another length); nor is a
 * frame-pointer frame at the same sp and return address as the last walk's whose RBP is not its
 * RBP (a VLA sized so that its bottom lands where the other caller's did).
 */
#define _GNU_SOURCE
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unwind.h"

#define MAX 128
#define NOINLINE __attribute__((noinline))

static int failures, compared, fell_back, repeated;
static volatile int sink;
static __thread struct vrt_unwind_memo *memo;

struct capture {
	uint64_t fast[MAX], slow[MAX];
	int n_fast, n_slow;
};

/* Both walks from one frame; entry 0 (the return address into this function) differs. */
static NOINLINE void capture_both(struct capture *c, int max, bool *same_as_last)
{
	if (!memo)
		memo = calloc(1, vrt_unwind_memo_size());
	c->n_fast = vrt_unwind(memo, c->fast, max, same_as_last);
	c->n_slow = unw_backtrace((void **)c->slow, max);
	sink++;
}

static struct capture previous;

static void check(const char *what, int max)
{
	struct capture c;
	bool same_as_last;
	capture_both(&c, max, &same_as_last);
	if (c.n_fast < 0) {
		fell_back++;
		return;
	}
	compared++;
	bool same = c.n_fast == c.n_slow;
	for (int i = 1; same && i < c.n_fast; i++)
		same = c.fast[i] == c.slow[i];
	/* "the same as the last walk" must be true exactly when it is */
	bool as_last = c.n_fast == previous.n_fast && !memcmp(c.fast + 1, previous.fast + 1, sizeof(uint64_t) * (size_t)(c.n_fast - 1));
	if (same_as_last && !as_last) {
		failures++;
		fprintf(stderr, "FAIL %s: said to be the last walk's stack, and is not\n", what);
	}
	repeated += same_as_last;
	previous = c;
	if (same)
		return;
	failures++;
	fprintf(stderr, "FAIL %s (max %d): fast %d frames, libunwind %d\n", what, max, c.n_fast, c.n_slow);
	for (int i = 0; i < (c.n_fast > c.n_slow ? c.n_fast : c.n_slow); i++)
		fprintf(stderr, "  %2d %#18llx %#18llx\n", i, i < c.n_fast ? (unsigned long long)c.fast[i] : 0ull,
			i < c.n_slow ? (unsigned long long)c.slow[i] : 0ull);
}

/* A chain of RSP-based frames of several sizes. */
static NOINLINE int chain(int depth, int max)
{
	volatile char pad[40 + (depth % 3) * 200];
	pad[0] = (char)depth;
	if (depth == 0)
		check("chain", max);
	else
		sink += chain(depth - 1, max);
	return pad[0];
}

/* Frames whose CFA is RBP + 16 (a VLA needs a frame pointer), with another chain on top. */
static NOINLINE int vla(int depth, int n)
{
	volatile char buf[n];
	buf[0] = (char)n;
	if (depth == 0)
		sink += chain(5, MAX);
	else
		sink += vla(depth - 1, n + 16);
	return buf[0];
}

/* Through libc's own frames. */
static int compare_and_capture(const void *a, const void *b)
{
	static int once;
	if (!once++)
		check("qsort", MAX);
	return *(const int *)a - *(const int *)b;
}

static NOINLINE void through_libc(void)
{
	int v[32];
	for (int i = 0; i < 32; i++)
		v[i] = 31 - i;
	qsort(v, 32, sizeof(int), compare_and_capture);
}

static void *thread_main(void *arg)
{
	(void)arg;
	sink += chain(30, MAX);
	sink += vla(6, 24);
	free(memo);
	memo = NULL;
	return NULL;
}

/* Twins: equal frames, so the frames above them sit at the same addresses whichever called. */
static NOINLINE int twin_a(int depth)
{
	volatile char pad[64];
	pad[0] = 1;
	sink += chain(depth, MAX);
	return pad[0];
}

static NOINLINE int twin_b(int depth)
{
	volatile char pad[64];
	pad[0] = 2;
	sink += chain(depth, MAX);
	return pad[0];
}

static NOINLINE void alternate(void)
{
	for (int i = 0; i < 8; i++)
		sink += (i & 1 ? twin_b : twin_a)(6);
	for (int i = 0; i < 4; i++)
		sink += twin_a(6); /* the same stack again: walked from the memo */
}

/* A frame-pointer frame (a VLA) whose RBP - sp is its length's, under a chain of RSP frames. */
static NOINLINE int vla_under_chain(int n)
{
	volatile char buf[n];
	buf[0] = (char)n;
	sink += chain(4, MAX);
	return buf[0];
}

static NOINLINE int at_depth(int depth, int vla_len)
{
	volatile char pad[96];
	pad[0] = 1;
	if (depth)
		sink += at_depth(depth - 1, vla_len);
	else
		sink += vla_len ? vla_under_chain(vla_len) : chain(6, MAX);
	return pad[0];
}

static NOINLINE void moved(void)
{
	struct vrt_unwind_counts before, after;
	int fell_before = fell_back, compared_before = compared;
	vrt_unwind_counts(&before);
	for (int i = 0; i < 6; i++)
		sink += at_depth(1 + i % 3, 0); /* the same inner frames at three depths */
	for (int i = 0; i < 6; i++)
		sink += at_depth(2, 16 + 64 * (i % 2)); /* one depth, the VLA's length alternating */
	vrt_unwind_counts(&after);
	uint64_t moved_frames = after.moved - before.moved;
	/* each walk after the first starts at another depth: chain(6) and check's frames (9) in the
	 * first loop, chain(4)'s (7) in the second, at least */
	if (moved_frames < 5 * 9 + 5 * 7)
		failures++, fprintf(stderr, "FAIL moved: %llu frames taken moved from the last walk, want >= %d\n",
				    (unsigned long long)moved_frames, 5 * 9 + 5 * 7);
	if (fell_back != fell_before || compared - compared_before != 12)
		failures++, fprintf(stderr, "FAIL moved: %d of 12 walks handed to libunwind\n", fell_back - fell_before);
}

/* A VLA whose bottom lands at the same address whatever the caller's depth: its length grows by
 * what the caller's frame is shallower than the deepest seen (frames are 16-byte aligned), so the
 * frames above it sit at the same sps and return addresses while its RBP, and with it its CFA,
 * is the caller's. */
static uintptr_t deepest_rbp, landed;
static int landed_twice;

static NOINLINE int vla_landing(void)
{
	uintptr_t rbp = (uintptr_t)__builtin_frame_address(0);
	if (!deepest_rbp || rbp < deepest_rbp)
		deepest_rbp = rbp;
	volatile char buf[64 + (rbp - deepest_rbp)];
	buf[0] = 1;
	if (landed == (uintptr_t)&buf[0])
		landed_twice++;
	landed = (uintptr_t)&buf[0];
	sink += chain(3, MAX);
	return buf[0];
}

static NOINLINE int shallow_caller(void)
{
	volatile char pad[32];
	pad[0] = 1;
	sink += vla_landing();
	return pad[0];
}

static NOINLINE int deep_caller(void)
{
	volatile char pad[32 + 512];
	pad[0] = 2;
	sink += vla_landing();
	return pad[0];
}

static NOINLINE void same_sp_other_rbp(void)
{
	sink += deep_caller(); /* first: the deepest RBP is known before the walks compared */
	landed_twice = 0;
	int failed_before = failures;
	for (int i = 0; i < 6; i++)
		sink += (i & 1 ? deep_caller : shallow_caller)();
	if (landed_twice < 5)
		failures++, fprintf(stderr, "FAIL same sp, other rbp: the VLA landed at one address %d times of 5; the "
				    "case is not made\n", landed_twice);
	else if (failures != failed_before)
		fprintf(stderr, "(the walks above followed a frame-pointer frame by its sp and return address alone)\n");
}

static void on_signal(int sig)
{
	(void)sig;
	struct capture c;
	bool ignored;
	capture_both(&c, MAX, &ignored);
	/* __restore_rt's FDE is a signal frame: the walk must hand the stack over. */
	if (c.n_fast >= 0) {
		failures++;
		fprintf(stderr, "FAIL signal: the fast walk took a signal frame (%d frames)\n", c.n_fast);
	}
}

int main(void)
{
	if (!vrt_unwind_init(dlsym(RTLD_DEFAULT, "_dl_find_object"))) {
		fprintf(stderr, "FAIL init\n");
		return 1;
	}
	for (int depth = 0; depth < 70; depth += 3)
		sink += chain(depth, MAX);
	for (int max = 1; max < 12; max++)
		sink += chain(20, max); /* truncated: the same first frames */
	sink += vla(8, 8);
	through_libc();
	for (volatile int i = 0; i < 3; i++) /* volatile: not unrolled into three call sites */
		check("one site in a loop", MAX);
	vrt_unwind_forget();
	check("after a new epoch", MAX);
	alternate();
	moved();
	same_sp_other_rbp();
	pthread_t t;
	pthread_create(&t, NULL, thread_main, NULL);
	pthread_join(t, NULL);
	signal(SIGUSR1, on_signal);
	raise(SIGUSR1);

	/* The same again through dl_iterate_phdr (glibc < 2.35 has no _dl_find_object). */
	vrt_unwind_init(NULL);
	sink += chain(40, MAX);
	sink += vla(4, 32);
	through_libc();

	printf("%d stacks equal to libunwind's (%d of them the last walk's again), %d handed to libunwind, %d "
	       "different\n", compared, repeated, fell_back, failures);
	if (compared < 50)
		failures++, fprintf(stderr, "FAIL: only %d stacks were walked\n", compared);
	if (repeated < 5)
		failures++, fprintf(stderr, "FAIL: only %d stacks were known as the last walk's\n", repeated);
	free(memo);
	return failures ? 1 : 0;
}
