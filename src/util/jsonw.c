#include "util/jsonw.h"

#include <math.h>
#include <string.h>

#include "trainperf.h"

void jw_init(jw *w, buf *out, int pretty)
{
    memset(w, 0, sizeof(*w));
    w->out = out;
    w->pretty = pretty;
    w->first[0] = 1;
}

static void jw_indent(jw *w)
{
    buf_putc(w->out, '\n');
    for (int i = 0; i < w->depth; i++) buf_puts(w->out, "  ");
}

/* Separator before a value or key at the current depth. */
static void jw_pre(jw *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (!w->first[w->depth]) buf_putc(w->out, ',');
    w->first[w->depth] = 0;
    if (w->pretty && w->depth > 0) jw_indent(w);
}

static void jw_open(jw *w, char c)
{
    jw_pre(w);
    buf_putc(w->out, c);
    if (w->depth + 1 >= JW_MAX_DEPTH) {
        w->err = TPF_EINVAL;
        return;
    }
    w->depth++;
    w->first[w->depth] = 1;
}

static void jw_close(jw *w, char c)
{
    if (w->depth == 0) {
        w->err = TPF_EINVAL;
        return;
    }
    int empty = w->first[w->depth];
    w->depth--;
    if (w->pretty && !empty) jw_indent(w);
    buf_putc(w->out, c);
}

void jw_obj_begin(jw *w) { jw_open(w, '{'); }
void jw_obj_end(jw *w) { jw_close(w, '}'); }
void jw_arr_begin(jw *w) { jw_open(w, '['); }
void jw_arr_end(jw *w) { jw_close(w, ']'); }

void jw_key(jw *w, const char *k)
{
    jw_pre(w);
    json_escape(w->out, k, strlen(k));
    buf_puts(w->out, w->pretty ? ": " : ":");
    w->after_key = 1;
}

void jw_str(jw *w, const char *s)
{
    if (!s) {
        jw_null(w);
        return;
    }
    jw_strn(w, s, strlen(s));
}

void jw_strn(jw *w, const char *s, size_t n)
{
    jw_pre(w);
    json_escape(w->out, s, n);
}

void jw_num(jw *w, double v)
{
    jw_pre(w);
    if (!isfinite(v))
        buf_puts(w->out, "null");
    else if (fabs(v) < 1e15 && v == (double)(int64_t)v) /* range first: the cast of a larger value is UB */
        buf_printf(w->out, "%lld", (long long)v);
    else
        buf_printf(w->out, "%.10g", v);
}

void jw_numf(jw *w, double v, int decimals)
{
    jw_pre(w);
    if (!isfinite(v))
        buf_puts(w->out, "null");
    else
        buf_printf(w->out, "%.*f", decimals, v);
}

void jw_int(jw *w, int64_t v)
{
    jw_pre(w);
    buf_printf(w->out, "%lld", (long long)v);
}

void jw_uint(jw *w, uint64_t v)
{
    jw_pre(w);
    buf_printf(w->out, "%llu", (unsigned long long)v);
}

void jw_bool(jw *w, int v)
{
    jw_pre(w);
    buf_puts(w->out, v ? "true" : "false");
}

void jw_null(jw *w)
{
    jw_pre(w);
    buf_puts(w->out, "null");
}

void jw_kstr(jw *w, const char *k, const char *s) { jw_key(w, k); jw_str(w, s); }
void jw_knum(jw *w, const char *k, double v) { jw_key(w, k); jw_num(w, v); }
void jw_kint(jw *w, const char *k, int64_t v) { jw_key(w, k); jw_int(w, v); }
void jw_kuint(jw *w, const char *k, uint64_t v) { jw_key(w, k); jw_uint(w, v); }
void jw_kbool(jw *w, const char *k, int v) { jw_key(w, k); jw_bool(w, v); }

void jw_doc_begin(jw *w, buf *out, const char *version_key, int version)
{
    jw_init(w, out, 1);
    jw_obj_begin(w);
    jw_kint(w, version_key, version);
}

void jw_fields(jw *w, const void *base, const jw_field *f, size_t n)
{
    const char *p = base;
    for (size_t i = 0; i < n; i++) {
        const void *m = p + f[i].off;
        jw_key(w, f[i].key);
        switch (f[i].type) {
        case JWF_INT: jw_int(w, *(const int *)m); break;
        case JWF_I64: jw_int(w, *(const int64_t *)m); break;
        case JWF_U64: jw_uint(w, *(const uint64_t *)m); break;
        case JWF_DBL: jw_num(w, *(const double *)m); break;
        case JWF_STR: jw_str(w, (const char *)m); break;
        case JWF_STRZ: jw_str(w, *(const char *)m ? (const char *)m : NULL); break;
        case JWF_PSTR: jw_str(w, *(const char *const *)m); break;
        case JWF_BOOL: jw_bool(w, *(const int *)m != 0); break;
        default: jw_null(w); break;
        }
    }
}

void jw_fields_obj(jw *w, const void *base, const jw_field *f, size_t n)
{
    jw_obj_begin(w);
    jw_fields(w, base, f, n);
    jw_obj_end(w);
}

int jw_error(const jw *w) { return w->err ? w->err : w->out->err; }

/* Length of a valid UTF-8 sequence starting at s (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; min = 0x10000; }
    else return 0;
    if (len > n) return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

int json_escape(buf *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    buf_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            buf_putc(b, '\\');
            buf_putc(b, (char)c);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            switch (c) {
            case '\n': buf_puts(b, "\\n"); break;
            case '\r': buf_puts(b, "\\r"); break;
            case '\t': buf_puts(b, "\\t"); break;
            default: buf_printf(b, "\\u%04x", c);
            }
            i++;
        } else if (c == '<' || c == '>' || c == '&') {
            /* Safe to embed in HTML <script> blocks as well. */
            buf_printf(b, "\\u%04x", c);
            i++;
        } else {
            size_t l = utf8_len(p + i, n - i);
            if (l == 0) {
                buf_puts(b, "\\ufffd");
                i++;
            } else {
                buf_append(b, p + i, l);
                i += l;
            }
        }
    }
    return buf_putc(b, '"');
}

void jw_knums(jw *w, const char *key, const double *v, size_t n)
{
    jw_key(w, key);
    jw_arr_begin(w);
    for (size_t i = 0; i < n; i++) jw_num(w, v[i]);
    jw_arr_end(w);
}
