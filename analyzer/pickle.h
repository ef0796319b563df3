/* SPDX-License-Identifier: MIT */
/* Just enough of Python's pickle protocol 2 to write PyTorch's memory snapshot: dicts, lists,
 * strings, integers, booleans, None, 2-tuples and the memo. Streaming; the caller balances begin/end. */
#ifndef VRAMTRACE_PICKLE_H
#define VRAMTRACE_PICKLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

void pk_begin(FILE *f);
void pk_end(FILE *f);
void pk_dict_begin(FILE *f);
void pk_dict_end(FILE *f);
void pk_list_begin(FILE *f);
void pk_list_end(FILE *f);
void pk_str(FILE *f, const char *s);
void pk_int(FILE *f, int64_t v);
void pk_bool(FILE *f, bool v);
void pk_none(FILE *f);
void pk_tuple2_int(FILE *f, int64_t a, int64_t b);
/* The memo: put stores the object just built under index i; get pushes it again (shared). */
void pk_put(FILE *f, uint32_t i);
void pk_get(FILE *f, uint32_t i);
/* key: value pairs inside a dict */
void pk_key_str(FILE *f, const char *key, const char *value);
void pk_key_int(FILE *f, const char *key, int64_t value);

#endif /* VRAMTRACE_PICKLE_H */
