#include "util/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"

void buf_init(buf *b, size_t max)
{
    memset(b, 0, sizeof(*b));
    b->max = max;
}

void buf_free(buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->err = 0;
}

void buf_reset(buf *b)
{
    b->len = 0;
    b->err = 0;
    if (b->data) b->data[0] = '\0';
}

static int buf_reserve(buf *b, size_t extra)
{
    size_t max = b->max ? b->max : BUF_DEFAULT_MAX;
    if (b->err) return b->err;
    if (extra > max || b->len > max - extra) return b->err = TPF_ETOOBIG;
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return 0;
    size_t ncap = b->cap ? b->cap : 256;
    while (ncap < need) ncap *= 2;
    if (ncap > max + 1) ncap = max + 1;
    char *p = realloc(b->data, ncap);
    if (!p) return b->err = TPF_ENOMEM;
    b->data = p;
    b->cap = ncap;
    return 0;
}

int buf_append(buf *b, const void *p, size_t n)
{
    int rc = buf_reserve(b, n);
    if (rc) return rc;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_puts(buf *b, const char *s) { return buf_append(b, s, strlen(s)); }

int buf_putc(buf *b, char c) { return buf_append(b, &c, 1); }

int buf_vprintf(buf *b, const char *fmt, va_list ap)
{
    char small[256];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    if (n < 0) {
        va_end(ap2);
        return b->err ? b->err : (b->err = TPF_EINVAL);
    }
    if ((size_t)n < sizeof(small)) {
        va_end(ap2);
        return buf_append(b, small, (size_t)n);
    }
    int rc = buf_reserve(b, (size_t)n);
    if (rc == 0) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
    return rc;
}

int buf_printf(buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}
