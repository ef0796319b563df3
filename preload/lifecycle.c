/* SPDX-License-Identifier: MIT */
/*
 * Start, stop, fork, fatal signals and self-disable. The global state moves
 * UNINIT -> READY -> FINISHING, or to DISABLED from anywhere; every hook checks it first.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

_Atomic int vrt_state = VRT_STATE_UNINIT;
_Atomic int vrt_mode = VRT_MODE_OFF;

static uintptr_t self_text_start, self_text_end;
static char self_path[4096];

static const int fatal_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTERM };
#define N_FATAL (sizeof(fatal_signals) / sizeof(fatal_signals[0]))
static struct sigaction previous_actions[N_FATAL];

uint64_t vrt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void vrt_log(const char *fmt, ...)
{
	if (vrt_cfg.quiet)
		return;
	char line[1024];
	int n = snprintf(line, sizeof(line), "vramtrace[%d]: ", (int)getpid());
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n += m < 0 ? 0 : (m > (int)sizeof(line) - n - 2 ? (int)sizeof(line) - n - 2 : m);
	line[n++] = '\n';
	ssize_t ignored = write(STDERR_FILENO, line, (size_t)n);
	(void)ignored;
}

void vrt_disable(const char *why)
{
	int expected = atomic_load(&vrt_state);
	while (expected != VRT_STATE_DISABLED) {
		if (atomic_compare_exchange_weak(&vrt_state, &expected, VRT_STATE_DISABLED)) {
			bool quiet = vrt_cfg.quiet;
			vrt_cfg.quiet = false; /* this one line is always printed */
			vrt_log("disabled: %s; the program continues untraced", why);
			vrt_cfg.quiet = quiet;
			return;
		}
	}
}

bool vrt_addr_is_ours(const void *addr)
{
	uintptr_t a = (uintptr_t)addr;
	return a >= self_text_start && a < self_text_end;
}

const char *vrt_self_path(void) { return self_path; }

static int find_self(struct dl_phdr_info *info, size_t size, void *base)
{
	(void)size;
	if (info->dlpi_addr != (ElfW(Addr))base)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			self_text_start = info->dlpi_addr + ph->p_vaddr;
			self_text_end = self_text_start + ph->p_memsz;
		}
	}
	return 1;
}

static void locate_self(void)
{
	Dl_info info;
	if (dladdr((void *)locate_self, &info) && info.dli_fname) {
		snprintf(self_path, sizeof(self_path), "%s", info.dli_fname);
		dl_iterate_phdr(find_self, info.dli_fbase);
	}
}

static void fatal_handler(int sig, siginfo_t *si, void *uc)
{
	(void)si;
	(void)uc;
	vrt_collector_crash_flush(sig);
	for (size_t i = 0; i < N_FATAL; i++)
		if (fatal_signals[i] == sig)
			sigaction(sig, &previous_actions[i], NULL);
	/* Faults re-execute and reach the previous handler; abort() raises again by itself. */
	if (sig == SIGTERM)
		raise(sig);
}

static void install_fatal_handlers(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fatal_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < N_FATAL; i++) {
		struct sigaction old;
		if (sigaction(fatal_signals[i], NULL, &old))
			continue;
		/* Only where nobody else handles it (SIGTERM: only if it would kill us silently). */
		if (old.sa_handler != SIG_DFL)
			continue;
		previous_actions[i] = old;
		sigaction(fatal_signals[i], &sa, NULL);
	}
}

static void atfork_child(void)
{
	if (atomic_load(&vrt_state) != VRT_STATE_READY)
		return;
	vrt_tls.buf = NULL;
	vrt_tbuf_after_fork_child();
	if (!vrt_cfg.follow_fork) {
		atomic_store(&vrt_state, VRT_STATE_DISABLED);
		return;
	}
	vrt_collector_after_fork_child();
}

__attribute__((constructor)) static void vrt_start(void)
{
	vrt_tls.busy = 1;
	vrt_config_load(&vrt_cfg);
	locate_self();
	vrt_lookup_init();
	if (vrt_cfg.mode == VRT_MODE_OFF) {
		atomic_store(&vrt_state, VRT_STATE_DISABLED);
		vrt_tls.busy = 0;
		return;
	}
	vrt_tbuf_init();
	vrt_stacks_init();
	vrt_python_init();
	if (vrt_cfg.nvtx)
		vrt_nvtx_setup_env();
	atomic_store(&vrt_mode, vrt_cfg.mode);
	if (vrt_collector_start()) {
		vrt_disable("could not start the collector thread");
		vrt_tls.busy = 0;
		return;
	}
	pthread_atfork(NULL, NULL, atfork_child);
	install_fatal_handlers();
	atomic_store(&vrt_state, VRT_STATE_READY);
	vrt_tls.busy = 0;
}

__attribute__((destructor)) static void vrt_finish(void)
{
	int expected = VRT_STATE_READY;
	if (!atomic_compare_exchange_strong(&vrt_state, &expected, VRT_STATE_FINISHING))
		return;
	vrt_tls.busy = 1;
	vrt_collector_stop(VRT_END_EXIT, -1);
	vrt_tls.busy = 0;
}
