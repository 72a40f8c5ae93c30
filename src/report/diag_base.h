/* What every layer of the diagnosis shares: a finding (id, title, score,
 * evidence, recommendations), the diagnosis made of findings, the writers
 * that fill a finding, and a number read from a run directory as int.
 * Internal to src/report/; it calls nothing of report/. */
#ifndef TPF_REPORT_DIAG_BASE_H
#define TPF_REPORT_DIAG_BASE_H

#include <stddef.h>

#define DIAG_MAX_FINDINGS 12
#define DIAG_MAX_RECS 6
#define DIAG_MAX_EVIDENCE 8

typedef struct devidence {
    char name[40];
    double value; /* NAN when it is text only */
    char text[200];
} devidence;

typedef struct dfinding {
    char id[24]; /* input-bound, host-bound, ... */
    char title[64];
    char summary[240];
    double score; /* share of step time it explains, 0..1 */
    int nev;
    devidence ev[DIAG_MAX_EVIDENCE];
    int nrec;
    char rec[DIAG_MAX_RECS][320];
} dfinding;

typedef struct diag_result {
    int insufficient; /* too little data to name a bottleneck */
    char insufficient_why[200];
    dfinding primary;
    int nsec;
    dfinding sec[DIAG_MAX_FINDINGS];
    int nnotes;
    char notes[8][240];
} diag_result;

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
/* A number read from a run directory as int: dflt when NaN or outside
 * [lo, hi] (damaged files hold any number; the cast would be undefined). */
int diag_int(double v, double lo, double hi, int dflt);

#endif
