/* The GPU figures of a run (see load_gpu.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/figs.h"
#include "report/load_gpu.h"
#include "util/csvr.h"

static void from_summary(dgpu_steps *g, const jr_node *s)
{
    g->steps = jr_pnum(s, "steps");
    g->warm_steps = jr_pnum(s, "warm_steps");
    g->records = jr_pnum(s, "records");
    g->steps_in_profiler = jr_pnum(s, "steps_in_profiler");
    g->busy_share = jr_pnum(s, "busy_share");
    g->busy_p10 = jr_pnum(s, "busy_share_p10");
    g->busy_ms = jr_pnum(s, "busy_ms_mean");
    g->kernels_per_step = jr_pnum(s, "kernels_per_step");
    g->kernel_us_p50 = jr_pnum(s, "kernel_us_p50");
    g->kernel_ms = jr_pnum(s, "kernel_ms_mean");
    g->comm_kernel_ms = jr_pnum(s, "comm_kernel_ms_mean");
    g->sync_share = jr_pnum(s, "sync_share");
    g->syncs_per_step = jr_pnum(s, "syncs_per_step");
    g->sync_idle_share = jr_pnum(s, "sync_idle_share");
    g->copy_ms = jr_pnum(s, "copy_ms_mean");
    g->h2d = jr_pnum(s, "h2d_bytes_per_step");
    g->h2d_pageable = jr_pnum(s, "h2d_pageable_bytes_per_step");
    g->d2h = jr_pnum(s, "d2h_bytes_per_step");
    g->d2h_pageable = jr_pnum(s, "d2h_pageable_bytes_per_step");
    if (g->busy_ms > 0 && g->busy_share > 0) g->step_ms = g->busy_ms / g->busy_share;
    g->event_steps = jr_pnum(s, "event_steps");
    g->gpu_ms = jr_pnum(s, "gpu_ms_mean");
    g->gpu_share = jr_pnum(s, "gpu_share");
}

/* An interrupted run has gpu_steps.csv but no summary: the same figures
 * through figs_add_gpu, the collector's own fold (kernel durations' median
 * is not in the rows: their mean stands in). */
static void from_csv(dgpu_steps *g, const char *dir)
{
    char path[PATH_MAX + 32], e[160];
    snprintf(path, sizeof(path), "%s/gpu_steps.csv", dir);
    csvr c;
    if (csvr_open(&c, path, e, sizeof(e)) != 0) return;
    static const char *const cols[] = {"step", "interval_ns", "gpu_busy_ns", "kernel_ns", "kernels",
                                       "copy_ns", "h2d_bytes", "h2d_pageable_bytes", "d2h_bytes",
                                       "d2h_pageable_bytes", "sync_ns", "syncs", "comm_kernel_ns", "sync_idle_ns",
                                       "tid"};
    enum { NC = sizeof(cols) / sizeof(cols[0]) };
    int ix[NC];
    for (int i = 0; i < NC; i++) ix[i] = csvr_col(&c, cols[i]);
    int src = csvr_col(&c, "source"); /* absent before the windows: every row is CUPTI's */
    double events = 0;
    figs f;
    figs_init(&f);
    while (csvr_next(&c) == 1) {
        /* a row from CUDA events (outside the kernel-detail windows) has no kernel figures */
        const char *sv = src >= 0 ? csvr_str(&c, src) : NULL;
        if (sv && *sv && strcmp(sv, "cupti") != 0) {
            events++;
            continue;
        }
        double v[NC];
        for (int i = 0; i < NC; i++)
            if (ix[i] < 0 || !csvr_num(&c, ix[i], &v[i]) || !(v[i] >= 0) || v[i] > 1e19) v[i] = 0;
        gpu_step s = {.step = (uint64_t)v[0], .interval_ns = (uint64_t)v[1], .busy_ns = (uint64_t)v[2],
                      .kernel_ns = (uint64_t)v[3], .kernels = (uint64_t)v[4], .copy_ns = (uint64_t)v[5],
                      .h2d_bytes = (uint64_t)v[6], .h2d_pageable_bytes = (uint64_t)v[7],
                      .d2h_bytes = (uint64_t)v[8], .d2h_pageable_bytes = (uint64_t)v[9],
                      .sync_ns = (uint64_t)v[10], .syncs = (uint64_t)v[11], .comm_kernel_ns = (uint64_t)v[12],
                      .sync_idle_ns = (uint64_t)v[13]};
        /* tid 0: a window of a process with no steps (the summary's
         * gpu_windows), not a step */
        s.tid = ix[14] < 0 || v[14] > 0 ? 1 : 0;
        if (s.tid) figs_add_gpu(&f, &s);
    }
    csvr_close(&c);
    g->event_steps = events;
    const figs_gpu *x = &f.gpu;
    double n = (double)x->warm_steps, iv = (double)x->interval_ns;
    g->steps = (double)x->steps;
    g->warm_steps = n;
    if (n > 0 && iv > 0) {
        g->busy_share = (double)x->busy_ns / iv;
        g->busy_p10 = sketch_quantile(&x->busy_share, 0.1) / 1e6;
        g->busy_ms = (double)x->busy_ns / n / 1e6;
        g->kernels_per_step = (double)x->kernels / n;
        g->kernel_us_p50 = x->kernels ? (double)x->kernel_ns / (double)x->kernels / 1e3 : NAN;
        g->kernel_ms = (double)x->kernel_ns / n / 1e6;
        g->comm_kernel_ms = (double)x->comm_kernel_ns / n / 1e6;
        g->sync_share = (double)x->sync_ns / iv;
        g->syncs_per_step = (double)x->syncs / n;
        g->sync_idle_share = (double)x->sync_idle_ns / iv;
        g->copy_ms = (double)x->copy_ns / n / 1e6;
        g->h2d = (double)x->h2d_bytes / n;
        g->h2d_pageable = (double)x->h2d_pageable_bytes / n;
        g->d2h = (double)x->d2h_bytes / n;
        g->d2h_pageable = (double)x->d2h_pageable_bytes / n;
        g->step_ms = iv / n / 1e6;
    }
    figs_free(&f);
}

void lg_load(dgpu_steps *g, const jr_node *summary, const char *dir)
{
    memset(g, 0, sizeof(*g));
    double *nan_fields[] = {&g->steps, &g->warm_steps, &g->records, &g->steps_in_profiler, &g->busy_share, &g->busy_p10,
                            &g->busy_ms, &g->step_ms, &g->kernels_per_step, &g->kernel_us_p50,
                            &g->kernel_ms, &g->comm_kernel_ms, &g->sync_share, &g->syncs_per_step,
                            &g->copy_ms, &g->sync_idle_share, &g->h2d, &g->h2d_pageable, &g->d2h,
                            &g->d2h_pageable, &g->event_steps, &g->gpu_ms, &g->gpu_share};
    for (size_t i = 0; i < sizeof(nan_fields) / sizeof(nan_fields[0]); i++) *nan_fields[i] = NAN;
    const jr_node *s = summary ? jr_path(summary, "steps.gpu") : NULL;
    if (s && s->type == JR_OBJ)
        from_summary(g, s);
    else
        from_csv(g, dir);
    g->have = g->warm_steps >= LG_MIN_STEPS && isfinite(g->busy_share);
    const jr_node *w = summary ? jr_path(summary, "steps.gpu_windows") : NULL;
    g->win_busy_share = w ? jr_pnum(w, "busy_share") : NAN;
    double wm = w ? jr_pnum(w, "busy_ms_mean") : NAN, ws = w ? jr_pnum(w, "warm_steps") : NAN;
    g->win_s = isfinite(wm) && isfinite(ws) && isfinite(g->win_busy_share) && g->win_busy_share > 0
                   ? wm * ws / g->win_busy_share / 1e3
                   : NAN;
}
