/* Failures in reports: the hang verdict and its stacks, the attempts of a
 * run under --restart with the time lost, and the cost of checkpoints with
 * the interval that minimises expected lost work (Young/Daly).
 *
 * Reads failures.json, attempts.json, hangs.jsonl and hangs/ (written by the
 * supervisor of `trainperf run`, docs/run-format.md); the checkpoint figures
 * come from steps.csv when failures.json is missing (embedded runs, a run cut
 * short), through the same code that wrote them. */
#ifndef TPF_REPORT_FAILURES_H
#define TPF_REPORT_FAILURES_H

#include "util/buf.h"
#include "util/jsonw.h"

typedef struct fail_ckpt {
    int n;            /* checkpoints (steps with checkpoint time, on the busiest thread) */
    double cost_s;    /* mean time per checkpoint; NAN when none */
    double max_s;
    double share;     /* checkpoint time / step time, 0-1 */
    double interval_s; /* mean time between checkpoints seen; NAN with fewer than 2 */
} fail_ckpt;

/* Checkpoint figures from RUN/steps.csv (checkpoint_ns). Returns 0, or a
 * negative TPF_E code with *out zeroed/NAN (no steps.csv). */
int fail_ckpt_load(const char *run_dir, fail_ckpt *out);

/* Daly's interval for checkpoint cost c and MTBF m (seconds):
 * sqrt(2cm) - c when c < 2m, else m. NAN when either is unknown. */
double fail_daly(double cost_s, double mtbf_s);
/* Young's: sqrt(2cm). */
double fail_young(double cost_s, double mtbf_s);

/* The checkpoint object of failures.json. */
void fail_ckpt_json(jw *w, const fail_ckpt *c, double mtbf_s);

enum { FAIL_TEXT = 0, FAIL_MD = 1, FAIL_HTML = 2 };

/* The one-line hang verdict that opens a report ("" when the run had no
 * hang); fmt FAIL_*. */
void fail_headline(buf *b, const char *run_dir, int fmt, int color);
/* The sections: hangs with their stacks, attempts and time lost, checkpoint
 * cost. Nothing when the run has none of them. */
void fail_sections(buf *b, const char *run_dir, int fmt, int color);

/* report --format json: "failures": failures.json as it is (or the checkpoint
 * figures from steps.csv), "hangs": the hangs' verdicts. Two keys into the
 * open object of w. */
void fail_json(jw *w, const char *run_dir);

#endif
