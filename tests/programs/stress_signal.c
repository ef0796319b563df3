/*
 * stress_signal.c - a signal handler that calls CUDA while the interrupted thread is inside
 * vramtrace's hooks.
 *
 *   stress_signal ITERATIONS
 *
 * A POSIX timer sends SIGALRM every 50 us. The handler (signal_handler) keeps HANDLER_SLOTS
 * slots: an empty slot gets cudaMalloc(handler_site, 8 KiB + 256 * slot), a full one cudaFree.
 * Meanwhile the main thread makes ITERATIONS cudaMalloc/cudaFree pairs from main_site, then one
 * 1 MiB allocation it keeps (main_keep_site). Run with tests/programs/stress_sigshim.c preloaded
 * after libvramtrace.so so that signals arrive inside the hooks and never inside the double.
 *
 * Output, after the timer is stopped (one line):
 *   stress_signal: handler_allocs=A handler_frees=F handler_bytes=B handler_calls=C main_allocs=M
 *     main_frees=N main_bytes=1048576
 * handler_bytes: what the handler still holds. A CUDA call failing in the handler prints
 * "stress_signal: handler cudaMalloc|cudaFree RC" and exits 3 (prog.h's rule).
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prog.h"

#define HANDLER_SLOTS 8

static void *slot[HANDLER_SLOTS];
static volatile sig_atomic_t handler_allocs, handler_frees, handler_calls;

/* In the handler: one line with write(2) (async-signal-safe), then _exit(3). */
static void handler_failed(const char *what, int rc)
{
	char line[64] = "stress_signal: handler ";
	size_t n = strlen(line);
	for (const char *p = what; *p && n < sizeof(line) - 8; p++)
		line[n++] = *p;
	line[n++] = ' ';
	line[n++] = (char)('0' + rc / 100 % 10);
	line[n++] = (char)('0' + rc / 10 % 10);
	line[n++] = (char)('0' + rc % 10);
	line[n++] = '\n';
	ssize_t ignored = write(2, line, n);
	(void)ignored;
	_exit(3);
}

SITE void handler_site(int k)
{
	int rc = cudaMalloc(&slot[k], 8 * KiB + (size_t)k * 256);
	if (rc != cudaSuccess)
		handler_failed("cudaMalloc", rc);
}

static void signal_handler(int sig)
{
	(void)sig;
	int saved = errno;
	int k = handler_calls++ % HANDLER_SLOTS;
	if (slot[k]) {
		int rc = cudaFree(slot[k]);
		if (rc != cudaSuccess)
			handler_failed("cudaFree", rc);
		slot[k] = NULL;
		handler_frees++;
	} else {
		handler_site(k);
		handler_allocs++;
	}
	errno = saved;
}

SITE void main_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 64 * KiB));
	CHECK(cudaFree(p));
}

SITE void main_keep_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
}

int main(int argc, char **argv)
{
	long iterations = argc > 1 ? atol(argv[1]) : 20000;
	CHECK(cudaSetDevice(0));
	void *warm;
	CHECK(cudaMalloc(&warm, 4096)); /* runtime and driver initialized outside the handler */
	CHECK(cudaFree(warm));
	struct sigaction sa = { .sa_handler = signal_handler, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	timer_t timer;
	struct sigevent sev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM };
	if (timer_create(CLOCK_MONOTONIC, &sev, &timer)) {
		perror("timer_create");
		return 3;
	}
	struct itimerspec every = { { 0, 50000 }, { 0, 50000 } }, off = { { 0, 0 }, { 0, 0 } };
	timer_settime(timer, 0, &every, NULL);
	for (long i = 0; i < iterations; i++)
		main_site();
	timer_settime(timer, 0, &off, NULL);
	sigset_t alrm;
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	sigprocmask(SIG_BLOCK, &alrm, NULL); /* no handler runs from here on */
	main_keep_site();
	size_t held = 0;
	for (int k = 0; k < HANDLER_SLOTS; k++)
		if (slot[k])
			held += 8 * KiB + (size_t)k * 256;
	printf("stress_signal: handler_allocs=%ld handler_frees=%ld handler_bytes=%zu handler_calls=%ld main_allocs=%ld "
	       "main_frees=%ld main_bytes=%zu\n",
	       (long)handler_allocs, (long)handler_frees, held, (long)handler_calls, iterations + 2, iterations + 1,
	       (size_t)MiB);
	return 0;
}
