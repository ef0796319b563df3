/*
 * ring_peak_at_start.c - a flight-recorder ring whose retained window starts at its peak, for
 * tests/e2e/test_flight_recorder.py: the replay of a wrapped ring starts from a checkpoint's
 * items, and here nothing after them holds more, so the peak is set inside that checkpoint.
 *
 *   ring_peak_at_start MARKS [distinct]
 *
 * keep_site allocates KEPT x 1 MiB; then MARKS marks (vramtrace_mark), named from 4096 names
 * in a pseudo-random order so that they compress badly and wrap a 4 MiB ring with a few million
 * events (with `distinct`, each its own name: a string table that outgrows VRT_ID_SLACK in the
 * ring's first lap); then half of the kept memory is freed. Prints
 *   ring_peak_at_start: kept=N bytes=B
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "prog.h"
#include "stress_throttle.h"
#include "vramtrace/vramtrace.h"

#define KEPT 64
#define NAMES 4096

SITE void *keep_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, MiB));
	return p;
}

int main(int argc, char **argv)
{
	long marks = argc > 1 ? atol(argv[1]) : 3000000;
	int distinct = argc > 2 && !strcmp(argv[2], "distinct");
	char name[32];
	static char names[NAMES][8];
	for (int i = 0; i < NAMES; i++)
		snprintf(names[i], sizeof(names[i]), "m%04d", i);
	void *kept[KEPT];
	CHECK(cudaSetDevice(0));
	for (int i = 0; i < KEPT; i++)
		kept[i] = keep_site();
	uint64_t s = 0x2545f4914f6cdd1dull;
	for (long i = 0; i < marks && vramtrace_mark; i++) {
		if (i % 10000 == 0 && i)
			stress_throttle((unsigned long long)(KEPT + i), 200000);
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		if (distinct)
			snprintf(name, sizeof(name), "mark-%ld", i);
		vramtrace_mark(distinct ? name : names[s % NAMES]);
	}
	for (int i = 0; i < KEPT / 2; i++)
		CHECK(cudaFree(kept[i]));
	printf("ring_peak_at_start: kept=%d bytes=%zu\n", KEPT, KEPT * MiB);
	return 0;
}
