/* report.html: one self-contained file. Charts are inline SVG drawn here; no
 * script at all and nothing loaded from anywhere. Every string that came
 * from the user or the program goes through report_html_esc. */
#include "report/report_html.h"
#include "report/report_profile.h"
#include "report/report_ranks.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/failures.h"
#include "report/flame.h"
#include "util/table.h"
#include "trainperf.h"

#define CW 1000.0 /* chart width (viewBox units) */
#define CH 230.0
#define ML 62.0
#define MR 18.0
#define MT 16.0
#define MB 30.0

static const char *const phase_color[PH_COUNT] = {"#e4572e", "#4e79a7", "#59a14f", "#edc948",
                                                  "#b07aa1", "#76b7b2", "#9c755f", "#bab0ac"};
static const char *const line_color[] = {"#4e79a7", "#e4572e", "#59a14f", "#b07aa1",
                                         "#edc948", "#76b7b2", "#9c755f", "#ff9da7"};


/* A "nice" axis maximum: 1, 2, 2.5 or 5 times a power of ten. */
static double nice_max(double v)
{
    if (!(v > 0)) return 1;
    double p = pow(10, floor(log10(v)));
    double m[] = {1, 2, 2.5, 5, 10};
    for (int i = 0; i < 5; i++)
        if (v <= m[i] * p * 1.0000001) return m[i] * p;
    return 10 * p;
}

static void fmt_tick(char *o, size_t n, double v)
{
    if (v == 0)
        snprintf(o, n, "0");
    else if (fabs(v) >= 1e9)
        snprintf(o, n, "%gG", v / 1e9);
    else if (fabs(v) >= 1e6)
        snprintf(o, n, "%gM", v / 1e6);
    else if (fabs(v) >= 1e4)
        snprintf(o, n, "%gk", v / 1e3);
    else
        snprintf(o, n, "%g", v);
}

static void fmt_time_tick(char *o, size_t n, double s)
{
    if (s >= 7200)
        snprintf(o, n, "%gh", round(s / 360) / 10);
    else if (s >= 120)
        snprintf(o, n, "%gm", round(s / 6) / 10);
    else
        snprintf(o, n, "%gs", round(s * 10) / 10);
}

typedef struct chart {
    double xmax, ymax;
    const char *yunit;
    double xmin; /* the time at the left edge: 0, or the first step's for step charts */
} chart;

static double X(const chart *c, double t)
{
    return ML + (CW - ML - MR) * ((t - c->xmin) / (c->xmax - c->xmin));
}
static double Y(const chart *c, double v)
{
    return CH - MB - (CH - MT - MB) * (v / c->ymax);
}

static void chart_begin(buf *b, const chart *c, const char *title, const char *aria)
{
    buf_puts(b, "<figure class=\"chart\"><figcaption>");
    report_html_esc(b, title);
    buf_printf(b, "</figcaption>\n<svg viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"", CW,
               CH);
    report_html_esc(b, aria);
    buf_puts(b, "\">\n");
    /* grid and y labels */
    for (int i = 0; i <= 4; i++) {
        double v = c->ymax * i / 4, y = Y(c, v);
        char t[32];
        fmt_tick(t, sizeof(t), v);
        buf_printf(b,
                   "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                   "<text class=\"yl\" x=\"%.1f\" y=\"%.1f\">%s%s</text>\n",
                   ML, y, CW - MR, y, ML - 6, y + 4, t, i == 4 && c->yunit ? c->yunit : "");
    }
}

static void time_axis(buf *b, const chart *c)
{
    double step = nice_max((c->xmax - c->xmin) / 6);
    double from = c->xmin > 0 ? ceil(c->xmin / step - 1e-9) * step : 0;
    for (double t = from; t <= c->xmax * 1.0001; t += step) {
        char s[32];
        fmt_time_tick(s, sizeof(s), t);
        buf_printf(b, "<text class=\"xl\" x=\"%.1f\" y=\"%.1f\">%s</text>\n", X(c, t), CH - MB + 18,
                   s);
    }
    buf_printf(b, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ML,
               CH - MB, CW - MR, CH - MB);
}

static void chart_end(buf *b)
{
    buf_puts(b, "</svg></figure>\n");
}

static void alert_marks(buf *b, const diag_run *r, const chart *c)
{
    for (int i = 0; i < r->nalerts; i++) {
        const dalert *a = &r->alerts[i];
        if (strcmp(a->state, "fired") != 0 || !(a->t >= c->xmin) || a->t > c->xmax) continue;
        int crit = strcmp(a->severity, "critical") == 0;
        buf_printf(
            b, "<line class=\"alert%s\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"><title>",
            crit ? " crit" : "", X(c, a->t), MT, X(c, a->t), CH - MB);
        report_html_esc(b, a->rule);
        buf_puts(b, ": ");
        report_html_esc(b, a->message);
        buf_puts(b, "</title></line>\n");
    }
}

static void polyline(buf *b, const chart *c, const dseries *s, double scale, const char *color,
                     const char *dash)
{
    buf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s%s points=\"", color,
               dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    double t, v;
    for (int k = 0; k < s->n; k++)
        if (dseries_value(s, k, &t, &v)) buf_printf(b, "%.1f,%.1f ", X(c, t), Y(c, v * scale));
    buf_puts(b, "\"/>\n");
}

static double series_max(const dseries *s, double scale)
{
    double m = 0, t, v;
    for (int k = 0; k < s->n; k++)
        if (dseries_value(s, k, &t, &v) && v * scale > m) m = v * scale;
    return m;
}

static void legend(buf *b, const char *const *names, const char *const *colors, int n)
{
    buf_puts(b, "<div class=\"legend\">");
    for (int i = 0; i < n; i++) {
        buf_printf(b, "<span><i style=\"background:%s\"></i>", colors[i]);
        report_html_esc(b, names[i]);
        buf_puts(b, "</span>");
    }
    buf_puts(b, "</div>\n");
}

static double xmax_of(const diag_run *r)
{
    double x = r->duration_s;
    if (!(x > 0) && isfinite(r->last_end_s)) x = r->last_end_s;
    return x > 0 ? x : 1;
}

/* The left edge of a chart of steps: the start of the group of buckets
 * (group_s wide) holding the first step, so that a long start-up (imports,
 * loading data) does not take most of the axis; 0 when the first step is
 * unknown. Its caption says from when (step_from). */
static double step_x0(const diag_run *r, double group_s)
{
    double f = r->first_start_s, x = xmax_of(r);
    if (!(f > 0) || !(group_s > 0)) return 0;
    double x0 = floor(f / group_s) * group_s;
    return x0 > 0 && x0 < x ? x0 : 0;
}

static void step_from(char *o, size_t n, const char *title, const chart *c)
{
    char t[32];
    fmt_time_tick(t, sizeof(t), c->xmin);
    if (c->xmin > 0)
        snprintf(o, n, "%s, from the first step (%s into the run)", title, t);
    else
        snprintf(o, n, "%s", title);
}

/* ---- the charts ---------------------------------------------------------------- */

/* Buckets of the step series are merged m at a time for display, so each
 * point averages several steps (a rate from one or two steps is mostly
 * quantisation noise) and bars stay readable. */
static int group_factor(const dseries *s, double steps, double min_per_group, int max_groups)
{
    if (s->n <= 0) return 1;
    double per = steps / s->n;
    int m = per > 0 ? (int)ceil(min_per_group / per) : 1;
    if (m < 1) m = 1;
    while ((s->n + m - 1) / m > max_groups)
        m++;
    return m;
}

static void chart_throughput(buf *b, const diag_run *r)
{
    if (!r->have_steps || r->steps == 0) return;
    const dseries *s = r->samples > 0 ? &r->s_sample_rate : &r->s_step_rate;
    const char *unit = r->samples > 0 ? "samples/s" : "steps/s";
    int m = group_factor(&r->s_step_rate, r->steps, 4, 120);
    double pts[DIAG_SERIES_CAP][2];
    int np = 0;
    double mx = 0;
    /* rate = work done / step time spent, per group of buckets: counting
     * steps per time bucket would show quantisation noise instead */
    int streams = r->nstreams > 0 ? r->nstreams : 1;
    for (int k = 0; k < s->n; k += m) {
        double work = 0, ms = 0, tc = 0, nc = 0;
        for (int j = k; j < k + m && j < s->n; j++) {
            work += s->sum[j];
            for (int p = 0; p < PH_COUNT; p++)
                ms += r->s_phase[p].sum[j];
            if (s->cnt[j] > 0) tc += s->t0 + (j + 0.5) * s->width, nc++;
        }
        if (ms <= 0 || nc == 0) continue;
        double v = work / (ms / 1000.0 / streams);
        pts[np][0] = tc / nc;
        pts[np][1] = v;
        np++;
        if (v > mx) mx = v;
    }
    chart c = {xmax_of(r), nice_max(mx * 1.05), NULL, step_x0(r, s->width * m)};
    char t0[64], title[160];
    snprintf(t0, sizeof(t0), "Throughput over time (%s)", unit);
    step_from(title, sizeof(title), t0, &c);
    chart_begin(b, &c, title, t0);
    buf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
               line_color[0]);
    for (int k = 0; k < np; k++)
        buf_printf(b, "%.1f,%.1f ", X(&c, pts[k][0]), Y(&c, pts[k][1]));
    buf_puts(b, "\"/>\n");
    alert_marks(b, r, &c);
    time_axis(b, &c);
    chart_end(b);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void chart_breakdown(buf *b, const diag_run *r)
{
    if (!r->have_steps || r->steps == 0) return;
    const dseries *s0 = &r->s_phase[PH_OTHER];
    int m = group_factor(s0, r->steps, 1, 100);
    double tot[DIAG_SERIES_CAP], srt[DIAG_SERIES_CAP], ph[DIAG_SERIES_CAP][PH_COUNT];
    int ng = 0;
    for (int k = 0; k < s0->n; k += m) {
        double t = 0;
        for (int p = 0; p < PH_COUNT; p++) {
            double sum = 0, cnt = 0;
            for (int j = k; j < k + m && j < s0->n; j++)
                sum += r->s_phase[p].sum[j], cnt += r->s_phase[p].cnt[j];
            ph[ng][p] = cnt > 0 ? sum / cnt : 0;
            t += ph[ng][p];
        }
        tot[ng] = srt[ng] = t;
        ng++;
    }
    /* scale to the bulk of the steps: one slow warm-up step must not flatten
     * the rest (taller bars are cut at the top and say so in their tooltip) */
    qsort(srt, (size_t)ng, sizeof(double), cmp_double);
    double top = ng ? srt[(int)(0.95 * (ng - 1))] * 1.25 : 1;
    if (ng && srt[ng - 1] < top) top = srt[ng - 1] * 1.05;
    chart c = {xmax_of(r), nice_max(top), " ms", step_x0(r, s0->width * m)};
    char title[160];
    step_from(title, sizeof(title), "Step time breakdown (mean per step, stacked)", &c);
    chart_begin(b, &c, title, "stacked phases of the step time over time");
    double bw = (X(&c, s0->width * m) - X(&c, 0)) * 0.85;
    if (bw < 1) bw = 1;
    for (int g = 0; g < ng; g++) {
        double t = s0->t0 + g * m * s0->width, acc = 0;
        if (t > c.xmax || t < c.xmin || tot[g] <= 0) continue;
        for (int p = 0; p < PH_COUNT; p++) {
            double v = ph[g][p];
            if (v <= 0 || acc >= c.ymax) continue;
            double hi = acc + v > c.ymax ? c.ymax : acc + v;
            double y1 = Y(&c, acc), y0 = Y(&c, hi);
            buf_printf(b,
                       "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                       "fill=\"%s\"><title>%s %.1f ms%s</title></rect>\n",
                       X(&c, t), y0, bw, y1 - y0, phase_color[p], diag_phase_names[p], v,
                       acc + v > c.ymax ? " (bar cut at the chart top)" : "");
            acc += v;
        }
    }
    alert_marks(b, r, &c);
    time_axis(b, &c);
    chart_end(b);
    const char *names[PH_COUNT], *cols[PH_COUNT];
    int n = 0;
    for (int p = 0; p < PH_COUNT; p++)
        if (r->sum_phase_ns[p] > 0) names[n] = diag_phase_names[p], cols[n++] = phase_color[p];
    legend(b, names, cols, n);
}

static void chart_data_hist(buf *b, const diag_run *r)
{
    const dhist *h = &r->h_data;
    if (h->n <= 0) return;
    /* regroup the fine log bins into at most 40 display bins over the used range */
    int lo = -1, hi = -1;
    for (int k = 0; k < DIAG_HIST_BINS; k++)
        if (h->bins[k]) {
            if (lo < 0) lo = k;
            hi = k;
        }
    enum { NB = 40 };
    double cnt[NB + 1] = {0}, edge_lo[NB + 1], edge_hi[NB + 1];
    int nb = 0;
    if (h->zero > 0) {
        cnt[0] = h->zero;
        edge_lo[0] = edge_hi[0] = 0;
        nb = 1;
    }
    if (lo >= 0) {
        int span = hi - lo + 1, per = (span + NB - 1) / NB;
        if (per < 1) per = 1;
        for (int k = lo; k <= hi; k += per) {
            double sum = 0;
            for (int j = k; j < k + per && j <= hi; j++)
                sum += h->bins[j];
            cnt[nb] = sum;
            edge_lo[nb] = 1e-3 * exp(k * 0.0198026272961797);
            edge_hi[nb] = 1e-3 * exp((k + per) * 0.0198026272961797);
            nb++;
        }
    }
    double m = 0;
    for (int i = 0; i < nb; i++)
        if (cnt[i] > m) m = cnt[i];
    chart c = {1, nice_max(m * 1.05), NULL, 0};
    chart_begin(b, &c, "Data-wait distribution (steps per bin of wait time; bins log-spaced)",
                "histogram of data wait per step");
    double bw = (CW - ML - MR) / nb;
    for (int i = 0; i < nb; i++) {
        double x = ML + i * bw, y = Y(&c, cnt[i]);
        char l[32], hh[32];
        fmt_tick(l, sizeof(l), round(edge_lo[i] * 100) / 100);
        fmt_tick(hh, sizeof(hh), round(edge_hi[i] * 100) / 100);
        buf_printf(b,
                   "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                   "fill=\"%s\"><title>%s-%s ms: %.0f steps</title></rect>\n",
                   x + 1, y, bw - 2 > 1 ? bw - 2 : 1, CH - MB - y, phase_color[PH_DATA], l, hh,
                   cnt[i]);
        if (nb <= 12 || i % (nb / 8 + 1) == 0) {
            buf_printf(b, "<text class=\"xl\" x=\"%.1f\" y=\"%.1f\">%.3g ms</text>\n", x + bw / 2,
                       CH - MB + 18, edge_lo[i]);
        }
    }
    buf_printf(b, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ML,
               CH - MB, CW - MR, CH - MB);
    chart_end(b);
}

static void chart_gpu(buf *b, const diag_run *r)
{
    int any = 0;
    for (int i = 0; i < r->ngpu; i++)
        any |= r->gpus[i].s_util.n > 0;
    if (!any) return;
    chart c = {xmax_of(r), 100, "%", 0};
    /* a job's GPUs are many: the first DIAG_CHART_GPUS drawn, the rest said */
    int nd = r->ngpu < DIAG_CHART_GPUS ? r->ngpu : DIAG_CHART_GPUS;
    char title[160] = "GPU utilisation (solid) and memory used (dashed), %";
    if (nd < r->ngpu)
        snprintf(title + strlen(title), sizeof(title) - strlen(title),
                 ": %d of %d GPUs drawn (the nodes table has every node's)", nd, r->ngpu);
    chart_begin(b, &c, title, "GPU utilisation and memory over time");
    const char *names[DIAG_CHART_GPUS], *cols[DIAG_CHART_GPUS];
    char nm[DIAG_CHART_GPUS][16];
    for (int i = 0; i < nd; i++) {
        const char *col = line_color[i % 8];
        polyline(b, &c, &r->gpus[i].s_util, 1, col, NULL);
        polyline(b, &c, &r->gpus[i].s_mem, 1, col, "6 4");
        snprintf(nm[i], sizeof(nm[i]), "GPU %d", r->gpus[i].index);
        names[i] = nm[i];
        cols[i] = col;
    }
    alert_marks(b, r, &c);
    time_axis(b, &c);
    chart_end(b);
    legend(b, names, cols, nd);
}

static void chart_cpu_mem(buf *b, const diag_run *r)
{
    if (!r->have_metrics || r->msamples == 0) return;
    double m = series_max(&r->s_tree_cpu, 1);
    double m2 = series_max(&r->s_main_cpu, 1);
    if (m2 > m) m = m2;
    if (m < 100) m = 100;
    /* a tree of one process: its line and the main process's are the same
     * line, drawn once */
    dfig f;
    diag_figures(r, &f);
    int one = isfinite(f.procs_max) && f.procs_max <= 1;
    chart c = {xmax_of(r), nice_max(m * 1.05), "%", 0};
    chart_begin(b, &c,
                one ? "CPU: system (% of all cores) and the process (% of one core; the tree was "
                      "this one process)"
                    : "CPU: system (% of all cores), process tree and main process (% of one core)",
                "CPU over time");
    polyline(b, &c, &r->s_cpu, 1, line_color[0], NULL);
    polyline(b, &c, &r->s_tree_cpu, 1, line_color[1], NULL);
    if (!one) polyline(b, &c, &r->s_main_cpu, 1, line_color[2], "6 4");
    alert_marks(b, r, &c);
    time_axis(b, &c);
    chart_end(b);
    const char *n1[] = {"system", one ? "process" : "process tree", "main process"};
    const char *c1[] = {line_color[0], line_color[1], line_color[2]};
    legend(b, n1, c1, one ? 2 : 3);

    double tot = r->mem_total.n ? r->mem_total.max : NAN;
    chart c2 = {xmax_of(r), 100, "%", 0};
    chart_begin(b, &c2, "Host memory: used (% of total) and process-tree RSS (% of total)",
                "host memory over time");
    polyline(b, &c2, &r->s_mem_used_pct, 1, line_color[0], NULL);
    if (tot > 0) polyline(b, &c2, &r->s_tree_rss, 100 / tot, line_color[1], NULL);
    alert_marks(b, r, &c2);
    time_axis(b, &c2);
    chart_end(b);
    const char *n2[] = {"host used", "tree RSS"};
    legend(b, n2, c1, 2);
}

static void alerts_timeline(buf *b, const diag_run *r)
{
    if (!r->nalerts) return;
    chart c = {xmax_of(r), 1, NULL, 0};
    double h = 84;
    buf_puts(b, "<figure class=\"chart\"><figcaption>Alerts on the timeline</figcaption>\n");
    buf_printf(b, "<svg viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"alerts over time\">\n",
               CW, h);
    buf_printf(b, "<line class=\"axis\" x1=\"%.1f\" y1=\"35\" x2=\"%.1f\" y2=\"35\"/>\n", ML,
               CW - MR);
    for (int i = 0; i < r->nalerts; i++) {
        const dalert *a = &r->alerts[i];
        if (!(a->t >= 0)) continue;
        int fired = strcmp(a->state, "fired") == 0, crit = strcmp(a->severity, "critical") == 0;
        double x = X(&c, a->t > c.xmax ? c.xmax : a->t);
        buf_printf(b, "<circle cx=\"%.1f\" cy=\"35\" r=\"%d\" class=\"%s\"><title>%.1f s ", x,
                   fired ? 7 : 5, fired ? (crit ? "dot crit" : "dot warn") : "dot clear", a->t);
        report_html_esc(b, a->state);
        buf_puts(b, " ");
        report_html_esc(b, a->rule);
        buf_puts(b, ": ");
        report_html_esc(b, a->message);
        buf_puts(b, "</title></circle>\n");
        if (fired) {
            buf_printf(b, "<text class=\"al\" x=\"%.1f\" y=\"%d\">", x, 18 + (i % 2) * 40);
            report_html_esc(b, a->rule);
            buf_puts(b, "</text>\n");
        }
    }
    double step = nice_max(c.xmax / 6);
    for (double t = 0; t <= c.xmax * 1.0001; t += step) {
        char lab[32];
        fmt_time_tick(lab, sizeof(lab), t);
        buf_printf(b, "<text class=\"xl\" x=\"%.1f\" y=\"80\">%s</text>\n", X(&c, t), lab);
    }
    buf_puts(b, "</svg></figure>\n");
}

/* ---- page --------------------------------------------------------------------- */

static const char css[] =
    "body{font:15px/1.45 system-ui,-apple-system,'Segoe "
    "UI',Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d232b}"
    "main{max-width:1080px;margin:0 auto;padding:24px 28px 48px}"
    "h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid "
    "#dde1e6;padding-bottom:4px}"
    "h3{font-size:15px;margin:16px 0 6px}"
    ".meta{color:#5b6573;font-size:13px;margin:0 0 16px}.meta code{background:#eceff3;padding:1px "
    "5px;border-radius:4px;word-break:break-all}"
    ".diag{background:#fff;border-radius:10px;padding:16px 20px;border-left:6px solid "
    "#e0a100;box-shadow:0 1px 3px rgba(0,0,0,.08)}"
    ".diag.ok{border-left-color:#2e9e4f}.diag.bad{border-left-color:#d23b2a}.diag.na{border-left-"
    "color:#8a94a3}"
    ".diag .t{font-size:20px;font-weight:650}.diag .s{font-size:16px;margin:2px 0 8px}"
    ".diag ol li,.diag ul li{margin:3px 0}.sec{margin-top:10px;padding-top:6px;border-top:1px "
    "dashed #dde1e6}"
    ".tiles{display:grid;grid-template-columns:repeat(4,1fr);gap:12px;margin:16px 0}"
    ".tile{background:#fff;border-radius:8px;padding:10px 14px;box-shadow:0 1px 3px "
    "rgba(0,0,0,.06)}"
    ".tile b{display:block;font-size:20px}.tile span{color:#5b6573;font-size:12px}"
    "figure.chart{background:#fff;margin:14px 0 2px;padding:10px 12px "
    "4px;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.06)}"
    "figcaption{font-weight:600;font-size:14px;margin-bottom:4px}svg{width:100%;height:auto;"
    "display:block}"
    ".flame{background:#fff;border-radius:8px;padding:10px 12px;box-shadow:0 1px 3px "
    "rgba(0,0,0,.06)}.flame svg{margin-top:8px;cursor:pointer}"
    ".flame text{font:11px ui-monospace,monospace;fill:#1d232b;pointer-events:none}"
    ".grid{stroke:#e6e9ee;stroke-width:1}.axis{stroke:#9aa3ae;stroke-width:1}"
    ".yl{font-size:11px;fill:#5b6573;text-anchor:end}.xl{font-size:11px;fill:#5b6573;text-anchor:"
    "middle}"
    ".al{font-size:11px;fill:#8a5a00;text-anchor:middle}"
    ".alert{stroke:#e0a100;stroke-width:1.5;stroke-dasharray:4 3}.alert.crit{stroke:#d23b2a}"
    ".dot.warn{fill:#e0a100}.dot.crit{fill:#d23b2a}.dot.clear{fill:#fff;stroke:#8a94a3;stroke-"
    "width:2}"
    ".legend{font-size:12px;color:#3d4550;margin:2px 0 8px 4px}.legend "
    "span{margin-right:14px;white-space:nowrap}"
    ".legend "
    "i{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-"
    "align:-1px}"
    "table{border-collapse:collapse;background:#fff;width:100%;font-size:13px;box-shadow:0 1px 3px "
    "rgba(0,0,0,.06)}"
    "th,td{padding:5px 9px;border-bottom:1px solid "
    "#eceff3;text-align:left;vertical-align:top}th{background:#f0f2f5}"
    "td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".prof{overflow-x:auto}.prof table{width:auto;min-width:60%}.prof "
    "td{word-break:break-word}.prof td.n,.prof "
    "th{white-space:nowrap}.prof p{margin:6px 0}"
    ".muted{color:#6b7480}footer{margin-top:32px;color:#8a94a3;font-size:12px}";

static void tile(buf *b, const char *value, const char *label)
{
    buf_puts(b, "<div class=\"tile\"><b>");
    report_html_esc(b, value);
    buf_puts(b, "</b><span>");
    report_html_esc(b, label);
    buf_puts(b, "</span></div>\n");
}

static void finding_html(buf *b, const dfinding *d, int full)
{
    if (d->nev) {
        buf_puts(b, "<h3>Evidence</h3><ul>\n");
        for (int i = 0; i < d->nev; i++) {
            buf_puts(b, "<li>");
            report_html_esc(b, d->ev[i].text);
            buf_puts(b, "</li>\n");
        }
        buf_puts(b, "</ul>\n");
    }
    if (d->nrec) {
        buf_printf(b, "<h3>What to change%s</h3><ol>\n", full ? ", most effect first" : "");
        for (int i = 0; i < d->nrec; i++) {
            buf_puts(b, "<li>");
            report_html_esc(b, d->rec[i]);
            buf_puts(b, "</li>\n");
        }
        buf_puts(b, "</ol>\n");
    }
}

static void row(buf *b, const char *k, const char *v)
{
    buf_puts(b, "<tr><th>");
    report_html_esc(b, k);
    buf_puts(b, "</th><td class=\"n\">");
    report_html_esc(b, v);
    buf_puts(b, "</td></tr>\n");
}

/* Inline Markdown of one line: `code` spans, backslash escapes; the rest
 * escaped as text. */
static void md_inline(buf *b, const char *s, size_t n)
{
    int code = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        char one[2] = {ch, '\0'};
        if (ch == '\\' && i + 1 < n && ispunct((unsigned char)s[i + 1])) {
            one[0] = s[++i];
            report_html_esc(b, one);
        } else if (ch == '`') {
            buf_puts(b, code ? "</code>" : "<code>");
            code = !code;
        } else if (ch == '*' && i + 1 < n && s[i + 1] == '*') {
            i++; /* bold markers carry no information here */
        } else {
            report_html_esc(b, one);
        }
    }
    if (code) buf_puts(b, "</code>");
}

/* One table row "| a | b |" as <tr>: cells split at unescaped '|'. align:
 * per-column right alignment from the separator row. */
static void md_row(buf *b, const char *s, size_t n, int head, const unsigned char *align,
                   int nalign)
{
    buf_puts(b, "<tr>");
    size_t i = 0;
    while (i < n && s[i] != '|')
        i++;
    int col = 0;
    while (i < n) {
        size_t st = ++i;
        while (i < n && !(s[i] == '|' && s[i - 1] != '\\'))
            i++;
        if (i >= n) break; /* text after the last '|' is not a cell */
        size_t a = st, z = i;
        while (a < z && s[a] == ' ')
            a++;
        while (z > a && s[z - 1] == ' ')
            z--;
        const char *tag = head ? "th" : "td";
        int right = col < nalign && align[col];
        buf_printf(b, "<%s%s>", tag, right ? " class=\"n\"" : "");
        md_inline(b, s + a, z - a);
        buf_printf(b, "</%s>", tag);
        col++;
    }
    buf_puts(b, "</tr>\n");
}

/* The Markdown of the profiler section (the report's and the trace
 * analyser's: headings, pipe tables, lists, paragraphs) as HTML. */
static void md_block(buf *b, const char *md)
{
    enum { NONE, TABLE, LIST } open = NONE;
    unsigned char align[32];
    int nalign = 0, head = 0;
    const char *s = md;
    buf_puts(b, "<div class=\"prof\">\n");
    while (*s) {
        size_t n = strcspn(s, "\n");
        const char *line = s;
        s += n;
        if (*s == '\n') s++;
        int is_row = n > 0 && line[0] == '|';
        int is_item = n > 1 && line[0] == '-' && line[1] == ' ';
        if ((open == TABLE && !is_row) || (open == LIST && !is_item)) {
            buf_puts(b, open == TABLE ? "</table>\n" : "</ul>\n");
            open = NONE;
        }
        if (n == 0) continue;
        if (is_row) {
            if (open != TABLE) {
                buf_puts(b, "<table>\n");
                open = TABLE;
                head = 1;
                nalign = 0;
                /* the separator row after the header gives the alignment */
                size_t m = strcspn(s, "\n");
                if (m && s[0] == '|' && strspn(s, "|-: ") == m) {
                    for (size_t i = 1; i < m && nalign < 32; i++)
                        if (s[i] == '|') {
                            size_t k = i - 1;
                            while (k > 0 && s[k] == ' ')
                                k--;
                            align[nalign++] = s[k] == ':';
                        }
                    md_row(b, line, n, 1, align, nalign);
                    s += m;
                    if (*s == '\n') s++;
                    head = 0;
                    continue;
                }
            }
            md_row(b, line, n, head, align, nalign);
            head = 0;
        } else if (is_item) {
            if (open != LIST) buf_puts(b, "<ul>\n");
            open = LIST;
            buf_puts(b, "<li>");
            md_inline(b, line + 2, n - 2);
            buf_puts(b, "</li>\n");
        } else if (line[0] == '#') {
            size_t h = strspn(line, "#");
            size_t t = h < n && line[h] == ' ' ? h + 1 : h;
            int lvl = h < 2 ? 2 : h > 4 ? 4 : (int)h;
            buf_printf(b, "<h%d>", lvl);
            md_inline(b, line + t, n - t);
            buf_printf(b, "</h%d>\n", lvl);
        } else {
            buf_puts(b, "<p>");
            md_inline(b, line, n);
            buf_puts(b, "</p>\n");
        }
    }
    if (open != NONE) buf_puts(b, open == TABLE ? "</table>\n" : "</ul>\n");
    buf_puts(b, "</div>\n");
}

void report_html(const diag_run *r, const char *prof_md, buf *b)
{
    dfig f;
    diag_figures(r, &f);
    const diag_result *g = &r->diag;
    char a[64], c[64], d[64], e[64], v[160];
    buf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\n"
                "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                "style-src 'unsafe-inline'; img-src data:; script-src '" FLAME_JS_SHA256 "'\">\n"
                "<title>trainperf report: ");
    report_html_esc(b, r->name);
    buf_printf(b, "</title>\n<style>%s</style></head><body><main>\n", css);
    buf_puts(b, "<h1>trainperf report: ");
    report_html_esc(b, r->name);
    buf_puts(b, "</h1>\n<p class=\"meta\">");
    if (r->command[0]) {
        buf_puts(b, "<code>");
        report_html_esc(b, r->command);
        buf_puts(b, "</code><br>");
    }
    buf_printf(b, "duration %s · exit %s", diag_fmt_dur(a, sizeof(a), f.duration_s),
               diag_fmt_exit(r, c, sizeof(c)));
    if (r->host[0]) {
        buf_puts(b, " · host ");
        report_html_esc(b, r->host);
    }
    buf_printf(b, " · %d CPUs · %d GPU%s</p>\n", r->cpus, r->ngpu, r->ngpu == 1 ? "" : "s");
    fail_headline(b, r->dir, FAIL_HTML, 0);

    const dfinding *p = &g->primary;
    const char *cls = strcmp(p->id, "compute-bound") == 0       ? " ok"
                      : strcmp(p->id, "insufficient-data") == 0 ? " na"
                      : (strcmp(p->id, "memory-capacity") == 0 || strcmp(p->id, "unstable") == 0)
                          ? " bad"
                          : "";
    buf_printf(b, "<section class=\"diag%s\"><div class=\"t\">", cls);
    report_html_esc(b, p->title);
    buf_puts(b, "</div><div class=\"s\">");
    report_html_esc(b, p->summary);
    buf_puts(b, ".</div>\n"); /* summaries are sentences, as in text and md */
    finding_html(b, p, 1);
    for (int i = 0; i < g->nsec; i++) {
        buf_puts(b, "<div class=\"sec\"><b>Also: ");
        report_html_esc(b, g->sec[i].title);
        buf_puts(b, "</b> — ");
        report_html_esc(b, g->sec[i].summary);
        buf_puts(b, ".");
        finding_html(b, &g->sec[i], 0);
        buf_puts(b, "</div>\n");
    }
    if (g->nnotes) {
        buf_puts(b, "<div class=\"sec muted\"><ul>\n");
        for (int i = 0; i < g->nnotes; i++) {
            buf_puts(b, "<li>");
            report_html_esc(b, g->notes[i]);
            buf_puts(b, "</li>\n");
        }
        buf_puts(b, "</ul></div>\n");
    }
    buf_puts(b, "</section>\n<div class=\"tiles\">\n");
    if (isfinite(f.samples_per_s))
        tile(b, diag_fmt_num(a, sizeof(a), "%.1f", f.samples_per_s), "samples/s");
    else
        tile(b, diag_fmt_num(a, sizeof(a), "%.2f", f.steps_per_s), "steps/s");
    snprintf(v, sizeof(v), "%s ms", diag_fmt_num(a, sizeof(a), "%.1f", f.step_p50));
    tile(b, v, "median step time");
    snprintf(v, sizeof(v), "%s%%", diag_fmt_num(a, sizeof(a), "%.0f", 100 * f.data_share));
    tile(b, v, "data wait share");
    if (isfinite(f.gpu_util_mean)) {
        snprintf(v, sizeof(v), "%.0f%%", f.gpu_util_mean);
        tile(b, v, "GPU utilisation (mean)");
    } else {
        snprintf(v, sizeof(v), "%s%%", diag_fmt_num(a, sizeof(a), "%.0f", f.tree_cpu_mean));
        tile(b, v, "process-tree CPU (mean)");
    }
    buf_puts(b, "</div>\n");

    buf_puts(b, "<h2>Throughput and steps</h2>\n");
    chart_throughput(b, r);
    chart_breakdown(b, r);
    report_gpu_breakdown_note(b, REPORT_HTML, &r->gs);
    chart_data_hist(b, r);
    rr_html(r, b);
    report_quantiles(b, REPORT_HTML, &f);

    report_html_profile(b, r);
    buf_puts(b, "<h2>GPUs</h2>\n");
    if (!r->ngpu) {
        buf_puts(b, "<p class=\"muted\">No GPU metrics: ");
        report_html_esc(b, r->nvml_source[0] ? r->nvml_source : "no GPU in this run");
        buf_puts(b, ".</p>\n");
    } else {
        chart_gpu(b, r);
        buf_puts(b, "<table><tr><th>GPU</th><th>name</th><th class=\"n\">util mean</th><th "
                    "class=\"n\">memory max</th><th class=\"n\">temp max</th><th class=\"n\">power "
                    "mean</th><th>clock events</th></tr>\n");
        int listed = diag_gpus_listed(r);
        for (int i = 0; i < listed; i++) {
            const dgpu *gp = &r->gpus[i];
            buf_printf(b, r->nnodes > 1 ? "<tr><td>%d (node %d)</td><td>" : "<tr><td>%d</td><td>",
                       gp->index, gp->node);
            report_html_esc(b, gp->name);
            buf_printf(b,
                       "</td><td class=\"n\">%s%%</td><td class=\"n\">%s</td><td class=\"n\">%s "
                       "C</td><td class=\"n\">%s W</td><td>",
                       diag_fmt_num(a, sizeof(a), "%.0f", dstat_mean(&gp->util)),
                       human_bytes(c, sizeof(c), gp->mem_used.n ? gp->mem_used.max : NAN),
                       diag_fmt_num(d, sizeof(d), "%.0f", gp->temp.n ? gp->temp.max : NAN),
                       diag_fmt_num(e, sizeof(e), "%.0f", dstat_mean(&gp->power)));
            report_html_esc(b, gp->throttle_words[0] ? gp->throttle_words : "none");
            buf_puts(b, "</td></tr>\n");
        }
        buf_puts(b, "</table>\n");
        if (listed < r->ngpu)
            buf_printf(b, "<p>%d more GPUs not listed (<code>--all-ranks</code> lists them; the "
                          "JSON report has every GPU).</p>\n",
                       r->ngpu - listed);
    }

    buf_puts(b, "<h2>CPU and memory</h2>\n");
    chart_cpu_mem(b, r);
    if (r->have_metrics) {
        buf_puts(b, "<table>\n");
        snprintf(v, sizeof(v), "%s%% / %s%%", diag_fmt_num(a, sizeof(a), "%.0f", f.cpu_mean),
                 diag_fmt_num(c, sizeof(c), "%.0f", f.cpu_max));
        row(b, "system CPU mean / max", v);
        snprintf(v, sizeof(v), "%s%% / %s%%", diag_fmt_num(a, sizeof(a), "%.0f", f.tree_cpu_mean),
                 diag_fmt_num(c, sizeof(c), "%.0f", f.tree_cpu_max));
        row(b, "process-tree CPU mean / max (100% = one core)", v);
        snprintf(v, sizeof(v), "%s%%", diag_fmt_num(a, sizeof(a), "%.0f", f.main_cpu_mean));
        row(b, "main process CPU mean", v);
        snprintf(v, sizeof(v), "%s", diag_fmt_num(a, sizeof(a), "%.0f", f.procs_max));
        row(b, "processes in the tree (max)", v);
        snprintf(v, sizeof(v), "%s / %s", human_bytes(a, sizeof(a), f.rss_mean),
                 human_bytes(c, sizeof(c), f.rss_max));
        row(b, "tree RSS mean / max", v);
        snprintf(v, sizeof(v), "%s of %s", human_bytes(a, sizeof(a), f.mem_avail_min),
                 human_bytes(c, sizeof(c), f.mem_total));
        row(b, "host memory available (min)", v);
        row(b, "swap used (max)", human_bytes(a, sizeof(a), f.swap_max));
        snprintf(v, sizeof(v), "%s%% / %s%% / %s%%", diag_fmt_num(a, sizeof(a), "%.1f", f.psi_cpu),
                 diag_fmt_num(c, sizeof(c), "%.1f", f.psi_mem),
                 diag_fmt_num(d, sizeof(d), "%.1f", f.psi_io));
        row(b, "PSI some: cpu / memory / io (mean)", v);
        snprintf(v, sizeof(v), "%s%%", diag_fmt_num(a, sizeof(a), "%.1f", f.iowait_mean));
        row(b, "iowait (mean)", v);
        buf_puts(b, "</table>\n");
    }

    buf_puts(b, "<h2>Alerts</h2>\n");
    if (!r->nalerts)
        buf_puts(b, "<p class=\"muted\">None.</p>\n");
    else {
        alerts_timeline(b, r);
        static const tbl_col cols[] = {
            {"t", 0, 1}, {"state", 0, 0}, {"severity", 0, 0}, {"rule", 0, 0}, {"message", 0, 0}};
        tbl t;
        tbl_begin(&t, b, REPORT_HTML, 0, NULL, cols, 5);
        for (int i = 0; i < r->nalerts; i++) {
            const dalert *al = &r->alerts[i];
            char ts[32];
            snprintf(ts, sizeof(ts), "%.1f s", al->t);
            const char *cells[] = {ts, al->state, al->severity, al->rule, al->message};
            tbl_row(&t, cells, TBL_PLAIN);
        }
        tbl_end(&t);
    }
    fail_sections(b, r->dir, FAIL_HTML, 0);
    md_block(b, prof_md ? prof_md : "");
    buf_printf(b, "<footer>trainperf %s · run directory ", tpf_version());
    report_html_esc(b, r->name);
    buf_puts(b, "</footer>\n</main></body></html>\n");
}
