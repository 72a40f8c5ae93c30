/* Diagnosis and reports from a run directory (the analyser knows only the
 * run directory's files, so it works on runs copied from elsewhere). */
#ifndef TPF_ANALYZE_REPORT_H
#define TPF_ANALYZE_REPORT_H

#include "util/buf.h"

typedef enum report_format {
    REPORT_TEXT = 0,  /* terminal */
    REPORT_MD = 1,
    REPORT_HTML = 2,
    REPORT_JSON = 3,
} report_format;

/* Build the report of run_dir in fmt into out. color: ANSI colour in text.
 * TPF_ENOENT / TPF_EFORMAT with a one-line reason in err for a missing or
 * damaged run directory. */
int report_build(const char *run_dir, report_format fmt, int color, buf *out,
                 char *err, size_t errlen);

/* The report of one job from several run directories (one per node, or a
 * parent holding them): all ranks, clocks aligned (report_ranks.c). One
 * directory that is a run reports that run as report_build does. Runs that
 * are not one job (rr_load_job) are refused with TPF_EINVAL unless
 * REPORT_AS_JOB is in flags. */
enum {
    REPORT_AS_JOB = 1,    /* the directories are one job whatever their commands and times */
    REPORT_ALL_RANKS = 2, /* text/md/html: every rank's row, not the distribution and the worst */
};
int report_build_job(const char *const *dirs, int ndirs, int flags, report_format fmt, int color,
                     buf *out, char *err, size_t errlen);

/* At the end of a run: compute the diagnosis, add it to summary.json, write
 * report.md and report.html into run_dir, and put the text report in
 * terminal (may be NULL). */
int report_finish_run(const char *run_dir, int color, buf *terminal, char *err, size_t errlen);

#endif
