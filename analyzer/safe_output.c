/* SPDX-License-Identifier: MIT */
/*
 * Every file the analyzer writes goes through here. vramtrace runs as root on shared machines
 * and writes where it is told, often into directories that other users can write to: a name
 * planted there (a symbolic link to /etc/passwd, a hard link, a FIFO) must never be opened. So
 * the output is written to a new file of a random name in the destination directory, created
 * O_EXCL|O_NOFOLLOW with mode 0600 (or the input trace's mode, if stricter), and renamed over
 * the name it was asked for; the rename replaces a directory entry, whatever it pointed to, and
 * a failure leaves the earlier file in place.
 */
#define _GNU_SOURCE
#include "safe_output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "vramtrace/error.h"

/* "vramtrace: <message>" and the exit code of a file that cannot be written. */
static int io_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int io_error(const char *fmt, ...)
{
	va_list ap;
	fputs("vramtrace: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return VRT_EXIT_IO;
}

static const char *kind_of(mode_t mode)
{
	return S_ISLNK(mode)    ? "a symbolic link"
	       : S_ISDIR(mode)  ? "a directory"
	       : S_ISFIFO(mode) ? "a FIFO"
	       : S_ISCHR(mode)  ? "a character device"
	       : S_ISBLK(mode)  ? "a block device"
	       : S_ISSOCK(mode) ? "a socket"
				: "not a regular file";
}

/* Splits path into its directory (opened) and last component. */
static int open_parent(struct vrt_safe_output *o, const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[sizeof(o->path)];
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	snprintf(o->name, sizeof(o->name), "%s", slash ? slash + 1 : path);
	if (!o->name[0] || !strcmp(o->name, ".") || !strcmp(o->name, ".."))
		return io_error("cannot write %s: it names a directory, not a file", path);
	o->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (o->dir_fd < 0)
		return io_error("cannot write %s: %s: %s", path, dir, strerror(errno));
	return 0;
}

static void random_suffix(char *out, size_t n)
{
	static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	uint8_t bytes[16];
	if (getrandom(bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes)) {
		uint64_t x = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)out;
		for (size_t i = 0; i < sizeof(bytes); i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
			bytes[i] = (uint8_t)(x >> 56);
	}
	for (size_t i = 0; i + 1 < n && i < sizeof(bytes); i++)
		out[i] = digits[bytes[i] % (sizeof(digits) - 1)];
	out[n - 1 < sizeof(bytes) ? n - 1 : sizeof(bytes)] = 0;
}

int vrt_safe_output_open(struct vrt_safe_output *o, const char *path, const struct vrt_trace *input)
{
	memset(o, 0, sizeof(*o));
	o->dir_fd = -1;
	if (snprintf(o->path, sizeof(o->path), "%s", path) >= (int)sizeof(o->path))
		return vrt_fail(VRT_E_ARG, "%s: path too long", path);
	int rc = open_parent(o, path);
	if (rc)
		return rc;
	struct stat st;
	if (!fstatat(o->dir_fd, o->name, &st, AT_SYMLINK_NOFOLLOW) && !S_ISREG(st.st_mode)) {
		vrt_safe_output_abort(o);
		return io_error("not writing %s: it is %s, which vramtrace never writes through or replaces; remove it "
				"or choose another output", path, kind_of(st.st_mode));
	}
	o->mode = 0600;
	if (input && input->fd >= 0 && !fstat(input->fd, &st))
		o->mode &= st.st_mode; /* never more open than the trace it came from */
	for (int attempt = 0; attempt < 100; attempt++) {
		char suffix[13];
		random_suffix(suffix, sizeof(suffix));
		snprintf(o->temp, sizeof(o->temp), ".%.200s.%s.partial", o->name, suffix);
		int fd = openat(o->dir_fd, o->temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd < 0) {
			o->temp[0] = 0;
			rc = errno;
			vrt_safe_output_abort(o);
			return io_error("cannot write %s: %s", path, strerror(rc));
		}
		o->f = fdopen(fd, "w");
		if (!o->f) {
			close(fd);
			vrt_safe_output_abort(o);
			return vrt_fail(VRT_E_NOMEM, "cannot write %s", path);
		}
		return 0;
	}
	o->temp[0] = 0;
	vrt_safe_output_abort(o);
	return vrt_fail(VRT_E_IO, "cannot write %s: no free temporary name beside it", path);
}

int vrt_safe_output_commit(struct vrt_safe_output *o)
{
	int err = 0;
	if (fflush(o->f) || ferror(o->f))
		err = errno ? errno : EIO;
	if (!err && fchmod(fileno(o->f), o->mode))
		err = errno;
	if (fclose(o->f) && !err)
		err = errno ? errno : EIO;
	o->f = NULL;
	if (!err && renameat(o->dir_fd, o->temp, o->dir_fd, o->name))
		err = errno;
	if (err) {
		vrt_safe_output_abort(o);
		return io_error("cannot write %s: %s", o->path, strerror(err));
	}
	o->temp[0] = 0;
	close(o->dir_fd);
	o->dir_fd = -1;
	return 0;
}

void vrt_safe_output_abort(struct vrt_safe_output *o)
{
	if (o->f)
		fclose(o->f);
	o->f = NULL;
	if (o->temp[0] && o->dir_fd >= 0)
		unlinkat(o->dir_fd, o->temp, 0);
	o->temp[0] = 0;
	if (o->dir_fd >= 0)
		close(o->dir_fd);
	o->dir_fd = -1;
}
