/*
 * cut_underfoot.c - libcut_underfoot.so, preloaded into the analyzer by test_security.py: the
 * first time the process learns the size of CUT_UNDERFOOT_PATH through fstat, the file is cut to
 * CUT_UNDERFOOT_SIZE bytes right after, as if another process overwrote or truncated the trace
 * while `vramtrace` reads it. Whatever way the reader reads (mapping or pread), what it reads
 * after that is gone.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Both names, whatever _FILE_OFFSET_BITS the build gives (on x86-64 they are one call). */
int shim_fstat(int fd, struct stat *st) __asm__("fstat");
int shim_fstat64(int fd, struct stat *st) __asm__("fstat64");

static int real_fstat(int fd, struct stat *st)
{
	static int (*real)(int, struct stat *);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "fstat64");
	return real(fd, st);
}

static void cut_if_target(int fd)
{
	static int done;
	const char *path = getenv("CUT_UNDERFOOT_PATH"), *size = getenv("CUT_UNDERFOOT_SIZE");
	struct stat target, st;
	if (done || !path || !size || stat(path, &target) || real_fstat(fd, &st) || st.st_ino != target.st_ino ||
	    st.st_dev != target.st_dev || !S_ISREG(st.st_mode))
		return;
	done = 1;
	if (truncate(path, strtoll(size, NULL, 10)))
		abort();
}

int shim_fstat(int fd, struct stat *st)
{
	int rc = real_fstat(fd, st);
	if (!rc)
		cut_if_target(fd);
	return rc;
}

int shim_fstat64(int fd, struct stat *st) { return shim_fstat(fd, st); }
