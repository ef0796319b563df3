/*
 * stress_launcher.c - a launcher that starts its workers by fork, or by fork + exec.
 *
 *   stress_launcher fork N       N children, each allocates (i + 1) MiB from worker_site
 *   stress_launcher exec N       N children exec "stress_launcher worker i"
 *   stress_launcher inherit N    like fork, but the children keep the environment as it is
 *   stress_launcher worker I     allocates (I + 1) MiB from worker_site, prints, exits 0
 *
 * With fork and exec, child i has RANK=i in its environment (set in the child before it
 * allocates, or passed to exec) when the launcher itself was started with RANK set, as
 * torchrun-like launchers do.
 * Every worker prints "worker i pid=P rank=R bytes=B". The launcher allocates nothing itself,
 * waits for all children (exit 3 if one failed) and prints "launcher: N workers".
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog.h"

SITE void worker_site(size_t size)
{
	void *p;
	CHECK(cudaMalloc(&p, size));
}

static int worker(int i)
{
	CHECK(cudaSetDevice(0));
	size_t size = (size_t)(i + 1) * MiB;
	worker_site(size);
	const char *rank = getenv("RANK");
	printf("worker %d pid=%d rank=%s bytes=%zu\n", i, (int)getpid(), rank ? rank : "-", size);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: stress_launcher fork|exec N | worker I\n");
		return 2;
	}
	int n = atoi(argv[2]);
	if (!strcmp(argv[1], "worker"))
		return worker(n);
	bool exec = !strcmp(argv[1], "exec");
	bool ranks = getenv("RANK") != NULL && strcmp(argv[1], "inherit");
	fflush(stdout);
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid < 0)
			return 3;
		if (pid)
			continue;
		char index[16];
		snprintf(index, sizeof(index), "%d", i);
		if (ranks)
			setenv("RANK", index, 1);
		if (!exec)
			exit(worker(i));
		execl("/proc/self/exe", argv[0], "worker", index, (char *)NULL);
		_exit(127);
	}
	int failed = 0, status;
	for (int i = 0; i < n; i++)
		if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
			failed++;
	printf("launcher: %d workers\n", n);
	return failed ? 3 : 0;
}
