/* SPDX-License-Identifier: MIT */
/*
 * Where a trace may be written, shared by the preload (VRAMTRACE_OUTPUT) and `vramtrace run -o`.
 * A trace is created O_EXCL|O_NOFOLLOW, so no planted name is ever followed; this refuses, in
 * addition, the places where writing a trace is wrong whatever the name: a device or FIFO given
 * as the file, the root directory, and a directory another user can write to (they could rename
 * or replace the trace once written), unless it is sticky and owned by root or by us (/tmp).
 * No allocation: safe on the preload's collector thread.
 */
#ifndef VRAMTRACE_OUTPUT_PLACE_H
#define VRAMTRACE_OUTPUT_PLACE_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline const char *vrt_file_kind(mode_t mode)
{
	return S_ISDIR(mode)    ? "a directory"
	       : S_ISFIFO(mode) ? "a FIFO"
	       : S_ISCHR(mode)  ? "a character device"
	       : S_ISBLK(mode)  ? "a block device"
	       : S_ISSOCK(mode) ? "a socket"
	       : S_ISLNK(mode)  ? "a symbolic link"
				: "a regular file";
}

/* Whether traces may go into directory dir; if not, why (one clause) in why. */
static inline bool vrt_output_dir_ok(const char *dir, char *why, size_t len)
{
	struct stat st;
	int n = (int)strnlen(dir, 3000);
	if (stat(dir, &st))
		return true; /* not there (yet): creating the file says why it cannot */
	uid_t me = geteuid();
	if (st.st_uid != me && st.st_uid != 0) {
		snprintf(why, len, "%.*s belongs to uid %u, who could replace the trace", n, dir, (unsigned)st.st_uid);
		return false;
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
		snprintf(why, len, "%.*s is writable by other users (mode %04o) and not sticky: they could replace the trace",
			 n, dir, (unsigned)(st.st_mode & 07777));
		return false;
	}
	return true;
}

/*
 * Whether a trace may be written at target (a file, or a directory when is_dir); if not, why
 * in why. A file target that exists must be a regular file or a link (the preload then makes
 * a name of its own beside it); its directory is checked like a directory target.
 */
static inline bool vrt_output_place_ok(const char *target, bool is_dir, char *why, size_t len)
{
	struct stat st;
	if (!is_dir && !lstat(target, &st) && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
		snprintf(why, len, "%.1000s is %s, not a trace file", target, vrt_file_kind(st.st_mode));
		return false;
	}
	if (is_dir) {
		size_t n = strlen(target);
		while (n > 1 && target[n - 1] == '/')
			n--;
		if (n == 1 && target[0] == '/') {
			snprintf(why, len, "/ is the root directory");
			return false;
		}
		return vrt_output_dir_ok(target[0] ? target : ".", why, len);
	}
	char dir[4096];
	const char *slash = strrchr(target, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == target)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - target < 4000 ? slash - target : 4000), target);
	return vrt_output_dir_ok(dir, why, len);
}

#endif /* VRAMTRACE_OUTPUT_PLACE_H */
