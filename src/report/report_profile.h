/* The zero-code Python profile section of report.html (report_profile.c). */
#ifndef TPF_REPORT_PROFILE_H
#define TPF_REPORT_PROFILE_H

#include "report/report_load.h"
#include "util/buf.h"

/* Nothing when the run has no pyprof/. */
void report_html_profile(buf *b, const diag_run *r);

#endif
