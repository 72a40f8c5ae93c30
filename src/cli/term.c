/* Terminal helpers of the CLI: the terminal's width, text wrapped to it, and
 * the signals a command that waits takes from it. */
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <stdio.h>

#include "cli/cli.h"
#include "util/buf.h"

int cli_term_cols(int fd)
{
    struct winsize ws;
    return ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 0;
}

/* Bytes of an ANSI escape ("ESC [ ... letter") at s, or 0. */
static size_t esc_len(const char *s, size_t n)
{
    if (n < 2 || s[0] != '\033' || s[1] != '[') return 0;
    size_t i = 2;
    while (i < n && !((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z')))
        i++;
    return i < n ? i + 1 : n;
}

/* The columns a continuation is indented by, so wrapped text lines up: the
 * line's leading spaces and a list marker after them ("12. ", "- "), or, on
 * a "label   value" row, the value's column (the text after the first run
 * of two or more spaces). Escapes are not counted: the rows that carry them
 * (tables, bars) are short. */
static int hang_of(const char *s, size_t n, int cols)
{
    size_t i = 0;
    while (i < n && s[i] == ' ')
        i++;
    size_t m = i;
    while (m < n && s[m] >= '0' && s[m] <= '9')
        m++;
    if (m > i && m + 1 < n && s[m] == '.' && s[m + 1] == ' ') {
        m += 2;
    } else if (i + 1 < n && s[i] == '-' && s[i + 1] == ' ') {
        m = i + 2;
    } else {
        const char *two = i < n ? memmem(s + i, n - i, "  ", 2) : NULL;
        m = i;
        if (two) {
            size_t v = (size_t)(two - s);
            while (v < n && s[v] == ' ')
                v++;
            if (v < n) m = v;
        }
    }
    return (int)m <= cols / 2 ? (int)m : (int)i <= cols / 2 ? (int)i : 0;
}

static void wrap_line(const char *s, size_t n, int cols, buf *out)
{
    int hang = hang_of(s, n, cols), col0 = 0;
    size_t start = 0;
    for (;;) {
        /* col: the columns s[start..i) takes on this row. A space after some
         * text is where the row may end: the last one at which it still fits,
         * or, when its first word is wider than the row, the one after it. */
        int col = col0, text = 0, have = 0;
        size_t i = start, brk = 0;
        while (i < n) {
            size_t e = esc_len(s + i, n - i);
            if (e) {
                i += e;
                continue;
            }
            if (s[i] == ' ' && text) {
                if (col <= cols || !have) {
                    brk = i;
                    have = 1;
                }
                if (col > cols) break;
            }
            if (s[i] != ' ') text = 1;
            if (((unsigned char)s[i] & 0xC0) != 0x80) col++;
            i++;
        }
        if (!have || (i >= n && col <= cols)) { /* the rest fits, or cannot be broken */
            buf_append(out, s + start, n - start);
            buf_putc(out, '\n');
            return;
        }
        size_t end = brk;
        while (end > start && s[end - 1] == ' ')
            end--;
        buf_append(out, s + start, end - start);
        buf_putc(out, '\n');
        while (brk < n && s[brk] == ' ')
            brk++;
        if (brk >= n) return;
        for (int k = 0; k < hang; k++)
            buf_putc(out, ' ');
        start = brk;
        col0 = hang;
    }
}

void cli_wrap(const char *in, size_t len, int cols, buf *out)
{
    if (cols < 20) {
        buf_append(out, in, len);
        return;
    }
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(in + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (in + i)) : len - i;
        if (nl)
            wrap_line(in + i, n, cols, out);
        else if (n) {
            /* a last line without its newline keeps going without one */
            size_t before = out->len;
            wrap_line(in + i, n, cols, out);
            if (out->len > before && out->data[out->len - 1] == '\n') out->len--;
            if (out->data) out->data[out->len] = 0;
        }
        i += n + (nl ? 1 : 0);
    }
}

void cli_print_report(const struct buf *text)
{
    buf w;
    buf_init(&w, 0);
    int cols = cli_term_cols(STDERR_FILENO);
    if (cols) cli_wrap(text->data, text->len, cols, &w);
    fprintf(stderr, "\n%s", cols && !w.err && w.data ? w.data : text->data);
    buf_free(&w);
}

void cli_on_signals(void (*handler)(int), int quit)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (quit) sigaction(SIGQUIT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

char *cli_csv_tail(FILE *f, const char *hdr, long cap)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0) return NULL;
    long hlen = (long)strlen(hdr);
    long from = st.st_size > cap ? (long)st.st_size - cap : hlen;
    if (from < hlen) from = hlen;
    char *tail = malloc((size_t)cap + 1);
    if (!tail || fseek(f, from, SEEK_SET) != 0) {
        free(tail);
        return NULL;
    }
    size_t got = fread(tail, 1, (size_t)cap, f);
    tail[got] = 0;
    char *p = tail;
    if (from > hlen) { /* the first line is cut: skip it */
        p = strchr(p, '\n');
        p = p ? p + 1 : tail + got;
    }
    char *end = strrchr(p, '\n'); /* a row still being written has none */
    size_t keep = end ? (size_t)(end - p) + 1 : 0;
    memmove(tail, p, keep);
    tail[keep] = 0;
    return tail;
}
