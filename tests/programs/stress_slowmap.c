/*
 * stress_slowmap.c - libstress_slowmap.so, preloaded after libvramtrace.so: in the process it
 * was loaded into (not in a forked child), every anonymous mapping vramtrace's collector thread
 * (named "vramtrace") asks for takes 200 ms more. A drain that grows its arrays is then halfway
 * through for that long, and the children forked meanwhile (quick: they are not slowed) get the
 * collector's state as it was halfway (a fork waits for the collector's fork sections, not for a
 * drain). Nothing else is touched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "stress_collector_thread.h"

static pid_t loaded_in;

__attribute__((constructor)) static void remember(void) { loaded_in = getpid(); }

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*real)(void *, size_t, int, int, int, off_t);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "mmap");
	if ((flags & MAP_ANONYMOUS) && getpid() == loaded_in && stress_is_collector_thread()) {
		struct timespec pause = { 0, 200 * 1000 * 1000 };
		nanosleep(&pause, NULL);
	}
	return real(addr, len, prot, flags, fd, off);
}
