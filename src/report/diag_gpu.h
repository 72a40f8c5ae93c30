/* The diagnosis on a GPU run: the figures of the GPU records joined to the
 * steps (summary.json steps.gpu, or gpu_steps.csv when an interrupted run
 * wrote no summary), the caching allocator's figures (pyprof events "cuda"),
 * and the rules that read them (docs/diagnosis.md, "GPU"). Internal to
 * src/report/. */
#ifndef TPF_REPORT_DIAG_GPU_H
#define TPF_REPORT_DIAG_GPU_H

#include "util/jsonr.h"

struct diag_run;
struct dfinding;

typedef struct dgpu_steps {
    int have; /* GPU records joined to warm steps */
    double steps, warm_steps, records;
    double busy_share, busy_p10, busy_ms, step_ms; /* step_ms: mean warm interval */
    double kernels_per_step, kernel_us_p50, kernel_ms, comm_kernel_ms;
    double sync_share, syncs_per_step, sync_idle_share, copy_ms;
    double h2d, h2d_pageable, d2h, d2h_pageable; /* bytes per step */
    /* the allocator (one process: the one with the most CUDA memory) */
    int have_alloc;
    double total, alloc_first, alloc_last, alloc_peak, reserved_peak, reserved_last;
    double t_first, t_last, retries, ooms, oom_events, oom_snapshots;
    double t_q1, alloc_q1, alloc_mid; /* the series at its first quarter and its middle */
} dgpu_steps;

/* Fill r->gs from summary.json (r->summary) or gpu_steps.csv. */
void dg_load(struct diag_run *r);
/* One pyprof events-<pid>.json's "cuda" object (diag_cause.c's loader). */
void dg_take_events(struct diag_run *r, const jr_node *root);
/* GPU findings into cand (at most room); returns how many. */
int dg_cands(const struct diag_run *r, struct dfinding *cand, int room);
/* What the other rules' findings mean on a GPU run: those that read host
 * time stand aside where the GPU records say otherwise (docs/diagnosis.md). */
void dg_fold(const struct diag_run *r, struct dfinding *cand, int *nc);

#endif
