/*
 * attach_target.c - a long-running program for `vramtrace attach` (tests/e2e/test_attach.py),
 * linked against the runtime double and driven by lines on stdin. It starts with early_site:
 * 1 MiB (a) and 2 MiB (b), prints "ready pid=<pid>", then:
 *
 *   attach_target steps   waits in read(2) for a line; then late_site: 4 MiB (c) and frees a,
 *                         prints "late done"; waits for another line, prints "bye", exits 0.
 *                         Live at the end: b (2 MiB, from before tracing) + c (4 MiB) = 6 MiB.
 *   attach_target loop    every 10 ms (poll(2) on stdin) loop_site allocates 64 KiB and keeps it,
 *                         until told to stop. Commands, one per line, each answered by one line:
 *                           where   -> "where <object> n=<allocations>": the object the program's
 *                                      own pointer to cudaMalloc points into (libvramtrace.so
 *                                      while attached by injection, libcudart.so.13 otherwise)
 *                           pause   -> "paused n=<allocations>" (no allocation until resume)
 *                           resume  -> "resumed"
 *                           big     -> big_site allocates 100 MiB and keeps it: "big done"
 *                           stop    -> "loop: <allocations> allocations", exit 0
 *                         Device bytes in use at any time: 3 MiB + n * 64 KiB (+ 100 MiB a
 *                         big), none freed.
 *   attach_target lookedup  the same loop, allocating through the cudaMalloc that dlsym gave
 *                         before "ready" (the runtime's own): what an attach cannot see.
 *   attach_target suspend waits in sigsuspend(2) (SIGUSR1 blocked outside it); on SIGUSR1
 *                         late_site, prints "late done", exits 0.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "prog.h"

#define LOOP_BYTES (64 * KiB)

static void *a, *b, *c;

SITE void early_site(void)
{
	CHECK(cudaMalloc(&a, 1 * MiB));
	CHECK(cudaMalloc(&b, 2 * MiB));
}

SITE void late_site(void)
{
	CHECK(cudaMalloc(&c, 4 * MiB));
	CHECK(cudaFree(a));
}

/* lookedup: cudaMalloc as dlsym gave it at the start; else the call goes through the GOT. */
static cudaError_t (*looked_up)(void **, size_t);

SITE void loop_site(void)
{
	void *p;
	CHECK(looked_up ? looked_up(&p, LOOP_BYTES) : cudaMalloc(&p, LOOP_BYTES));
}

SITE void big_site(void)
{
	void *p;
	CHECK(looked_up ? looked_up(&p, 100 * MiB) : cudaMalloc(&p, 100 * MiB));
}

static void say(const char *fmt, long v)
{
	printf(fmt, v);
	fflush(stdout);
}

/* One line from stdin with read(2) (no stdio buffering behind poll's back); 0 at EOF. */
static size_t read_line(char *line, size_t cap)
{
	size_t n = 0;
	char ch;
	while (n + 1 < cap && read(0, &ch, 1) == 1 && ch != '\n')
		line[n++] = ch;
	line[n] = 0;
	return n;
}

static int steps(void)
{
	char line[64];
	read_line(line, sizeof(line));
	late_site();
	say("late done%.0ld\n", 0);
	read_line(line, sizeof(line));
	say("bye%.0ld\n", 0);
	return 0;
}

static const char *where_cuda_malloc(void)
{
	Dl_info info;
	void *p = (void *)cudaMalloc; /* read from this program's GOT */
	if (!dladdr(p, &info) || !info.dli_fname)
		return "?";
	const char *slash = strrchr(info.dli_fname, '/');
	return slash ? slash + 1 : info.dli_fname;
}

static int loop(void)
{
	long n = 0;
	int paused = 0;
	char line[64];
	for (;;) {
		struct pollfd p = { 0, POLLIN, 0 };
		if (poll(&p, 1, 10) == 1) {
			read_line(line, sizeof(line));
			if (!strcmp(line, "where")) {
				printf("where %s ", where_cuda_malloc());
				say("n=%ld\n", n);
			} else if (!strcmp(line, "pause")) {
				paused = 1;
				say("paused n=%ld\n", n);
			} else if (!strcmp(line, "resume")) {
				paused = 0;
				say("resumed%.0ld\n", 0);
			} else if (!strcmp(line, "big")) {
				big_site();
				say("big done%.0ld\n", 0);
			} else {
				say("loop: %ld allocations\n", n);
				return 0;
			}
		}
		if (!paused) {
			loop_site();
			n++;
		}
	}
}

static volatile sig_atomic_t woken;

static void wake(int sig)
{
	(void)sig;
	woken = 1;
}

static int suspend(void)
{
	sigset_t usr1, none;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigemptyset(&none);
	signal(SIGUSR1, wake);
	sigprocmask(SIG_BLOCK, &usr1, NULL);
	say("ready pid=%ld\n", (long)getpid());
	while (!woken)
		sigsuspend(&none);
	late_site();
	say("late done%.0ld\n", 0);
	return 0;
}

int main(int argc, char **argv)
{
	CHECK(cudaSetDevice(0));
	early_site();
	if (argc > 1 && !strcmp(argv[1], "suspend"))
		return suspend();
	bool lookedup = argc > 1 && !strcmp(argv[1], "lookedup");
	if (lookedup)
		looked_up = (cudaError_t (*)(void **, size_t))dlsym(RTLD_DEFAULT, "cudaMalloc");
	say("ready pid=%ld\n", (long)getpid());
	return argc > 1 && (lookedup || !strcmp(argv[1], "loop")) ? loop() : steps();
}
