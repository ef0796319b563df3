/* SPDX-License-Identifier: MIT */
/*
 * Start, stop, fork and fatal signals: the orchestration. The global state (base.c) moves
 * UNINIT -> READY -> FINISHING, or to DISABLED from anywhere (vrt_disable); every hook checks
 * it first.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "attach.h"
#include "internal.h"
#include "vramtrace/small_file.h"

static const int fatal_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTERM };
#define N_FATAL (sizeof(fatal_signals) / sizeof(fatal_signals[0]))
static struct sigaction previous_actions[N_FATAL];

static void fatal_handler(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	vrt_collector_crash_flush(sig);
	for (size_t i = 0; i < N_FATAL; i++)
		if (fatal_signals[i] == sig)
			sigaction(sig, &previous_actions[i], NULL);
	/* A fault re-executes its instruction and reaches the previous action; abort() raises
	 * again by itself. A signal sent by raise()/kill() (si_code <= 0) happens only once. */
	if (sig == SIGTERM || si->si_code <= 0)
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

/* ---- fork (see "Fork safety" in internal.h; the waits are in base.c) ----------------------- */

static bool python_locked; /* by this fork's prepare handler; forks are serialized by glibc */

static void atfork_prepare(void)
{
	atomic_fetch_add_explicit(&vrt_forking, 1, memory_order_seq_cst);
	vrt_fork_fence_heavy();
	uint64_t deadline = vrt_now_ns() + VRT_FORK_WAIT_NS;
	/* The collector first: parked, it unlinks no thread buffer while we walk the list (not
	 * parked in time, it might: the list is not walked then). */
	if (vrt_collector_wait_parked(deadline))
		vrt_tbuf_wait_sections(deadline);
	python_locked = vrt_python_fork_prepare(deadline);
}

static void fork_done(void)
{
	atomic_fetch_sub_explicit(&vrt_forking, 1, memory_order_seq_cst);
	syscall(SYS_futex, &vrt_forking, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void atfork_parent(void)
{
	vrt_python_fork_parent(python_locked);
	fork_done();
}

static void atfork_child(void)
{
	atomic_store(&vrt_forking, 0);
	vrt_fork_fence_init(); /* membarrier's registration is the parent's process's; this one thread */
	vrt_python_fork_child(python_locked);
	vrt_torch_fork_child();
	vrt_pid = getpid();
	if (atomic_load(&vrt_state) != VRT_STATE_READY)
		return;
	vrt_tls.buf = NULL;
	vrt_tbuf_after_fork_child();
	if (!vrt_cfg.follow_fork) {
		atomic_store(&vrt_state, VRT_STATE_DISABLED);
		return;
	}
	/* Nothing is started here: an allocator that is not fork-safe may hang a thread created
	 * by an atfork handler, and most children exec right away. */
	vrt_collector_after_fork_child();
}

/* ---- preload or late load ---------------------------------------------------------------- */

static bool loaded_late;

bool vrt_loaded_late(void) { return loaded_late; }

/* Whether one LD_PRELOAD entry (a path, or a bare name searched by the loader) is this file. */
static bool names_self(const char *entry, size_t len, const struct stat *self)
{
	char path[4096];
	if (!len || len >= sizeof(path))
		return false;
	memcpy(path, entry, len);
	path[len] = 0;
	if (!strchr(path, '/')) {
		const char *self_path = vrt_self_path(), *base = strrchr(self_path, '/');
		return !strcmp(path, base ? base + 1 : self_path);
	}
	struct stat st;
	return !stat(path, &st) && st.st_dev == self->st_dev && st.st_ino == self->st_ino;
}

/* Whether a preload list (separated by spaces or colons, as ld.so takes it) names us. */
static bool list_names_self(const char *list, size_t n, const struct stat *self)
{
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && list[i] != ':' && list[i] != ' ' && list[i] != '\n' && list[i] != '\t')
			continue;
		if (names_self(list + start, i - start, self))
			return true;
		start = i + 1;
	}
	return false;
}

/*
 * Preloaded or dlopen'ed later? The loader only preloads what LD_PRELOAD (as the process was
 * started: /proc/self/environ, which a later setenv/unsetenv does not change) or
 * /etc/ld.so.preload names, so anything else means someone dlopen'ed us into a running process:
 * `vramtrace attach`, or a program loading us by hand. Either way, starting to trace (and
 * writing a file, and printing) on our own would surprise it.
 */
static bool preloaded(void)
{
	struct stat self;
	if (!vrt_self_path()[0] || stat(vrt_self_path(), &self))
		return true; /* cannot tell: keep the behaviour of a preload */
	static char env[1 << 18]; /* .bss: only the bytes read are touched */
	size_t n = vrt_read_small_file("/proc/self/environ", env, sizeof(env));
	for (size_t i = 0; i < n; i += strlen(env + i) + 1)
		if (!strncmp(env + i, "LD_PRELOAD=", 11)) {
			const char *v = env + i + 11;
			if (list_names_self(v, strlen(v), &self))
				return true;
		}
	const char *live = n ? NULL : getenv("LD_PRELOAD"); /* /proc unreadable: second best */
	if (live && list_names_self(live, strlen(live), &self))
		return true;
	char etc[4096];
	n = vrt_read_small_file("/etc/ld.so.preload", etc, sizeof(etc));
	return list_names_self(etc, n, &self);
}

int vrt_lifecycle_begin(int initial_mode)
{
	vrt_fork_fence_init();
	vrt_tbuf_init();
	vrt_stacks_init();
	vrt_python_init();
	if (vrt_cfg.nvtx)
		vrt_nvtx_setup_env();
	atomic_store(&vrt_mode, initial_mode);
	vrt_pid = getpid();
	if (vrt_collector_start()) {
		vrt_disable("could not start the collector thread");
		return -1;
	}
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	install_fatal_handlers();
	atomic_store(&vrt_state, VRT_STATE_READY);
	return 0;
}

/* A late load reads its configuration silently: nothing may reach the program's stderr
 * before somebody asks for tracing (vramtrace_attach_start). */
static void load_config_quietly(void)
{
	static struct vrt_config cfg;
	vrt_cfg.quiet = true;
	vrt_config_load(&cfg);
	vrt_cfg = cfg;
	vrt_cfg.quiet = true;
}

static void start(void)
{
	int busy = vrt_tls.busy;
	vrt_tls.busy = 1;
	vrt_locate_self();
	loaded_late = !preloaded();
	if (loaded_late) {
		/* State stays UNINIT: every hook passes through until vramtrace_attach_start. */
		load_config_quietly();
		vrt_lookup_init();
		vrt_exec_hooks_init();
		vrt_tls.busy = busy;
		return;
	}
	vrt_config_load(&vrt_cfg);
	if (vrt_config_warned() && !vrt_cfg.quiet)
		setenv("VRAMTRACE_SETTINGS_SAID", "1", 0); /* children: said already (config.c) */
	vrt_lookup_init();
	vrt_exec_hooks_init();
	if (vrt_cfg.mode == VRT_MODE_OFF) {
		atomic_store(&vrt_state, VRT_STATE_DISABLED);
		vrt_tls.busy = busy;
		return;
	}
	if (vrt_cfg.output_unusable) {
		vrt_disable("VRAMTRACE_OUTPUT is longer than a path vramtrace takes (4095 bytes)");
		vrt_tls.busy = busy;
		return;
	}
	vrt_lifecycle_begin(vrt_cfg.mode);
	vrt_tls.busy = busy;
}

static pthread_once_t start_once = PTHREAD_ONCE_INIT;

/*
 * Our constructor, or the first hook that runs before it: a library's constructor that
 * allocates may run before ours (the loader orders constructors by dependencies only), and its
 * calls would go untraced.
 */
__attribute__((constructor)) static void vrt_start(void) { pthread_once(&start_once, start); }

bool vrt_start_early(void)
{
	pthread_once(&start_once, start);
	return atomic_load(&vrt_state) == VRT_STATE_READY;
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
