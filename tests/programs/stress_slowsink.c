/*
 * stress_slowsink.c - libstress_slowsink.so, preloaded after libvramtrace.so: the first
 * STRESS_SLOW_WRITES pwrite calls libvramtrace.so makes (its trace chunks) each take
 * STRESS_SLOW_MS longer, as on a disk that stalls. While one is stalled the collector drains no
 * thread buffer, so busy threads fill theirs whatever the machine's speed. The first
 * STRESS_SLOW_SKIP of its writes go through unstalled. Nothing else is touched. Works under
 * ASan too (its interceptor between the preload and this library).
 */
#undef _FILE_OFFSET_BITS /* pwrite and pwrite64 both defined here, as libc has them */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic long stalls_left = -1, skips_left = -1;

/* Whether libvramtrace.so made this write: its caller, or under ASan its caller's caller (the
 * sanitizer's pwrite interceptor, first in LD_PRELOAD, calls this one). */
static bool from_vramtrace(void)
{
	void *frames[8];
	int n = backtrace(frames, 8);
	for (int i = 0; i < n; i++) {
		Dl_info info;
		if (dladdr(frames[i], &info) && info.dli_fname && strstr(info.dli_fname, "libvramtrace"))
			return true;
	}
	return false;
}

static void stall_if_ours(void)
{
	if (atomic_load(&stalls_left) < 0) {
		const char *n = getenv("STRESS_SLOW_WRITES"), *k = getenv("STRESS_SLOW_SKIP");
		long want = n ? atol(n) : 0, skip = k ? atol(k) : 0, unset = -1;
		atomic_compare_exchange_strong(&skips_left, &unset, skip > 0 ? skip : 0);
		unset = -1;
		atomic_compare_exchange_strong(&stalls_left, &unset, want > 0 ? want : 0);
	}
	if (atomic_load(&stalls_left) <= 0 || !from_vramtrace())
		return;
	if (atomic_load(&skips_left) > 0 && atomic_fetch_sub(&skips_left, 1) > 0)
		return; /* STRESS_SLOW_SKIP: the first writes (the file's header) go through */
	if (atomic_fetch_sub(&stalls_left, 1) <= 0)
		return;
	const char *ms = getenv("STRESS_SLOW_MS");
	long wait = ms ? atol(ms) : 300;
	struct timespec ts = { wait / 1000, (wait % 1000) * 1000000L };
	while (nanosleep(&ts, &ts))
		;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	static ssize_t (*real)(int, const void *, size_t, off_t);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "pwrite64");
	stall_if_ours();
	return real(fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	static ssize_t (*real)(int, const void *, size_t, off_t);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "pwrite");
	stall_if_ours();
	return real(fd, buf, n, off);
}
