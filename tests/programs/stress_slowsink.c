/*
 * stress_slowsink.c - libstress_slowsink.so, preloaded after libvramtrace.so: the first
 * STRESS_SLOW_WRITES pwrite calls libvramtrace.so makes (its trace chunks) each take
 * STRESS_SLOW_MS longer, as on a disk that stalls. While one is stalled the collector drains no
 * thread buffer, so busy threads fill theirs whatever the machine's speed. The first
 * STRESS_SLOW_SKIP of its writes go through unstalled. Nothing else is touched.
 */
#undef _FILE_OFFSET_BITS /* pwrite and pwrite64 both defined here, as libc has them */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic long stalls_left = -1, skips_left = -1;

static void stall_if_ours(void *caller)
{
	if (atomic_load(&stalls_left) < 0) {
		const char *n = getenv("STRESS_SLOW_WRITES"), *k = getenv("STRESS_SLOW_SKIP");
		long want = n ? atol(n) : 0, skip = k ? atol(k) : 0, unset = -1;
		atomic_compare_exchange_strong(&skips_left, &unset, skip > 0 ? skip : 0);
		unset = -1;
		atomic_compare_exchange_strong(&stalls_left, &unset, want > 0 ? want : 0);
	}
	Dl_info info;
	if (atomic_load(&stalls_left) <= 0 || !dladdr(caller, &info) || !info.dli_fname ||
	    !strstr(info.dli_fname, "libvramtrace"))
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
	stall_if_ours(__builtin_return_address(0));
	return real(fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	static ssize_t (*real)(int, const void *, size_t, off_t);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "pwrite");
	stall_if_ours(__builtin_return_address(0));
	return real(fd, buf, n, off);
}
