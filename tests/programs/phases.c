/*
 * phases.c - phases and marks through the C API (include/vramtrace/vramtrace.h: weak symbols,
 * which libvramtrace.so defines when it is preloaded), with every size fixed in advance, for
 * `leaks --phase`, `report --until-mark` and `diff --at` (tests/e2e/test_phases.py).
 *
 *   phases [STEPS]   (default 4)
 *
 *   setup_site:         4 MiB, kept; before any phase
 *   phase "step" x STEPS; invocation i (0-based) allocates step_scratch_site 2 MiB (freed before
 *                       it exits) and step_leak_site 1 MiB (kept): live at its entry 4 MiB + i MiB,
 *                       at its exit 4 MiB + (i + 1) MiB. The scratch is allocated inside a nested
 *                       "step" (as a recursive call would): part of the outermost invocation
 *   phase "eval", after every second step: eval_site 512 KiB, freed inside
 *   mark "half" after step STEPS / 2, then 20 ms without any event (so that a time between the
 *                       mark and the next event is unambiguous)
 *
 * Prints "phases: steps=S held_bytes=B" at the end.
 */
#include <cuda_runtime_api.h>
#include <time.h>

#include "prog.h"
#include "vramtrace/vramtrace.h"

static void enter(const char *name)
{
	if (vramtrace_phase_enter)
		vramtrace_phase_enter(name);
}

static void leave(const char *name)
{
	if (vramtrace_phase_exit)
		vramtrace_phase_exit(name);
}

SITE void *setup_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 4 * MiB));
	return p;
}

SITE void step_scratch_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 2 * MiB));
	CHECK(cudaFree(p));
}

SITE void *step_leak_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
	return p;
}

SITE void eval_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 512 * KiB));
	CHECK(cudaFree(p));
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 4;
	CHECK(cudaSetDevice(0));
	setup_site();
	for (int i = 0; i < steps; i++) {
		enter("step");
		enter("step");
		step_scratch_site();
		leave("step");
		step_leak_site();
		leave("step");
		if (i % 2 == 1) {
			enter("eval");
			eval_site();
			leave("eval");
		}
		if (i + 1 == steps / 2) {
			if (vramtrace_mark)
				vramtrace_mark("half");
			nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
		}
	}
	printf("phases: steps=%d held_bytes=%zu\n", steps, 4 * MiB + (size_t)steps * MiB);
	return 0;
}
