/* SPDX-License-Identifier: MIT */
/*
 * exec and _exit: the image ends without vramtrace's destructor. _exit is how Python's
 * os._exit and multiprocessing's forked workers leave; the trace is finished first (end
 * reason VRT_END_EXIT with the status), so a short-lived worker still leaves a complete file.
 *
 * exec: the image that calls it is replaced, and with it everything the collector has not
 * written yet. Before the real call the trace is finished, complete and with end reason
 * VRT_END_EXEC (the new image, preloaded again, writes its own file). If the call returns, it
 * failed: the process goes on and so does its trace, in a new file (collector.c).
 *
 * Every entry point is hooked: glibc's exec functions reach the system call through internal
 * aliases, never through each other's exported symbols. The execl forms build their argv and
 * go through the hooked execve/execvp here.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

enum real_fn { EXECVE, EXECV, EXECVP, EXECVPE, FEXECVE, EXECVEAT, EXIT, EXIT_C99, N_REAL };

static const char *const real_names[N_REAL] = { "execve",  "execv",    "execvp", "execvpe",
						 "fexecve", "execveat", "_exit",  "_Exit" };
static _Atomic(void *) reals[N_REAL];

/* Looked up at load, so a vfork child never has to call dlsym here; lazily if exec comes first. */
void vrt_exec_hooks_init(void)
{
	for (int i = 0; i < N_REAL; i++)
		atomic_store_explicit(&reals[i], vrt_real_dlsym(RTLD_NEXT, real_names[i]), memory_order_release);
}

static void *real(enum real_fn which)
{
	void *fn = atomic_load_explicit(&reals[which], memory_order_acquire);
	if (VRT_UNLIKELY(!fn)) {
		fn = vrt_real_dlsym(RTLD_NEXT, real_names[which]);
		atomic_store_explicit(&reals[which], fn, memory_order_release);
	}
	return fn;
}

/* A vfork child shares our memory, collector included, but it is not the traced process: its
 * exec or _exit must leave the parent's trace alone. */
static bool is_traced_process(void) { return atomic_load(&vrt_state) == VRT_STATE_READY && getpid() == vrt_pid; }

/* Before the real call: nonzero (vrt_enter's token) if the trace was finished and must go on
 * should the call return. */
static int exec_begin(void)
{
	int guard;
	if (!is_traced_process() || !(guard = vrt_enter()))
		return 0;
	if (vrt_collector_close_now(VRT_END_EXEC, 0))
		return guard; /* still busy: this thread records nothing until exec_failed */
	vrt_leave(guard);
	return 0;
}

static int exec_failed(int closed, int rc)
{
	if (!closed)
		return rc;
	int saved = errno;
	vrt_collector_reopen_after_exec();
	vrt_leave(closed);
	errno = saved;
	return rc;
}

static int missing(void)
{
	errno = ENOSYS;
	return -1;
}

VRT_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	int (*fn)(const char *, char *const[], char *const[]) = real(EXECVE);
	if (!fn)
		return missing();
	int closed = exec_begin();
	return exec_failed(closed, fn(path, argv, envp));
}

VRT_EXPORT int execv(const char *path, char *const argv[])
{
	int (*fn)(const char *, char *const[]) = real(EXECV);
	if (!fn)
		return missing();
	int closed = exec_begin();
	return exec_failed(closed, fn(path, argv));
}

VRT_EXPORT int execvp(const char *file, char *const argv[])
{
	int (*fn)(const char *, char *const[]) = real(EXECVP);
	if (!fn)
		return missing();
	int closed = exec_begin();
	return exec_failed(closed, fn(file, argv));
}

VRT_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	int (*fn)(const char *, char *const[], char *const[]) = real(EXECVPE);
	if (!fn)
		return missing();
	int closed = exec_begin();
	return exec_failed(closed, fn(file, argv, envp));
}

VRT_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	int (*fn)(int, char *const[], char *const[]) = real(FEXECVE);
	if (!fn)
		return missing();
	int closed = exec_begin();
	return exec_failed(closed, fn(fd, argv, envp));
}

VRT_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	int (*fn)(int, const char *, char *const[], char *const[], int) = real(EXECVEAT);
	int closed = exec_begin();
	/* glibc before 2.34 has no wrapper: the system call is the same thing. */
	int rc = fn ? fn(dirfd, path, argv, envp, flags) : (int)syscall(SYS_execveat, dirfd, path, argv, envp, flags);
	return exec_failed(closed, rc);
}

static _Noreturn void exit_now(enum real_fn which, int status)
{
	void (*fn)(int) = real(which);
	if (is_traced_process() && vrt_enter())
		vrt_collector_close_now(VRT_END_EXIT, status); /* no vrt_leave: nothing runs after */
	if (fn)
		fn(status);
	syscall(SYS_exit_group, status);
	__builtin_unreachable();
}

VRT_EXPORT _Noreturn void _exit(int status) { exit_now(EXIT, status); }

VRT_EXPORT _Noreturn void _Exit(int status) { exit_now(EXIT_C99, status); }

/* ---- the execl forms: argv from the variable arguments, as glibc builds it ---------------- */

enum list_form { LIST_PATH, LIST_SEARCH, LIST_ENV };

/*
 * The execl forms: argv from the variable arguments after arg (entries, then NULL, then for
 * execle the environment), on this frame's stack as glibc builds it, then the hooked call.
 */
static int exec_list(enum list_form form, const char *file, const char *arg, va_list ap)
{
	va_list count;
	va_copy(count, ap);
	size_t n = 1; /* the terminating NULL */
	if (arg)
		while (n++, va_arg(count, char *))
			;
	va_end(count);
	if (n > INT_MAX) {
		errno = E2BIG;
		return -1;
	}
	char *argv[n];
	argv[0] = (char *)arg;
	for (size_t i = 1; i < n; i++)
		argv[i] = va_arg(ap, char *);
	switch (form) {
	case LIST_SEARCH: return execvp(file, argv);
	case LIST_ENV: return execve(file, argv, va_arg(ap, char *const *));
	case LIST_PATH: break;
	}
	return execve(file, argv, environ);
}

VRT_EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	int rc = exec_list(LIST_PATH, path, arg, ap);
	va_end(ap);
	return rc;
}

VRT_EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	int rc = exec_list(LIST_SEARCH, file, arg, ap);
	va_end(ap);
	return rc;
}

VRT_EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	int rc = exec_list(LIST_ENV, path, arg, ap);
	va_end(ap);
	return rc;
}
