/* Streaming tokenizer for Chrome/Kineto traces: one fixed read buffer, events
 * decoded in place and handed out one by one (see trace_json.h). */
#include "trace/trace_json.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "trainperf.h"
#include "util/err.h"

#define JS_BUFSZ (256 * 1024)
#define JS_MAX_DEPTH 256
#define JS_CAPTURE_MAX ((size_t)64 << 20) /* one event's raw text (merge) */
#define JS_NUM_MAX 64

/* The file: plain text read as it is, or gzip members one after the other
 * (as gzip and zlib's gzread take them). Unlike gzread it counts what
 * follows the last member (which gzread, and so we, ignore; Python's gzip
 * rejects it) so that it can be said. */
#define ZR_INSZ (128 * 1024)

typedef struct zrd {
    int fd;
    int gzip, started, inflating, done;
    z_stream z;
    unsigned char *in;
    uint64_t produced;      /* bytes handed out */
    uint64_t trailing;      /* bytes after the last member */
    char msg[256];
} zrd;

static zrd *zr_open(int fd)
{
    zrd *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->fd = fd;
    if (!(r->in = malloc(ZR_INSZ))) {
        free(r);
        return NULL;
    }
    return r;
}

static void zr_close(zrd *r)
{
    if (!r) return;
    if (r->gzip) inflateEnd(&r->z);
    close(r->fd);
    free(r->in);
    free(r);
}

/* More input behind what is left; 1 read, 0 end of file, -1 error. */
static int zr_more(zrd *r)
{
    if (r->z.avail_in && r->z.next_in != r->in) memmove(r->in, r->z.next_in, r->z.avail_in);
    ssize_t n;
    do n = read(r->fd, r->in + r->z.avail_in, ZR_INSZ - r->z.avail_in);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        snprintf(r->msg, sizeof(r->msg), "read error after %llu bytes: %s", (unsigned long long)r->produced,
                 strerror(errno));
        return -1;
    }
    r->z.next_in = r->in;
    r->z.avail_in += (uInt)n;
    return n > 0;
}

/* Up to n bytes of the text: >0, 0 at its end, TPF_EIO / TPF_EFORMAT (msg). */
static int zr_read(zrd *r, unsigned char *out, unsigned n)
{
    if (r->done) return 0;
    if (!r->started) {
        r->started = 1;
        int m;
        while (r->z.avail_in < 2 && (m = zr_more(r)) > 0) {}
        if (r->msg[0]) return TPF_EIO;
        if (r->z.avail_in >= 2 && r->z.next_in[0] == 0x1f && r->z.next_in[1] == 0x8b) {
            if (inflateInit2(&r->z, 15 + 16) != Z_OK) {
                snprintf(r->msg, sizeof(r->msg), "out of memory");
                return TPF_ENOMEM;
            }
            r->gzip = r->inflating = 1;
        }
    }
    if (!r->gzip) { /* plain: what was looked at first, then the file */
        if (!r->z.avail_in && zr_more(r) < 0) return TPF_EIO;
        unsigned k = r->z.avail_in < n ? r->z.avail_in : n;
        memcpy(out, r->z.next_in, k);
        r->z.next_in += k;
        r->z.avail_in -= k;
        r->produced += k;
        if (!k) r->done = 1;
        return (int)k;
    }
    r->z.next_out = out;
    r->z.avail_out = n;
    while (r->z.avail_out == n) {
        if (!r->inflating) {
            /* after a member: another one, the end, or trailing bytes */
            int m = 1;
            while (r->z.avail_in < 2 && (m = zr_more(r)) > 0) {}
            if (m < 0) return TPF_EIO;
            if (r->z.avail_in == 0) {
                r->done = 1;
                break;
            }
            if (r->z.avail_in >= 2 && r->z.next_in[0] == 0x1f && r->z.next_in[1] == 0x8b) {
                inflateReset(&r->z);
                r->inflating = 1;
                continue;
            }
            uint64_t t = r->z.avail_in;
            r->z.avail_in = 0;
            while ((m = zr_more(r)) > 0) {
                t += r->z.avail_in;
                r->z.avail_in = 0;
            }
            if (m < 0) return TPF_EIO;
            r->trailing = t;
            r->done = 1;
            break;
        }
        if (!r->z.avail_in) {
            int m = zr_more(r);
            if (m < 0) return TPF_EIO;
            if (m == 0) {
                snprintf(r->msg, sizeof(r->msg), "corrupt or truncated gzip data after %llu bytes: unexpected end of file",
                         (unsigned long long)r->produced);
                return TPF_EFORMAT;
            }
        }
        int rc = inflate(&r->z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END) {
            r->inflating = 0;
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            if (rc == Z_MEM_ERROR) {
                snprintf(r->msg, sizeof(r->msg), "out of memory");
                return TPF_ENOMEM;
            }
            snprintf(r->msg, sizeof(r->msg), "corrupt or truncated gzip data after %llu bytes: %s",
                     (unsigned long long)r->produced, r->z.msg ? r->z.msg : "invalid data");
            return TPF_EFORMAT;
        }
    }
    unsigned k = n - r->z.avail_out;
    r->produced += k;
    return (int)k;
}

/* Inflating runs in its own thread, a few buffers ahead of the tokenizer,
 * so decompression and parsing overlap on two cores. */
#define RD_NBUF 4

typedef struct rdthr {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    zrd *gz;
    unsigned char *bufs[RD_NBUF];
    size_t lens[RD_NBUF];
    int cur;                /* slot the tokenizer reads */
    int filled;             /* filled slots after cur */
    int done, stop;
    int rc;                 /* error at the end of the filled data */
    uint64_t produced;
    char msg[256];
} rdthr;

typedef struct jsrc {
    rdthr *thr;
    zrd *gz;
    unsigned char *buf;
    size_t len, pos;
    uint64_t base;          /* file offset of buf[0] */
    int eof;
    int rc;                 /* first error */
    char *err;
    size_t errlen;
    uint64_t nonfinite;     /* NaN / Infinity / -Infinity literals read */
    int capturing;          /* raw capture wanted (merge) */
    int doubles;            /* TRACE_DOUBLE */
    int cap_on;             /* inside an event while capturing */
    size_t cap_from;
    buf cap;
} jsrc;

/* Per-event scratch, reused for every event (fixed size: no growth). */
typedef struct jscratch {
    char name[TRACE_STR_MAX + 1];
    char cat[256];
    char argname[256];
    char key[64];
    trace_carg cargs[TRACE_CARGS_MAX];
} jscratch;

static int js_fail(jsrc *s, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int js_fail(jsrc *s, int rc, const char *fmt, ...)
{
    if (s->rc) return s->rc;
    s->rc = rc;
    if (s->err && s->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->err, s->errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static uint64_t js_off(const jsrc *s) { return s->base + s->pos; }

/* Refill; 1 when bytes are available, 0 at end of input, <0 on error. */
static int js_fill(jsrc *s)
{
    if (s->rc) return s->rc;
    if (s->eof || (!s->gz && !s->thr)) {
        s->eof = 1;
        return 0;
    }
    if (s->cap_on) {
        if (buf_append(&s->cap, s->buf + s->cap_from, s->len - s->cap_from))
            return js_fail(s, TPF_ETOOBIG, "event at byte %llu is larger than %zu MiB",
                           (unsigned long long)js_off(s), JS_CAPTURE_MAX >> 20);
        s->cap_from = 0;
    }
    s->base += s->len;
    s->len = s->pos = 0;
    if (s->thr) {
        rdthr *t = s->thr;
        pthread_mutex_lock(&t->mu);
        while (!t->filled && !t->done) pthread_cond_wait(&t->cv, &t->mu);
        if (!t->filled) {
            int rc = t->rc;
            pthread_mutex_unlock(&t->mu);
            if (rc) return js_fail(s, rc, "%s", t->msg);
            s->eof = 1;
            return 0;
        }
        t->cur = (t->cur + 1) % RD_NBUF;
        t->filled--;
        s->buf = t->bufs[t->cur];
        s->len = t->lens[t->cur];
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        return 1;
    }
    int n = zr_read(s->gz, s->buf, JS_BUFSZ);
    if (n < 0) return js_fail(s, n, "%s", s->gz->msg);
    if (n == 0) {
        s->eof = 1;
        return 0;
    }
    s->len = (size_t)n;
    return 1;
}

static inline int js_peek(jsrc *s)
{
    if (s->pos < s->len) return s->buf[s->pos];
    return js_fill(s) > 0 ? s->buf[s->pos] : -1;
}

/* Skip whitespace; the next byte or -1 (end of input or error). */
static inline int js_ws(jsrc *s)
{
    for (;;) {
        while (s->pos < s->len) {
            unsigned char c = s->buf[s->pos];
            if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return c;
            s->pos++;
        }
        if (js_fill(s) <= 0) return -1;
    }
}

static int js_eof_error(jsrc *s, const char *what)
{
    if (s->rc) return s->rc;
    return js_fail(s, TPF_EFORMAT, "unexpected end of input at byte %llu inside %s (truncated file?)",
                   (unsigned long long)js_off(s), what);
}

static int js_expect(jsrc *s, int want, const char *ctx)
{
    int c = js_ws(s);
    if (c == want) {
        s->pos++;
        return 0;
    }
    if (c < 0) return js_eof_error(s, ctx);
    return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: expected '%c' in %s, found '%s%c'",
                   (unsigned long long)js_off(s), want, ctx, c < 32 ? "\\x" : "",
                   c < 32 ? '?' : c);
}

static void put_utf8(char *dst, size_t cap, size_t *n, unsigned cp)
{
    char t[4];
    size_t k;
    if (cp < 0x80) { t[0] = (char)cp; k = 1; }
    else if (cp < 0x800) { t[0] = (char)(0xC0 | (cp >> 6)); t[1] = (char)(0x80 | (cp & 0x3F)); k = 2; }
    else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12)); t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F)); k = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18)); t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); t[3] = (char)(0x80 | (cp & 0x3F)); k = 4;
    }
    for (size_t i = 0; i < k && *n < cap; i++) dst[(*n)++] = t[i];
}

static int js_hex4(jsrc *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int c = js_peek(s);
        if (c < 0) return js_eof_error(s, "a string");
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else
            return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: bad \\u escape",
                           (unsigned long long)js_off(s));
        s->pos++;
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 0;
}

/* A string value; the opening quote is next. dst == NULL skips it. The text
 * is truncated at cap-1 bytes and NUL-terminated. */
static int js_string(jsrc *s, char *dst, size_t cap, size_t *outlen)
{
    size_t n = 0;
    size_t lim = dst ? cap - 1 : 0;
    s->pos++; /* the quote (js_ws/peek made sure it is in the buffer) */
    for (;;) {
        const unsigned char *p = s->buf;
        size_t end = s->len;
        /* memchr is vectorised: find the quote, then any backslash before it. */
        const unsigned char *q = memchr(p + s->pos, '"', end - s->pos);
        size_t lim2 = q ? (size_t)(q - p) : end;
        const unsigned char *bs = memchr(p + s->pos, '\\', lim2 - s->pos);
        size_t i = bs ? (size_t)(bs - p) : lim2;
        if (dst && n < lim) {
            size_t k = i - s->pos;
            if (k > lim - n) k = lim - n;
            memcpy(dst + n, p + s->pos, k);
            n += k;
        }
        s->pos = i;
        if (i == end) {
            if (js_fill(s) <= 0) return js_eof_error(s, "a string");
            continue;
        }
        s->pos++;
        if (p[i] == '"') break;
        int c = js_peek(s);
        if (c < 0) return js_eof_error(s, "a string");
        s->pos++;
        char ch;
        switch (c) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            unsigned cp;
            int rc = js_hex4(s, &cp);
            if (rc) return rc;
            if (cp >= 0xD800 && cp < 0xDC00 && js_peek(s) == '\\') {
                /* A surrogate pair spells one code point. */
                s->pos++;
                if (js_peek(s) != 'u')
                    return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: bad escape",
                                   (unsigned long long)js_off(s));
                s->pos++;
                unsigned lo;
                if ((rc = js_hex4(s, &lo))) return rc;
                cp = (lo >= 0xDC00 && lo < 0xE000) ? 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                                                   : 0xFFFD;
            } else if (cp >= 0xD800 && cp < 0xE000) {
                cp = 0xFFFD;
            }
            if (dst) put_utf8(dst, lim, &n, cp);
            continue;
        }
        default:
            return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: bad escape '\\%c'",
                           (unsigned long long)(js_off(s) - 1), c >= 32 && c < 127 ? c : '?');
        }
        if (dst && n < lim) dst[n++] = ch;
    }
    if (dst) dst[n] = '\0';
    if (outlen) *outlen = n;
    return 0;
}

/* A number literal copied into nb (validated by the caller's parser). */
static inline int num_char(int c)
{
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

static int js_number(jsrc *s, char *nb, size_t *nlen)
{
    size_t n = 0;
    /* Fast path: the whole literal is inside the buffer. */
    {
        size_t i = s->pos, end = s->len;
        while (i < end && i - s->pos < JS_NUM_MAX - 1 && num_char(s->buf[i])) i++;
        if (i < end && i - s->pos < JS_NUM_MAX - 1) {
            n = i - s->pos;
            memcpy(nb, s->buf + s->pos, n);
            nb[n] = '\0';
            s->pos = i;
            *nlen = n;
            return 0;
        }
    }
    for (;;) {
        int c = js_peek(s);
        if (c < 0) {
            if (s->rc) return s->rc;
            break;
        }
        if (!num_char(c)) break;
        if (n >= JS_NUM_MAX - 1)
            return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: number too long",
                           (unsigned long long)js_off(s));
        nb[n++] = (char)c;
        s->pos++;
    }
    nb[n] = '\0';
    *nlen = n;
    return 0;
}

/* A number literal and where it started (for the error naming its byte).
 * nonfinite: it was -Infinity (not a number for any field, as NaN and
 * Infinity, which do not start like a number, are not). */
typedef struct jnum {
    char s[JS_NUM_MAX];
    size_t n;
    uint64_t at;
    int nonfinite;
} jnum;

static int js_word(jsrc *s, const char *w);

static int js_num(jsrc *s, jnum *t)
{
    t->at = js_off(s);
    t->nonfinite = 0;
    int rc = js_number(s, t->s, &t->n);
    if (!rc && t->n == 1 && t->s[0] == '-' && js_peek(s) == 'I') {
        if ((rc = js_word(s, "Infinity"))) return rc;
        t->nonfinite = 1;
        s->nonfinite++;
    }
    return rc;
}

static int num_start(int c) { return c == '-' || (c >= '0' && c <= '9'); }

static int js_bad_number(jsrc *s, uint64_t at)
{
    return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: malformed number",
                   (unsigned long long)at);
}

int trace_parse_us(const char *s, size_t n, int64_t *ns, int *frac)
{
    /* Fast path, the common shapes: up to 15 integer digits and at most 3
     * decimals ("1682725898236567", "4458676522690.655", "68.0"). */
    if (n && n <= 19 && s[0] >= '0' && s[0] <= '9' && !(s[0] == '0' && n > 1 && s[1] != '.')) {
        int64_t v = 0;
        size_t i = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9' && i < 15) v = v * 10 + (s[i++] - '0');
        if (i == n) {
            *ns = v * 1000;
            if (frac) *frac = 0;
            return 0;
        }
        if (s[i] == '.' && i + 1 < n && n - i - 1 <= 3) {
            size_t k = i + 1;
            int64_t f = 0;
            int nd = 0;
            while (k < n && s[k] >= '0' && s[k] <= '9') { f = f * 10 + (s[k++] - '0'); nd++; }
            if (k == n) {
                while (nd++ < 3) f *= 10;
                *ns = v * 1000 + f;
                if (frac) *frac = 1;
                return 0;
            }
        }
    }
    size_t i = 0;
    int neg = 0;
    uint64_t mant = 0;
    int digits = 0, dropped = 0, nfrac = 0, any = 0;
    int round_digit = -1; /* first dropped digit, for rounding */
    int isfrac = 0;
    if (i < n && s[i] == '-') { neg = 1; i++; }
    if (i >= n || s[i] < '0' || s[i] > '9') return TPF_EFORMAT;
    if (s[i] == '0' && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9') return TPF_EFORMAT;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        any = 1;
        if (digits < 18) { mant = mant * 10 + (uint64_t)(s[i] - '0'); if (mant) digits++; }
        else { if (round_digit < 0) round_digit = s[i] - '0'; dropped++; }
    }
    if (i < n && s[i] == '.') {
        isfrac = 1;
        i++;
        if (i >= n || s[i] < '0' || s[i] > '9') return TPF_EFORMAT;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (digits < 18) { mant = mant * 10 + (uint64_t)(s[i] - '0'); nfrac++; if (mant) digits++; }
            else if (round_digit < 0) round_digit = s[i] - '0';
        }
    }
    long exp10 = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        isfrac = 1;
        i++;
        int eneg = 0;
        if (i < n && (s[i] == '+' || s[i] == '-')) { eneg = s[i] == '-'; i++; }
        if (i >= n || s[i] < '0' || s[i] > '9') return TPF_EFORMAT;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            if (exp10 < 100000) exp10 = exp10 * 10 + (s[i] - '0');
        if (eneg) exp10 = -exp10;
    }
    if (i != n || !any) return TPF_EFORMAT;
    /* value = mant * 10^(dropped - nfrac + exp10) us = mant * 10^(that + 3) ns */
    long shift = (long)dropped - nfrac + exp10 + 3;
    uint64_t v = mant;
    if (mant == 0) {
        v = 0;
    } else if (shift >= 0) {
        for (long k = 0; k < shift; k++) {
            if (v > (uint64_t)INT64_MAX / 10) return TPF_ETOOBIG;
            v *= 10;
        }
    } else {
        int rd = round_digit;
        for (long k = 0; k < -shift; k++) {
            if (!v) { rd = 0; break; }
            rd = (int)(v % 10);
            v /= 10;
        }
        if (rd >= 5) v++;
    }
    if (v > (uint64_t)INT64_MAX) return TPF_ETOOBIG;
    *ns = neg ? -(int64_t)v : (int64_t)v;
    if (frac) *frac = isfrac;
    return 0;
}

/* JSON number grammar, without converting. */
static int num_valid(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n || s[i] < '0' || s[i] > '9') return 0;
    if (s[i] == '0' && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9') return 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || s[i] < '0' || s[i] > '9') return 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || s[i] < '0' || s[i] > '9') return 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    return i == n;
}

/* An integer-valued literal ("7", "-1", "1700000000000000000", "7.0"). */
static int parse_int_lit(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    uint64_t v = 0;
    if (i < n && s[i] == '-') { neg = 1; i++; }
    size_t d0 = i;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10) return TPF_ETOOBIG;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == n && i > d0 && v <= (uint64_t)INT64_MAX) {
        *out = neg ? -(int64_t)v : (int64_t)v;
        return 0;
    }
    /* "7.0", "1e3": through the fixed-point parser, which must land on whole units */
    int64_t ns;
    int frac;
    if (trace_parse_us(s, n, &ns, &frac)) return TPF_EFORMAT;
    if (ns % 1000) return TPF_EFORMAT;
    *out = ns / 1000;
    return 0;
}

/* The literal w, next in the input. */
static int js_word(jsrc *s, const char *w)
{
    for (const char *p = w; *p; p++) {
        int d = js_peek(s);
        if (d < 0) return js_eof_error(s, "a literal");
        if (d != *p)
            return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: bad literal", (unsigned long long)js_off(s));
        s->pos++;
    }
    return 0;
}

/* true, false, null, and what Python's json also reads: NaN and Infinity
 * (counted, said as a warning; never a number for a field). */
static int js_literal(jsrc *s)
{
    static const char *const lits[] = {"true", "false", "null", "NaN", "Infinity"};
    int c = js_peek(s);
    for (int k = 0; k < 5; k++) {
        if (c != lits[k][0]) continue;
        int rc = js_word(s, lits[k]);
        if (!rc && k >= 3) s->nonfinite++;
        return rc;
    }
    return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: unexpected character '%c'",
                   (unsigned long long)js_off(s), c >= 32 && c < 127 ? c : '?');
}

/* Validate and skip any value. */
static int js_skip(jsrc *s, int depth)
{
    int c = js_ws(s);
    if (c < 0) return js_eof_error(s, "a value");
    if (depth > JS_MAX_DEPTH)
        return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: nesting deeper than %d",
                       (unsigned long long)js_off(s), JS_MAX_DEPTH);
    if (c == '"') return js_string(s, NULL, 0, NULL);
    if (c == '{' || c == '[') {
        int close = c == '{' ? '}' : ']';
        s->pos++;
        c = js_ws(s);
        if (c == close) {
            s->pos++;
            return 0;
        }
        for (;;) {
            int rc;
            if (close == '}') {
                c = js_ws(s);
                if (c < 0) return js_eof_error(s, "an object");
                if (c != '"')
                    return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: expected a key",
                                   (unsigned long long)js_off(s));
                if ((rc = js_string(s, NULL, 0, NULL))) return rc;
                if ((rc = js_expect(s, ':', "an object"))) return rc;
            }
            if ((rc = js_skip(s, depth + 1))) return rc;
            c = js_ws(s);
            if (c < 0) return js_eof_error(s, close == '}' ? "an object" : "an array");
            s->pos++;
            if (c == close) return 0;
            if (c != ',')
                return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: expected ',' or '%c'",
                               (unsigned long long)(js_off(s) - 1), close);
        }
    }
    if (num_start(c)) {
        jnum t;
        int rc = js_num(s, &t);
        if (rc) return rc;
        return t.nonfinite || num_valid(t.s, t.n) ? 0 : js_bad_number(s, t.at);
    }
    return js_literal(s);
}

static size_t cap_pos(const jsrc *s) { return s->cap.len + (s->pos - s->cap_from); }

/* A scalar that must be an integer or a string; other values are skipped.
 * Sets isnum and v; the span of the raw value text when capturing. */
static int js_scalar_int(jsrc *s, int *isnum, int64_t *v, size_t *off, size_t *len)
{
    int c = js_ws(s);
    size_t o = s->cap_on ? cap_pos(s) : 0;
    int rc;
    *isnum = 0;
    if (num_start(c)) {
        jnum t;
        if ((rc = js_num(s, &t))) return rc;
        int64_t x;
        if (t.nonfinite) {
            /* -Infinity: not a number for the field */
        } else if (parse_int_lit(t.s, t.n, &x) == 0) {
            *isnum = 1;
            *v = x;
        } else if (trace_parse_us(t.s, t.n, &x, NULL) == TPF_EFORMAT) {
            return js_bad_number(s, t.at);
        }
    } else if ((rc = js_skip(s, 1))) {
        return rc;
    }
    if (off) {
        *off = o;
        *len = s->cap_on ? cap_pos(s) - o : 0;
    }
    return 0;
}

static int js_time(jsrc *s, trace_ev *ev, unsigned bit, int64_t *dst, size_t *off, size_t *len)
{
    int c = js_ws(s);
    size_t o = s->cap_on ? cap_pos(s) : 0;
    if (num_start(c)) {
        jnum t;
        int rc = js_num(s, &t);
        if (rc) return rc;
        if (t.nonfinite) {
            if (bit == TEV_TS) ev->has |= TEV_TS_FRAC; /* as NaN below */
            goto out;
        }
        int frac = 0;
        rc = trace_parse_us(t.s, t.n, dst, &frac);
        if (rc == TPF_EFORMAT) return js_bad_number(s, t.at);
        if (rc == 0) {
            ev->has |= bit;
            if (frac) ev->has |= bit == TEV_TS ? TEV_TS_FRAC : TEV_DUR_FRAC;
            if (s->doubles) {
                /* An integer literal is a whole number of microseconds, exact
                 * in a double; a fraction is read as Python reads it. */
                double d = frac ? strtod(t.s, NULL) : (double)(*dst / 1000);
                if (bit == TEV_TS) ev->ts_us = d;
                else ev->dur_us = d;
            }
        } else {
            ev->has |= TEV_BADNUM; /* counted by the analyser, never silently lost */
        }
    } else {
        int rc = js_skip(s, 1);
        if (rc) return rc;
        if (bit == TEV_TS) ev->has |= TEV_TS_FRAC; /* HTA reads a non-number ts as NaN */
    }
out:
    if (off) {
        *off = o;
        *len = s->cap_on ? cap_pos(s) - o : 0;
    }
    return 0;
}

static int js_key(jsrc *s, jscratch *sc, const char *ctx)
{
    int c = js_ws(s);
    if (c < 0) return js_eof_error(s, ctx);
    if (c != '"')
        return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: expected a key in %s",
                       (unsigned long long)js_off(s), ctx);
    int rc = js_string(s, sc->key, sizeof(sc->key), NULL);
    if (rc) return rc;
    return js_expect(s, ':', ctx);
}

/* After a member: ',' (returns 1) or the closing brace (returns 0). */
static int js_next_member(jsrc *s, const char *ctx)
{
    int c = js_ws(s);
    if (c < 0) return js_eof_error(s, ctx);
    s->pos++;
    if (c == ',') return 1;
    if (c == '}') return 0;
    return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: expected ',' or '}' in %s",
                   (unsigned long long)(js_off(s) - 1), ctx);
}

/* Enter an object whose members the caller reads: 1 when there are members,
 * 0 when it was empty or not an object (skipped), or an error. */
static int js_obj_open(jsrc *s)
{
    if (js_ws(s) != '{') return js_skip(s, 1);
    s->pos++;
    if (js_ws(s) == '}') {
        s->pos++;
        return 0;
    }
    return 1;
}

/* The integer args of an event: the field each fills, the flag it sets when
 * it is a number, and the flag it sets when present at all. */
typedef struct int_arg_def {
    const char *key;
    size_t off;
    unsigned flag, any;
} int_arg_def;

#define IA(k, f, fl, an) {k, offsetof(trace_ev, f), fl, an}
static const int_arg_def int_args[] = {
    IA("stream", stream, TEV_STREAM, TEV_STREAM_ANY),
    IA("correlation", corr, TEV_CORR, 0),
    IA("bytes", bytes, TEV_BYTES, 0),
    IA("Bytes", bytes, TEV_BYTES, 0),
    IA("Total Allocated", mem_alloc, TEV_MEM, 0),
    IA("Total Reserved", mem_reserved, 0, 0),
    IA("wait_on_stream", wait_stream, TEV_WAIT, 0),
    IA("wait_on_cuda_event_record_corr_id", wait_corr, TEV_WAIT, 0),
    IA("Device Type", devtype, 0, 0),
    IA("Device Id", dev, TEV_DEV, 0),
    IA("device", dev, TEV_DEV, 0),
};
#undef IA

static const int_arg_def *int_arg(const char *key)
{
    for (size_t i = 0; i < sizeof(int_args) / sizeof(int_args[0]); i++)
        if (strcmp(key, int_args[i].key) == 0) return &int_args[i];
    return NULL;
}

static int js_args(jsrc *s, trace_ev *ev, jscratch *sc)
{
    const int_arg_def *a;
    int rc = js_obj_open(s);
    if (rc <= 0) return rc;
    /* Counter values: Kineto writes "ph" first, so this costs nothing on
     * its files; writers that put "args" first pay for their numbers. */
    const int ctr = ev->ph == 'C' || ev->ph == 0;
    for (;;) {
        if ((rc = js_key(s, sc, "event args"))) return rc;
        int isnum;
        int64_t v;
        char k0 = sc->key[0];
        if (ctr && num_start(js_ws(s)) && !int_arg(sc->key)) {
            jnum t;
            if ((rc = js_num(s, &t))) return rc;
            if (!t.nonfinite && !num_valid(t.s, t.n)) return js_bad_number(s, t.at);
            double d = t.nonfinite ? -INFINITY : strtod(t.s, NULL);
            if (isfinite(d) && ev->ncargs < TRACE_CARGS_MAX) {
                trace_carg *c = &sc->cargs[ev->ncargs++];
                snprintf(c->key, sizeof(c->key), "%s", sc->key);
                c->v = d;
            }
        } else if (k0 == 'm' && num_start(js_ws(s)) && strcmp(sc->key, "memory bandwidth (GB/s)") == 0) {
            jnum t;
            if ((rc = js_num(s, &t))) return rc;
            if (!t.nonfinite && !num_valid(t.s, t.n)) return js_bad_number(s, t.at);
            ev->mem_bw = t.nonfinite ? -INFINITY : strtod(t.s, NULL);
            if (isfinite(ev->mem_bw) && ev->mem_bw >= 0) ev->has |= TEV_MEMBW;
        } else if (k0 != 's' && k0 != 'c' && k0 != 'n' && k0 != 'b' && k0 != 'B' && k0 != 'T' && k0 != 'D' &&
            k0 != 'w') {
            /* most args: skip without comparing */
            if ((rc = js_skip(s, 2))) return rc;
        } else if ((a = int_arg(sc->key))) {
            if ((rc = js_scalar_int(s, &isnum, &v, NULL, NULL))) return rc;
            ev->has |= a->any;
            if (isnum) {
                *(int64_t *)((char *)ev + a->off) = v;
                ev->has |= a->flag;
                if (ctr && ev->ncargs < TRACE_CARGS_MAX) {
                    trace_carg *c = &sc->cargs[ev->ncargs++];
                    snprintf(c->key, sizeof(c->key), "%s", sc->key);
                    c->v = (double)v;
                }
            }
        } else if (strcmp(sc->key, "name") == 0 && js_ws(s) == '"') {
            if ((rc = js_string(s, sc->argname, sizeof(sc->argname), NULL))) return rc;
        } else if ((rc = js_skip(s, 2))) {
            return rc;
        }
        if ((rc = js_next_member(s, "event args")) <= 0) return rc;
    }
}

/* One event object; '{' is next. */
static int js_event(jsrc *s, jscratch *sc, trace_ev_fn fn, void *ud)
{
    trace_ev ev;
    memset(&ev, 0, sizeof(ev));
    ev.stream = -1;
    ev.corr = -1;
    ev.wait_stream = ev.wait_corr = -1;
    ev.name = sc->name;
    ev.cat = sc->cat;
    ev.arg_name = sc->argname;
    ev.cargs = sc->cargs;
    sc->name[0] = sc->cat[0] = sc->argname[0] = '\0';
    int rc, c;
    if (s->capturing) {
        buf_reset(&s->cap);
        s->cap_from = s->pos;
        s->cap_on = 1;
    }
    s->pos++;
    if (js_ws(s) == '}') {
        s->pos++;
        goto deliver;
    }
    for (;;) {
        if ((rc = js_key(s, sc, "an event"))) return rc;
        const char *k = sc->key;
        int isnum;
        int64_t v;
        switch (k[0]) {
        case 'p':
            if (strcmp(k, "ph") == 0) {
                c = js_ws(s);
                if (c == '"') {
                    char ph[4];
                    if ((rc = js_string(s, ph, sizeof(ph), NULL))) return rc;
                    ev.ph = ph[0];
                } else if ((rc = js_skip(s, 1))) {
                    return rc;
                }
                goto next;
            }
            if (strcmp(k, "pid") == 0) {
                if ((rc = js_scalar_int(s, &isnum, &v, &ev.pid_off, &ev.pid_len))) return rc;
                if (isnum) { ev.pid = v; ev.has |= TEV_PID; }
                goto next;
            }
            break;
        case 't':
            if (strcmp(k, "ts") == 0) {
                if ((rc = js_time(s, &ev, TEV_TS, &ev.ts_ns, &ev.ts_off, &ev.ts_len))) return rc;
                goto next;
            }
            if (strcmp(k, "tid") == 0) {
                if ((rc = js_scalar_int(s, &isnum, &v, NULL, NULL))) return rc;
                if (isnum) { ev.tid = v; ev.has |= TEV_TID; }
                goto next;
            }
            break;
        case 'd':
            if (strcmp(k, "dur") == 0) {
                if ((rc = js_time(s, &ev, TEV_DUR, &ev.dur_ns, NULL, NULL))) return rc;
                goto next;
            }
            break;
        case 'n':
        case 'c': {
            /* the two string members, read into the scratch buffers */
            int nm = strcmp(k, "name") == 0;
            if ((nm || strcmp(k, "cat") == 0) && js_ws(s) == '"') {
                rc = nm ? js_string(s, sc->name, sizeof(sc->name), &ev.name_len)
                        : js_string(s, sc->cat, sizeof(sc->cat), &ev.cat_len);
                if (rc) return rc;
                ev.has |= nm ? TEV_NAME : TEV_CAT;
                goto next;
            }
            break;
        }
        case 'a':
            if (strcmp(k, "args") == 0) {
                if ((rc = js_args(s, &ev, sc))) return rc;
                goto next;
            }
            break;
        case 'i':
            if (strcmp(k, "id") == 0) {
                if ((rc = js_scalar_int(s, &isnum, &v, &ev.id_off, &ev.id_len))) return rc;
                if (isnum) { ev.id = v; ev.has |= TEV_ID; }
                goto next;
            }
            break;
        default:
            break;
        }
        if ((rc = js_skip(s, 1))) return rc;
    next:
        if ((rc = js_next_member(s, "an event")) < 0) return rc;
        if (rc == 0) break;
    }
deliver:
    if (s->cap_on) {
        s->cap_on = 0;
        if (buf_append(&s->cap, s->buf + s->cap_from, s->pos - s->cap_from))
            return js_fail(s, TPF_ETOOBIG, "event at byte %llu is larger than %zu MiB",
                           (unsigned long long)js_off(s), JS_CAPTURE_MAX >> 20);
        ev.raw = s->cap.data;
        ev.raw_len = s->cap.len;
    }
    rc = fn(ud, &ev);
    if (rc) return s->rc = rc;
    return 0;
}

static int js_events(jsrc *s, jscratch *sc, trace_ev_fn fn, void *ud, trace_meta *m, int lenient)
{
    int rc, c;
    s->pos++; /* '[' */
    c = js_ws(s);
    if (c == ']') {
        s->pos++;
        return 0;
    }
    for (;;) {
        c = js_ws(s);
        if (c < 0) {
            if (s->rc) return s->rc;
            if (lenient) { m->unterminated = 1; return 0; }
            return js_eof_error(s, "the event array");
        }
        if (c == ']' && lenient) { /* a trailing comma before the bracket */
            s->pos++;
            return 0;
        }
        m->events++;
        if (c == '{') {
            if (fn) {
                if ((rc = js_event(s, sc, fn, ud))) return rc;
            } else if ((rc = js_skip(s, 1))) {
                return rc;
            }
        } else {
            m->skipped++;
            if ((rc = js_skip(s, 1))) return rc;
        }
        c = js_ws(s);
        if (c < 0) {
            if (s->rc) return s->rc;
            if (lenient) { m->unterminated = 1; return 0; }
            return js_eof_error(s, "the event array");
        }
        s->pos++;
        if (c == ']') return 0;
        if (c != ',')
            return js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: expected ',' or ']' between events",
                           (unsigned long long)(js_off(s) - 1));
    }
}

static int js_distinfo(jsrc *s, jscratch *sc, trace_meta *m)
{
    int rc = js_obj_open(s);
    if (rc <= 0) return rc;
    for (;;) {
        if ((rc = js_key(s, sc, "distributedInfo"))) return rc;
        if (strcmp(sc->key, "rank") == 0) {
            int isnum;
            int64_t v;
            if ((rc = js_scalar_int(s, &isnum, &v, NULL, NULL))) return rc;
            if (isnum && v >= 0 && v < (1L << 30)) { m->has_rank = 1; m->rank = (long)v; }
        } else if ((rc = js_skip(s, 2))) {
            return rc;
        }
        if ((rc = js_next_member(s, "distributedInfo")) <= 0) return rc;
    }
}

static int js_top(jsrc *s, trace_ev_fn fn, void *ud, trace_meta *m)
{
    jscratch *sc = malloc(sizeof(*sc));
    if (!sc) return js_fail(s, TPF_ENOMEM, "out of memory");
    int rc = 0;
    int c = js_ws(s);
    if (c == 0xEF) { /* UTF-8 byte order mark */
        for (int i = 0; i < 3 && js_peek(s) >= 0; i++) s->pos++;
        c = js_ws(s);
    }
    if (c < 0) {
        rc = s->rc ? s->rc : js_fail(s, TPF_EFORMAT, "empty input: no JSON found");
    } else if (c == '[') {
        m->array_form = 1;
        m->has_events = 1;
        rc = js_events(s, sc, fn, ud, m, 1);
        /* `[1,2` is JSON-ish, not a trace: no element is an event object */
        if (rc == 0 && m->events > 0 && m->skipped == m->events)
            rc = js_fail(s, TPF_EFORMAT, "not a trace: the array holds no event objects");
    } else if (c == '{') {
        s->pos++;
        if (js_ws(s) == '}') {
            s->pos++;
        } else {
            for (;;) {
                if ((rc = js_key(s, sc, "the trace object"))) break;
                if (strcmp(sc->key, "traceEvents") == 0 && js_ws(s) == '[') {
                    m->has_events = 1;
                    rc = js_events(s, sc, fn, ud, m, 0);
                } else if (strcmp(sc->key, "distributedInfo") == 0) {
                    rc = js_distinfo(s, sc, m);
                } else if (strcmp(sc->key, "baseTimeNanoseconds") == 0) {
                    int isnum;
                    int64_t v;
                    rc = js_scalar_int(s, &isnum, &v, NULL, NULL);
                    if (!rc && isnum) { m->has_base = 1; m->base_ns = v; }
                } else {
                    rc = js_skip(s, 1);
                }
                if (rc) break;
                if ((rc = js_next_member(s, "the trace object")) <= 0) break;
            }
        }
    } else {
        rc = js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: a trace starts with '{' or '['",
                     (unsigned long long)js_off(s));
    }
    if (!rc) {
        c = js_ws(s);
        if (c >= 0)
            rc = js_fail(s, TPF_EFORMAT, "invalid JSON at byte %llu: unexpected data after the trace",
                         (unsigned long long)js_off(s));
        else if (s->rc)
            rc = s->rc;
    }
    free(sc);
    m->bytes = s->base + s->len;
    m->nonfinite = s->nonfinite;
    return rc;
}

static int js_run(jsrc *s, trace_ev_fn fn, void *ud, int mode, trace_meta *meta)
{
    trace_meta local;
    trace_meta *m = meta ? meta : &local;
    memset(m, 0, sizeof(*m));
    buf_init(&s->cap, JS_CAPTURE_MAX);
    s->capturing = mode && (mode & ~TRACE_DOUBLE) ? 1 : 0;
    s->doubles = (mode & TRACE_DOUBLE) != 0;
    int rc = js_top(s, fn, ud, m);
    buf_free(&s->cap);
    return rc;
}

static void *rd_main(void *arg)
{
    rdthr *t = arg;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->filled >= RD_NBUF - 1 && !t->stop) pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop) {
            pthread_mutex_unlock(&t->mu);
            return NULL;
        }
        int slot = (t->cur + 1 + t->filled) % RD_NBUF;
        pthread_mutex_unlock(&t->mu);
        int n = zr_read(t->gz, t->bufs[slot], JS_BUFSZ);
        int rc = 0;
        if (n < 0) {
            rc = n;
            snprintf(t->msg, sizeof(t->msg), "%s", t->gz->msg);
        }
        pthread_mutex_lock(&t->mu);
        if (n > 0) {
            t->lens[slot] = (size_t)n;
            t->produced += (uint64_t)n;
            t->filled++;
        } else {
            t->done = 1;
            t->rc = rc;
        }
        pthread_cond_broadcast(&t->cv);
        int fin = t->done;
        pthread_mutex_unlock(&t->mu);
        if (fin) return NULL;
    }
}

static void rd_stop(rdthr *t)
{
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->th, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    for (int i = 0; i < RD_NBUF; i++) free(t->bufs[i]);
    free(t);
}

/* Start the inflating thread; NULL when it cannot (then reading is inline). */
static rdthr *rd_start(zrd *gz)
{
    if (getenv("TRAINPERF_NO_READER_THREAD")) return NULL;
    rdthr *t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    for (int i = 0; i < RD_NBUF; i++)
        if (!(t->bufs[i] = malloc(JS_BUFSZ))) goto fail;
    t->gz = gz;
    t->cur = RD_NBUF - 1;
    if (pthread_mutex_init(&t->mu, NULL)) goto fail;
    if (pthread_cond_init(&t->cv, NULL)) {
        pthread_mutex_destroy(&t->mu);
        goto fail;
    }
    if (pthread_create(&t->th, NULL, rd_main, t)) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        goto fail;
    }
    return t;
fail:
    for (int i = 0; i < RD_NBUF; i++) free(t->bufs[i]);
    free(t);
    return NULL;
}

int trace_read(const char *path, trace_ev_fn fn, void *ud, int mode, trace_meta *meta,
               char *err, size_t errlen)
{
    jsrc s;
    memset(&s, 0, sizeof(s));
    s.err = err;
    s.errlen = errlen;
    if (err && errlen) err[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return js_fail(&s, err_from_errno(e) ? err_from_errno(e) : TPF_EIO, "cannot open %s: %s",
                       path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        return js_fail(&s, TPF_EIO, "cannot read %s: is a directory", path);
    }
    s.gz = zr_open(fd);
    if (!s.gz) {
        close(fd);
        return js_fail(&s, TPF_ENOMEM, "cannot open %s: out of memory", path);
    }
    /* Plain files are read inline: nothing to overlap. */
    unsigned char two[2];
    int gz = pread(fd, two, 2, 0) == 2 && two[0] == 0x1f && two[1] == 0x8b;
    s.thr = gz ? rd_start(s.gz) : NULL;
    unsigned char *own = NULL;
    if (s.thr) {
        s.gz = NULL;
    } else if (!(own = s.buf = malloc(JS_BUFSZ))) {
        zr_close(s.gz);
        return js_fail(&s, TPF_ENOMEM, "out of memory");
    }
    int rc = js_run(&s, fn, ud, mode, meta);
    zrd *z = s.thr ? s.thr->gz : s.gz;
    if (s.thr) rd_stop(s.thr);
    else free(own);
    if (!rc && meta) meta->trailing = z->trailing;
    zr_close(z);
    return rc;
}

int trace_read_mem(const void *data, size_t len, trace_ev_fn fn, void *ud, int mode,
                   trace_meta *meta, char *err, size_t errlen)
{
    jsrc s;
    memset(&s, 0, sizeof(s));
    s.err = err;
    s.errlen = errlen;
    if (err && errlen) err[0] = '\0';
    /* The tokenizer reads but never writes its buffer. */
    s.buf = (unsigned char *)(uintptr_t)data;
    s.len = len;
    s.eof = 1;
    return js_run(&s, fn, ud, mode, meta);
}
