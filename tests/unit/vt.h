/* SPDX-License-Identifier: MIT */
/*
 * A tiny test harness: checks that report and go on, test functions, and the closing line
 * "N passed, N failed" that test runners read. No dependencies.
 *
 *   static void test_something(void) { VT_CHECK(x == 1); VT_EQ(a, b); }
 *   int main(void) { VT_RUN(test_something); return vt_summary(); }
 */
#ifndef VRT_TESTS_VT_H
#define VRT_TESTS_VT_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int vt_tests_passed, vt_tests_failed;
static unsigned long vt_check_failures; /* in the current test */
static unsigned long vt_checks;

/* Stop printing after this many failures in one test; they are usually one cause. */
#define VT_MAX_REPORTS 20

static inline void vt_report(const char *file, int line, const char *fmt, ...)
{
	if (++vt_check_failures > VT_MAX_REPORTS)
		return;
	va_list ap;
	fprintf(stderr, "  %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

#define VT_CHECK(cond)                                                        \
	do {                                                                  \
		vt_checks++;                                                  \
		if (!(cond))                                                  \
			vt_report(__FILE__, __LINE__, "check failed: %s", #cond); \
	} while (0)

#define VT_CHECKF(cond, ...)                                        \
	do {                                                        \
		vt_checks++;                                        \
		if (!(cond))                                        \
			vt_report(__FILE__, __LINE__, __VA_ARGS__); \
	} while (0)

#define VT_EQ(a, b)                                                                                      \
	do {                                                                                             \
		uint64_t vt_a_ = (uint64_t)(a), vt_b_ = (uint64_t)(b);                                   \
		vt_checks++;                                                                             \
		if (vt_a_ != vt_b_)                                                                      \
			vt_report(__FILE__, __LINE__, "%s == %s: 0x%" PRIx64 " (%" PRId64 ") != 0x%" PRIx64 \
				  " (%" PRId64 ")", #a, #b, vt_a_, (int64_t)vt_a_, vt_b_, (int64_t)vt_b_);    \
	} while (0)

/* Fatal inside a test: report and return from the test function. */
#define VT_REQUIRE(cond)                                                              \
	do {                                                                          \
		vt_checks++;                                                          \
		if (!(cond)) {                                                        \
			vt_report(__FILE__, __LINE__, "requirement failed: %s", #cond); \
			return;                                                       \
		}                                                                     \
	} while (0)

#define VT_RUN(fn)                                                                       \
	do {                                                                             \
		vt_check_failures = 0;                                                   \
		fn();                                                                    \
		if (vt_check_failures) {                                                 \
			vt_tests_failed++;                                               \
			printf("FAIL %s (%lu failed checks)\n", #fn, vt_check_failures); \
		} else {                                                                 \
			vt_tests_passed++;                                               \
			printf("ok   %s\n", #fn);                                        \
		}                                                                        \
		fflush(stdout);                                                          \
	} while (0)

static inline int vt_summary(void)
{
	printf("%lu checks\n%d passed, %d failed\n", vt_checks, vt_tests_passed, vt_tests_failed);
	return vt_tests_failed ? 1 : 0;
}

/* Deterministic pseudo-random numbers (xorshift64*), so failures reproduce. */
static inline uint64_t vt_rand(uint64_t *state)
{
	uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ull;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545f4914f6cdd1dull;
}

#endif /* VRT_TESTS_VT_H */
