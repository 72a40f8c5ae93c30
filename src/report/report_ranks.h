/* Ranks and nodes in the reports (see report_ranks.c). */
#ifndef TPF_REPORT_RANKS_H
#define TPF_REPORT_RANKS_H

#include <stddef.h>

#include "report/report_load.h"
#include "report/load_ranks.h"
#include "report/report.h"
#include "util/buf.h"
#include "util/jsonw.h"

/* A straggler is named when the others wait for it at least this share of
 * the step time (docs/diagnosis.md). */
#define RR_STRAGGLER_SHARE 0.10

/* The rank the others wait for, from per-rank comm waits (synchronous
 * training evens step times out; where the time goes does not). */
typedef struct rr_strag {
    int rank;                /* the straggler */
    int waiter;              /* the rank that waits the most for it */
    double gap_ms;           /* the others' comm wait a step beyond its own */
    double others_wait_ms, own_wait_ms, step_ms, share;
    double extra_data_ms, extra_compute_ms; /* its data wait / compute beyond the others' */
    int loader;              /* its own data loader explains the gap */
    const char *where;       /* "data loader" (loader) or "step" */
    char op[32];             /* the collective the others wait in */
} rr_strag;

/* 1 and *s filled when a straggler holds the others back by at least
 * RR_STRAGGLER_SHARE of the step time; 0 otherwise (s still filled when there
 * were at least two ranks with steps). */
int rr_straggler(const diag_run *r, rr_strag *s);
/* The straggler as one sentence of evidence into o ("" when none). */
void rr_evidence(const diag_run *r, char *o, size_t n);

/* A node whose ranks all hold the others back (a slow node: its ranks wait
 * the least in collectives, by as much as they spend in their own step): the
 * straggler rule over nodes instead of ranks (docs/distributed.md). */
typedef struct rr_slow_node_t {
    int node, ranks;
    const char *host;
    double gap_ms, others_wait_ms, own_wait_ms, step_ms, share;
    double extra_data_ms, extra_compute_ms;
    const char *where; /* "data loader" or "step" */
} rr_slow_node_t;
int rr_slow_node(const diag_run *r, rr_slow_node_t *s);

/* A node whose collectives move data far slower than the other nodes' (the
 * ranks' bus bandwidth, comm/): a slow link (RR_SLOW_LINK_RATIO). */
#define RR_SLOW_LINK_RATIO 1.5
typedef struct rr_slow_link_t {
    int node;
    const char *host;
    double busbw_bps, median_busbw_bps, ratio;
} rr_slow_link_t;
int rr_slow_link(const diag_run *r, rr_slow_link_t *s);

/* More ranks (or nodes) than this: the tables show their distribution and
 * the worst, unless the report was asked for every rank (--all-ranks). */
#define RR_TABLE_ROWS 16

/* Communication per rank and step (mean over ranks with a comm log): in
 * flight (union of the collectives' issue-to-completion spans), exposed
 * (the comm wait of steps.csv) and overlapped (the rest); for FSDP (all-gathers
 * and reduce-scatters) their time, exposed part and what prefetch could buy. */
typedef struct rr_overlap_t {
    double busy_ms, exposed_ms, overlapped_ms, compute_ms;
    int fsdp;
    double ag_ms, ag_exposed_ms, rs_ms, rs_exposed_ms, prefetch_gain_ms;
} rr_overlap_t;
int rr_overlap(const diag_run *r, rr_overlap_t *o); /* 0: no comm log */
/* The FSDP recommendation as one sentence ("" when not FSDP). */
void rr_fsdp_advice(const diag_run *r, char *out, size_t n);



/* The job's figures: optimizer steps (not a sum over ranks), samples/s and
 * tokens/s summed over ranks, model FLOP/s summed over the ranks whose FLOPs
 * are known and MFU = their FLOP/s over their peaks (NAN unknown). */
typedef struct rr_job {
    double steps, samples_per_s, tokens_per_s, flops_per_s, mfu;
    int ranks, nodes, flops_ranks, mfu_ranks;
    char peak_src[160]; /* the first rank's peak source (or why none) */
} rr_job;
void rr_job_figures(const diag_run *r, rr_job *j);
/* `  "model_flops": {...}` (no trailing comma) into b for summary.json when
 * some rank's FLOPs are known: the job's FLOP/s and MFU and each rank's;
 * returns 1 when written, 0 (nothing written) otherwise. */
int rr_summary_flops(const diag_run *r, buf *b);

/* Run directories, a parent of run directories expanded (sorted by name).
 * *out: n strdup'd strings in a calloc'd array, freed by the caller. */
int rr_expand_dirs(const char *const *in, int nin, char ***out, int *nout, char *err,
                   size_t errlen);
/* Load the run directories of one job (one per node) as one diag_run: node
 * 0's run plus every other node's steps and collectives, clocks aligned.
 * Unless as_job, runs that are not one job (different rendezvous in their
 * commands, or times that do not overlap) are refused: TPF_EINVAL, why in err. */
int rr_load_job(const char *const *dirs, int n, int as_job, diag_run **out, char *err,
                size_t errlen);

/* The clock offset (seconds to add) and alignment error of each of n run
 * directories against the first, as the report aligns them (errs_s NAN when
 * no collectives matched). */
int rr_job_offsets(const char *const *dirs, int n, double *offsets_s, double *errs_s, char *err,
                   size_t errlen);


/* The rank/communication/node sections of each format; nothing for a run
 * of one rank on one node. */
void rr_text(const diag_run *r, buf *b, const char *bold, const char *reset);
void rr_md(const diag_run *r, buf *b);
void rr_html(const diag_run *r, buf *b);
void rr_json(const diag_run *r, jw *w); /* keys ranks, straggler, collectives, nodes */

/* compare: per-rank rows of A and B side by side (text, md or html through
 * util/table.h) and the straggler of each; json keys ranks, straggler_a,
 * straggler_b. */
void rr_compare(const diag_run *a, const diag_run *b, report_format fmt, int color, buf *o);
void rr_compare_json(const diag_run *a, const diag_run *b, jw *w);

#endif
