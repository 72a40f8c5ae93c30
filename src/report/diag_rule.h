/* What diagnosis rules (diag.c, diag_cause.c) use to fill a finding: one copy,
 * defined in diag.c. The function-like macros keep the rules short and leave
 * variables named fmt, ev or rec alone. Internal to src/report/. */
#ifndef TPF_REPORT_DIAG_RULE_H
#define TPF_REPORT_DIAG_RULE_H

#include <stddef.h>

#include "report/diag.h"

/* printf into o (n bytes, always terminated) */
void diag_fmt(char *o, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));
/* one evidence line of d (name, value, sentence); ignored past DIAG_MAX_EVIDENCE */
void diag_ev(dfinding *d, const char *name, double v, const char *f, ...)
    __attribute__((format(printf, 4, 5)));
/* a finding's id, title, score and one-sentence summary (printf format) */
void diag_head(dfinding *d, const char *id, const char *title, double score, const char *f, ...)
    __attribute__((format(printf, 5, 6)));
/* one recommendation of d; ignored past DIAG_MAX_RECS */
void diag_rec(dfinding *d, const char *f, ...) __attribute__((format(printf, 2, 3)));

#define fmt(...) diag_fmt(__VA_ARGS__)
#define ev(...) diag_ev(__VA_ARGS__)
#define rec(...) diag_rec(__VA_ARGS__)

#endif
