/* SPDX-License-Identifier: MIT */
/* Minimal JSON output helpers: the analyzer writes JSON by hand, streaming. */
#ifndef VRAMTRACE_JSON_H
#define VRAMTRACE_JSON_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "vramtrace/utf8.h"

/*
 * A JSON string, in ASCII whatever it holds: other characters as \uXXXX (a surrogate pair past
 * U+FFFF), so the document reads the same in every locale and through charset.h's guarded
 * streams. A byte that is not UTF-8 (a path from the command line can hold any) is written as the
 * text \xNN, as the reports show it: the document stays valid JSON.
 */
static inline void json_string(FILE *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t left = strlen((const char *)p);
	fputc('"', out);
	while (left) {
		size_t plain = 0; /* printable ASCII but the two escaped: written as it is, in one go */
		while (plain < left && p[plain] >= 0x20 && p[plain] < 0x7f && p[plain] != '"' && p[plain] != '\\')
			plain++;
		if (plain) {
			fwrite(p, 1, plain, out);
			p += plain;
			left -= plain;
			continue;
		}
		uint32_t cp;
		size_t n = vrt_utf8_decode(p, left, &cp);
		if (!n) {
			fprintf(out, "\\\\x%02x", *p);
			n = 1;
		} else if (cp == '"' || cp == '\\') {
			fputc('\\', out);
			fputc((int)cp, out);
		} else if (cp == '\n') {
			fputs("\\n", out);
		} else if (cp == '\r') {
			fputs("\\r", out);
		} else if (cp == '\t') {
			fputs("\\t", out);
		} else if (cp >= 0x20 && cp < 0x7f) {
			fputc((int)cp, out);
		} else if (cp < 0x10000) {
			fprintf(out, "\\u%04x", (unsigned)cp);
		} else {
			cp -= 0x10000;
			fprintf(out, "\\u%04x\\u%04x", 0xd800 + (unsigned)(cp >> 10), 0xdc00 + (unsigned)(cp & 0x3ff));
		}
		p += n;
		left -= n;
	}
	fputc('"', out);
}

#endif /* VRAMTRACE_JSON_H */
