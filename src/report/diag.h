/* The diagnosis of a loaded run (report_load.h): one primary bottleneck, the
 * secondary findings and notes, from the rules of diag_rules[] (rules.h).
 * Rules and thresholds: docs/diagnosis.md. */
#ifndef TPF_REPORT_DIAG_H
#define TPF_REPORT_DIAG_H

#include "report/report_load.h"
#include "util/jsonw.h"

/* Fill r->diag from the loaded data. */
void diag_compute(diag_run *r);

/* Write r->diag as a JSON object value. */
void diag_write_json(const diag_run *r, jw *w);

#endif
