/*
 * stress_churn.c - a long allocation churn from many sites with long-lived survivors spread over
 * the whole run, for the flight recorder (tests/e2e/test_flight_recorder.py): the ring wraps
 * many times, and every survivor must still be known at the end, with its stack.
 *
 *   stress_churn ROUNDS KEEP_EVERY
 *
 * Round i allocates from one of SITES site functions (site_00 .. site_15, chosen by a fixed
 * pseudo-random sequence) a pseudo-random size of 1..256 KiB; every KEEP_EVERY-th allocation
 * is kept to the end (a survivor), the others are freed at once. Many survivors make every
 * periodic checkpoint (the whole live set, with stacks) large, which wraps the ring sooner.
 * Every 10000 rounds it waits while more than 200000 of its events are still in vramtrace's
 * thread buffers (stress_throttle.h): with a runtime that costs nothing (stress_fastrt.c) it
 * would otherwise outrun the collector and drop events (counted, but then the live set is not
 * exact), which is what tests/e2e/test_stress.py's lossy runs are about, not this program.
 * Output, one line per site that keeps something, then a total:
 *   site site_07 count=C bytes=B
 *   stress_churn: rounds=R allocs=R frees=F held_count=N held_bytes=B
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "prog.h"
#include "stress_throttle.h"

#define SITES 16

#define DEFINE_SITE(n)                                      \
	SITE void *site_##n(size_t size)                    \
	{                                                   \
		void *p;                                    \
		CHECK(cudaMalloc(&p, size));                \
		return p;                                   \
	}
DEFINE_SITE(00) DEFINE_SITE(01) DEFINE_SITE(02) DEFINE_SITE(03)
DEFINE_SITE(04) DEFINE_SITE(05) DEFINE_SITE(06) DEFINE_SITE(07)
DEFINE_SITE(08) DEFINE_SITE(09) DEFINE_SITE(10) DEFINE_SITE(11)
DEFINE_SITE(12) DEFINE_SITE(13) DEFINE_SITE(14) DEFINE_SITE(15)

static void *(*const sites[SITES])(size_t) = {
	site_00, site_01, site_02, site_03, site_04, site_05, site_06, site_07,
	site_08, site_09, site_10, site_11, site_12, site_13, site_14, site_15,
};

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 100000;
	long keep_every = argc > 2 ? atol(argv[2]) : 100;
	if (rounds < 1 || keep_every < 1) {
		fprintf(stderr, "usage: stress_churn ROUNDS KEEP_EVERY\n");
		return 2;
	}
	CHECK(cudaSetDevice(0));
	uint64_t count[SITES] = { 0 }, bytes[SITES] = { 0 }, s = 0x2545f4914f6cdd1dull, frees = 0;
	for (long i = 0; i < rounds; i++) {
		if (i % 10000 == 0 && i)
			stress_throttle(2 * (unsigned long long)i - (unsigned long long)(i / keep_every), 200000);
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		int k = (int)(s % SITES);
		size_t size = 1 + (size_t)((s >> 8) % (256 * KiB));
		void *p = sites[k](size);
		if (i % keep_every == keep_every / 2) {
			count[k]++;
			bytes[k] += size;
		} else {
			CHECK(cudaFree(p));
			frees++;
		}
	}
	uint64_t held = 0, n = 0;
	for (int k = 0; k < SITES; k++)
		if (count[k]) {
			printf("site site_%02d count=%llu bytes=%llu\n", k, (unsigned long long)count[k],
			       (unsigned long long)bytes[k]);
			held += bytes[k];
			n += count[k];
		}
	printf("stress_churn: rounds=%ld allocs=%ld frees=%llu held_count=%llu held_bytes=%llu\n", rounds, rounds,
	       (unsigned long long)frees, (unsigned long long)n, (unsigned long long)held);
	return 0;
}
