/* The step figures of a run: what the aggregator (collect/agg.c) computes
 * from probe events, what summary.json writes and what a report recomputes
 * from steps.csv when an interrupted run never wrote them -- one definition,
 * one code path (figs_add), so a figure has one owner.
 *
 * Streaming and bounded: totals, mergeable quantile sketches and per-rank
 * groups (at most max_groups, AGG_MAX_GROUPS unless set); nothing is kept per step. Not
 * thread-safe. */
#ifndef TPF_CORE_FIGS_H
#define TPF_CORE_FIGS_H

#include <stdint.h>
#include <sys/types.h>

#include "core/sketch.h"
#include "trainperf.h"

/* The predefined phases, index = TPF_PHASE_* - 1. */
#define AGG_NPHASES 7
extern const char *const agg_phase_names[AGG_NPHASES];

#define AGG_MAX_GROUPS 256    /* ranks (or rank-less processes) with own figures, in the
                               * collector (one node's); a report's figs have no cap */

/* One finished step (a row of steps.csv). Times are CLOCK_MONOTONIC ns. */
typedef struct agg_step {
    int rank, local_rank; /* -1: none */
    pid_t pid, tid;
    uint64_t step;        /* 0-based on this thread */
    uint64_t begin_ns, end_ns;
    uint64_t duration_ns, interval_ns;
    uint64_t phase_ns[AGG_NPHASES];
    uint64_t other_ns;
    uint64_t samples, tokens;
} agg_step;

/* A step's GPU figures (a row of gpu_steps.csv), joined by collect/gpujoin.c
 * from the GPU records of the step's process that fall in the step's host
 * interval [end_ns - interval_ns, end_ns]. Times in ns. */
typedef struct gpu_step {
    int rank;
    pid_t pid, tid;
    uint64_t step;
    uint64_t end_ns, interval_ns;
    int drain;                 /* not a step: the work the GPU ran after the process's last
                                * step (the queue the host left); counts in the run's totals */
    uint64_t busy_ns;          /* union of kernel intervals, clipped to the interval */
    uint64_t kernel_ns;        /* kernels started in the interval: summed durations */
    uint64_t kernels;          /* ... and their count */
    uint64_t comm_kernel_ns;   /* of kernel_ns, collectives' kernels (NCCL) */
    uint64_t idle_max_ns;      /* the longest stretch of the interval with no kernel running */
    uint64_t copy_ns;          /* copies started in the interval: summed durations */
    uint64_t h2d_bytes, h2d_pageable_bytes, d2h_bytes, d2h_pageable_bytes, memset_bytes;
    uint64_t sync_ns;          /* host waits for the GPU (CUPTI synchronization records) */
    uint64_t syncs;
    uint64_t sync_idle_ns;     /* GPU idle after those waits until the next kernel: the queue drained */
    int source;                /* GPU_SRC_*: where the figures came from */
    uint64_t span_ns;          /* the GPU's time between the step's boundary events (CUDA
                                * events); valid when span_ok */
    int span_ok;
} gpu_step;

/* gpu_step.source: kernel records (CUPTI; every figure above), CUDA events
 * at the step boundaries (span_ns only: outside the kernel-detail windows) */
enum { GPU_SRC_CUPTI = 0, GPU_SRC_EVENTS = 1, GPU_SRC_NVML = 2 };

/* Run totals of the GPU steps (every step, and warm ones: each thread's first
 * left out) and the kernel-duration distribution. */
typedef struct figs_gpu {
    uint64_t steps, warm_steps;
    uint64_t interval_ns, busy_ns, kernel_ns, kernels, copy_ns, sync_ns, syncs; /* warm */
    uint64_t comm_kernel_ns, sync_idle_ns;                                     /* warm */
    uint64_t h2d_bytes, h2d_pageable_bytes, d2h_bytes, d2h_pageable_bytes;   /* warm */
    uint64_t records, records_late;   /* GPU records seen; those no step could take */
    uint64_t steps_paused;            /* steps in a script's profiler window: no row */
    uint64_t event_steps;             /* rows from CUDA events only (outside the windows) */
    uint64_t span_steps, span_ns, span_interval_ns; /* warm steps with an event span: sums */
    uint64_t steps_undetailed;        /* steps outside the windows with no events: no row */
    sketch kernel_dur_ns;             /* every kernel's duration */
    sketch busy_share;                /* per warm step, busy / interval (0..1, x1e6) */
} figs_gpu;

/* One closed range (for the trace). */
typedef struct agg_range {
    pid_t pid, tid;
    tpf_name name;
    uint64_t begin_ns, end_ns;
    int depth;            /* 0 = outermost */
} agg_range;

/* Figures of one rank (or of one rank-less process). */
typedef struct agg_group {
    int rank;             /* -1 when the process had none */
    pid_t pid;            /* the first process seen in the group */
    uint64_t count, interval_ns, samples, tokens; /* every step */
    uint64_t data_ns, comm_ns; /* data wait, comm wait (comm exclusive of other phases), every step */
    /* warm steps (each thread's first left out): the per-rank means of the reports */
    uint64_t warm_count, warm_interval_ns, warm_data_ns, warm_comm_ns;
    /* since collect/ranks.c last took them (the live straggler figures) */
    uint64_t live_count, live_interval_ns, live_data_ns, live_comm_ns;
    sketch step_ns;       /* warm steps */
} agg_group;

/* Run totals. Quantiles come from the sketches only (one estimator).
 * Totals (counts, shares, rates) take every step; the distributions
 * (sketches, interval_sq_ms) leave out each thread's first step, which
 * carries warm-up (allocation, compilation, the first batch's fetch). */
typedef struct figs {
    uint64_t count;
    uint64_t interval_ns, duration_ns, other_ns, samples, tokens;
    uint64_t phase_ns[AGG_NPHASES];
    double interval_sq_ms; /* sum of squared step intervals in ms^2, for cv (warm steps) */
    uint64_t first_end_ns, last_end_ns; /* 0: none yet */
    uint64_t unmatched_pops, untracked_threads, untracked_groups;
    sketch step_ns;       /* step interval (what throughput sees), warm steps */
    sketch data_ns;       /* data wait per step, warm steps */
    agg_group **groups;   /* owned, grown as ranks appear; figs_free frees them */
    int ngroups, capgroups;
    int max_groups;       /* AGG_MAX_GROUPS after figs_init; 0: no cap (a report's job) */
    int last_group;       /* the group the last step went to (consecutive rows share one) */
    figs_gpu gpu;         /* steps.gpu: all zero on a run without GPU records */
    figs_gpu gpu_win;     /* steps.gpu_windows: step-less processes' windows (tid 0) */
} figs;

void figs_init(figs *f);
/* Frees the groups; f may be reused after figs_init. */
void figs_free(figs *f);
/* Fold one finished step into the totals, sketches and its rank's group
 * (rank >= 0: by rank, else by pid). A group that cannot be had (cap, out of
 * memory) is counted in untracked_groups. */
void figs_add(figs *f, const agg_step *s);
/* Fold one GPU step into f->gpu (a window, tid 0: into f->gpu_win). */
void figs_add_gpu(figs *f, const gpu_step *g);

/* Fold every figure of src into dst (job figures over ranks and nodes):
 * totals add, sketches merge, groups of the same rank merge. */
void figs_merge(figs *dst, const figs *src);
/* Fold group src into dst (a node's figures over its ranks): totals add,
 * the sketch merges; the live figures and the identity stay dst's. */
void figs_group_merge(agg_group *dst, const agg_group *src);

/* The job's steps: with two or more ranks, the most steps of any rank (a
 * step of data-parallel training is a step of every rank, so not the sum);
 * otherwise every step counted. */
uint64_t figs_global_steps(const figs *f);

/* Run throughput: steps per second of one rank (mean over ranks), samples and
 * tokens per second summed over ranks; NAN when unknown (no steps, or no
 * samples/tokens were ever given). */
void figs_rates(const figs *f, double *steps_per_s, double *samples_per_s, double *tokens_per_s);

/* The headline figures every output shows (summary.json, the report in each
 * format, compare, the end-of-run lines), computed in one place. Times in
 * ms, shares 0..1; NaN when unknown. */
typedef struct figs_view {
    double steps_per_s, samples_per_s, tokens_per_s; /* figs_rates */
    double step_mean_ms, step_p50_ms, step_p95_ms, step_p99_ms, step_min_ms, step_max_ms;
    double step_cv;                  /* sample standard deviation / mean */
    double data_wait_mean_ms, data_wait_p50_ms, data_wait_p95_ms, data_wait_p99_ms,
        data_wait_max_ms;
    double data_wait_share;          /* data time / step time, every step */
    double phase_share[AGG_NPHASES]; /* of step time, every step */
    double other_share;
} figs_view;

void figs_headline(const figs *f, figs_view *v);

struct jw;
/* The view's members as JSON keys (steps_per_s ... phase_share), for every
 * JSON document that shows them: summary.json and the report's JSON. */
void figs_view_json(struct jw *w, const figs_view *v);

#endif
