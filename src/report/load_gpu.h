/* The GPU figures of a run: the GPU records joined to its steps
 * (summary.json steps.gpu, written by the collector; gpu_steps.csv through
 * the same fold when an interrupted run wrote no summary). The load layer:
 * rules read them from diag_run (report_load.h), never load them. */
#ifndef TPF_REPORT_LOAD_GPU_H
#define TPF_REPORT_LOAD_GPU_H

#include "util/jsonr.h"

typedef struct dgpu_steps {
    int have; /* GPU records joined to enough warm steps */
    double steps, warm_steps, records;
    double steps_in_profiler; /* steps with no row: the script's profiler held CUPTI */
    double busy_share, busy_p10, busy_ms, step_ms; /* step_ms: mean warm interval */
    double kernels_per_step, kernel_us_p50, kernel_ms, comm_kernel_ms;
    double sync_share, syncs_per_step, sync_idle_share, copy_ms;
    double h2d, h2d_pageable, d2h, d2h_pageable; /* bytes per step */
    /* outside the kernel-detail windows (`--gpu-trace windows`): steps with
     * only their GPU time from CUDA events, that time per step and over
     * their host time (every step with events, windows' included) */
    double event_steps, gpu_ms, gpu_share;
    /* a process with records and no steps: its windows (steps.gpu_windows) */
    double win_busy_share, win_s;
} dgpu_steps;

#define LG_MIN_STEPS 5 /* warm steps with GPU records before a GPU rule reads them */

/* Fill g from summary (summary.json's root, NULL when none) or from
 * dir/gpu_steps.csv. */
void lg_load(dgpu_steps *g, const jr_node *summary, const char *dir);

#endif
