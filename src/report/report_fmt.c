/* What every format of the report shares (report_fmt.h). */
#include <stdio.h>

#include "report/report_fmt.h"
#include "util/table.h"

void report_html_esc(buf *b, const char *s) { tbl_esc(b, TBL_HTML, s); }

void report_quantiles(buf *b, report_format fmt, const dfig *f)
{
    static const char *const label[] = {"step time", "data wait"};
    const double v[2][4] = {{f->step_p50, f->step_p95, f->step_p99, f->step_max},
                            {f->data_p50, f->data_p95, f->data_p99, f->data_max}};
    static const tbl_col cols[] = {{"ms", 0, 0}, {"p50", 0, 1}, {"p95", 0, 1},
                                   {"p99", 0, 1}, {"max", 0, 1}};
    char s[4][32];
    tbl t;
    if (fmt != REPORT_TEXT) tbl_begin(&t, b, fmt, 0, NULL, cols, 5);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 4; i++) diag_fmt_num(s[i], sizeof(s[i]), "%.1f", v[k][i]);
        if (fmt == REPORT_TEXT) {
            buf_printf(b, "  %-13sp50 %s  p95 %s  p99 %s  max %s ms\n", label[k], s[0], s[1], s[2],
                       s[3]);
            continue;
        }
        const char *cells[] = {label[k], s[0], s[1], s[2], s[3]};
        tbl_row(&t, cells, TBL_PLAIN);
    }
    if (fmt != REPORT_TEXT) tbl_end(&t);
}

const char *report_gpu_window_note(char *o, size_t n, const dgpu_steps *g)
{
    if (!(g->steps_in_profiler > 0)) {
        if (n) o[0] = 0;
        return o;
    }
    snprintf(o, n,
             "%.0f steps inside the script's torch.profiler window are not in these figures: "
             "their GPU records are in its trace.",
             g->steps_in_profiler);
    return o;
}

void report_gpu_breakdown_note(buf *b, report_format fmt, const dgpu_steps *g)
{
    if (!g->have) return;
    int html = fmt == REPORT_HTML;
    buf_printf(b, "%sThe phases are host time. On the GPU a kernel ran %s%.1f%%%s of the step "
                  "(%.0f kernels per step, median %.1f us); the host waited for it %.0f%% of the "
                  "step.%s\n",
               html ? "<p>" : "\n", html ? "<b>" : "", 100 * g->busy_share, html ? "</b>" : "",
               g->kernels_per_step, g->kernel_us_p50, 100 * g->sync_share, html ? "</p>" : "");
    char note[200];
    if (*report_gpu_window_note(note, sizeof(note), g))
        buf_printf(b, html ? "<p>%s</p>\n" : "%s\n", note);
}
