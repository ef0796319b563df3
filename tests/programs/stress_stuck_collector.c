/*
 * stress_stuck_collector.c - a thread whose buffer fills while the collector cannot run.
 *
 *   stress_stuck_collector PAIRS
 *
 * Finds vramtrace's collector thread (comm "vramtrace"), has a forked helper stop it alone
 * (PTRACE_SEIZE + PTRACE_INTERRUPT on that thread: the rest of the process runs), makes PAIRS
 * cudaMalloc + cudaFree pairs from the main thread, then lets the helper resume the collector and
 * exits normally. Far more events than a small buffer holds: the thread waits for room once
 * (VRAMTRACE_FULL_WAIT_MS without progress), then drops and counts every event that finds the
 * ring full without waiting again, so the loop ends in about one wait (tbuf.c). Run with
 * VRAMTRACE_STACK_DEPTH=0: a hook then takes no lock the stopped collector could hold.
 *
 * Output: stress_stuck_collector: allocs=A frees=F waited_ms=W
 *   (W: the longest single pair, in ms, for the curious; the test does not time anything)
 * Exit 77: no collector thread (untraced) or ptrace not permitted.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog.h"

static pid_t collector_tid(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	pid_t found = 0;
	while (d && (e = readdir(d))) {
		char path[320], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strcmp(comm, "vramtrace\n"))
			found = (pid_t)atoi(e->d_name);
		fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

/* The helper: stops tid, says so on `stopped`, resumes it when `resume` is readable. */
static void helper(pid_t tid, int stopped, int resume)
{
	char c = 1;
	int status;
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) || ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) ||
	    waitpid(tid, &status, __WALL) != tid)
		c = 0;
	if (write(stopped, &c, 1) != 1 || read(resume, &c, 1) < 0)
		_exit(1);
	ptrace(PTRACE_DETACH, tid, NULL, NULL);
	_exit(0);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

SITE void stuck_alloc(void **p) { CHECK(cudaMalloc(p, 4 * KiB)); }

int main(int argc, char **argv)
{
	long pairs = argc > 1 ? atol(argv[1]) : 5000;
	void *p;
	stuck_alloc(&p); /* the collector is running by now */
	CHECK(cudaFree(p));
	usleep(200000); /* and idle again, in poll(), holding nothing */
	pid_t tid = collector_tid();
	if (!tid) {
		fprintf(stderr, "stress_stuck_collector: no collector thread\n");
		return 77;
	}
	int stopped[2], resume[2];
	if (pipe(stopped) || pipe(resume))
		return 1;
	pid_t child = fork();
	if (child == 0) {
		close(resume[1]);
		helper(tid, stopped[1], resume[0]);
	}
	prctl(PR_SET_PTRACER, child, 0, 0, 0);
	char ok = 0;
	if (child < 0 || read(stopped[0], &ok, 1) != 1 || !ok) {
		fprintf(stderr, "stress_stuck_collector: could not stop the collector (ptrace)\n");
		kill(child, SIGKILL);
		return 77;
	}
	long allocs = 1, frees = 1;
	uint64_t worst = 0;
	for (long i = 0; i < pairs; i++) {
		uint64_t t0 = now_ns();
		stuck_alloc(&p);
		allocs++;
		CHECK(cudaFree(p));
		frees++;
		uint64_t d = now_ns() - t0;
		worst = d > worst ? d : worst;
	}
	ok = 1;
	if (write(resume[1], &ok, 1) != 1)
		return 1;
	waitpid(child, NULL, 0);
	printf("stress_stuck_collector: allocs=%ld frees=%ld waited_ms=%llu\n", allocs, frees,
	       (unsigned long long)(worst / 1000000));
	return 0;
}
