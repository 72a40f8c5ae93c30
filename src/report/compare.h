/* Two runs side by side: throughput, step breakdown, data wait, resources
 * and diagnosis, with absolute and relative deltas (B against A). */
#ifndef TPF_ANALYZE_COMPARE_H
#define TPF_ANALYZE_COMPARE_H

#include <stddef.h>

#include "report/report.h"
#include "util/buf.h"

/* fmt: a report_format. TPF_ENOENT / TPF_EFORMAT with one line in err when
 * either run directory is missing or damaged (the line names which). */
int compare_build(const char *run_a, const char *run_b, report_format fmt, int color, buf *out,
                  char *err, size_t errlen);

#endif
