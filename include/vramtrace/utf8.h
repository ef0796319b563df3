/* SPDX-License-Identifier: MIT */
/*
 * UTF-8 as the preload and the reader both handle it: decoding what others wrote (names, paths,
 * settings) to decide what a terminal may be shown as it is, encoding code points, and whether
 * the locale the environment names is UTF-8. Header-only: the preload links nothing of the
 * reader's.
 */
#ifndef VRAMTRACE_UTF8_H
#define VRAMTRACE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The character at p (n > 0 bytes there): its length, with *cp its code point; 0 where p holds
 * no well-formed character (overlong, a surrogate, past U+10FFFF, cut short). */
static inline size_t vrt_utf8_decode(const uint8_t *p, size_t n, uint32_t *cp)
{
	if (p[0] < 0x80) {
		*cp = p[0];
		return 1;
	}
	size_t len = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 && p[0] <= 0xef ? 3 : p[0] >= 0xc2 && p[0] < 0xe0 ? 2 : 0;
	if (!len || len > n)
		return 0;
	uint32_t v = p[0] & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (p[i] & 0x3f);
	}
	static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	if (v < least[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

/* Code points never given to a terminal as they are: C0 and C1 controls, DEL, and the bidi
 * controls that reorder what follows them. */
static inline bool vrt_utf8_escaped(uint32_t cp)
{
	return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) || (cp >= 0x202a && cp <= 0x202e) ||
	       (cp >= 0x2066 && cp <= 0x2069);
}

/* cp (at most U+10FFFF, no surrogate) as UTF-8 at out; returns the bytes written (1 to 4). */
static inline size_t vrt_utf8_encode(char *out, uint32_t cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Whether the locale the environment names (LC_ALL, LC_CTYPE, LANG, as setlocale picks it) is
 * UTF-8 by its name's codeset ("en_US.UTF-8@euro"): for a process that may not set or ask its
 * own locale (the preload), or whose machine lacks the locale named (the analyzer). */
static inline bool vrt_locale_name_utf8(void)
{
	static const char *const vars[] = { "LC_ALL", "LC_CTYPE", "LANG" };
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);
		if (!v || !*v)
			continue;
		const char *dot = strchr(v, '.');
		if (!dot)
			return false;
		char codeset[32];
		snprintf(codeset, sizeof(codeset), "%.*s", (int)strcspn(dot + 1, "@"), dot + 1);
		return !strcasecmp(codeset, "UTF-8") || !strcasecmp(codeset, "UTF8");
	}
	return false;
}

#endif /* VRAMTRACE_UTF8_H */
