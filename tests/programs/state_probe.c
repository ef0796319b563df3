/*
 * state_probe.c - libstate_probe.so, preloaded after libvramtrace.so: looks at the trace file
 * at the instants a kill could come, through libvramtrace.so's own pwrite calls.
 *
 *   STATE_PROBE_SNAPSHOTS=DIR   after each of its first 60 writes of the state block, copies the
 *                               whole file to DIR/state.N: the file a reader would find had the
 *                               process died right after that write.
 *   STATE_PROBE_KILL_AFTER=K    SIGKILLs the process right after the payload of the K-th EVENTS
 *                               chunk is written, before the state block that counts it.
 *
 * Nothing else is touched; pwrite calls to other files pass straight through.
 */
#undef _FILE_OFFSET_BITS /* pwrite and pwrite64 both defined here, as libc has them */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vramtrace/format.h"

#define MAX_SNAPSHOTS 60

static atomic_int snapshots, events_chunks;
static atomic_bool kill_at_next_write;

/* A write to a trace file (a name ending in .vrt): told by the file, not by the caller, since a
 * sanitizer's interceptor of pwrite can stand between libvramtrace.so and this one. */
static bool to_a_trace(int fd)
{
	char link[64], path[4096];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	return n > 4 && !memcmp(path + n - 4, ".vrt", 4);
}

static void snapshot(int fd)
{
	const char *dir = getenv("STATE_PROBE_SNAPSHOTS");
	int n = atomic_fetch_add(&snapshots, 1);
	if (!dir || n >= MAX_SNAPSHOTS)
		return;
	char path[4096];
	snprintf(path, sizeof(path), "%s/state.%02d.vrt", dir, n);
	int out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		return;
	char buf[1 << 16];
	ssize_t got;
	for (off_t at = 0; (got = pread(fd, buf, sizeof(buf), at)) > 0; at += got)
		if (write(out, buf, (size_t)got) != got)
			break;
	close(out);
}

/* Before a write: is it the header of an EVENTS chunk whose payload comes next? */
static void note(const void *buf, size_t n)
{
	const char *k = getenv("STATE_PROBE_KILL_AFTER");
	struct vrt_chunk_header h;
	if (!k || n != sizeof(h))
		return;
	memcpy(&h, buf, sizeof(h));
	if (h.magic == VRT_CHUNK_MAGIC && h.type == VRT_CHUNK_EVENTS && h.stored_size &&
	    atomic_fetch_add(&events_chunks, 1) + 1 == atol(k))
		atomic_store(&kill_at_next_write, true);
}

static void after(int fd, const void *buf, size_t n, off_t off)
{
	if (off == VRT_STATE_OFFSET && n == sizeof(struct vrt_file_state)) {
		snapshot(fd);
		return;
	}
	if (atomic_load(&kill_at_next_write)) /* this write is that chunk's payload */
		raise(SIGKILL);
	note(buf, n);
}

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);

static ssize_t probed(pwrite_fn real, int fd, const void *buf, size_t n, off_t off)
{
	ssize_t rc = real(fd, buf, n, off);
	if (rc == (ssize_t)n && to_a_trace(fd))
		after(fd, buf, n, off);
	return rc;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	static pwrite_fn real;
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "pwrite64");
	return probed(real, fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	static pwrite_fn real;
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "pwrite");
	return probed(real, fd, buf, n, off);
}
