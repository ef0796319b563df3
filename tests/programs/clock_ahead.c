/*
 * clock_ahead.c - events that no drain of the collector takes: with
 * tests/programs/step_clockshim.c preloaded after libvramtrace.so, the main thread's clock jumps
 * an hour ahead (stepclock_advance_thread) after BEFORE allocations, and the AFTER allocations
 * that follow are stamped later than any drain's horizon. At exit they are still in the thread's
 * buffer: the trace must count them lost, not leave them out silently
 * (tests/e2e/test_stress.py).
 *
 *   clock_ahead [BEFORE AFTER]   (default 2 3)
 *
 * Prints "clock_ahead: before=B after=A".
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>

#include "prog.h"

SITE void *kept_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, MiB));
	return p;
}

int main(int argc, char **argv)
{
	int before = argc > 2 ? atoi(argv[1]) : 2, after = argc > 2 ? atoi(argv[2]) : 3;
	void (*advance_thread)(int64_t);
	*(void **)&advance_thread = dlsym(RTLD_DEFAULT, "stepclock_advance_thread");
	if (!advance_thread) {
		fprintf(stderr, "clock_ahead: run it with libstep_clockshim.so preloaded\n");
		return 2;
	}
	for (int i = 0; i < before; i++)
		kept_site();
	advance_thread((int64_t)3600 * 1000000000);
	for (int i = 0; i < after; i++)
		kept_site();
	printf("clock_ahead: before=%d after=%d\n", before, after);
	return 0;
}
