/* json: building JSON answers with cJSON without its pitfalls: integers travel as
 * doubles (exact only to 2^53), strings are copied byte for byte (invalid UTF-8 would
 * make invalid JSON) and U+2028/U+2029 are printed raw (json_print escapes them). Any
 * thread. The json_add_* functions return 0, or -1 when out of memory (the object is
 * then incomplete and the caller drops it). */
#ifndef QUERYD_JSON_H
#define QUERYD_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* A malloc'd NUL-terminated copy of len bytes, invalid UTF-8 sequences (and NUL)
 * replaced by U+FFFD; NULL when out of memory. */
char *json_utf8_dup(const char *s, size_t len);

/* A string item from len bytes, invalid UTF-8 sequences replaced by U+FFFD. The
 * caller owns the result; NULL when out of memory. */
cJSON *json_string(const char *s, size_t len);

/* An exact integer item (printed from the int64, never through a double). */
cJSON *json_int(int64_t v);
cJSON *json_uint(uint64_t v);

/* The text of item, without whitespace: the one writer of queryd's JSON (answers and
 * NDJSON lines). U+2028 and U+2029 come out as \u2028 and \u2029: JSON allows them
 * raw, but JavaScript before ES2019 refuses them in a string literal (eval, a
 * <script>) and some NDJSON readers split lines on them. A malloc'd string; NULL when
 * out of memory. */
char *json_print(const cJSON *item);

/* Adds item under name; the object takes it. item NULL (out of memory) is -1. */
int json_add(cJSON *obj, const char *name, cJSON *item);
int json_add_int(cJSON *obj, const char *name, int64_t v);
int json_add_str(cJSON *obj, const char *name, const char *s);   /* NULL: null */
int json_add_double(cJSON *obj, const char *name, double v);    /* not finite: null */
int json_add_null(cJSON *obj, const char *name);

#endif
