/* SPDX-License-Identifier: MIT */
#include "pickle.h"

#include <string.h>

enum {
	PROTO = 0x80, STOP = '.', MARK = '(', EMPTY_DICT = '}', SETITEMS = 'u', EMPTY_LIST = ']', APPENDS = 'e',
	BINUNICODE = 'X', BININT = 'J', LONG1 = 0x8a, NONE = 'N', NEWTRUE = 0x88, NEWFALSE = 0x89, TUPLE2 = 0x86,
	LONG_BINPUT = 'r', LONG_BINGET = 'j',
};

static void u32(FILE *f, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		fputc((int)((v >> (8 * i)) & 0xff), f);
}

void pk_begin(FILE *f)
{
	fputc(PROTO, f);
	fputc(2, f);
}

void pk_end(FILE *f) { fputc(STOP, f); }

/* Containers are built as EMPTY + MARK ... SETITEMS/APPENDS: one mark per container. */
void pk_dict_begin(FILE *f)
{
	fputc(EMPTY_DICT, f);
	fputc(MARK, f);
}

void pk_dict_end(FILE *f) { fputc(SETITEMS, f); }

void pk_list_begin(FILE *f)
{
	fputc(EMPTY_LIST, f);
	fputc(MARK, f);
}

void pk_list_end(FILE *f) { fputc(APPENDS, f); }

void pk_str(FILE *f, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	fputc(BINUNICODE, f);
	u32(f, (uint32_t)n);
	fwrite(s ? s : "", 1, n, f);
}

void pk_int(FILE *f, int64_t v)
{
	if (v >= INT32_MIN && v <= INT32_MAX) {
		fputc(BININT, f);
		u32(f, (uint32_t)(int32_t)v);
		return;
	}
	fputc(LONG1, f);
	fputc(8, f);
	for (int i = 0; i < 8; i++)
		fputc((int)(((uint64_t)v >> (8 * i)) & 0xff), f);
}

void pk_bool(FILE *f, bool v) { fputc(v ? NEWTRUE : NEWFALSE, f); }

void pk_none(FILE *f) { fputc(NONE, f); }

void pk_tuple2_int(FILE *f, int64_t a, int64_t b)
{
	pk_int(f, a);
	pk_int(f, b);
	fputc(TUPLE2, f);
}

void pk_key_str(FILE *f, const char *key, const char *value)
{
	pk_str(f, key);
	pk_str(f, value);
}

void pk_key_int(FILE *f, const char *key, int64_t value)
{
	pk_str(f, key);
	pk_int(f, value);
}

void pk_put(FILE *f, uint32_t i)
{
	fputc(LONG_BINPUT, f);
	u32(f, i);
}

void pk_get(FILE *f, uint32_t i)
{
	fputc(LONG_BINGET, f);
	u32(f, i);
}
