/*
 * stress_collector_thread.h - for the shims that act on vramtrace's own mappings
 * (stress_slowmap.c, stress_failmap.c): whether the calling thread is vramtrace's collector.
 */
#ifndef VRT_TEST_STRESS_COLLECTOR_THREAD_H
#define VRT_TEST_STRESS_COLLECTOR_THREAD_H

#include <pthread.h>
#include <string.h>

/* By the thread's name ("vramtrace"), not the caller: under ASan the caller of mmap is the
 * sanitizer's interceptor (docs/RELIABILITY.md, F33); the collector thread maps nothing but
 * vramtrace's. */
static inline int stress_is_collector_thread(void)
{
	char name[16] = "";
	return !pthread_getname_np(pthread_self(), name, sizeof(name)) && !strcmp(name, "vramtrace");
}

#endif
