/*
 * unwind_drained.c - sites whose stacks differ only in their innermost frames, each event
 * followed by a live-set query, for tests/e2e/test_unwind.py. The query returns once the
 * collector has drained this thread's buffer, which also fills the thread's stack cache with
 * the stack just written; so every event after the first is looked up in a cache that already
 * holds the stack before it, and a stack named by another stack's hash gets that stack's frames,
 * whatever the timing (without the queries the collector may not have run between two events).
 */
#include <cuda_runtime_api.h>

#include "prog.h"
#include "vramtrace/vramtrace.h"

static void drained(void)
{
	struct vramtrace_live_item items[4];
	if (!vramtrace_live_query || vramtrace_live_query(0, items, 4) < 0) {
		fprintf(stderr, "unwind_drained: run it under vramtrace\n");
		exit(2);
	}
}

SITE void first_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, MiB));
	drained();
	CHECK(cudaFree(p));
	drained();
}

SITE void second_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 2 * MiB));
	drained();
	CHECK(cudaFree(p));
	drained();
}

SITE void deeper_site(void) { first_site(); }

int main(void)
{
	for (int i = 0; i < 3; i++) {
		first_site();
		second_site();
		deeper_site();
	}
	return 0;
}
