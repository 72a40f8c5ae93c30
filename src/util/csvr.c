#include "util/afile.h"
#include "util/csvr.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"
#include "util/err.h"

static int csvr_grow(csvr *r, size_t need)
{
    if (need <= r->rec_cap) return 0;
    if (need > CSVR_MAX_RECORD + 1) return TPF_ETOOBIG;
    size_t cap = r->rec_cap ? r->rec_cap : 1024;
    while (cap < need)
        cap *= 2;
    if (cap > CSVR_MAX_RECORD + 1) cap = CSVR_MAX_RECORD + 1;
    char *p = realloc(r->rec, cap);
    if (!p) return TPF_ENOMEM;
    r->rec = p;
    r->rec_cap = cap;
    return 0;
}

/* Reads one record into rec as NUL-separated cells; offsets are turned into
 * pointers only at the end because rec may move while growing. */
static int csvr_read(csvr *r)
{
    size_t len = 0;
    int quoted = 0, at_cell_start = 1, any = 0, c;
    size_t starts[CSVR_MAX_COLS];
    int n = 0;
    starts[n++] = 0;
    long lines = 0;
    while ((c = getc(r->f)) != EOF) {
        any = 1;
        if (quoted) {
            if (c == '"') {
                int d = getc(r->f);
                if (d == '"') {
                    /* a doubled quote is one quote */
                } else {
                    quoted = 0;
                    if (d != EOF) ungetc(d, r->f);
                    continue;
                }
            }
            if (c == '\n') lines++;
        } else if (c == '"' && at_cell_start) {
            quoted = 1;
            at_cell_start = 0;
            continue;
        } else if (c == ',') {
            if (csvr_grow(r, len + 2)) return TPF_ETOOBIG;
            r->rec[len++] = '\0';
            if (n >= CSVR_MAX_COLS) return TPF_ETOOBIG;
            starts[n++] = len;
            at_cell_start = 1;
            continue;
        } else if (c == '\n') {
            lines++;
            break;
        } else if (c == '\r') {
            continue;
        }
        at_cell_start = 0;
        int rc = csvr_grow(r, len + 2);
        if (rc) return rc;
        r->rec[len++] = (char)c;
    }
    if (ferror(r->f)) return TPF_EIO;
    if (!any) return 0;
    if (csvr_grow(r, len + 1)) return TPF_ETOOBIG;
    r->rec[len] = '\0';
    for (int i = 0; i < n; i++)
        r->cell[i] = r->rec + starts[i];
    r->ncell = n;
    r->line += lines ? lines : 1;
    return 1;
}

int csvr_open(csvr *r, const char *path, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    r->f = afile_fopen_read(path);
    if (!r->f) {
        int e = errno;
        if (err && errlen) snprintf(err, errlen, "%s: %s", path, afile_read_why(e));
        int rc = e == EINVAL || e == ELOOP ? TPF_EIO : err_from_errno(e);
        return rc ? rc : TPF_EIO;
    }
    r->cell = calloc(CSVR_MAX_COLS, sizeof(char *));
    r->hcell = calloc(CSVR_MAX_COLS, sizeof(char *));
    if (!r->cell || !r->hcell) {
        csvr_close(r);
        return TPF_ENOMEM;
    }
    int rc = csvr_read(r);
    if (rc == 0) {
        /* Not a byte: what a full disk leaves of a streamed file whose
         * header never got out (record/sinks.c). No rows, as if absent. */
        if (err && errlen) snprintf(err, errlen, "%s: empty", path);
        csvr_close(r);
        return TPF_ENOENT;
    }
    if (rc < 0 || (r->ncell == 1 && r->rec[0] == '\0')) {
        if (err && errlen)
            snprintf(err, errlen, "%s: %s", path,
                     rc < 0 ? tpf_strerror(rc) : "empty, no header row");
        csvr_close(r);
        return rc < 0 ? rc : TPF_EFORMAT;
    }
    /* Header cells point into their own copy: rec is reused per record. */
    size_t hl = 0;
    for (int i = 0; i < r->ncell; i++)
        hl += strlen(r->cell[i]) + 1;
    r->hdr = malloc(hl ? hl : 1);
    if (!r->hdr) {
        csvr_close(r);
        return TPF_ENOMEM;
    }
    size_t o = 0;
    for (int i = 0; i < r->ncell; i++) {
        size_t l = strlen(r->cell[i]) + 1;
        memcpy(r->hdr + o, r->cell[i], l);
        r->hcell[i] = r->hdr + o;
        o += l;
    }
    r->ncol = r->ncell;
    r->ncell = 0;
    return 0;
}

void csvr_close(csvr *r)
{
    if (r->f) fclose(r->f);
    free(r->rec);
    free(r->cell);
    free(r->hdr);
    free(r->hcell);
    memset(r, 0, sizeof(*r));
}

int csvr_next(csvr *r)
{
    for (;;) {
        int rc = csvr_read(r);
        if (rc <= 0) return rc;
        /* blank lines carry nothing */
        if (r->ncell == 1 && r->rec[0] == '\0') continue;
        r->rows++;
        return 1;
    }
}

int csvr_col(const csvr *r, const char *name)
{
    for (int i = 0; i < r->ncol; i++)
        if (strcmp(r->hcell[i], name) == 0) return i;
    return -1;
}

const char *csvr_str(const csvr *r, int c)
{
    if (c < 0 || c >= r->ncell) return "";
    return r->cell[c];
}

int csvr_num(const csvr *r, int c, double *v)
{
    const char *s = csvr_str(r, c);
    if (!*s) return 0;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(x)) return 0;
    *v = x;
    return 1;
}
