/* A small streaming JSON writer into a buf. Commas and nesting are tracked so
 * callers only say what comes next. Non-finite numbers are written as null. */
#ifndef TPF_UTIL_JSONW_H
#define TPF_UTIL_JSONW_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define JW_MAX_DEPTH 32

typedef struct jw {
    buf *out;
    int depth;
    int pretty;                      /* indent with two spaces */
    unsigned char first[JW_MAX_DEPTH]; /* no element written yet at this depth */
    unsigned char after_key;
    int err;
} jw;

void jw_init(jw *w, buf *out, int pretty);
void jw_obj_begin(jw *w);
void jw_obj_end(jw *w);
void jw_arr_begin(jw *w);
void jw_arr_end(jw *w);
void jw_key(jw *w, const char *k);
void jw_str(jw *w, const char *s);           /* NULL writes null */
void jw_strn(jw *w, const char *s, size_t n);
void jw_num(jw *w, double v);                /* %.10g; NaN/inf -> null */
/* Fixed point with `decimals` digits after the point (times that need more
 * than %.10g keeps, e.g. Unix seconds with microseconds); NaN/inf -> null. */
void jw_numf(jw *w, double v, int decimals);
void jw_int(jw *w, int64_t v);
void jw_uint(jw *w, uint64_t v);
void jw_bool(jw *w, int v);
void jw_null(jw *w);
/* Shorthands for "key": value inside an object. */
void jw_kstr(jw *w, const char *k, const char *s);
void jw_knum(jw *w, const char *k, double v);
void jw_kint(jw *w, const char *k, int64_t v);
void jw_kuint(jw *w, const char *k, uint64_t v);
void jw_kbool(jw *w, const char *k, int v);
/* A JSON document that starts with its format version: jw_init (pretty),
 * "{" and "version_key": version. */
void jw_doc_begin(jw *w, buf *out, const char *version_key, int version);

/* Struct members written as "key": value, described once as a table
 * (JW_FIELD rows) instead of one jw_k* call per member. The same table reads
 * them back from a parsed object (jr_fields, util/jsonr.h). */
enum {
    JWF_INT,  /* int */
    JWF_I64,  /* int64_t */
    JWF_U64,  /* uint64_t */
    JWF_DBL,  /* double; NaN -> null */
    JWF_STR,  /* char array */
    JWF_STRZ, /* char array; empty -> null */
    JWF_PSTR, /* const char *; NULL -> null */
    JWF_BOOL, /* int; non-zero -> true */
};
typedef struct jw_field {
    const char *key;
    int type;
    size_t off;
    size_t size; /* of the member: a reader (jr_fields) cuts strings to it */
} jw_field;
#define JW_FIELD(type, key, T, member)                                                             \
    {key, JWF_##type, offsetof(T, member), sizeof(((T *)0)->member)}
#define JW_NFIELDS(f) (sizeof(f) / sizeof((f)[0]))
/* The members of `base` that `f` lists, inside the current object. */
void jw_fields(jw *w, const void *base, const jw_field *f, size_t n);
/* "key": [v0, v1, ...] (NaN -> null). */
void jw_knums(jw *w, const char *key, const double *v, size_t n);
/* The same as one object: {members}. */
void jw_fields_obj(jw *w, const void *base, const jw_field *f, size_t n);

/* 0, or the first error (nesting misuse: TPF_EINVAL; buffer: buf's error). */
int jw_error(const jw *w);

/* Append s as a JSON string literal (with quotes), escaping control
 * characters, quotes, backslashes and invalid UTF-8 (as U+FFFD). */
int json_escape(buf *b, const char *s, size_t n);

#endif
