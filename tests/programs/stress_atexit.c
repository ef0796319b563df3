/*
 * stress_atexit.c - CUDA calls from exit handlers that run before and after vramtrace's own
 * destructor (which closes the trace).
 *
 *   stress_atexit [busy]
 *
 * Exit-time code, in the order it runs:
 *   atexit_late      atexit() from main: runs first at exit
 *   atexit_early     atexit() from a constructor (before main)
 *   exe_destructor   the executable's ELF destructor
 *   lib_destructor   libstress_atexit_lib.so's destructor (tests/programs/stress_atexit_lib.c;
 *                    preloaded after libvramtrace.so, so torn down after it)
 * Each allocates a size of its own (from a site named after it), keeps it, and prints
 * "<name> ok enabled=<vramtrace_enabled()> bytes=<size>" where enabled=1 means vramtrace still
 * recorded.
 * A failing CUDA call prints "<name> failed rc" and _exit(3)s.
 *
 * With "busy", a thread allocates and frees without pause until the process is gone (main
 * returns once it has made 1000 pairs), so hooks run on it while the trace is being closed:
 * at most its one 4 KiB allocation in flight may be live in the trace beside the kept sizes.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include <vramtrace/vramtrace.h>

#include "prog.h"

void exit_call(const char *name, size_t size); /* also used by stress_atexit_lib.c */

SITE void exit_call(const char *name, size_t size)
{
	void *p;
	int rc = cudaMalloc(&p, size);
	int enabled = vramtrace_enabled ? vramtrace_enabled() : 0;
	if (rc) {
		printf("%s failed %d\n", name, rc);
		fflush(stdout);
		_exit(3);
	}
	printf("%s ok enabled=%d bytes=%zu\n", name, enabled ? 1 : 0, size);
	fflush(stdout);
}

SITE void atexit_early(void) { exit_call("atexit_early", 3 * MiB); }
SITE void atexit_late(void) { exit_call("atexit_late", 5 * MiB); }

__attribute__((constructor)) static void register_early(void) { atexit(atexit_early); }
__attribute__((destructor)) SITE void exe_destructor(void) { exit_call("exe_destructor", 7 * MiB); }

static atomic_long busy_calls;

SITE void busy_site(void)
{
	void *p;
	if (cudaMalloc(&p, 4096) == cudaSuccess)
		cudaFree(p);
	atomic_fetch_add(&busy_calls, 1);
}

static void *busy(void *arg)
{
	(void)arg;
	for (;;)
		busy_site();
	return NULL;
}

int main(int argc, char **argv)
{
	CHECK(cudaSetDevice(0));
	atexit(atexit_late);
	exit_call("main", 1 * MiB);
	if (argc > 1 && !strcmp(argv[1], "busy")) {
		pthread_t t;
		CHECK(pthread_create(&t, NULL, busy, NULL));
		while (atomic_load(&busy_calls) < 1000) /* exit while it is in full swing */
			sched_yield();
	}
	return 0;
}
