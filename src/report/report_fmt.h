/* What every format of the report shares (report_fmt.c): below the
 * writers (report.c, report_html.c, report_ranks.c, report_profile.c,
 * compare.c), so none of them calls another for it. */
#ifndef TPF_REPORT_FMT_H
#define TPF_REPORT_FMT_H

#include "report/report.h"
#include "report/report_load.h"
#include "util/buf.h"

/* Append s with &, <, >, " and ' escaped. */
void report_html_esc(buf *b, const char *s);
/* The step-time and data-wait quantile rows (p50, p95, p99, max in ms), one
 * description for every format: aligned lines in text, a table in md and
 * html. */
void report_quantiles(buf *b, report_format fmt, const dfig *f);
/* The sentence that says some steps have no GPU figures because the
 * script's own torch.profiler held CUPTI over them ("" when none). */
const char *report_gpu_window_note(char *o, size_t n, const dgpu_steps *g);
/* Under the step breakdown (md and html): the phases are host time, then what
 * the GPU did in the step, and the window note; nothing without GPU figures. */
void report_gpu_breakdown_note(buf *b, report_format fmt, const dgpu_steps *g);

#endif
