/*
 * stress_failmap.c - libstress_failmap.so, preloaded after libvramtrace.so: the first anonymous
 * mapping of exactly STRESS_FAILMAP_LEN bytes that vramtrace's collector thread (named
 * "vramtrace") asks for fails with ENOMEM, once (every one with STRESS_FAILMAP_ALWAYS=1), and
 * says so on stderr the first time ("stress_failmap: failed a mapping of N bytes"), so a test
 * knows the failure it meant happened. Nothing else is touched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "stress_collector_thread.h"

static atomic_bool failed_once;
static int said; /* the collector thread's alone */

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*real)(void *, size_t, int, int, int, off_t);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "mmap");
	const char *want = getenv("STRESS_FAILMAP_LEN");
	if (want && (flags & MAP_ANONYMOUS) && len == strtoull(want, NULL, 10) && stress_is_collector_thread() &&
	    (!atomic_exchange(&failed_once, 1) || getenv("STRESS_FAILMAP_ALWAYS"))) {
		char line[80];
		int n = snprintf(line, sizeof(line), "stress_failmap: failed a mapping of %zu bytes\n", len);
		if (!said && write(2, line, (size_t)n) < 0)
			(void)0;
		said = 1;
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return real(addr, len, prot, flags, fd, off);
}
