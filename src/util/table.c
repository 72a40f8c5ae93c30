/* Tables in text, Markdown and HTML (see table.h). */
#include "util/table.h"

#include <string.h>

/* s escaped for fmt: md keeps a cell in its column (| and newlines) and
 * shows it as text (no emphasis, code or links from a kernel or op name;
 * <, >, & as they are); html as report_html_esc does. */
void tbl_esc(buf *o, int fmt, const char *s)
{
    if (fmt != TBL_MD && fmt != TBL_HTML) {
        if (s) buf_puts(o, s);
        return;
    }
    for (; s && *s; s++) {
        switch (*s) {
        case '|': case '*': case '_': case '`': case '[': case ']': case '\\':
            if (fmt == TBL_MD) buf_putc(o, '\\');
            buf_putc(o, *s);
            break;
        case '\n': buf_putc(o, fmt == TBL_MD ? ' ' : '\n'); break;
        case '<': buf_puts(o, "&lt;"); break;
        case '>': buf_puts(o, "&gt;"); break;
        case '&': buf_puts(o, "&amp;"); break;
        case '"': buf_puts(o, fmt == TBL_HTML ? "&quot;" : "\""); break;
        case '\'': buf_puts(o, fmt == TBL_HTML ? "&#39;" : "'"); break;
        default: buf_putc(o, *s);
        }
    }
}

static int pad(const tbl_col *c) { return c->flags & TBL_RIGHT ? c->width : -c->width; }

/* pad(c) for the cell s: printf's %*s counts bytes, a column holds one
 * character of UTF-8 ("—" is three bytes) */
static int pad_cell(const tbl_col *c, const char *s)
{
    int extra = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) == 0x80) extra++;
    int w = c->width ? c->width + extra : 0;
    return c->flags & TBL_RIGHT ? w : -w;
}

/* Text: "  " then the cells, one space apart, each padded to its column;
 * cells NULL: the column heads. */
static void text_cells(tbl *t, const char *const *cells, int mark)
{
    buf *b = t->b;
    int last = t->ncols - 1;
    for (int i = 0; i < t->ncols; i++) {
        const char *s = cells ? cells[i] : t->cols[i].head ? t->cols[i].head : "";
        if (i && i == last && mark && t->color) {
            buf_printf(b, "%*s %s%s\033[0m", (t->cols[i].flags & TBL_GAP) ? 1 : 0, "", mark == TBL_GOOD ? "\033[32m" : "\033[31m", s);
            continue;
        }
        buf_printf(b, i ? "%*s %*s" : "%*s  %*s", (t->cols[i].flags & TBL_GAP) ? 1 : 0, "", pad_cell(&t->cols[i], s), s);
    }
    buf_putc(b, '\n');
}

static void md_cells(buf *b, const char *const *cells, int n)
{
    buf_putc(b, '|');
    for (int i = 0; i < n; i++) {
        buf_putc(b, ' ');
        tbl_esc(b, TBL_MD, cells[i]);
        buf_puts(b, " |");
    }
    buf_putc(b, '\n');
}

void tbl_heading(buf *b, int fmt, int color, const char *title)
{
    if (fmt == TBL_MD) {
        buf_printf(b, "\n### %s\n\n", title);
    } else if (fmt == TBL_HTML) {
        buf_puts(b, "<h3>");
        tbl_esc(b, TBL_HTML, title);
        buf_puts(b, "</h3>");
    } else {
        buf_printf(b, "\n%s%s%s\n", color ? "\033[1m" : "", title, color ? "\033[0m" : "");
    }
}

static void begin_text(tbl *t, const char *title)
{
    buf *b = t->b;
    const tbl_col *cols = t->cols;
    const char *bold = t->color ? "\033[1m" : "", *off = t->color ? "\033[0m" : "";
    if (t->layout == TBL_SUB) {
        if (title) tbl_heading(b, TBL_TEXT, t->color, title);
        buf_puts(b, t->color ? "\033[2m" : "");
        text_cells(t, NULL, TBL_PLAIN);
        buf_puts(b, off);
        return;
    }
    if (!title) return;
    /* the title stands over the first column (indented rows: +2) */
    buf_printf(b, "\n%s%-*s", bold, cols[0].width + 2, title);
    for (int i = 1; i < t->ncols; i++)
        if (cols[i].head) buf_printf(b, " %*s", pad(&cols[i]), cols[i].head);
    buf_printf(b, "%s\n", off);
}

static void begin_md(tbl *t, const char *title)
{
    buf *b = t->b;
    if (t->layout == TBL_SUB) {
        if (title) tbl_heading(b, TBL_MD, 0, title);
        buf_putc(b, '|');
        for (int i = 0; i < t->ncols; i++) {
            buf_putc(b, ' ');
            tbl_esc(b, TBL_MD, t->cols[i].head ? t->cols[i].head : "");
            buf_puts(b, " |");
        }
        buf_puts(b, "\n|");
        for (int i = 0; i < t->ncols; i++) buf_puts(b, t->cols[i].flags & TBL_RIGHT ? " ---: |" : " --- |");
        buf_putc(b, '\n');
        return;
    }
    if (title) buf_printf(b, "\n## %s\n", title);
    buf_puts(b, "\n|");
    for (int i = 0; i < t->ncols; i++) {
        const char *h = t->cols[i].head ? t->cols[i].head : "";
        buf_putc(b, ' ');
        tbl_esc(b, TBL_MD, h);
        buf_puts(b, *h ? " |" : "|");
    }
    buf_puts(b, "\n|");
    for (int i = 0; i < t->ncols; i++) buf_puts(b, "---|");
    buf_putc(b, '\n');
}

static void begin_html(tbl *t, const char *title)
{
    buf *b = t->b;
    if (title && t->layout == TBL_SUB) {
        tbl_heading(b, TBL_HTML, 0, title);
    } else if (title) {
        buf_puts(b, "<h2>");
        tbl_esc(b, TBL_HTML, title);
        buf_puts(b, "</h2>");
    }
    buf_puts(b, "<table><tr>");
    for (int i = 0; i < t->ncols; i++) {
        buf_puts(b, i && t->cols[i].flags & TBL_RIGHT ? "<th class=\"n\">" : "<th>");
        tbl_esc(b, TBL_HTML, t->cols[i].head);
        buf_puts(b, "</th>");
    }
    buf_puts(b, "</tr>\n");
}

static void begin(tbl *t, buf *b, int fmt, int color, int layout, const char *title,
                  const tbl_col *cols, int ncols)
{
    t->b = b;
    t->fmt = fmt;
    t->color = color && fmt == TBL_TEXT;
    t->layout = layout;
    t->cols = cols;
    t->ncols = ncols;
    t->open = 1;
    if (fmt == TBL_TEXT) begin_text(t, title);
    else if (fmt == TBL_MD) begin_md(t, title);
    else if (fmt == TBL_HTML) begin_html(t, title);
}

void tbl_begin(tbl *t, buf *b, int fmt, int color, const char *title,
               const tbl_col *cols, int ncols)
{
    begin(t, b, fmt, color, TBL_SECTION, title, cols, ncols);
}

void tbl_begin_sub(tbl *t, buf *b, int fmt, int color, const char *title,
                   const tbl_col *cols, int ncols)
{
    begin(t, b, fmt, color, TBL_SUB, title, cols, ncols);
}

static const char *mark_class(int mark)
{
    return mark == TBL_GOOD ? "better" : mark == TBL_BAD ? "worse" : "";
}

static void html_row(tbl *t, const char *const *cells, int mark)
{
    buf *b = t->b;
    int last = t->ncols - 1;
    /* the first cell heads its row, unless it is a number (a time) */
    buf_puts(b, t->cols[0].flags & TBL_RIGHT ? "<tr><td class=\"n\">" : "<tr><th>");
    tbl_esc(b, TBL_HTML, cells[0]);
    buf_puts(b, t->cols[0].flags & TBL_RIGHT ? "</td>" : "</th>");
    for (int i = 1; i < t->ncols; i++) {
        if (i == last && mark != TBL_PLAIN)
            buf_printf(b, "<td class=\"%s\">", mark_class(mark));
        else if (i == last && !t->cols[i].head)
            buf_puts(b, "<td class=\"\">");
        else
            buf_puts(b, t->cols[i].flags & TBL_RIGHT ? "<td class=\"n\">" : "<td>");
        tbl_esc(b, TBL_HTML, cells[i]);
        buf_puts(b, "</td>");
    }
    buf_puts(b, "</tr>\n");
}

void tbl_row(tbl *t, const char *const *cells, int mark)
{
    if (t->fmt == TBL_TEXT) text_cells(t, cells, mark);
    else if (t->fmt == TBL_MD) md_cells(t->b, cells, t->ncols);
    else if (t->fmt == TBL_HTML) html_row(t, cells, mark);
}

void tbl_end(tbl *t)
{
    if (t->open && t->fmt == TBL_HTML) buf_puts(t->b, "</table>\n");
    t->open = 0;
}

void tbl_cells(buf *b, int fmt, const char *const *cells, int n)
{
    for (int i = 0; i < n; i++) {
        tbl_esc(b, fmt, cells[i]);
    }
}
