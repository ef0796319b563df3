/*
 * stress_crash.c - dies in the middle of allocating: what does the trace still hold?
 *
 *   stress_crash kill|abort MILLISECONDS [KEEP_EVERY [PACE_US]]
 *
 * Allocation i (i = 0, 1, ...) is 4096 + 8 * i bytes from crash_site; every KEEP_EVERY-th
 * (default 10) is kept, the others freed at once. (Many survivors make large checkpoints, which
 * wrap a small ring within seconds.) Every 1000 allocations the program prints "made N T" (N allocations
 * so far, T = CLOCK_MONOTONIC in microseconds); after MILLISECONDS it prints "dying N T" and
 * raises SIGKILL ("kill": nothing in the process runs after it) or calls abort() ("abort":
 * vramtrace's fatal-signal handler flushes first). Sizes are unique, so the live set at death
 * names exactly which allocations the trace holds: kept i must be a prefix of the run. The
 * "dying" line also gives the allocations, frees and bytes kept so far.
 * Every 1000 allocations it waits while more than 20000 of its events are still in vramtrace's
 * thread buffers (stress_throttle.h), so with a runtime that costs nothing (stress_fastrt.c)
 * nothing is dropped and what a SIGKILL loses is what the collector had not yet written.
 *
 * With PACE_US > 0 it sleeps PACE_US microseconds after every allocation instead, prints
 * "made N T" after every 10th (T taken once allocation N has returned) and never throttles
 * (a status request wakes the collector): then nothing but the collector's timer writes events
 * to the file (a 1 MiB events chunk takes minutes to fill at that pace).
 */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "prog.h"
#include "stress_throttle.h"

static long long now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

SITE void *crash_site(size_t size)
{
	void *p;
	CHECK(cudaMalloc(&p, size));
	return p;
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "kill") && strcmp(argv[1], "abort"))) {
		fprintf(stderr, "usage: stress_crash kill|abort MILLISECONDS [KEEP_EVERY [PACE_US]]\n");
		return 2;
	}
	long long end = now_us() + atoll(argv[2]) * 1000;
	long keep_every = argc > 3 ? atol(argv[3]) : 10;
	long pace_us = argc > 4 ? atol(argv[4]) : 0;
	if (keep_every < 1)
		keep_every = 1;
	CHECK(cudaSetDevice(0));
	long i = 0;
	for (; pace_us > 0; i++) {
		void *p = crash_site(4096 + 8 * (size_t)i);
		long long t = now_us();
		if (i % 10 == 0) {
			printf("made %ld %lld\n", i, t);
			fflush(stdout);
		}
		if (i % keep_every)
			CHECK(cudaFree(p));
		if (t >= end) {
			i++;
			break;
		}
		nanosleep(&(struct timespec){ 0, pace_us * 1000 }, NULL);
	}
	for (; pace_us <= 0; i++) {
		if (i % 1000 == 0) {
			long long t = now_us();
			if (t >= end)
				break;
			printf("made %ld %lld\n", i, t);
			fflush(stdout);
			stress_throttle(2 * (unsigned long long)i - (unsigned long long)(i / keep_every), 20000);
		}
		void *p = crash_site(4096 + 8 * (size_t)i);
		if (i % keep_every)
			CHECK(cudaFree(p));
	}
	unsigned long long held = 0;
	for (long k = 0; k < i; k += keep_every)
		held += 4096 + 8 * (unsigned long long)k;
	printf("dying %ld %lld allocs=%ld frees=%ld held_bytes=%llu\n", i, now_us(), i, i - (i + keep_every - 1) / keep_every,
	       held);
	fflush(stdout);
	if (!strcmp(argv[1], "abort"))
		abort();
	raise(SIGKILL);
	return 4;
}
