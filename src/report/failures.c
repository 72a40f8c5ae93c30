/* Failures in reports (see failures.h). One loader fills a small model; the
 * three formats render it. */
#include "report/failures.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report_load.h"
#include "util/afile.h"
#include "util/table.h"
#include "trainperf.h"
#include "util/csvr.h"
#include "util/jsonr.h"

#define FAIL_MAX_STREAMS 1024
#define FAIL_MAX_HANGS 16      /* hangs shown */
#define FAIL_MAX_ATTEMPTS 64   /* attempt rows shown (first and last ones) */
#define FAIL_STACK_LINES 120   /* lines of the last hang's stacks shown in the report */
#define FAIL_FILE_MAX (16u << 20)

/* ---- checkpoint cost ---- */

typedef struct ck_stream {
    double pid, tid;
    int n;
    double first_end, last_end;
} ck_stream;

int fail_ckpt_load(const char *run_dir, fail_ckpt *out)
{
    memset(out, 0, sizeof(*out));
    out->cost_s = out->max_s = out->share = out->interval_s = NAN;
    char path[PATH_MAX + 16], err[160];
    snprintf(path, sizeof(path), "%s/steps.csv", run_dir);
    csvr r;
    int rc = csvr_open(&r, path, err, sizeof(err));
    if (rc) return rc;
    int c_pid = csvr_col(&r, "pid"), c_tid = csvr_col(&r, "tid"), c_start = csvr_col(&r, "start_s");
    int c_dur = csvr_col(&r, "duration_ns"), c_int = csvr_col(&r, "interval_ns");
    int c_ck = csvr_col(&r, "checkpoint_ns");
    ck_stream *st = calloc(FAIL_MAX_STREAMS, sizeof(ck_stream));
    if (!st) {
        csvr_close(&r);
        return TPF_ENOMEM;
    }
    int ns = 0, nck = 0;
    double sum_ck = 0, sum_int = 0, max_ck = 0;
    while ((rc = csvr_next(&r)) == 1) {
        double iv, ck, pid = -1, tid = -1, start, dur;
        if (csvr_num(&r, c_int, &iv)) sum_int += iv;
        if (!csvr_num(&r, c_ck, &ck) || ck <= 0) continue;
        sum_ck += ck;
        nck++;
        if (ck > max_ck) max_ck = ck;
        csvr_num(&r, c_pid, &pid);
        csvr_num(&r, c_tid, &tid);
        if (!csvr_num(&r, c_start, &start) || !csvr_num(&r, c_dur, &dur)) continue;
        double end = start + dur / 1e9;
        int k;
        for (k = 0; k < ns; k++)
            if (st[k].pid == pid && st[k].tid == tid) break;
        if (k == ns) {
            if (ns == FAIL_MAX_STREAMS) continue;
            ns++;
            st[k].pid = pid;
            st[k].tid = tid;
            st[k].first_end = end;
        }
        st[k].n++;
        st[k].last_end = end;
    }
    csvr_close(&r);
    int best = -1;
    for (int k = 0; k < ns; k++)
        if (best < 0 || st[k].n > st[best].n) best = k;
    if (nck) {
        out->n = best >= 0 ? st[best].n : nck;
        out->cost_s = sum_ck / nck / 1e9;
        out->max_s = max_ck / 1e9;
        out->share = sum_int > 0 ? sum_ck / sum_int : NAN;
        if (best >= 0 && st[best].n >= 2)
            out->interval_s = (st[best].last_end - st[best].first_end) / (st[best].n - 1);
    }
    free(st);
    return rc < 0 ? rc : 0;
}

double fail_young(double c, double m)
{
    if (!(c > 0) || !(m > 0)) return NAN;
    return sqrt(2 * c * m);
}

double fail_daly(double c, double m)
{
    if (!(c > 0) || !(m > 0)) return NAN;
    if (c >= 2 * m) return m;
    return sqrt(2 * c * m) - c;
}

/* Expected share of time lost to checkpoints and to rework after failures
 * when checkpointing every T: c/T + (T/2)/M (first order, restart time left out). */
static double overhead(double c, double t, double m)
{
    if (!(c > 0) || !(t > 0) || !(m > 0)) return NAN;
    return c / t + t / 2 / m;
}

/* The checkpoint figures as summary.json's failures.checkpoint has them:
 * written by fail_ckpt_json, read back by fail_model. */
static const jw_field ckpt_fields[] = {
    JW_FIELD(INT, "count", fail_ckpt, n),
    JW_FIELD(DBL, "cost_s", fail_ckpt, cost_s),
    JW_FIELD(DBL, "max_s", fail_ckpt, max_s),
    JW_FIELD(DBL, "share", fail_ckpt, share),
    JW_FIELD(DBL, "interval_s", fail_ckpt, interval_s),
};

void fail_ckpt_json(jw *w, const fail_ckpt *c, double mtbf_s)
{
    jw_obj_begin(w);
    jw_fields(w, c, ckpt_fields, JW_NFIELDS(ckpt_fields));
    jw_knum(w, "mtbf_s", mtbf_s);
    jw_knum(w, "optimal_interval_s", fail_daly(c->cost_s, mtbf_s));
    jw_knum(w, "young_interval_s", fail_young(c->cost_s, mtbf_s));
    jw_knum(w, "overhead_now", overhead(c->cost_s, c->interval_s, mtbf_s));
    jw_knum(w, "overhead_optimal", overhead(c->cost_s, fail_daly(c->cost_s, mtbf_s), mtbf_s));
    jw_obj_end(w);
}

/* ---- the model ---- */

typedef struct f_hang {
    double t, since, bound;
    int attempt;
    int first; /* before the attempt's first step: since counts from its start */
    char verdict[640], stacks[64], action[16], kind[16];
} f_hang;

/* A hang as hangs.jsonl and the JSON report have it (read and written). */
static const jw_field hang_fields[] = {
    JW_FIELD(DBL, "t", f_hang, t),
    JW_FIELD(INT, "attempt", f_hang, attempt),
    JW_FIELD(DBL, "since_last_step_s", f_hang, since),
    JW_FIELD(BOOL, "before_first_step", f_hang, first),
    JW_FIELD(DBL, "bound_s", f_hang, bound),
    JW_FIELD(STR, "verdict", f_hang, verdict),
    JW_FIELD(STRZ, "stacks", f_hang, stacks),
    JW_FIELD(STR, "action", f_hang, action),
};

typedef struct f_att {
    double start, dur, steps, ckpts, backoff;
    int code_ok, code, sig, restarted;
    char ended_by[16], stopped[160];
} f_att;

typedef struct f_model {
    int have_failures;
    int attempts, failures, restarts_opt;
    double time_lost, lost_work, restart_s, mtbf, run_s, bound;
    char mtbf_src[16], on_hang[16], bound_kind[16];
    int nhangs_total, nhangs;
    f_hang hangs[FAIL_MAX_HANGS];
    int natt, natt_total;
    f_att att[FAIL_MAX_ATTEMPTS];
    fail_ckpt ck;
    char *stack_text; /* the last hang's stacks, first FAIL_STACK_LINES lines */
    int stack_more;   /* lines left out */
} f_model;

/* A count from a file that may be damaged: never a cast of NaN or of a huge value. */
#define to_int(v) diag_int((v), -1e9, 1e9, 0)

static void cpy(char *o, size_t n, const char *s) { snprintf(o, n, "%s", s ? s : ""); }

/* One line of f into line (cap bytes with the NUL; the rest of a longer line
 * is skipped, so a damaged file never grows memory). Returns its length, or
 * -1 at the end of the file. */
static long read_line(FILE *f, char *line, size_t cap, int *cut)
{
    size_t n = 0;
    int c, any = 0;
    *cut = 0;
    while ((c = getc(f)) != EOF) {
        any = 1;
        if (c == '\n') break;
        if (n + 1 < cap)
            line[n++] = (char)c;
        else
            *cut = 1;
    }
    line[n] = 0;
    return any ? (long)n : -1;
}

static void load_hangs(f_model *m, const char *run_dir)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/hangs.jsonl", run_dir);
    FILE *f = afile_fopen_read(path);
    if (!f) return;
    size_t cap = 1u << 20; /* a hang's line: verdict and up to 256 processes */
    char *line = malloc(cap);
    long n;
    int cut;
    while (line && (n = read_line(f, line, cap, &cut)) >= 0) {
        if (cut || n == 0) continue;
        jr_doc d;
        char err[64];
        if (jr_parse(&d, line, (size_t)n, 0, err, sizeof(err)) != 0) continue;
        m->nhangs_total++;
        /* keep the last FAIL_MAX_HANGS */
        if (m->nhangs == FAIL_MAX_HANGS) {
            memmove(m->hangs, m->hangs + 1, sizeof(f_hang) * (FAIL_MAX_HANGS - 1));
            m->nhangs--;
        }
        f_hang *h = &m->hangs[m->nhangs++];
        *h = (f_hang){.attempt = 1}; /* a line from before attempts were counted */
        jr_fields(d.root, h, hang_fields, JW_NFIELDS(hang_fields));
        cpy(h->kind, sizeof(h->kind), jr_pstr(d.root, "bound_kind"));
        jr_free(&d);
    }
    free(line);
    fclose(f);
}

static void load_stacks(f_model *m, const char *run_dir)
{
    if (!m->nhangs) return;
    const f_hang *h = &m->hangs[m->nhangs - 1];
    if (!h->stacks[0] || strstr(h->stacks, "..")) return;
    char path[PATH_MAX + 80];
    snprintf(path, sizeof(path), "%s/%s", run_dir, h->stacks);
    FILE *f = afile_fopen_read(path);
    if (!f) return;
    buf b;
    buf_init(&b, 1u << 20);
    char line[1024];
    int lines = 0, cut;
    while (read_line(f, line, sizeof(line), &cut) >= 0) {
        if (lines < FAIL_STACK_LINES)
            buf_printf(&b, "%s%s\n", line, cut ? " [...]" : "");
        else
            m->stack_more++;
        lines++;
    }
    fclose(f);
    buf_putc(&b, 0);
    if (b.err) {
        buf_free(&b);
        return;
    }
    m->stack_text = strndup(b.data, b.len);
    buf_free(&b);
}

static void load_attempts(f_model *m, const char *run_dir)
{
    char path[PATH_MAX + 16], err[128];
    snprintf(path, sizeof(path), "%s/attempts.json", run_dir);
    jr_doc d;
    if (jr_load_file(&d, path, FAIL_FILE_MAX, err, sizeof(err)) != 0) return;
    const jr_node *arr = jr_get(d.root, "attempts");
    int n = arr ? arr->count : 0;
    m->natt_total = n;
    for (int i = 0; i < n; i++) {
        /* the first ones and the last ones when there are many */
        if (n > FAIL_MAX_ATTEMPTS && i >= FAIL_MAX_ATTEMPTS / 2 && i < n - FAIL_MAX_ATTEMPTS / 2)
            continue;
        const jr_node *a = jr_at(arr, i);
        f_att *x = &m->att[m->natt++];
        x->start = jr_pnum(a, "start_t");
        x->dur = jr_pnum(a, "duration_s");
        x->steps = jr_pnum(a, "steps");
        x->ckpts = jr_pnum(a, "checkpoints");
        x->backoff = jr_pnum(a, "backoff_s");
        double c = jr_pnum(a, "exit_code"), s = jr_pnum(a, "signal");
        x->code_ok = isfinite(c);
        x->code = to_int(c);
        x->sig = to_int(s);
        const jr_node *r = jr_get(a, "restarted");
        x->restarted = r && r->type == JR_BOOL && r->num != 0;
        cpy(x->ended_by, sizeof(x->ended_by), jr_pstr(a, "ended_by"));
        cpy(x->stopped, sizeof(x->stopped), jr_pstr(a, "stopped"));
    }
    jr_free(&d);
}

static void load(f_model *m, const char *run_dir)
{
    memset(m, 0, sizeof(*m));
    m->mtbf = m->time_lost = m->bound = NAN;
    char path[PATH_MAX + 16], err[128];
    snprintf(path, sizeof(path), "%s/failures.json", run_dir);
    jr_doc d;
    int have_ck = 0;
    if (jr_load_file(&d, path, FAIL_FILE_MAX, err, sizeof(err)) == 0) {
        m->have_failures = 1;
        m->attempts = to_int(jr_pnum(d.root, "attempts"));
        m->failures = to_int(jr_pnum(d.root, "failures"));
        double ro = jr_pnum(d.root, "options.restarts");
        m->restarts_opt = to_int(ro);
        m->time_lost = jr_pnum(d.root, "time_lost_s");
        m->lost_work = jr_pnum(d.root, "lost_work_s");
        m->restart_s = jr_pnum(d.root, "restart_s");
        m->run_s = jr_pnum(d.root, "run_s");
        m->mtbf = jr_pnum(d.root, "mtbf_s");
        m->bound = jr_pnum(d.root, "hang_bound_s");
        cpy(m->mtbf_src, sizeof(m->mtbf_src), jr_pstr(d.root, "mtbf_source"));
        cpy(m->on_hang, sizeof(m->on_hang), jr_pstr(d.root, "options.on_hang"));
        cpy(m->bound_kind, sizeof(m->bound_kind), jr_pstr(d.root, "options.hang_timeout"));
        const jr_node *ck = jr_get(d.root, "checkpoint");
        if (ck && ck->type == JR_OBJ) {
            have_ck = 1;
            jr_fields(ck, &m->ck, ckpt_fields, JW_NFIELDS(ckpt_fields));
        }
        jr_free(&d);
    }
    /* an embedded run or one cut short: the same figures from steps.csv */
    if (!have_ck) fail_ckpt_load(run_dir, &m->ck);
    load_hangs(m, run_dir);
    load_stacks(m, run_dir);
    load_attempts(m, run_dir);
}

static void unload(f_model *m)
{
    free(m->stack_text);
    m->stack_text = NULL;
}

/* ---- formatting ---- */

static const char *dur(char *o, size_t n, double s)
{
    if (!isfinite(s))
        snprintf(o, n, "?");
    else if (s < 1)
        snprintf(o, n, "%.0f ms", s * 1000);
    else if (s < 120)
        snprintf(o, n, "%.1f s", s);
    else if (s < 7200)
        snprintf(o, n, "%.1f min", s / 60);
    else if (s < 3 * 86400)
        snprintf(o, n, "%.1f h", s / 3600);
    else
        snprintf(o, n, "%.1f d", s / 86400);
    return o;
}

static const char *att_end(const f_att *a, char *o, size_t n)
{
    if (a->sig)
        snprintf(o, n, "signal %d", a->sig);
    else if (a->code_ok)
        snprintf(o, n, "exit %d", a->code);
    else
        snprintf(o, n, "running");
    return o;
}

/* fmt goes to the table writer's escaping as it is */
_Static_assert((int)FAIL_TEXT == (int)TBL_TEXT && (int)FAIL_MD == (int)TBL_MD &&
                   (int)FAIL_HTML == (int)TBL_HTML,
               "FAIL_* formats are TBL_* formats");

void fail_headline(buf *b, const char *run_dir, int fmt, int color)
{
    f_model *m = calloc(1, sizeof(*m));
    if (!m) return;
    load(m, run_dir);
    if (m->nhangs) {
        const f_hang *h = &m->hangs[m->nhangs - 1];
        char a[32];
        const char *red = fmt == FAIL_TEXT && color ? "\033[1;31m" : "";
        const char *rs = fmt == FAIL_TEXT && color ? "\033[0m" : "";
        if (fmt == FAIL_HTML)
            buf_puts(b, "<section class=\"diag bad\"><div class=\"t\">Hang: ");
        else if (fmt == FAIL_MD)
            buf_puts(b, "**Hang:** ");
        else
            buf_printf(b, "%sHANG%s ", red, rs);
        tbl_esc(b, fmt, h->verdict[0] ? h->verdict : "no process answered");
        if (fmt == FAIL_HTML) buf_puts(b, "</div><p>");
        buf_printf(b, "%s(%s %s at t = %.0f s", fmt == FAIL_HTML ? "" : " ",
                   h->first ? "no first step after" : "no step for", dur(a, sizeof(a), h->since),
                   h->t);
        if (h->stacks[0]) {
            buf_puts(b, "; stacks in ");
            tbl_esc(b, fmt, h->stacks);
        }
        if (m->nhangs_total > 1) buf_printf(b, "; %d hangs in all", m->nhangs_total);
        buf_puts(b, ")");
        buf_puts(b, fmt == FAIL_HTML ? "</p></section>\n" : fmt == FAIL_MD ? "\n\n" : "\n");
    }
    unload(m);
    free(m);
}

static void heading(buf *b, int fmt, int color, const char *t)
{
    if (fmt == FAIL_HTML)
        buf_printf(b, "<h2>%s</h2>\n", t);
    else if (fmt == FAIL_MD)
        buf_printf(b, "\n## %s\n\n", t);
    else {
        buf_printf(b, "\n%s", color ? "\033[1m" : "");
        for (const char *p = t; *p; p++) buf_putc(b, (*p >= 'a' && *p <= 'z') ? *p - 32 : *p);
        buf_printf(b, "%s\n", color ? "\033[0m" : "");
    }
}

/* A paragraph: text "  line", md "line\n\n", html <p>line</p>. */
static void para_begin(buf *b, int fmt) { buf_puts(b, fmt == FAIL_HTML ? "<p>" : fmt == FAIL_TEXT ? "  " : ""); }
static void para_end(buf *b, int fmt) { buf_puts(b, fmt == FAIL_HTML ? "</p>\n" : fmt == FAIL_MD ? "\n\n" : "\n"); }

static void sec_hangs(buf *b, const f_model *m, int fmt, int color)
{
    if (!m->nhangs) return;
    heading(b, fmt, color, "Hangs");
    char a[32], c[32];
    for (int i = 0; i < m->nhangs; i++) {
        const f_hang *h = &m->hangs[i];
        para_begin(b, fmt);
        if (fmt == FAIL_MD) buf_puts(b, "- ");
        buf_printf(b, "t = %.0f s, attempt %d: %s %s (bound %s, %s); action %s: ", h->t,
                   h->attempt, h->first ? "no first step after" : "no step for",
                   dur(a, sizeof(a), h->since), dur(c, sizeof(c), h->bound),
                   h->kind[0] ? h->kind : "?", h->action[0] ? h->action : "dump");
        tbl_esc(b, fmt, h->verdict[0] ? h->verdict : "no process answered");
        if (fmt == FAIL_MD) buf_puts(b, "\n");
        else para_end(b, fmt);
    }
    if (fmt == FAIL_MD) buf_puts(b, "\n");
    if (m->stack_text) {
        const f_hang *h = &m->hangs[m->nhangs - 1];
        para_begin(b, fmt);
        buf_puts(b, "Stacks of the last hang (");
        tbl_esc(b, fmt, h->stacks);
        buf_puts(b, "):");
        para_end(b, fmt);
        if (fmt == FAIL_HTML) {
            buf_puts(b, "<pre>");
            tbl_esc(b, fmt, m->stack_text);
            buf_puts(b, "</pre>\n");
        } else if (fmt == FAIL_MD) {
            buf_puts(b, "```\n");
            /* a fence inside the stacks would end the block early */
            for (const char *p = m->stack_text; *p; p++)
                buf_putc(b, (*p == '`') ? '\'' : *p);
            buf_puts(b, "```\n");
        } else {
            for (const char *p = m->stack_text; *p;) {
                size_t n = strcspn(p, "\n");
                buf_printf(b, "    %.*s\n", (int)n, p);
                p += n;
                if (*p) p++;
            }
        }
        if (m->stack_more) {
            para_begin(b, fmt);
            buf_printf(b, "(%d more lines in the file)", m->stack_more);
            para_end(b, fmt);
        }
    }
}

static void sec_attempts(buf *b, const f_model *m, int fmt, int color)
{
    if (m->natt_total < 2 && m->restarts_opt == 0) return;
    char a[32], c[32], d[32], e[32];
    static const tbl_col cols[] = {{"attempt", 8, 0}, {"start", 9, 1},   {"duration", 9, 1},
                                   {"end", 11, 0},    {"steps", 8, 1},   {"ckpts", 5, 1},
                                   {"ended by", 8, 0}, {"then", 0, 0}};
    tbl t;
    tbl_begin(&t, b, fmt, color, fmt == FAIL_TEXT ? "ATTEMPTS" : "Attempts", cols,
              (int)(sizeof(cols) / sizeof(cols[0])));
    for (int i = 0; i < m->natt; i++) {
        const f_att *x = &m->att[i];
        int num = m->natt_total > FAIL_MAX_ATTEMPTS && i >= FAIL_MAX_ATTEMPTS / 2
                      ? m->natt_total - (m->natt - i) + 1
                      : i + 1;
        char then[200], endw[32], nb[16], st[24], ck[24];
        if (x->restarted)
            snprintf(then, sizeof(then), "restarted after %s", dur(e, sizeof(e), x->backoff));
        else if (x->stopped[0])
            snprintf(then, sizeof(then), "not restarted: %s", x->stopped);
        else
            snprintf(then, sizeof(then), "-");
        att_end(x, endw, sizeof(endw));
        snprintf(nb, sizeof(nb), "%d", num);
        snprintf(st, sizeof(st), "%.0f", x->steps);
        snprintf(ck, sizeof(ck), "%.0f", x->ckpts);
        const char *cells[] = {nb, dur(a, sizeof(a), x->start), dur(c, sizeof(c), x->dur), endw,
                               st, ck, x->ended_by, then};
        int bad = x->sig || (x->code_ok && x->code != 0);
        tbl_row(&t, cells, bad ? TBL_BAD : TBL_PLAIN);
    }
    tbl_end(&t);
    if (fmt == FAIL_MD) buf_putc(b, '\n'); /* a line right after a table would be a row */
    para_begin(b, fmt);
    buf_printf(b, "%d attempt%s, %d failed", m->natt_total, m->natt_total == 1 ? "" : "s",
               m->failures);
    if (isfinite(m->time_lost))
        buf_printf(b, "; time lost to failures and restarts %s (work since the last checkpoint %s, "
                      "restarting %s)",
                   dur(a, sizeof(a), m->time_lost), dur(c, sizeof(c), m->lost_work),
                   dur(d, sizeof(d), m->restart_s));
    if (m->natt_total > m->natt)
        buf_printf(b, "; %d attempts in the middle left out (all in attempts.json)",
                   m->natt_total - m->natt);
    buf_puts(b, ".");
    para_end(b, fmt);
}

static void sec_ckpt(buf *b, const f_model *m, int fmt, int color)
{
    const fail_ckpt *k = &m->ck;
    if (k->n <= 0) return;
    heading(b, fmt, color, "Checkpoints");
    char a[32], c[32], d[32], e[32];
    para_begin(b, fmt);
    buf_printf(b, "%d checkpoint%s, %s each on average (longest %s), %.1f%% of step time", k->n,
               k->n == 1 ? "" : "s", dur(a, sizeof(a), k->cost_s), dur(c, sizeof(c), k->max_s),
               100 * (isfinite(k->share) ? k->share : 0));
    if (isfinite(k->interval_s)) buf_printf(b, ", one every %s", dur(d, sizeof(d), k->interval_s));
    buf_puts(b, ".");
    para_end(b, fmt);
    if (isfinite(m->mtbf) && m->mtbf > 0) {
        double t = fail_daly(k->cost_s, m->mtbf), y = fail_young(k->cost_s, m->mtbf);
        para_begin(b, fmt);
        buf_printf(b, "With a mean time between failures of %s (%s), the interval that minimises "
                      "expected lost work is %s (Daly; Young's sqrt(2 x cost x MTBF) gives %s)",
                   dur(a, sizeof(a), m->mtbf),
                   strcmp(m->mtbf_src, "option") == 0 ? "--mtbf" : "this run's own failures",
                   dur(c, sizeof(c), t), dur(d, sizeof(d), y));
        double now = overhead(k->cost_s, k->interval_s, m->mtbf), best = overhead(k->cost_s, t, m->mtbf);
        if (isfinite(now) && isfinite(best)) {
            buf_printf(b, ": checkpoints plus expected rework cost %.1f%% of the time at the "
                          "current interval, %.1f%% at %s",
                       100 * now, 100 * best, dur(e, sizeof(e), t));
            if (k->interval_s < 0.5 * t)
                buf_puts(b, " (checkpoint less often)");
            else if (k->interval_s > 2 * t)
                buf_puts(b, " (checkpoint more often)");
        }
        buf_puts(b, ".");
        para_end(b, fmt);
    } else {
        para_begin(b, fmt);
        buf_puts(b, "No failure rate known (pass --mtbf, or run under --restart): the interval that "
                    "minimises expected lost work would be");
        static const double mt[] = {6 * 3600.0, 86400.0, 7 * 86400.0};
        for (int i = 0; i < 3; i++)
            buf_printf(b, "%s %s for an MTBF of %s", i ? "," : "",
                       dur(a, sizeof(a), fail_daly(k->cost_s, mt[i])), dur(c, sizeof(c), mt[i]));
        buf_puts(b, " (Daly).");
        para_end(b, fmt);
    }
}

void fail_sections(buf *b, const char *run_dir, int fmt, int color)
{
    f_model *m = calloc(1, sizeof(*m));
    if (!m) return;
    load(m, run_dir);
    sec_hangs(b, m, fmt, color);
    sec_attempts(b, m, fmt, color);
    sec_ckpt(b, m, fmt, color);
    unload(m);
    free(m);
}

/* ---- JSON ---- */


void fail_json(jw *w, const char *run_dir)
{
    char path[PATH_MAX + 16], err[128];
    snprintf(path, sizeof(path), "%s/failures.json", run_dir);
    jr_doc d;
    fail_ckpt ck;
    if (jr_load_file(&d, path, FAIL_FILE_MAX, err, sizeof(err)) == 0) {
        jw_key(w, "failures");
        jr_write(w, d.root);
        jr_free(&d);
    } else {
        /* an embedded run or one cut short: what steps.csv says, when it
         * has checkpoints (nothing at all otherwise) */
        fail_ckpt_load(run_dir, &ck);
        if (ck.n <= 0) return;
        jw_key(w, "failures");
        jw_obj_begin(w);
        jw_key(w, "checkpoint");
        fail_ckpt_json(w, &ck, NAN);
        jw_obj_end(w);
    }
    f_model *m = calloc(1, sizeof(*m));
    jw_key(w, "hangs");
    jw_arr_begin(w);
    if (m) {
        load_hangs(m, run_dir);
        for (int i = 0; i < m->nhangs; i++)
            jw_fields_obj(w, &m->hangs[i], hang_fields, JW_NFIELDS(hang_fields));
        free(m);
    }
    jw_arr_end(w);
}
