/* One writer per format for the reports' tables: a table is described once
 * (its columns, then rows of cells already formatted for people) and comes
 * out as aligned terminal text, Markdown or HTML. compare's tables go
 * through it; a new report section with a table (per-rank figures, sampled
 * stacks, restarts ...) needs only its rows (docs/architecture.md).
 * JSON is not a table: its writer takes the same figures from the same row
 * descriptions, unformatted. */
#ifndef TPF_REPORT_TABLE_H
#define TPF_REPORT_TABLE_H

#include "report/report.h"
#include "util/buf.h"

typedef struct tbl_col {
    const char *head; /* NULL: no heading cell in text (a trailing remark column) */
    int width;        /* text: padded to this many columns (0: as it is) */
    int right;        /* aligned right (numbers) */
} tbl_col;

/* How a row's last cell reads: a verdict coloured in text, a class in HTML. */
enum { TBL_PLAIN = 0, TBL_GOOD = 1, TBL_BAD = -1 };

typedef struct tbl {
    buf *b;
    report_format fmt;  /* REPORT_TEXT, REPORT_MD or REPORT_HTML */
    int color;          /* text: ANSI colour */
    const tbl_col *cols;
    int ncols;
    int open;
} tbl;

/* Start a table titled title (text: a bold heading line with the column
 * heads; md: "## title"; html: <h2>); title NULL: a table inside the
 * current section (no heading; text has no head line). cols is borrowed
 * until tbl_end. */
void tbl_begin(tbl *t, buf *b, report_format fmt, int color, const char *title,
               const tbl_col *cols, int ncols);
/* One row of ncols cells (text as it is; escaped for md and html). mark
 * (TBL_GOOD / TBL_BAD / TBL_PLAIN) says how the last cell reads. */
void tbl_row(tbl *t, const char *const *cells, int mark);
void tbl_end(tbl *t);
/* n cells as text escaped for fmt (md, html), without table markup. */
void tbl_cells(buf *b, report_format fmt, const char *const *cells, int n);

#endif
