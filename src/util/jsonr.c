#include "util/afile.h"
#include "util/jsonr.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trainperf.h"
#include "util/err.h"

#define JR_BLOCK_NODES 512

struct jr_block {
    struct jr_block *next;
    size_t used;
    jr_node nodes[JR_BLOCK_NODES];
};

typedef struct jr_parser {
    const char *s;
    size_t n, i;
    char *sp; /* next free byte in the decoded-string area */
    jr_doc *d;
    size_t max_nodes;
    int rc;
    char *err;
    size_t errlen;
} jr_parser;

static void jr_fail(jr_parser *p, int rc, const char *what)
{
    if (p->rc) return;
    p->rc = rc;
    if (p->err && p->errlen) snprintf(p->err, p->errlen, "position %zu: %s", p->i + 1, what);
}

static jr_node *jr_alloc(jr_parser *p)
{
    if (p->d->nodes >= p->max_nodes) {
        jr_fail(p, TPF_ETOOBIG, "too many values");
        return NULL;
    }
    jr_block *b = p->d->blocks;
    if (!b || b->used == JR_BLOCK_NODES) {
        b = malloc(sizeof(*b));
        if (!b) {
            jr_fail(p, TPF_ENOMEM, "out of memory");
            return NULL;
        }
        b->used = 0;
        b->next = p->d->blocks;
        p->d->blocks = b;
    }
    jr_node *nd = &b->nodes[b->used++];
    memset(nd, 0, sizeof(*nd));
    p->d->nodes++;
    return nd;
}

static void jr_ws(jr_parser *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

static int jr_hex4(jr_parser *p, unsigned *out)
{
    if (p->n - p->i < 4) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i + (size_t)k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    p->i += 4;
    *out = v;
    return 0;
}

static void jr_put_utf8(char **o, unsigned cp)
{
    char *d = *o;
    if (cp < 0x80) {
        *d++ = (char)cp;
    } else if (cp < 0x800) {
        *d++ = (char)(0xC0 | (cp >> 6));
        *d++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *d++ = (char)(0xE0 | (cp >> 12));
        *d++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *d++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *d++ = (char)(0xF0 | (cp >> 18));
        *d++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *d++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *d++ = (char)(0x80 | (cp & 0x3F));
    }
    *o = d;
}

/* At the opening quote; decodes into the string area (never longer than the
 * source text, so the area sized to the input cannot overflow). */
static const char *jr_string(jr_parser *p)
{
    p->i++;
    char *start = p->sp, *o = p->sp;
    while (p->i < p->n) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') {
            p->i++;
            *o++ = '\0';
            p->sp = o;
            return start;
        }
        if (c < 0x20) {
            jr_fail(p, TPF_EFORMAT, "control character in string");
            return NULL;
        }
        if (c != '\\') {
            *o++ = (char)c;
            p->i++;
            continue;
        }
        p->i++;
        if (p->i >= p->n) break;
        char e = p->s[p->i++];
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (jr_hex4(p, &cp)) {
                jr_fail(p, TPF_EFORMAT, "expected 4 hex digits after \\u");
                return NULL;
            }
            if (cp >= 0xD800 && cp < 0xDC00 && p->n - p->i >= 6 && p->s[p->i] == '\\' &&
                p->s[p->i + 1] == 'u') {
                size_t save = p->i;
                p->i += 2;
                if (jr_hex4(p, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    p->i = save;
            }
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD; /* lone surrogate */
            if (cp == 0) cp = 0xFFFD;                     /* keep strings C-safe */
            jr_put_utf8(&o, cp);
            break;
        }
        default:
            p->i--;
            jr_fail(p, TPF_EFORMAT, "invalid escape in string");
            return NULL;
        }
    }
    jr_fail(p, TPF_EFORMAT, "unterminated string");
    return NULL;
}

static int jr_number(jr_parser *p, double *out)
{
    size_t st = p->i;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    size_t digits = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
        p->i++;
    if (p->i == digits) return -1;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        size_t f = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
        if (p->i == f) return -1;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        size_t f = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
        if (p->i == f) return -1;
    }
    char tmp[64];
    size_t len = p->i - st;
    if (len >= sizeof(tmp)) return -1;
    memcpy(tmp, p->s + st, len);
    tmp[len] = '\0';
    *out = strtod(tmp, NULL);
    return 0;
}

static int jr_lit(jr_parser *p, const char *w)
{
    size_t l = strlen(w);
    if (p->n - p->i < l || memcmp(p->s + p->i, w, l) != 0) return -1;
    p->i += l;
    return 0;
}

static jr_node *jr_value(jr_parser *p, int depth)
{
    jr_ws(p);
    if (p->i >= p->n) {
        jr_fail(p, TPF_EFORMAT, "expected a value, found end of input");
        return NULL;
    }
    if (depth > JR_MAX_DEPTH) {
        jr_fail(p, TPF_EFORMAT, "nested too deeply");
        return NULL;
    }
    jr_node *nd = jr_alloc(p);
    if (!nd) return NULL;
    nd->off = p->i;
    char c = p->s[p->i];
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        nd->type = c == '{' ? JR_OBJ : JR_ARR;
        p->i++;
        jr_ws(p);
        jr_node **tail = &nd->child;
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            nd->end = p->i;
            return nd;
        }
        for (;;) {
            const char *key = NULL;
            if (nd->type == JR_OBJ) {
                jr_ws(p);
                if (p->i >= p->n || p->s[p->i] != '"') {
                    jr_fail(p, TPF_EFORMAT, "expected a string key");
                    return NULL;
                }
                key = jr_string(p);
                if (!key) return NULL;
                jr_ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') {
                    jr_fail(p, TPF_EFORMAT, "expected ':'");
                    return NULL;
                }
                p->i++;
            }
            jr_node *ch = jr_value(p, depth + 1);
            if (!ch) return NULL;
            ch->key = key;
            *tail = ch;
            tail = &ch->next;
            nd->count++;
            jr_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == close) {
                p->i++;
                nd->end = p->i;
                return nd;
            }
            jr_fail(p, TPF_EFORMAT, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
            return NULL;
        }
    }
    if (c == '"') {
        nd->type = JR_STR;
        nd->str = jr_string(p);
        if (!nd->str) return NULL;
    } else if (c == 't' || c == 'f' || c == 'n') {
        if (jr_lit(p, "true") == 0) {
            nd->type = JR_BOOL;
            nd->num = 1;
        } else if (jr_lit(p, "false") == 0) {
            nd->type = JR_BOOL;
        } else if (jr_lit(p, "null") == 0) {
            nd->type = JR_NULL;
        } else {
            jr_fail(p, TPF_EFORMAT, "expected a value");
            return NULL;
        }
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        nd->type = JR_NUM;
        if (jr_number(p, &nd->num)) {
            jr_fail(p, TPF_EFORMAT, "malformed number");
            return NULL;
        }
    } else {
        jr_fail(p, TPF_EFORMAT, "expected a value");
        return NULL;
    }
    nd->end = p->i;
    return nd;
}

void jr_free(jr_doc *d)
{
    if (!d) return;
    jr_block *b = d->blocks;
    while (b) {
        jr_block *nx = b->next;
        free(b);
        b = nx;
    }
    free(d->strs);
    free(d->text);
    memset(d, 0, sizeof(*d));
}

int jr_parse(jr_doc *d, const char *text, size_t n, size_t max_nodes, char *err, size_t errlen)
{
    memset(d, 0, sizeof(*d));
    if (err && errlen) err[0] = '\0';
    jr_parser p = {.s = text, .n = n, .d = d, .err = err, .errlen = errlen};
    p.max_nodes = max_nodes ? max_nodes : JR_DEFAULT_MAX_NODES;
    d->strs = malloc(n + 1);
    if (!d->strs) return TPF_ENOMEM;
    p.sp = d->strs;
    d->root = jr_value(&p, 0);
    if (!p.rc) {
        jr_ws(&p);
        if (p.i < p.n) jr_fail(&p, TPF_EFORMAT, "expected end of input after the value");
    }
    if (p.rc) {
        jr_free(d);
        return p.rc;
    }
    return 0;
}

int jr_load_file(jr_doc *d, const char *path, size_t max_bytes, char *err, size_t errlen)
{
    memset(d, 0, sizeof(*d));
    if (!max_bytes) max_bytes = JR_DEFAULT_MAX_BYTES;
    FILE *f = afile_fopen_read(path);
    if (!f) {
        int e = errno;
        int rc = e == EINVAL || e == ELOOP ? TPF_EIO : err_from_errno(e);
        if (err && errlen) snprintf(err, errlen, "%s: %s", path, afile_read_why(e));
        return rc ? rc : TPF_EIO;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        if (err && errlen) snprintf(err, errlen, "%s: not a regular file", path);
        return TPF_EIO;
    }
    if ((size_t)st.st_size > max_bytes) {
        fclose(f);
        if (err && errlen) snprintf(err, errlen, "%s: larger than %zu bytes", path, max_bytes);
        return TPF_ETOOBIG;
    }
    size_t sz = (size_t)st.st_size;
    char *text = malloc(sz + 1);
    if (!text) {
        fclose(f);
        return TPF_ENOMEM;
    }
    size_t got = fread(text, 1, sz, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(text);
        if (err && errlen) snprintf(err, errlen, "%s: read error", path);
        return TPF_EIO;
    }
    text[got] = '\0';
    char perr[160];
    int rc = jr_parse(d, text, got, 0, perr, sizeof(perr));
    if (rc) {
        free(text);
        if (err && errlen) snprintf(err, errlen, "%s: %s", path, perr);
        return rc;
    }
    d->text = text;
    d->text_len = got;
    return 0;
}

const jr_node *jr_get(const jr_node *obj, const char *key)
{
    if (!obj || obj->type != JR_OBJ || !key) return NULL;
    for (const jr_node *c = obj->child; c; c = c->next)
        if (strcmp(c->key, key) == 0) return c;
    return NULL;
}

const jr_node *jr_path(const jr_node *n, const char *path)
{
    char part[128];
    const char *p = path;
    while (n && *p) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        if (l >= sizeof(part)) return NULL;
        memcpy(part, p, l);
        part[l] = '\0';
        n = jr_get(n, part);
        p += l;
        if (*p == '.') p++;
    }
    return n;
}

const jr_node *jr_at(const jr_node *arr, int i)
{
    if (!arr || arr->type != JR_ARR || i < 0) return NULL;
    const jr_node *c = arr->child;
    while (c && i-- > 0)
        c = c->next;
    return c;
}

double jr_num(const jr_node *n)
{
    if (!n || n->type != JR_NUM) return NAN;
    return n->num;
}

double jr_pnum(const jr_node *n, const char *path)
{
    return jr_num(jr_path(n, path));
}

const char *jr_str(const jr_node *n)
{
    return n && n->type == JR_STR ? n->str : NULL;
}

const char *jr_pstr(const jr_node *n, const char *path)
{
    return jr_str(jr_path(n, path));
}

/* v as an integer in [lo, hi]: 0 when out of range. */
static int64_t in_range(double v, double lo, double hi)
{
    return v >= lo && v <= hi ? (int64_t)v : 0;
}

void jr_fields(const jr_node *obj, void *base, const jw_field *f, size_t n)
{
    char *p = base;
    for (size_t i = 0; i < n; i++) {
        void *m = p + f[i].off;
        const jr_node *v = jr_get(obj, f[i].key);
        double x = jr_num(v);
        const char *s = jr_str(v);
        switch (f[i].type) {
        case JWF_DBL: *(double *)m = x; break;
        case JWF_INT:
            if (isfinite(x)) *(int *)m = (int)in_range(x, -2147483648.0, 2147483647.0);
            break;
        case JWF_I64:
            /* 2^63 is the first double past INT64_MAX */
            if (isfinite(x)) *(int64_t *)m = in_range(x, -9223372036854775808.0, 9223372036854774784.0);
            break;
        case JWF_U64:
            if (isfinite(x)) *(uint64_t *)m = x >= 0 && x < 18446744073709551616.0 ? (uint64_t)x : 0;
            break;
        case JWF_STR:
        case JWF_STRZ:
            if (f[i].size) snprintf(m, f[i].size, "%s", s ? s : "");
            break;
        case JWF_BOOL:
            if (v && v->type == JR_BOOL) *(int *)m = v->num != 0;
            break;
        default: break;
        }
    }
}

int jr_array(const jr_node *arr, void *out, size_t size, int max, const jw_field *f, size_t n)
{
    int k = 0;
    for (const jr_node *e = arr && arr->type == JR_ARR ? arr->child : NULL; e && k < max;
         e = e->next) {
        char *base = (char *)out + (size_t)k * size;
        memset(base, 0, size);
        jr_fields(e, base, f, n);
        k++;
    }
    return k;
}

static void write_node(jw *w, const jr_node *n, int depth)
{
    if (!n || depth > 16) {
        jw_null(w);
        return;
    }
    switch (n->type) {
    case JR_NULL: jw_null(w); break;
    case JR_BOOL: jw_bool(w, n->num != 0); break;
    case JR_STR: jw_str(w, n->str); break;
    case JR_NUM:
        if (isfinite(n->num) && n->num == floor(n->num) && fabs(n->num) < 9007199254740992.0)
            jw_int(w, (int64_t)n->num);
        else
            jw_num(w, n->num);
        break;
    case JR_ARR:
        jw_arr_begin(w);
        for (const jr_node *c = n->child; c; c = c->next) write_node(w, c, depth + 1);
        jw_arr_end(w);
        break;
    case JR_OBJ:
        jw_obj_begin(w);
        for (const jr_node *c = n->child; c; c = c->next) {
            jw_key(w, c->key);
            write_node(w, c, depth + 1);
        }
        jw_obj_end(w);
        break;
    }
}

void jr_write(jw *w, const jr_node *n) { write_node(w, n, 0); }
