/*
 * no_threads.c - libno_threads.so, preloaded into the analyzer by test_passes.py: every
 * pthread_create fails (EAGAIN), as under a process limit, so the trace reader works without its
 * second thread and the replay decodes every chunk itself.
 */
#include <errno.h>
#include <pthread.h>

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg)
{
	(void)thread;
	(void)attr;
	(void)start;
	(void)arg;
	return EAGAIN;
}
