/*
 * kill_early.c - a SIGKILL soon after the allocations (issue 22, item 6): what does the trace hold?
 *
 *   kill_early K AT [self|thread]
 *
 * Makes K allocations from kill_site, allocation i being 1 MiB + 4096 * i bytes (sizes are
 * distinct, so a live set names exactly which allocations a trace holds). After each call
 * returned it writes "returned i SIZE" to stdout with write(2) (nothing buffered in the process:
 * what the reader got was said before the kill). Once AT allocations have returned it dies by
 * SIGKILL: "self" (the default) raises it right there; "thread" has a second thread that waits
 * for the count to reach AT and kills the process from there while the main thread goes on
 * allocating (so the kill lands mid-run, between any two instructions); with KILL_EARLY_PAUSE_MS
 * set, "self" sleeps that long before its kill. AT = 0 kills before the
 * first allocation; AT > K never kills (the program exits 0 after "done").
 *
 *   kill_early K threads N
 *
 * N threads make K allocations each (thread t's allocation i is 1 MiB + 4096 * (t * K + i) bytes,
 * each said as "returned t*K+i SIZE"), in rounds: every thread's allocation i comes after every
 * thread's allocation i-1 (a barrier between rounds), so the threads' events interleave in time
 * however the scheduler runs them; once all have returned, the main thread kills the process.
 *
 *   kill_early K fork
 *
 * Twenty runs of the above in forked children, one after another (each child traces into a
 * file of its own): "self" after 1, 2, 3, 5, 8, 13, 21, 34, K-1 and K allocations, then
 * "thread" at the same counts. The parent makes no CUDA call; it prints "child PID AT MODE"
 * before each child starts and "killed PID" once it is reaped, dead by SIGKILL. Each child's
 * lines are "returned PID i SIZE".
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog.h"

static _Atomic long returned;
static long kill_at;
static int forked;

SITE void *kill_site(size_t size)
{
	void *p;
	CHECK(cudaMalloc(&p, size));
	return p;
}

static void say(const char *text)
{
	size_t n = strlen(text), off = 0;
	while (off < n) {
		ssize_t w = write(1, text + off, n - off);
		if (w <= 0)
			return;
		off += (size_t)w;
	}
}

static void *killer(void *arg)
{
	(void)arg;
	while (atomic_load(&returned) < kill_at)
		sched_yield();
	kill(getpid(), SIGKILL);
	return NULL;
}

static int scenario(long k, int from_thread)
{
	const char *pause_env = getenv("KILL_EARLY_PAUSE_MS");
	long pause_ms = pause_env ? atol(pause_env) : 0;
	CHECK(cudaSetDevice(0));
	pthread_t t;
	if (from_thread && kill_at <= k && pthread_create(&t, NULL, killer, NULL))
		return 4;
	if (!from_thread && kill_at == 0)
		kill(getpid(), SIGKILL);
	for (long i = 0; i < k; i++) {
		size_t size = MiB + 4096 * (size_t)i;
		kill_site(size);
		char line[96];
		if (forked)
			snprintf(line, sizeof(line), "returned %d %ld %zu\n", (int)getpid(), i, size);
		else
			snprintf(line, sizeof(line), "returned %ld %zu\n", i, size);
		say(line);
		atomic_store(&returned, i + 1);
		if (!from_thread && i + 1 == kill_at && pause_ms > 0) {
			struct timespec ts = { pause_ms / 1000, (pause_ms % 1000) * 1000000L };
			nanosleep(&ts, NULL); /* the collector's write under way (a stalled disk) */
		}
		if (!from_thread && i + 1 == kill_at)
			kill(getpid(), SIGKILL);
	}
	if (from_thread && kill_at <= k)
		for (;;)
			pause(); /* the killer's SIGKILL ends us */
	say("done\n");
	return 0;
}

static long per_thread;
static pthread_barrier_t round_barrier;

static void *allocator(void *arg)
{
	long t = (long)arg;
	for (long i = 0; i < per_thread; i++) {
		pthread_barrier_wait(&round_barrier);
		size_t size = MiB + 4096 * (size_t)(t * per_thread + i);
		kill_site(size);
		char line[96];
		snprintf(line, sizeof(line), "returned %ld %zu\n", t * per_thread + i, size);
		say(line);
	}
	return NULL;
}

static int run_threads(long k, long n)
{
	pthread_t t[64];
	per_thread = k;
	n = n < 64 ? n : 64;
	CHECK(cudaSetDevice(0));
	if (n < 1 || pthread_barrier_init(&round_barrier, NULL, (unsigned)n))
		return 4;
	for (long i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, allocator, (void *)i))
			return 4;
	for (long i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	kill(getpid(), SIGKILL);
	return 0;
}

static int run_forked(long k)
{
	long points[] = { 1, 2, 3, 5, 8, 13, 21, 34, k - 1, k };
	forked = 1;
	for (int mode = 0; mode < 2; mode++)
		for (size_t p = 0; p < sizeof(points) / sizeof(points[0]); p++) {
			kill_at = points[p];
			pid_t c = fork();
			if (c < 0)
				return 4;
			if (c == 0)
				_exit(scenario(k, mode));
			char line[96];
			snprintf(line, sizeof(line), "child %d %ld %s\n", (int)c, kill_at, mode ? "thread" : "self");
			say(line);
			int status;
			while (waitpid(c, &status, 0) < 0)
				;
			if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
				snprintf(line, sizeof(line), "killed %d\n", (int)c);
				say(line);
			}
		}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: kill_early K AT [self|thread] | kill_early K threads N | kill_early K fork\n");
		return 2;
	}
	long k = atol(argv[1]);
	if (!strcmp(argv[2], "fork"))
		return k >= 2 ? run_forked(k) : 2;
	if (!strcmp(argv[2], "threads"))
		return argc > 3 ? run_threads(k, atol(argv[3])) : 2;
	kill_at = atol(argv[2]);
	return scenario(k, argc > 3 && !strcmp(argv[3], "thread"));
}
