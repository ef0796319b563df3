/*
 * stress_throttle.h - keeps a program that allocates faster than vramtrace's collector can
 * write (a runtime that costs nothing, tests/programs/stress_fastrt.c) from dropping events.
 *
 * stress_throttle(made, in_flight) asks the process's own control socket ("\0vramtrace.<pid>",
 * a status request) how many events the collector has taken in, and asks again - a handshake,
 * no sleep - while more than in_flight of the `made` events so far are still waiting in the
 * thread buffers. Without vramtrace (no socket), or once it no longer takes events in (a write
 * failed and it disabled itself: "mode off"), it returns at once. Dropped events are counted
 * and tested elsewhere (tests/e2e/test_stress.py); programs using this want an exact trace.
 */
#ifndef VRT_TEST_STRESS_THROTTLE_H
#define VRT_TEST_STRESS_THROTTLE_H

#define VRT_CTL_CLIENT
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vramtrace/control.h>

/* Events the collector has taken in, from its status line; -1 without vramtrace or while it
 * is not recording. */
static long long stress_events_taken(void)
{
	struct vrt_ctl_msg reply;
	if (vrt_ctl_request((int)getpid(), VRT_CTL_STATUS, NULL, &reply, 10000) || reply.status)
		return -1;
	if (!strstr(reply.payload, " mode full "))
		return -1;
	const char *p = strstr(reply.payload, " events ");
	return p ? atoll(p + 8) : -1;
}

static void stress_throttle(unsigned long long made, unsigned long long in_flight)
{
	long long taken;
	while ((taken = stress_events_taken()) >= 0 && made > (unsigned long long)taken + in_flight)
		;
}

#endif
