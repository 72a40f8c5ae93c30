/* A small bounded DOM JSON reader for the run directory's JSON files
 * (run.json, summary.json, one alerts.jsonl line). The whole text is parsed
 * into a tree of nodes; limits on input size, node count and depth make a
 * hostile or damaged file an error value, never unbounded memory. */
#ifndef TPF_UTIL_JSONR_H
#define TPF_UTIL_JSONR_H

#include <stddef.h>

#include "util/jsonw.h"

typedef enum jr_type { JR_NULL, JR_BOOL, JR_NUM, JR_STR, JR_ARR, JR_OBJ } jr_type;

typedef struct jr_node {
    jr_type type;
    double num;            /* JR_NUM value; JR_BOOL 0/1 */
    const char *str;       /* JR_STR decoded, NUL-terminated; \u0000 becomes U+FFFD */
    const char *key;       /* member name when inside an object, else NULL */
    struct jr_node *child; /* first element/member (JR_ARR, JR_OBJ) */
    struct jr_node *next;  /* next sibling */
    int count;             /* elements/members */
    size_t off, end;       /* byte span of the value in the source text */
} jr_node;

typedef struct jr_block jr_block;

typedef struct jr_doc {
    jr_node *root;
    char *text; /* owned copy of the source when loaded from a file */
    size_t text_len;
    char *strs;       /* decoded strings */
    jr_block *blocks; /* node storage */
    size_t nodes;
} jr_doc;

#define JR_MAX_DEPTH 64
#define JR_DEFAULT_MAX_NODES ((size_t)1 << 20)
#define JR_DEFAULT_MAX_BYTES ((size_t)64 << 20)

/* Parse text[0..n) (need not be NUL-terminated; not copied, must outlive d
 * unless loaded with jr_load_file). max_nodes 0: default. Returns 0,
 * TPF_EFORMAT with "position N: expected ..." in err, TPF_ETOOBIG or
 * TPF_ENOMEM. On error d holds nothing to free; on success free with jr_free. */
int jr_parse(jr_doc *d, const char *text, size_t n, size_t max_nodes, char *err, size_t errlen);
/* Read and parse a file of at most max_bytes (0: default). TPF_ENOENT,
 * TPF_EIO, TPF_ETOOBIG, TPF_EFORMAT with a reason in err. */
int jr_load_file(jr_doc *d, const char *path, size_t max_bytes, char *err, size_t errlen);
void jr_free(jr_doc *d);

/* Lookups: NULL when absent or n is not of the right type. */
const jr_node *jr_get(const jr_node *obj, const char *key);
/* Dotted path of object keys: "steps.step_time_ms.p50". */
const jr_node *jr_path(const jr_node *n, const char *path);
const jr_node *jr_at(const jr_node *arr, int i);

/* The number at n, or NAN when n is missing, null or not a number. */
double jr_num(const jr_node *n);
/* jr_num(jr_path(n, path)). */
double jr_pnum(const jr_node *n, const char *path);
/* The string at n, or NULL. */
const char *jr_str(const jr_node *n);
const char *jr_pstr(const jr_node *n, const char *path);

/* The members that f lists (a jw_fields table), read from object obj into
 * base: the reverse of jw_fields, so one table gives both directions. DBL:
 * the number, NAN when missing or not a number. INT, I64, U64: left as they
 * are when missing or not a finite number (the caller's default), 0 when out
 * of the member's range (a damaged file never makes a cast of NaN or of a
 * huge value). STR, STRZ: copied, cut to the array; "" when missing. BOOL: set from
 * true/false, left as it is otherwise. PSTR
 * members are not read (the struct holds no storage for them). */
void jr_fields(const jr_node *obj, void *base, const jw_field *f, size_t n);

/* The objects of array arr (at most max) read into out[0..] (structs of
 * `size` bytes, each zeroed first) through the table f; returns how many.
 * Not an array: 0. */
int jr_array(const jr_node *arr, void *out, size_t size, int max, const jw_field *f, size_t n);

/* Write a parsed value (and what it holds) into w: integers stay exact,
 * nesting past 16 levels is written as null. */
void jr_write(jw *w, const jr_node *n);

#endif
