/*
 * exit_status.c - allocates 1 MiB from leak_site, makes sure the trace holds it, then ends as
 * told: "exit N" returns N from main; "signal N" raises signal N with raise() (SIGKILL cannot be
 * caught, so the trace is left unclosed for `vramtrace run` to finish); "abort" calls abort();
 * "fault" dereferences a null pointer (a real SIGSEGV).
 *
 * Under vramtrace the trace is flushed first through the optional API (vramtrace_snapshot
 * drains and writes the trace synchronously), so a process killed right after still has its
 * events on disk; without the preload the weak symbol is NULL and nothing is done.
 */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <vramtrace/vramtrace.h>

#include "prog.h"

SITE void leak_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
}

static void flush_trace(const char *snapshot)
{
	if (!vramtrace_snapshot || !snapshot)
		return;
	int rc = vramtrace_snapshot(snapshot);
	if (rc) {
		fprintf(stderr, "vramtrace_snapshot(%s) = %d\n", snapshot, rc);
		exit(3);
	}
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "exit") && strcmp(argv[1], "signal") && strcmp(argv[1], "abort") &&
			 strcmp(argv[1], "fault"))) {
		fprintf(stderr, "usage: exit_status exit|signal|abort|fault N [SNAPSHOT_PATH]\n");
		return 2;
	}
	int n = atoi(argv[2]);
	CHECK(cudaSetDevice(0));
	leak_site();
	flush_trace(argc > 3 ? argv[3] : NULL);
	printf("exit_status: %s %d\n", argv[1], n);
	fflush(stdout);
	if (!strcmp(argv[1], "exit"))
		return n;
	if (!strcmp(argv[1], "abort"))
		abort();
	if (!strcmp(argv[1], "fault"))
		return *(volatile int *)(uintptr_t)(n - n); /* null */
	raise(n);
	return 4; /* not reached for a fatal signal */
}
