/* The trace analyses' tables (trace_int.h, tr_col): one column list gives a
 * table's text or markdown and its JSON, and names are cut alike in every
 * table (trace_short_name). Below both the analyses' output (trace_out.c)
 * and the extra analyses (trace_extra.c), which share them. */
#include <stdio.h>
#include <string.h>

#include "trace/trace_int.h"
#include "util/jsonw.h"
#include "util/table.h"

/* One cell of column c from a row. */
static void tr_cell(char *o, size_t n, const tr_col *c, const char *row)
{
    const void *m = row + c->f.off;
    int64_t v = c->f.type == JWF_U64   ? (int64_t) * (const uint64_t *)m
                : c->f.type == JWF_INT ? *(const int *)m
                : c->f.type == JWF_I64 ? *(const int64_t *)m
                                       : 0;
    if (c->show == TRC_NAME)
        trace_short_name(o, n, *(const char *const *)m);
    else if (c->show == TRC_MS)
        snprintf(o, n, "%.3f", (double)v / 1e6);
    else if (c->f.type == JWF_U64)
        snprintf(o, n, "%llu", (unsigned long long)*(const uint64_t *)m);
    else
        snprintf(o, n, "%lld", (long long)v);
}

#define TR_MAX_COLS 8

void tr_table(buf *o, int fmt, int color, const char *title, const tr_col *c, int n,
              const void *rows, size_t nrows, size_t size)
{
    tbl_col cols[TR_MAX_COLS];
    int order[TR_MAX_COLS], k = 0;
    if (n > TR_MAX_COLS) n = TR_MAX_COLS;
    for (int pass = 0; pass < 2; pass++) /* numbers first, the name last */
        for (int i = 0; i < n; i++)
            if ((c[i].show == TRC_NAME) == pass) order[k++] = i;
    for (int i = 0; i < n; i++) cols[i] = c[order[i]].col;
    tbl t;
    tbl_begin_sub(&t, o, fmt, color, title, cols, n);
    char cell[TR_MAX_COLS][96];
    const char *cells[TR_MAX_COLS];
    for (size_t r = 0; r < nrows; r++) {
        for (int i = 0; i < n; i++) {
            tr_cell(cell[i], sizeof(cell[i]), &c[order[i]], (const char *)rows + r * size);
            cells[i] = cell[i];
        }
        tbl_row(&t, cells, TBL_PLAIN);
    }
    tbl_end(&t);
}

void tr_table_json(jw *w, const char *key, const tr_col *c, int n, const void *rows,
                   size_t nrows, size_t size)
{
    jw_key(w, key);
    jw_arr_begin(w);
    for (size_t r = 0; r < nrows; r++) {
        jw_obj_begin(w);
        for (int i = 0; i < n; i++) jw_fields(w, (const char *)rows + r * size, &c[i].f, 1);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

void trace_short_name(char *dst, size_t n, const char *s)
{
    size_t l = strlen(s);
    if (l < n) {
        memcpy(dst, s, l + 1);
    } else {
        size_t cut = n - 4;
        /* never split a UTF-8 sequence */
        while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--;
        memcpy(dst, s, cut);
        memcpy(dst + cut, "...", 4);
    }
    /* Control bytes (ESC, BEL...) from a trace never reach a terminal. */
    for (char *p = dst; *p; p++)
        if (*p == '|' || *p == '\n' || *p == '\t') *p = ' ';
        else if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}
