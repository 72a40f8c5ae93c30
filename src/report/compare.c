#include "report/compare.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report/diag.h"
#include "report/report_fmt.h"
#include "report/report_ranks.h"
#include "util/table.h"
#include "trainperf.h"
#include "util/jsonw.h"

/* How to show a row and which direction is better. */
enum { U_NUM, U_MS, U_PCT, U_SHARE, U_BYTES, U_C, U_W };
enum { BETTER_NONE = 0, BETTER_UP = 1, BETTER_DOWN = -1 };

typedef struct crow {
    const char *section, *name, *key;
    size_t off; /* into dfig */
    int unit, better;
} crow;

#define F(x) offsetof(dfig, x)
static const crow rows[] = {
    {"Throughput", "steps/s", "steps_per_s", F(steps_per_s), U_NUM, BETTER_UP},
    {"Throughput", "samples/s", "samples_per_s", F(samples_per_s), U_NUM, BETTER_UP},
    {"Throughput", "tokens/s", "tokens_per_s", F(tokens_per_s), U_NUM, BETTER_UP},
    {"Throughput", "steps", "steps", F(steps), U_NUM, BETTER_NONE},
    {"Step time", "step time p50", "step_time_p50_ms", F(step_p50), U_MS, BETTER_DOWN},
    {"Step time", "step time p95", "step_time_p95_ms", F(step_p95), U_MS, BETTER_DOWN},
    {"Step time", "step time p99", "step_time_p99_ms", F(step_p99), U_MS, BETTER_DOWN},
    {"Step time", "step time CV", "step_time_cv", F(step_cv), U_NUM, BETTER_DOWN},
    {"Step breakdown", "data", "share_data", F(share[PH_DATA]), U_SHARE, BETTER_DOWN},
    {"Step breakdown", "forward", "share_forward", F(share[PH_FORWARD]), U_SHARE, BETTER_NONE},
    {"Step breakdown", "backward", "share_backward", F(share[PH_BACKWARD]), U_SHARE, BETTER_NONE},
    {"Step breakdown", "optimizer", "share_optimizer", F(share[PH_OPTIMIZER]), U_SHARE,
     BETTER_NONE},
    {"Step breakdown", "comm", "share_comm", F(share[PH_COMM]), U_SHARE, BETTER_DOWN},
    {"Step breakdown", "eval", "share_eval", F(share[PH_EVAL]), U_SHARE, BETTER_NONE},
    {"Step breakdown", "checkpoint", "share_checkpoint", F(share[PH_CHECKPOINT]), U_SHARE,
     BETTER_DOWN},
    {"Step breakdown", "other", "share_other", F(share[PH_OTHER]), U_SHARE, BETTER_NONE},
    {"Data wait", "data wait p50", "data_wait_p50_ms", F(data_p50), U_MS, BETTER_DOWN},
    {"Data wait", "data wait p95", "data_wait_p95_ms", F(data_p95), U_MS, BETTER_DOWN},
    {"Data wait", "data wait share", "data_wait_share", F(data_share), U_SHARE, BETTER_DOWN},
    {"Resources", "system CPU mean", "cpu_pct_mean", F(cpu_mean), U_PCT, BETTER_NONE},
    {"Resources", "tree CPU mean", "tree_cpu_pct_mean", F(tree_cpu_mean), U_PCT, BETTER_NONE},
    {"Resources", "main process CPU mean", "main_cpu_pct_mean", F(main_cpu_mean), U_PCT,
     BETTER_NONE},
    {"Resources", "processes (max)", "tree_procs_max", F(procs_max), U_NUM, BETTER_NONE},
    {"Resources", "tree RSS max", "tree_rss_max_bytes", F(rss_max), U_BYTES, BETTER_DOWN},
    {"Resources", "memory available min", "mem_available_min_bytes", F(mem_avail_min), U_BYTES,
     BETTER_UP},
    {"Resources", "swap used max", "swap_used_max_bytes", F(swap_max), U_BYTES, BETTER_DOWN},
    {"Resources", "iowait mean", "cpu_iowait_pct_mean", F(iowait_mean), U_PCT, BETTER_DOWN},
    {"Resources", "PSI io mean", "psi_io_some_pct_mean", F(psi_io), U_PCT, BETTER_DOWN},
    {"GPU", "GPU util mean", "gpu_util_pct_mean", F(gpu_util_mean), U_PCT, BETTER_UP},
    {"GPU", "GPU memory max", "gpu_mem_max_bytes", F(gpu_mem_max), U_BYTES, BETTER_NONE},
    {"GPU", "GPU power (sum of means)", "gpu_power_w", F(gpu_power_mean), U_W, BETTER_NONE},
    {"GPU", "GPU temp max", "gpu_temp_max_c", F(gpu_temp_max), U_C, BETTER_DOWN},
};
#undef F
#define NROWS ((int)(sizeof(rows) / sizeof(rows[0])))

static double val(const dfig *f, const crow *r)
{
    return *(const double *)((const char *)f + r->off);
}

static const char *show(char *o, size_t n, int unit, double v)
{
    switch (unit) {
    case U_MS: return diag_fmt_num(o, n, "%.1f ms", v);
    case U_PCT: return diag_fmt_num(o, n, "%.1f%%", v);
    case U_SHARE: return diag_fmt_num(o, n, "%.1f%%", isfinite(v) ? 100 * v : v);
    case U_BYTES: return human_bytes(o, n, v);
    case U_C: return diag_fmt_num(o, n, "%.0f C", v);
    case U_W: return diag_fmt_num(o, n, "%.0f W", v);
    default: return diag_fmt_num(o, n, fabs(v) >= 100 ? "%.0f" : "%.3g", v);
    }
}

/* Absolute delta in the row's unit (percentage points for shares). */
static const char *show_delta(char *o, size_t n, int unit, double d)
{
    char t[48];
    if (!isfinite(d)) {
        snprintf(o, n, "?");
        return o;
    }
    if (unit == U_SHARE)
        snprintf(o, n, "%+.1f pp", 100 * d);
    else if (unit == U_PCT)
        snprintf(o, n, "%+.1f pp", d);
    else if (unit == U_BYTES)
        snprintf(o, n, "%s%s", d >= 0 ? "+" : "-", human_bytes(t, sizeof(t), fabs(d)));
    else if (unit == U_MS)
        snprintf(o, n, "%+.1f ms", d);
    else if (unit == U_W)
        snprintf(o, n, "%+.0f W", d);
    else if (unit == U_C)
        snprintf(o, n, "%+.0f C", d);
    else
        snprintf(o, n, "%+.3g", d);
    return o;
}

static double pct(double a, double b)
{
    return isfinite(a) && isfinite(b) && a != 0 ? 100 * (b - a) / fabs(a) : NAN;
}

/* "better"/"worse" when the change is beyond 2% and the row has a direction. */
static const char *verdict(const crow *r, double a, double b)
{
    double p = pct(a, b);
    if (!r->better || !isfinite(p) || fabs(p) < 2) return "";
    return (p > 0) == (r->better > 0) ? "better" : "worse";
}

static int row_known(const dfig *fa, const dfig *fb, const crow *r)
{
    return isfinite(val(fa, r)) || isfinite(val(fb, r));
}

/* The rows as tables, one per section, in any of the table formats. */
static void rows_out(const dfig *fa, const dfig *fb, report_format fmt, int color, buf *o)
{
    static const tbl_col cols[] = {
        {"", 24, 0}, {"A", 14, 1}, {"B", 14, 1}, {"delta", 14, 1}, {"%", 9, 1}, {NULL, 0, 0},
    };
    tbl t = {0};
    const char *sec = "";
    char s1[48], s2[48], s3[48], s4[48];
    for (int i = 0; i < NROWS; i++) {
        const crow *r = &rows[i];
        if (!row_known(fa, fb, r)) continue;
        if (strcmp(sec, r->section) != 0) {
            tbl_end(&t);
            sec = r->section;
            tbl_begin(&t, o, fmt, color, sec, cols, (int)(sizeof(cols) / sizeof(cols[0])));
        }
        double va = val(fa, r), vb = val(fb, r), p = pct(va, vb);
        const char *v = verdict(r, va, vb);
        if (isfinite(p))
            snprintf(s4, sizeof(s4), "%+.1f%%", p);
        else
            snprintf(s4, sizeof(s4), "?");
        const char *cells[] = {r->name, show(s1, sizeof(s1), r->unit, va),
                               show(s2, sizeof(s2), r->unit, vb),
                               show_delta(s3, sizeof(s3), r->unit, vb - va), s4, v};
        tbl_row(&t, cells, !*v ? TBL_PLAIN : strcmp(v, "better") == 0 ? TBL_GOOD : TBL_BAD);
    }
    tbl_end(&t);
}

/* The primary findings side by side (md, html). */
static void diag_table(const diag_run *a, const diag_run *b, report_format fmt, buf *o)
{
    static const tbl_col cols[] = {{"", 0, 0}, {"A", 0, 0}, {"B", 0, 0}};
    tbl t;
    tbl_begin(&t, o, fmt, 0, "Diagnosis", cols, 3);
    const char *r1[] = {"primary", a->diag.primary.title, b->diag.primary.title};
    const char *r2[] = {"summary", a->diag.primary.summary, b->diag.primary.summary};
    tbl_row(&t, r1, TBL_PLAIN);
    tbl_row(&t, r2, TBL_PLAIN);
    tbl_end(&t);
}

static void text_out(const diag_run *a, const diag_run *b, const dfig *fa, const dfig *fb,
                     int color, buf *o)
{
    const char *B = color ? "\033[1m" : "", *R = color ? "\033[0m" : "";
    buf_printf(o, "%strainperf compare%s  A: %s   B: %s\n", B, R, a->name, b->name);
    rows_out(fa, fb, REPORT_TEXT, color, o);
    rr_compare(a, b, REPORT_TEXT, color, o);
    buf_printf(o, "\n%sDiagnosis%s\n  A: %s — %s\n  B: %s — %s\n", B, R, a->diag.primary.title,
               a->diag.primary.summary, b->diag.primary.title, b->diag.primary.summary);
}

static void md_out(const diag_run *a, const diag_run *b, const dfig *fa, const dfig *fb, buf *o)
{
    const char *names[] = {"", a->name, b->name};
    buf_puts(o, "# trainperf compare\n\n- A: ");
    tbl_cells(o, REPORT_MD, &names[1], 1);
    buf_puts(o, "\n- B: ");
    tbl_cells(o, REPORT_MD, &names[2], 1);
    buf_puts(o, "\n");
    rows_out(fa, fb, REPORT_MD, 0, o);
    rr_compare(a, b, REPORT_MD, 0, o);
    diag_table(a, b, REPORT_MD, o);
}

static void json_out(const diag_run *a, const diag_run *b, const dfig *fa, const dfig *fb, buf *o)
{
    jw w;
    jw_doc_begin(&w, o, "format_version", 1);
    jw_kstr(&w, "a", a->name);
    jw_kstr(&w, "b", b->name);
    jw_key(&w, "metrics");
    jw_obj_begin(&w);
    for (int i = 0; i < NROWS; i++) {
        const crow *r = &rows[i];
        double va = val(fa, r), vb = val(fb, r);
        jw_key(&w, r->key);
        jw_obj_begin(&w);
        jw_knum(&w, "a", va);
        jw_knum(&w, "b", vb);
        jw_knum(&w, "delta", vb - va);
        jw_knum(&w, "delta_pct", pct(va, vb));
        const char *v = verdict(r, va, vb);
        jw_kstr(&w, "verdict", *v ? v : NULL);
        jw_obj_end(&w);
    }
    jw_obj_end(&w);
    rr_compare_json(a, b, &w);
    jw_key(&w, "diagnosis");
    jw_obj_begin(&w);
    jw_key(&w, "a");
    diag_write_json(a, &w);
    jw_key(&w, "b");
    diag_write_json(b, &w);
    jw_obj_end(&w);
    jw_obj_end(&w);
    buf_putc(o, '\n');
}

static void html_out(const diag_run *a, const diag_run *b, const dfig *fa, const dfig *fb, buf *o)
{
    buf_puts(o,
             "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
             "'unsafe-inline'\">"
             "<title>trainperf compare</title><style>"
             "body{font:15px/1.45 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d232b}"
             "main{max-width:1000px;margin:0 "
             "auto;padding:24px}table{border-collapse:collapse;width:100%;background:#fff}"
             "th,td{padding:5px 9px;border-bottom:1px solid "
             "#eceff3;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}"
             "th{background:#f0f2f5}.better{color:#2e9e4f;font-weight:600}.worse{color:#d23b2a;"
             "font-weight:600}"
             "</style></head><body><main><h1>trainperf compare</h1><p>A: <code>");
    report_html_esc(o, a->name);
    buf_puts(o, "</code> &nbsp; B: <code>");
    report_html_esc(o, b->name);
    buf_puts(o, "</code></p>\n");
    rows_out(fa, fb, REPORT_HTML, 0, o);
    rr_compare(a, b, REPORT_HTML, 0, o);
    diag_table(a, b, REPORT_HTML, o);
    buf_puts(o, "</main></body></html>\n");
}

int compare_build(const char *run_a, const char *run_b, report_format fmt, int color, buf *out,
                  char *err, size_t errlen)
{
    diag_run *a = NULL, *b = NULL;
    char e[400];
    int rc = diag_load(run_a, &a, e, sizeof(e));
    if (rc) {
        if (err && errlen) snprintf(err, errlen, "run A: %s", e);
        return rc;
    }
    rc = diag_load(run_b, &b, e, sizeof(e));
    if (rc) {
        if (err && errlen) snprintf(err, errlen, "run B: %s", e);
        diag_free(a);
        return rc;
    }
    diag_compute(a);
    diag_compute(b);
    dfig fa, fb;
    diag_figures(a, &fa);
    diag_figures(b, &fb);
    switch (fmt) {
    case REPORT_TEXT: text_out(a, b, &fa, &fb, color, out); break;
    case REPORT_MD: md_out(a, b, &fa, &fb, out); break;
    case REPORT_HTML: html_out(a, b, &fa, &fb, out); break;
    case REPORT_JSON: json_out(a, b, &fa, &fb, out); break;
    default: rc = TPF_EINVAL;
    }
    if (!rc) rc = out->err;
    if (rc && err && errlen && !err[0])
        snprintf(err, errlen, "building the comparison: %s", tpf_strerror(rc));
    diag_free(a);
    diag_free(b);
    return rc;
}
