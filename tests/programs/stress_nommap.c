/*
 * stress_nommap.c - libstress_nommap.so, preloaded after libvramtrace.so: every anonymous
 * mapping libvramtrace.so asks for without MAP_NORESERVE (its per-thread event buffers) fails
 * with ENOMEM, as under an address-space limit too tight for even the smallest buffer. Nothing
 * else is touched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*real)(void *, size_t, int, int, int, off_t);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "mmap");
	Dl_info info;
	if ((flags & MAP_ANONYMOUS) && !(flags & MAP_NORESERVE) &&
	    dladdr(__builtin_return_address(0), &info) && info.dli_fname && strstr(info.dli_fname, "libvramtrace")) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return real(addr, len, prot, flags, fd, off);
}
