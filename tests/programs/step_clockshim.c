/*
 * step_clockshim.c - libstep_clockshim.so, preloaded after libvramtrace.so for
 * tests/programs/steps_burst.c: a CLOCK_MONOTONIC that the program moves forward on purpose
 * (stepclock_advance, found with dlsym), so a loop's step takes exactly as long as the test says
 * on any machine, however loaded. Every thread sees the same offset, as after a real jump of
 * the clock: vramtrace's collector takes only events stamped before its own reading of the clock
 * (preload/collector.c, the horizon), so a clock one thread alone saw move would hold that
 * thread's events back for ever. The jump cuts short any wait on the clock that spans it; the
 * program makes none. stepclock_advance_thread moves the calling thread's clock alone, to make
 * exactly that: events no drain will take (tests/programs/clock_ahead.c).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static _Atomic int64_t offset_ns;
static __thread int64_t thread_offset_ns;

void stepclock_advance(int64_t ns) { offset_ns += ns; }

void stepclock_advance_thread(int64_t ns) { thread_offset_ns += ns; }

int clock_gettime(clockid_t id, struct timespec *ts)
{
	if (!real_clock_gettime) {
		*(void **)&real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
		if (!real_clock_gettime)
			abort();
	}
	int64_t offset = offset_ns + thread_offset_ns; /* read before the clock: no reading runs ahead of a later one */
	int rc = real_clock_gettime(id, ts);
	if (rc || id != CLOCK_MONOTONIC || !offset)
		return rc;
	int64_t ns = (int64_t)ts->tv_nsec + offset % 1000000000;
	ts->tv_sec += offset / 1000000000 + ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
	return rc;
}
