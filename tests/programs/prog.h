/*
 * prog.h - shared by the end-to-end test programs (tests/programs/).
 *
 * Every program makes allocations of fixed sizes from named, non-inlined functions ("sites"), so
 * tests/e2e can assert exact byte counts per device and kind, and the function names in the
 * recorded stacks. A failing CUDA call is a broken test double or program, never an expected
 * outcome: it prints one line and exits 3 (a code no program otherwise uses).
 */
#ifndef VRT_TEST_PROG_H
#define VRT_TEST_PROG_H

#include <stdio.h>
#include <stdlib.h>

#define SITE __attribute__((noinline, used))

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

#define CHECK(call)                                                                                       \
	do {                                                                                              \
		long rc_ = (long)(call);                                                                  \
		if (rc_ != 0) {                                                                           \
			fprintf(stderr, "%s:%d: %s returned %ld\n", __FILE__, __LINE__, #call, rc_);      \
			exit(3);                                                                          \
		}                                                                                         \
	} while (0)

#endif /* VRT_TEST_PROG_H */
