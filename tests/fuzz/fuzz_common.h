/* SPDX-License-Identifier: MIT */
/* Shared by the fuzz targets: the input as a file the reader can open (the reader takes a path). */
#ifndef VRT_FUZZ_COMMON_H
#define VRT_FUZZ_COMMON_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* One memfd for the whole run, rewritten for every input; path is /proc/self/fd/N. */
static inline int vrt_fuzz_file(const uint8_t *data, size_t size, char *path, size_t len)
{
	static int fd = -1;
	if (fd < 0) {
		fd = memfd_create("vrt-fuzz", MFD_CLOEXEC);
		if (fd < 0)
			return -1;
	}
	if (ftruncate(fd, 0))
		return -1;
	for (size_t done = 0; done < size;) {
		ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	snprintf(path, len, "/proc/self/fd/%d", fd);
	return 0;
}

#endif /* VRT_FUZZ_COMMON_H */
