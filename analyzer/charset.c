/* SPDX-License-Identifier: MIT */
/* What text for people may hold (charset.h). */
#define _GNU_SOURCE
#include "charset.h"

#include <errno.h>
#include <langinfo.h>
#include <locale.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "vramtrace/error.h"
#include "vramtrace/utf8.h"

static bool utf8 = true;

void vrt_charset_init(void)
{
	if (setlocale(LC_CTYPE, "")) {
		const char *codeset = nl_langinfo(CODESET);
		utf8 = !strcasecmp(codeset, "UTF-8") || !strcasecmp(codeset, "UTF8");
		setlocale(LC_CTYPE, "C");
		return;
	}
	utf8 = vrt_locale_name_utf8(); /* a locale this machine does not have: its name says the set */
}

void vrt_charset_set_utf8(bool on) { utf8 = on; }
bool vrt_charset_utf8(void) { return utf8; }
const char *vrt_ellipsis(void) { return utf8 ? "\u2026" : "..."; }
int vrt_ellipsis_columns(void) { return utf8 ? 1 : 3; }

/* c as \xNN at out: 4 bytes. */
static size_t put_escaped(char *out, unsigned char c)
{
	static const char hex[] = "0123456789abcdef";
	out[0] = '\\';
	out[1] = 'x';
	out[2] = hex[c >> 4];
	out[3] = hex[c & 15];
	return 4;
}

void vrt_charset_shown(const char *in, char *out, size_t cap)
{
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)in; *p && o + 1 < cap; p++) {
		if (utf8 || *p < 0x80)
			out[o++] = (char)*p;
		else if (o + 5 <= cap)
			o += put_escaped(out + o, *p);
		else
			break;
	}
	if (cap)
		out[o] = 0;
}

/* ---- the guarded streams: what is written goes to the descriptor, bytes above 0x7f as \xNN */

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static ssize_t guarded_write(void *cookie, const char *buf, size_t size)
{
	int fd = (int)(intptr_t)cookie;
	char out[4096];
	size_t o = 0;
	for (size_t i = 0; i < size; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (o + 4 > sizeof(out)) {
			if (write_all(fd, out, o))
				return -1;
			o = 0;
		}
		if (c < 0x80)
			out[o++] = (char)c;
		else
			o += put_escaped(out + o, c);
	}
	if (o && write_all(fd, out, o))
		return -1;
	return (ssize_t)size;
}

static FILE *guarded(int fd, int mode)
{
	cookie_io_functions_t io = { .write = guarded_write };
	FILE *f = fopencookie((void *)(intptr_t)fd, "w", io);
	if (f)
		setvbuf(f, NULL, mode, 0);
	return f;
}

int vrt_charset_guard_streams(bool with_output)
{
	if (utf8)
		return 0;
	fflush(stdout);
	fflush(stderr);
	FILE *out = with_output ? guarded(STDOUT_FILENO, isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF) : stdout;
	FILE *err = guarded(STDERR_FILENO, _IONBF);
	if (!out || !err) {
		if (out && out != stdout)
			fclose(out);
		if (err)
			fclose(err);
		return VRT_E_NOMEM;
	}
	stdout = out;
	stderr = err;
	return 0;
}
