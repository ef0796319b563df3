/* SPDX-License-Identifier: MIT */
/*
 * libprefault.so - LD_PRELOADed ahead of libvramtrace.so in the hot-path benchmarks only.
 *
 * A first-touch page fault costs ~1-3 µs on a small VM (`hotpath faults` measures it), and a
 * traced run writes 80 bytes of thread ring per event: until the ring has wrapped once, every
 * 51st event pays a fault, ~60 ns an event, ~120 ns a pair. A long-running process pays that
 * once; a benchmark of a few hundred thousand pairs pays it throughout. This shim adds
 * MAP_POPULATE to private anonymous mappings of 1 MiB or more that are not MAP_NORESERVE (the
 * thread rings; not the preload's sparse Python tables), so the pages exist before the timed
 * loop starts and the benchmark sees the steady state. Untraced runs load it too.
 */
#define _GNU_SOURCE
#undef _FILE_OFFSET_BITS /* define mmap and mmap64 apart */
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static void *do_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if ((flags & MAP_ANONYMOUS) && (flags & MAP_PRIVATE) && !(flags & MAP_NORESERVE) && len >= (1u << 20) &&
	    (prot & PROT_WRITE))
		flags |= MAP_POPULATE;
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return do_mmap(addr, len, prot, flags, fd, off);
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return do_mmap(addr, len, prot, flags, fd, off);
}
