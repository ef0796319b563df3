/*
 * stress_nested.c - signal handlers nested DEPTH deep, each calling CUDA while the level it
 * interrupted is in the middle of writing vramtrace's buffer.
 *
 *   stress_nested ITERATIONS DEPTH
 *
 * Run with tests/programs/stress_clockshim.c preloaded after libvramtrace.so: it raises the
 * level-1 signal from inside vramtrace's buffer write every third clock_gettime of the main
 * thread, and the level d+1 signal from inside level d's write when level d asks. The handler
 * of level d (signal SIGRTMIN + d - 1) keeps SLOTS slots: an empty slot gets cudaMalloc of
 * level_bytes(d, slot) (level_site), a full one cudaFree; before a cudaMalloc it asks for the
 * next level. The main thread makes ITERATIONS cudaMalloc/cudaFree pairs of 64 KiB
 * (main_site), then keeps 1 MiB (main_keep_site).
 *
 * Output (one line; the per-level counts for d = 1..DEPTH):
 *   stress_nested: depth=D main_allocs=M main_frees=N held_bytes=B allocs1=A frees1=F ...
 * held_bytes: what the handlers still hold, plus main_keep_site's 1 MiB.
 * Sizes: level_bytes(d, k) = 4096 * d + 256 * k + 128 (d <= 16, k < SLOTS): distinct from main's.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "prog.h"

#define SLOTS 4
#define MAX_DEPTH 16

static void (*arm)(int every, int depth);
static void (*set_level)(int d);
static void (*nest)(int d);

static void *slot[MAX_DEPTH + 1][SLOTS];
static volatile long allocs[MAX_DEPTH + 1], frees[MAX_DEPTH + 1], calls[MAX_DEPTH + 1];
static int depth;

static size_t level_bytes(int d, int k) { return 4096 * (size_t)d + 256 * (size_t)k + 128; }

static void handler_failed(void)
{
	static const char line[] = "stress_nested: a handler's CUDA call failed\n";
	ssize_t ignored = write(2, line, sizeof(line) - 1);
	(void)ignored;
	_exit(3);
}

SITE void level_site(int d, int k)
{
	if (cudaMalloc(&slot[d][k], level_bytes(d, k)) != cudaSuccess)
		handler_failed();
}

static void handler(int sig)
{
	int saved = errno;
	int d = sig - SIGRTMIN + 1;
	set_level(d);
	int k = (int)(calls[d]++ % SLOTS);
	if (slot[d][k]) {
		if (cudaFree(slot[d][k]) != cudaSuccess)
			handler_failed();
		slot[d][k] = NULL;
		frees[d]++;
	} else {
		if (d < depth)
			nest(d);
		level_site(d, k);
		allocs[d]++;
	}
	set_level(d - 1);
	errno = saved;
}

SITE void main_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 64 * KiB));
	CHECK(cudaFree(p));
}

SITE void main_keep_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
}

int main(int argc, char **argv)
{
	long iterations = argc > 1 ? atol(argv[1]) : 2000;
	depth = argc > 2 ? atoi(argv[2]) : 3;
	if (depth < 1 || depth > MAX_DEPTH || SIGRTMIN + depth - 1 > SIGRTMAX)
		return 2;
	*(void **)&arm = dlsym(RTLD_DEFAULT, "clockshim_arm");
	*(void **)&set_level = dlsym(RTLD_DEFAULT, "clockshim_level");
	*(void **)&nest = dlsym(RTLD_DEFAULT, "clockshim_nest");
	if (!arm || !set_level || !nest) {
		fprintf(stderr, "stress_nested: preload libstress_clockshim.so\n");
		return 2;
	}
	CHECK(cudaSetDevice(0));
	void *warm;
	CHECK(cudaMalloc(&warm, 4096)); /* runtime and driver initialized outside any handler */
	CHECK(cudaFree(warm));
	for (int d = 1; d <= depth; d++) {
		struct sigaction sa = { .sa_handler = handler };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGRTMIN + d - 1, &sa, NULL);
	}
	arm(3, depth);
	for (long i = 0; i < iterations; i++)
		main_site();
	arm(0, 0);
	main_keep_site();
	size_t held = MiB;
	for (int d = 1; d <= depth; d++)
		for (int k = 0; k < SLOTS; k++)
			if (slot[d][k])
				held += level_bytes(d, k);
	printf("stress_nested: depth=%d main_allocs=%ld main_frees=%ld held_bytes=%zu", depth, iterations + 2,
	       iterations + 1, held);
	for (int d = 1; d <= depth; d++)
		printf(" allocs%d=%ld frees%d=%ld", d, (long)allocs[d], d, (long)frees[d]);
	printf("\n");
	return 0;
}
