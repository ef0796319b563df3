/*
 * thread_rename.c - a thread that renames itself after its first events (as threads often do
 * right after they start), for the collector's thread names (tests/e2e/test_static_and_threads.py).
 * With tests/programs/step_clockshim.c preloaded after libvramtrace.so:
 *
 *   thread_rename SECONDS
 *
 * allocates once; asks vramtrace for its live set (the collector drains first: the first event
 * is written and the thread's name read, "thread_rename"); renames itself "renamed"; allocates
 * again, asks again; then moves the clock SECONDS ahead (stepclock_advance) and allocates once
 * more. The collector reads a thread's name again at its first event 2 s or more after the last
 * read, so the trace names the thread "renamed" when SECONDS >= 2, "thread_rename" otherwise.
 * Prints "thread_rename: tid=T seconds=S".
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "prog.h"
#include "vramtrace/vramtrace.h"

SITE void named_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, MiB));
	CHECK(cudaFree(p));
}

static void drained(void)
{
	struct vramtrace_live_item items[4];
	if (!vramtrace_live_query || vramtrace_live_query(0, items, 4) < 0) {
		fprintf(stderr, "thread_rename: run it under vramtrace\n");
		exit(2);
	}
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 3;
	void (*advance)(int64_t);
	*(void **)&advance = dlsym(RTLD_DEFAULT, "stepclock_advance");
	if (!advance) {
		fprintf(stderr, "thread_rename: run it with libstep_clockshim.so preloaded\n");
		return 2;
	}
	named_site();
	drained();
	prctl(PR_SET_NAME, "renamed");
	named_site();
	drained();
	advance((int64_t)seconds * 1000000000);
	named_site();
	printf("thread_rename: tid=%d seconds=%d\n", (int)getpid(), seconds);
	return 0;
}
