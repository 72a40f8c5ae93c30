/* The self-contained HTML report (inline SVG; one inline script, the flame
 * graph's, allowed by its hash: report/flame.h). */
#ifndef TPF_ANALYZE_REPORT_HTML_H
#define TPF_ANALYZE_REPORT_HTML_H

#include "report/diag.h"
#include "report/report.h"

/* prof_md: the profiler section in Markdown (report.c), shown as HTML. */
void report_html(const diag_run *r, const char *prof_md, buf *out);
/* Append s with &, <, >, " and ' escaped. */
void report_html_esc(buf *b, const char *s);
/* The zero-code Python profile section (report_profile.c); nothing when the
 * run has no pyprof/. */
struct diag_run;
void report_html_profile(buf *b, const struct diag_run *r);
/* The step-time and data-wait quantile rows (p50, p95, p99, max in ms), one
 * description for every format: aligned lines in text, a table in md and
 * html (report.c). */
void report_quantiles(buf *b, report_format fmt, const dfig *f);

#endif
