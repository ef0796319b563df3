/* SPDX-License-Identifier: MIT */
/*
 * The leaf of the preload: the process-wide state every file reads (the lifecycle state, the
 * tracing mode, the configuration, fork progress), the clock, the one stderr line, self-disable,
 * where our own code lies, and the waits of the fork protocol. It calls nothing else of ours,
 * so every other file may use it without a circle (tests/check_preload_layers.py checks).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "vramtrace/utf8.h"

struct vrt_config vrt_cfg; /* filled by vrt_config_load (config.c) before any hook records */
_Atomic int vrt_state = VRT_STATE_UNINIT;
_Atomic int vrt_mode = VRT_MODE_OFF;
_Atomic int vrt_forking;
bool vrt_fork_fence_light;
pid_t vrt_pid;

static uintptr_t self_text_start, self_text_end;
static char self_path[4096];

uint64_t vrt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The length of the character at p (n bytes there) that a terminal may be given as it is; 0
 * for a control, a bidi control, or a byte that is not UTF-8. */
static size_t shown_utf8(const unsigned char *p, size_t n)
{
	uint32_t cp;
	size_t len = vrt_utf8_decode(p, n, &cp);
	return len && !vrt_utf8_escaped(cp) ? len : 0;
}

/* The messages quote what others chose (settings, paths, library names): what a terminal may
 * not be given as it is (vramtrace/utf8.h), and bytes above 0x7f outside a UTF-8 locale, are
 * written as \xNN. */
void vrt_log(const char *fmt, ...)
{
	if (vrt_cfg.quiet)
		return;
	char text[1024], line[2048]; /* small: it may run on a signal handler's stack */
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	size_t n = (size_t)snprintf(line, sizeof(line), "vramtrace[%d]: ", (int)getpid());
	size_t len = m < 0 ? 0 : (size_t)m < sizeof(text) ? (size_t)m : sizeof(text) - 1;
	const unsigned char *p = (const unsigned char *)text;
	for (size_t i = 0; i < len && n + 5 < sizeof(line);) {
		size_t keep = p[i] < 0x80 || vrt_cfg.terminal_utf8 ? shown_utf8(p + i, len - i) : 0;
		if (keep) {
			memcpy(line + n, p + i, keep);
			n += keep;
			i += keep;
		} else {
			n += (size_t)snprintf(line + n, 5, "\\x%02x", p[i++]);
		}
	}
	line[n++] = '\n';
	ssize_t ignored = write(STDERR_FILENO, line, n);
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

void vrt_locate_self(void)
{
	Dl_info info;
	if (dladdr((void *)vrt_locate_self, &info) && info.dli_fname) {
		snprintf(self_path, sizeof(self_path), "%s", info.dli_fname);
		dl_iterate_phdr(find_self, info.dli_fbase);
	}
}

/* ---- fork (see "Fork safety" in internal.h) ------------------------------------------------ */

bool vrt_fork_fence_init(void)
{
	vrt_fork_fence_light = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
	return vrt_fork_fence_light;
}

void vrt_fork_fence_heavy(void)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (vrt_fork_fence_light)
		syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
}

bool vrt_fork_wait_clear(_Atomic int *mark, uint64_t deadline_ns)
{
	for (int spins = 0; atomic_load_explicit(mark, memory_order_seq_cst); spins++) {
		if (spins < 64) {
			sched_yield(); /* sections are short: most waits end here */
			continue;
		}
		if (vrt_now_ns() > deadline_ns)
			return false;
		struct timespec pause = { 0, 50000 };
		nanosleep(&pause, NULL);
	}
	return true;
}

void vrt_fork_park(_Atomic int *mark)
{
	for (;;) {
		atomic_store_explicit(mark, 1, memory_order_seq_cst);
		int forking = atomic_load_explicit(&vrt_forking, memory_order_seq_cst);
		if (VRT_LIKELY(!forking))
			return;
		atomic_store_explicit(mark, 0, memory_order_release);
		struct timespec limit = { 0, 10000000 }; /* a missed wake costs 10 ms, not a hang */
		syscall(SYS_futex, &vrt_forking, FUTEX_WAIT_PRIVATE, forking, &limit, NULL, 0);
	}
}
