/* One writer per format for every table trainperf prints: a table is
 * described once (its columns, then rows of cells already formatted for
 * people) and comes out as aligned terminal text, Markdown or HTML. The
 * reports (report/), compare and the trace analyser (trace/) all go through
 * it, so it lives in util/ where both may include it; a new table needs only
 * its rows (docs/architecture.md). JSON is not a table: its writer takes the
 * same figures from the same row descriptions, unformatted. */
#ifndef TPF_UTIL_TABLE_H
#define TPF_UTIL_TABLE_H

#include "util/buf.h"

/* Output formats; the values are report_format's (report/report.h) so a
 * report hands its format over as it is. */
enum { TBL_TEXT = 0, TBL_MD = 1, TBL_HTML = 2 };

typedef struct tbl_col {
    const char *head; /* NULL: no heading cell in text (a trailing remark column) */
    int width;        /* text: padded to this many columns (0: as it is) */
    int flags;        /* TBL_RIGHT, TBL_GAP */
} tbl_col;

/* Column flags: aligned right (numbers); text: one more space before the
 * column (a name after a run of numbers). */
enum { TBL_RIGHT = 1, TBL_GAP = 2 };

/* How a row's last cell reads: a verdict coloured in text, a class in HTML. */
enum { TBL_PLAIN = 0, TBL_GOOD = 1, TBL_BAD = -1 };

/* Two layouts. TBL_SECTION (reports, compare): text puts the title and the
 * column heads on one bold line; md "## title". TBL_SUB (a table under its
 * own small heading, as the trace analyser's): text has a bold title line,
 * then the heads in a dim row aligned as the cells; md "### title" and
 * right-aligned number columns (---:). */
enum { TBL_SECTION = 0, TBL_SUB = 1 };

typedef struct tbl {
    buf *b;
    int fmt;            /* TBL_TEXT, TBL_MD or TBL_HTML */
    int color;          /* text: ANSI colour */
    int layout;         /* TBL_SECTION or TBL_SUB */
    const tbl_col *cols;
    int ncols;
    int open;
} tbl;

/* Start a section table titled title (layout TBL_SECTION); title NULL: a
 * table inside the current section (no heading; text has no head line).
 * cols is borrowed until tbl_end. */
void tbl_begin(tbl *t, buf *b, int fmt, int color, const char *title,
               const tbl_col *cols, int ncols);
/* The same in layout TBL_SUB (title NULL: the head row without a title). */
void tbl_begin_sub(tbl *t, buf *b, int fmt, int color, const char *title,
                   const tbl_col *cols, int ncols);
/* The small heading TBL_SUB tables stand under, alone (a list follows). */
void tbl_heading(buf *b, int fmt, int color, const char *title);
/* One row of ncols cells (text as it is; escaped for md and html). mark
 * (TBL_GOOD / TBL_BAD / TBL_PLAIN) says how the last cell reads. */
void tbl_row(tbl *t, const char *const *cells, int mark);
void tbl_end(tbl *t);
/* s escaped for fmt: Markdown (characters that would break a table or turn
 * into markup; HTML-like text as entities, newlines as spaces), HTML
 * (entities), text as it is. NULL writes nothing. */
void tbl_esc(buf *b, int fmt, const char *s);
/* n cells as text escaped for fmt (md, html), without table markup. */
void tbl_cells(buf *b, int fmt, const char *const *cells, int n);

#endif
