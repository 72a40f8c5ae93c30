/* A growable byte buffer with a hard cap (curl's dynbuf idea): growing past the
 * cap is an error value, never an unbounded allocation. */
#ifndef TPF_UTIL_BUF_H
#define TPF_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct buf {
    char *data;   /* always NUL-terminated when non-NULL */
    size_t len;
    size_t cap;   /* allocated bytes */
    size_t max;   /* hard cap on len; 0 means BUF_DEFAULT_MAX */
    int err;      /* first error (sticky): TPF_ENOMEM or TPF_ETOOBIG */
} buf;

#define BUF_DEFAULT_MAX ((size_t)1 << 30)
#define BUF_INIT {NULL, 0, 0, 0, 0}

/* Set the cap before the first append. */
void buf_init(buf *b, size_t max);
/* Frees data; b can be reused after buf_init. */
void buf_free(buf *b);
void buf_reset(buf *b);
/* Append; return 0 or the sticky error. */
int buf_append(buf *b, const void *p, size_t n);
int buf_puts(buf *b, const char *s);
int buf_putc(buf *b, char c);
int buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#endif
