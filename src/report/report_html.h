/* The self-contained HTML report (inline SVG; one inline script, the flame
 * graph's, allowed by its hash: report/flame.h). */
#ifndef TPF_ANALYZE_REPORT_HTML_H
#define TPF_ANALYZE_REPORT_HTML_H

#include "report/diag.h"
#include "report/report.h"
#include "report/report_fmt.h"

/* prof_md: the profiler section in Markdown (report.c), shown as HTML. */
void report_html(const diag_run *r, const char *prof_md, buf *out);

#endif
