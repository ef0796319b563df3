/*
 * steps_burst.c - a loop that keeps two buffers a step from one line, with no phase or mark, for
 * `leaks` without phases (tests/e2e/test_leaks_without_phases.py): a step's survivors come
 * together, and the step is one step, not two.
 *
 *   steps_burst [STEPS]   (default 10)
 *
 * Run with tests/programs/step_clockshim.c preloaded after libvramtrace.so: each step takes
 * 10 s (STEP_NS) on the clock vramtrace reads (stepclock_advance), without sleeping.
 *   setup:  a step (below, from the same stacks), then 100 pairs of churn_site 4 KiB made and
 *           freed, then one step's time: the setup's buffers are born before total memory's
 *           first low point (the scratch's free), so they are no step
 *   step i: scratch_site 64 MiB (freed at the step's end: total memory's low point comes after
 *           it), keep_site 1 MiB twice (kept), a scratch of 256 KiB made and freed by keep_site
 *           between its two buffers (a tensor the step does not keep); the step's time passes,
 *           except after step STEPS / 2: the next step comes at once (a loop catching up).
 * Prints "steps_burst: steps=S kept_bytes=B step_ns=N".
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>

#include "prog.h"

#define STEP_NS ((int64_t)10 * 1000000000)
#define KEPT_PER_STEP 2

static void *kept[4096];
static int nkept;

SITE void *scratch_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 64 * MiB));
	return p;
}

SITE void keep_site(void)
{
	for (int k = 0; k < KEPT_PER_STEP; k++) {
		void *tmp;
		CHECK(cudaMalloc(&kept[nkept++], MiB));
		CHECK(cudaMalloc(&tmp, 256 * KiB));
		CHECK(cudaFree(tmp));
	}
}

SITE void churn_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 4 * KiB));
	CHECK(cudaFree(p));
}

/* The setup is a step that churns afterwards: its buffers come from the same stack as every
 * step's. */
SITE void step(int setup)
{
	void *scratch = scratch_site();
	keep_site();
	CHECK(cudaFree(scratch));
	for (int i = 0; setup && i < 100; i++)
		churn_site();
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 10;
	if (steps < 1 || (steps + 1) * KEPT_PER_STEP > (int)(sizeof(kept) / sizeof(kept[0])))
		return 2;
	void (*advance)(int64_t);
	*(void **)&advance = dlsym(RTLD_DEFAULT, "stepclock_advance");
	if (!advance) {
		fprintf(stderr, "steps_burst: run it with libstep_clockshim.so preloaded\n");
		return 2;
	}
	for (int i = -1; i < steps; i++) { /* -1: the setup */
		step(i < 0);
		if (i != steps / 2)
			advance(STEP_NS);
	}
	printf("steps_burst: steps=%d kept_bytes=%zu step_ns=%lld\n", steps, (size_t)nkept * MiB, (long long)STEP_NS);
	return 0;
}
