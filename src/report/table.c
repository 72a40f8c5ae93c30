/* Report tables in text, Markdown and HTML (see table.h). */
#include "report/table.h"

#include <string.h>

#include "report/report_html.h"

static void md_cell(buf *o, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '|': buf_puts(o, "\\|"); break;
        case '<': buf_puts(o, "&lt;"); break;
        case '>': buf_puts(o, "&gt;"); break;
        case '&': buf_puts(o, "&amp;"); break;
        case '\n': buf_putc(o, ' '); break;
        default: buf_putc(o, *s);
        }
    }
}

void tbl_begin(tbl *t, buf *b, report_format fmt, int color, const char *title,
               const tbl_col *cols, int ncols)
{
    t->b = b;
    t->fmt = fmt;
    t->color = color && fmt == REPORT_TEXT;
    t->cols = cols;
    t->ncols = ncols;
    t->open = 1;
    switch (fmt) {
    case REPORT_TEXT:
        if (!title) break;
        /* the title stands over the first column (indented rows: +2) */
        buf_printf(b, "\n%s%-*s", t->color ? "\033[1m" : "", cols[0].width + 2, title);
        for (int i = 1; i < ncols; i++)
            if (cols[i].head) buf_printf(b, " %*s", cols[i].right ? cols[i].width : -cols[i].width,
                                         cols[i].head);
        buf_printf(b, "%s\n", t->color ? "\033[0m" : "");
        break;
    case REPORT_MD:
        if (title) buf_printf(b, "\n## %s\n", title);
        buf_puts(b, "\n|");
        for (int i = 0; i < ncols; i++) {
            const char *h = cols[i].head ? cols[i].head : "";
            buf_putc(b, ' ');
            md_cell(b, h);
            buf_puts(b, *h ? " |" : "|");
        }
        buf_puts(b, "\n|");
        for (int i = 0; i < ncols; i++) buf_puts(b, "---|");
        buf_putc(b, '\n');
        break;
    case REPORT_HTML:
        if (title) {
            buf_puts(b, "<h2>");
            report_html_esc(b, title);
            buf_puts(b, "</h2>");
        }
        buf_puts(b, "<table><tr>");
        for (int i = 0; i < ncols; i++) {
            buf_puts(b, i && cols[i].right ? "<th class=\"n\">" : "<th>");
            if (cols[i].head) report_html_esc(b, cols[i].head);
            buf_puts(b, "</th>");
        }
        buf_puts(b, "</tr>\n");
        break;
    default: break;
    }
}

static const char *mark_class(int mark)
{
    return mark == TBL_GOOD ? "better" : mark == TBL_BAD ? "worse" : "";
}

void tbl_row(tbl *t, const char *const *cells, int mark)
{
    buf *b = t->b;
    int last = t->ncols - 1;
    switch (t->fmt) {
    case REPORT_TEXT:
        buf_printf(b, "  %*s", t->cols[0].right ? t->cols[0].width : -t->cols[0].width, cells[0]);
        for (int i = 1; i < t->ncols; i++) {
            const tbl_col *c = &t->cols[i];
            if (i == last && mark && t->color) {
                buf_printf(b, " %s%s\033[0m", mark == TBL_GOOD ? "\033[32m" : "\033[31m", cells[i]);
                continue;
            }
            buf_printf(b, " %*s", c->right ? c->width : -c->width, cells[i]);
        }
        buf_putc(b, '\n');
        break;
    case REPORT_MD:
        buf_putc(b, '|');
        for (int i = 0; i < t->ncols; i++) {
            buf_putc(b, ' ');
            md_cell(b, cells[i]);
            buf_puts(b, " |");
        }
        buf_putc(b, '\n');
        break;
    case REPORT_HTML:
        /* the first cell heads its row, unless it is a number (a time) */
        buf_puts(b, t->cols[0].right ? "<tr><td class=\"n\">" : "<tr><th>");
        report_html_esc(b, cells[0]);
        buf_puts(b, t->cols[0].right ? "</td>" : "</th>");
        for (int i = 1; i < t->ncols; i++) {
            if (i == last && mark != TBL_PLAIN)
                buf_printf(b, "<td class=\"%s\">", mark_class(mark));
            else if (i == last && !t->cols[i].head)
                buf_puts(b, "<td class=\"\">");
            else
                buf_puts(b, t->cols[i].right ? "<td class=\"n\">" : "<td>");
            report_html_esc(b, cells[i]);
            buf_puts(b, "</td>");
        }
        buf_puts(b, "</tr>\n");
        break;
    default: break;
    }
}

void tbl_end(tbl *t)
{
    if (t->open && t->fmt == REPORT_HTML) buf_puts(t->b, "</table>\n");
    t->open = 0;
}

void tbl_cells(buf *b, report_format fmt, const char *const *cells, int n)
{
    for (int i = 0; i < n; i++) {
        if (fmt == REPORT_MD)
            md_cell(b, cells[i]);
        else if (fmt == REPORT_HTML)
            report_html_esc(b, cells[i]);
        else
            buf_puts(b, cells[i]);
    }
}
