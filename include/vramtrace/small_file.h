/* SPDX-License-Identifier: MIT */
/*
 * Reading a small file whole (/proc/PID/status, /proc/self/environ, /etc/ld.so.preload),
 * shared by the preload and the analyzer. No allocation: safe in the preload's constructor.
 */
#ifndef VRAMTRACE_SMALL_FILE_H
#define VRAMTRACE_SMALL_FILE_H

#include <fcntl.h>
#include <stddef.h>
#include <unistd.h>

/* Reads at most cap - 1 bytes of path into buf and NUL-terminates it; returns the bytes read.
 * 0 if the file cannot be opened (buf untouched then) or is empty. cap must be at least 1. */
static inline size_t vrt_read_small_file(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t n = 0;
	ssize_t r;
	while (n < cap - 1 && (r = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)r;
	close(fd);
	buf[n] = 0;
	return n;
}

#endif /* VRAMTRACE_SMALL_FILE_H */
