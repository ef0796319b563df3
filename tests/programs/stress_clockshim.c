/*
 * stress_clockshim.c - libstress_clockshim.so, preloaded after libvramtrace.so for
 * tests/programs/stress_nested.c: a clock_gettime that raises a signal in the thread that called
 * it, on purpose. vramtrace stamps an allocation's event with clock_gettime after reserving its
 * space in the thread's buffer, so a signal raised there is delivered while that buffer is
 * mid-write: exactly the interruption the signal path must survive, made deterministic.
 *
 * The program arms it with clockshim_arm(every, depth) (found with dlsym):
 *  - outside any handler, every `every`-th call raises the level-1 signal;
 *  - inside the handler at level d < depth that asked for it (clockshim_nest(d)), the next
 *    call raises the level d+1 signal: a handler interrupted mid-write by the next handler.
 * Level d's signal is SIGRTMIN + d - 1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEPTH 16

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static volatile int armed_every, armed_depth;
static volatile int level; /* the handler level running now (the program keeps it) */
static volatile int nest_asked[MAX_DEPTH + 1];
static volatile long calls;
static volatile pid_t armed_thread; /* only the thread that armed it is interrupted */

static pid_t gettid_(void) { return (pid_t)syscall(SYS_gettid); }

void clockshim_arm(int every, int depth)
{
	armed_thread = gettid_();
	armed_depth = depth < MAX_DEPTH ? depth : MAX_DEPTH;
	armed_every = every;
}

void clockshim_level(int d) { level = d; }

void clockshim_nest(int d) { nest_asked[d] = 1; }

static void raise_level(int d) { syscall(SYS_tgkill, getpid(), gettid_(), SIGRTMIN + d - 1); }

int clock_gettime(clockid_t id, struct timespec *ts)
{
	if (!real_clock_gettime) {
		*(void **)&real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
		if (!real_clock_gettime)
			abort();
	}
	int rc = real_clock_gettime(id, ts);
	/* Read once: the program disarms (every = 0) while vramtrace's collector thread calls in. */
	int d = level, every = armed_every;
	if (!every || gettid_() != armed_thread)
		return rc;
	if (d == 0 && ++calls % every == 0)
		raise_level(1);
	else if (d > 0 && d < armed_depth && nest_asked[d]) {
		nest_asked[d] = 0;
		raise_level(d + 1);
	}
	return rc;
}
