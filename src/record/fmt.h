/* A line builder on the stack: per-event rows (steps.csv, trace events) are
 * assembled with plain stores and handed to the buf with one append, since
 * at a million events a second the per-call cost of buf_putc/printf is the
 * collector's largest cost. The caller sizes the array for the longest line
 * (callers check names against it first). */
#ifndef TPF_RECORD_FMT_H
#define TPF_RECORD_FMT_H

#include <stdint.h>
#include <string.h>

typedef struct fmt_line {
    char *p;
} fmt_line;

static inline void fmt_mem(fmt_line *l, const char *s, size_t n)
{
    memcpy(l->p, s, n);
    l->p += n;
}

#define FMT_LIT(l, lit) fmt_mem((l), (lit), sizeof(lit) - 1)

static inline void fmt_u64(fmt_line *l, uint64_t v)
{
    char t[20], *q = t + sizeof(t);
    do {
        *--q = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    fmt_mem(l, q, (size_t)(t + sizeof(t) - q));
}

static inline void fmt_i64(fmt_line *l, int64_t v)
{
    if (v < 0) {
        *l->p++ = '-';
        fmt_u64(l, (uint64_t)0 - (uint64_t)v);
    } else {
        fmt_u64(l, (uint64_t)v);
    }
}

/* v / 10^decimals, exactly `decimals` (1..18) digits after the point. */
static inline void fmt_fixed(fmt_line *l, int64_t v, int decimals)
{
    uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0) *l->p++ = '-';
    char t[24], *q = t + sizeof(t);
    for (int i = 0; i < decimals; i++) {
        *--q = (char)('0' + m % 10);
        m /= 10;
    }
    *--q = '.';
    do {
        *--q = (char)('0' + m % 10);
        m /= 10;
    } while (m);
    fmt_mem(l, q, (size_t)(t + sizeof(t) - q));
}

/* 1 when s (length n) can go into a JSON string as it is: printable ASCII
 * without quote or backslash (the common case for range names). */
static inline int fmt_json_plain(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&')
            return 0;
    }
    return 1;
}

#endif
