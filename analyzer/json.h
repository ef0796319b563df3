/* SPDX-License-Identifier: MIT */
/* Minimal JSON output helpers: the analyzer writes JSON by hand, streaming. */
#ifndef VRAMTRACE_JSON_H
#define VRAMTRACE_JSON_H

#include <stdio.h>

static inline void json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", out); break;
		case '\\': fputs("\\\\", out); break;
		case '\n': fputs("\\n", out); break;
		case '\r': fputs("\\r", out); break;
		case '\t': fputs("\\t", out); break;
		default:
			if (*p < 0x20)
				fprintf(out, "\\u%04x", *p);
			else
				fputc(*p, out);
		}
	}
	fputc('"', out);
}

#endif /* VRAMTRACE_JSON_H */
