/* SPDX-License-Identifier: MIT */
/*
 * Whether text for people may hold UTF-8 (charset.c). A terminal set up for another character
 * set (LC_ALL=C, a Latin-1 locale) shows UTF-8's bytes as other characters, and some of them
 * (0x80-0x9f) as its C1 controls: there, the analyzer's own characters have ASCII forms, and its
 * standard output and error show every other byte above 0x7f as \xNN. Files in a format of
 * their own (JSON, HTML, CSV written with -o, exports) are UTF-8 or ASCII in every locale.
 */
#ifndef VRAMTRACE_CHARSET_H
#define VRAMTRACE_CHARSET_H

#include <stdbool.h>
#include <stddef.h>

/* Reads the locale's character set from the environment (LC_ALL, LC_CTYPE, LANG); once, in
 * main, before anything is written. The process's own locale stays "C". */
void vrt_charset_init(void);
/* Sets it (tests, and the library's users, which never call vrt_charset_init). */
void vrt_charset_set_utf8(bool utf8);
bool vrt_charset_utf8(void);

/* in as the guarded streams would show it (in UTF-8: in itself), into out (cut at cap): text whose
 * width is measured before it is written, so that it is measured as shown. */
void vrt_charset_shown(const char *in, char *out, size_t cap);

/* "…" (one column), or "..." (three). */
const char *vrt_ellipsis(void);
int vrt_ellipsis_columns(void);

/* Where text is not UTF-8: standard error, and standard output unless it may carry a file
 * format of its own (with_output false), escape bytes above 0x7f from here on. 0, or
 * VRT_E_NOMEM (the streams are as they were). */
int vrt_charset_guard_streams(bool with_output);

#endif /* VRAMTRACE_CHARSET_H */
