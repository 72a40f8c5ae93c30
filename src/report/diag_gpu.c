/* The diagnosis on a GPU run (see diag_gpu.h, docs/diagnosis.md "GPU").
 *
 * The host's clock is not the GPU's: kernels run after they are launched,
 * and the host waits wherever it reads a result. So on a run with GPU
 * records the question "what holds the step back" is first asked of the
 * GPU: how much of each step's wall time had a kernel running (busy share).
 * Busy most of the time: the GPU sets the pace (healthy; the host's waits in
 * .item() are the GPU's work). Idle with many tiny kernels: the host cannot
 * launch fast enough. Idle after a host wait: a synchronisation drains the
 * queue. Idle while the training thread waits for data: input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/diag.h"
#include "report/diag_gpu.h"
#include "report/diag_rule.h"
#include "util/csvr.h"
#include "util/human.h"

#define GPU_BOUND_SHARE 0.85   /* busy share of the step: the GPU sets the pace */
#define GPU_IDLE_SHARE 0.50    /* below: the GPU waits for the host most of the step */
#define LAUNCH_KERNELS 20      /* kernels per step ... */
#define LAUNCH_KERNEL_US 50.0  /* ... of this median duration or less: launch-bound */
#define PAGEABLE_MIN_BYTES (1024.0 * 1024.0) /* per step */
#define MIN_GPU_STEPS 5
#define SYNC_IDLE_SHARE 0.05 /* of the step, GPU idle after host waits */
#define MEM_GROWTH_MIN (256.0 * 1024 * 1024)
#define MEM_GROWTH_STEP (64.0 * 1024 * 1024)

static const dfinding *find(const dfinding *cand, int nc, const char *id)
{
    for (int i = 0; i < nc; i++)
        if (strcmp(cand[i].id, id) == 0) return &cand[i];
    return NULL;
}

static void drop(dfinding *cand, int *nc, const char *id)
{
    for (int i = 0; i < *nc; i++)
        if (strcmp(cand[i].id, id) == 0) {
            memmove(&cand[i], &cand[i + 1], (size_t)(*nc - i - 1) * sizeof(cand[0]));
            (*nc)--;
            i--;
        }
}

/* ---- loading ---- */

static void from_summary(dgpu_steps *g, const jr_node *s)
{
    g->steps = jr_pnum(s, "steps");
    g->warm_steps = jr_pnum(s, "warm_steps");
    g->records = jr_pnum(s, "records");
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
                                       "d2h_pageable_bytes", "sync_ns", "syncs", "comm_kernel_ns", "sync_idle_ns"};
    enum { NC = sizeof(cols) / sizeof(cols[0]) };
    int ix[NC];
    for (int i = 0; i < NC; i++) ix[i] = csvr_col(&c, cols[i]);
    figs f;
    figs_init(&f);
    while (csvr_next(&c) == 1) {
        double v[NC];
        for (int i = 0; i < NC; i++)
            if (ix[i] < 0 || csvr_num(&c, ix[i], &v[i]) != 0 || !(v[i] >= 0) || v[i] > 1e19) v[i] = 0;
        gpu_step s = {.step = (uint64_t)v[0], .interval_ns = (uint64_t)v[1], .busy_ns = (uint64_t)v[2],
                      .kernel_ns = (uint64_t)v[3], .kernels = (uint64_t)v[4], .copy_ns = (uint64_t)v[5],
                      .h2d_bytes = (uint64_t)v[6], .h2d_pageable_bytes = (uint64_t)v[7],
                      .d2h_bytes = (uint64_t)v[8], .d2h_pageable_bytes = (uint64_t)v[9],
                      .sync_ns = (uint64_t)v[10], .syncs = (uint64_t)v[11], .comm_kernel_ns = (uint64_t)v[12],
                      .sync_idle_ns = (uint64_t)v[13]};
        figs_add_gpu(&f, &s);
    }
    csvr_close(&c);
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

void dg_load(diag_run *r)
{
    dgpu_steps *g = &r->gs;
    int keep_alloc = g->have_alloc;
    dgpu_steps a = *g; /* the allocator's figures may already be in (pyprof is loaded first) */
    memset(g, 0, sizeof(*g));
    double *nan_fields[] = {&g->steps, &g->warm_steps, &g->records, &g->busy_share, &g->busy_p10,
                            &g->busy_ms, &g->step_ms, &g->kernels_per_step, &g->kernel_us_p50,
                            &g->kernel_ms, &g->comm_kernel_ms, &g->sync_share, &g->syncs_per_step,
                            &g->copy_ms, &g->sync_idle_share, &g->h2d, &g->h2d_pageable, &g->d2h, &g->d2h_pageable};
    for (size_t i = 0; i < sizeof(nan_fields) / sizeof(nan_fields[0]); i++) *nan_fields[i] = NAN;
    const jr_node *s = r->have_summary ? jr_path(r->summary.root, "steps.gpu") : NULL;
    if (s && s->type == JR_OBJ)
        from_summary(g, s);
    else
        from_csv(g, r->dir);
    g->have = g->warm_steps >= MIN_GPU_STEPS && isfinite(g->busy_share);
    if (keep_alloc) {
        g->have_alloc = 1;
        g->total = a.total, g->alloc_first = a.alloc_first, g->alloc_last = a.alloc_last;
        g->alloc_peak = a.alloc_peak, g->reserved_peak = a.reserved_peak;
        g->reserved_last = a.reserved_last, g->t_first = a.t_first, g->t_last = a.t_last;
        g->retries = a.retries, g->ooms = a.ooms, g->oom_events = a.oom_events;
        g->oom_snapshots = a.oom_snapshots;
        g->alloc_mid = a.alloc_mid, g->alloc_q1 = a.alloc_q1, g->t_q1 = a.t_q1;
    }
}

static double series_at(const jr_node *ser, int i, int col)
{
    return jr_num(jr_at(jr_at(ser, i), col));
}

void dg_take_events(diag_run *r, const jr_node *root)
{
    const jr_node *c = jr_get(root, "cuda");
    if (!c || c->type != JR_OBJ) return;
    dgpu_steps *g = &r->gs;
    double peak = jr_pnum(c, "peak_allocated_bytes");
    /* several processes with CUDA (DDP on one host): the one that held most */
    if (g->have_alloc && !(peak > g->alloc_peak)) return;
    g->have_alloc = 1;
    g->total = jr_pnum(c, "total_bytes");
    g->alloc_peak = peak;
    g->reserved_peak = jr_pnum(c, "peak_reserved_bytes");
    g->retries = jr_pnum(c, "alloc_retries");
    g->ooms = jr_pnum(c, "ooms");
    g->oom_events = jr_pnum(c, "oom_events");
    g->oom_snapshots = jr_pnum(c, "oom_snapshots");
    const jr_node *ser = jr_get(c, "series");
    int n = 0;
    while (ser && jr_at(ser, n)) n++;
    g->alloc_first = g->alloc_last = g->alloc_mid = g->alloc_q1 = NAN;
    if (n >= 4) {
        /* columns: t_mono_s, allocated, reserved, ... (docs/run-format.md) */
        g->t_first = series_at(ser, 0, 0);
        g->alloc_first = series_at(ser, 0, 1);
        g->t_q1 = series_at(ser, n / 4, 0);
        g->alloc_q1 = series_at(ser, n / 4, 1);
        g->alloc_mid = series_at(ser, n / 2, 1);
        g->t_last = series_at(ser, n - 1, 0);
        g->alloc_last = series_at(ser, n - 1, 1);
        g->reserved_last = series_at(ser, n - 1, 2);
    }
}

/* ---- rules ---- */

static const char *mib(char *o, size_t n, double b)
{
    human_bytes(o, n, b);
    return o;
}

static int gpu_bound(const diag_run *r, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    double compute = g->busy_share;
    if (isfinite(g->comm_kernel_ms) && g->step_ms > 0) compute -= g->comm_kernel_ms / g->step_ms;
    if (!(compute >= GPU_BOUND_SHARE)) return 0;
    diag_head(d, "gpu-bound", "GPU-bound (healthy)", compute,
              "a kernel ran %.0f%% of each step's time: the GPU sets the pace, the host keeps up",
              100 * g->busy_share);
    ev(d, "gpu_busy_share", g->busy_share,
       "GPU busy %.0f%% of step time (the union of kernel intervals over the warm steps; p10 "
       "step %.0f%%)",
       100 * g->busy_share, 100 * g->busy_p10);
    ev(d, "kernels_per_step", g->kernels_per_step, "%.0f kernels per step, median %.1f us",
       g->kernels_per_step, g->kernel_us_p50);
    if (g->syncs_per_step >= 0.5)
        ev(d, "sync_share", g->sync_share,
           "the host waited for the GPU %.0f%% of the step (%.1f waits per step): that wait is "
           "the GPU's work still running, not host code",
           100 * g->sync_share, g->syncs_per_step);
    if (r->python) {
        const dcause *k = &r->cause;
        int amp = k->amp_bf16 || k->amp_f16, comp = k->compile_frames > 0;
        rec(d, "Do less work per sample on the GPU: %s%sfused optimizers (fused=True), flash "
               "attention (scaled_dot_product_attention)%s.",
            amp ? "" : "bf16 autocast (tensor cores), ", comp ? "" : "torch.compile, ",
            amp && comp ? " (the run already uses autocast and torch.compile)"
            : amp       ? " (the run already uses autocast)"
            : comp      ? " (the run already uses torch.compile)"
                        : "");
    } else {
        rec(d, "Do less work per sample on the GPU: bf16/fp16 matrix multiplies on tensor cores, "
               "fused kernels, flash attention.");
    }
    if (g->have_alloc && g->total > 0 && g->reserved_peak > 0 && g->reserved_peak < 0.6 * g->total) {
        char a[32];
        rec(d, "%s of the GPU's memory was never reserved by PyTorch: a larger batch may raise "
               "throughput.",
            mib(a, sizeof(a), g->total - g->reserved_peak));
    }
    return 1;
}

static int launch_bound(const diag_run *r, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    if (!(g->busy_share < GPU_IDLE_SHARE) || !(g->kernels_per_step >= LAUNCH_KERNELS) ||
        !(g->kernel_us_p50 <= LAUNCH_KERNEL_US))
        return 0;
    double data = r->warm_interval_ns > 0 ? r->warm_phase_ns[PH_DATA] / r->warm_interval_ns : NAN;
    if (isfinite(data) && data >= 0.20) return 0; /* the input rule's */
    double idle = 1 - g->busy_share;
    diag_head(d, "launch-bound", "Launch-bound (GPU idle between kernels)", idle * 0.9,
              "the GPU is idle %.0f%% of each step: %.0f kernels per step of %.1f us median are "
              "launched one by one faster than the host can issue them",
              100 * idle, g->kernels_per_step, g->kernel_us_p50);
    ev(d, "gpu_busy_share", g->busy_share, "GPU busy %.0f%% of step time", 100 * g->busy_share);
    ev(d, "kernels_per_step", g->kernels_per_step, "%.0f kernels per step", g->kernels_per_step);
    ev(d, "kernel_us_p50", g->kernel_us_p50, "median kernel %.1f us", g->kernel_us_p50);
    if (g->step_ms > 0)
        ev(d, "launch_us_per_kernel", 1e3 * g->step_ms / g->kernels_per_step,
           "one kernel every %.1f us of host time", 1e3 * g->step_ms / g->kernels_per_step);
    if (r->python) {
        rec(d, "Capture the step in a CUDA graph: torch.compile(model, mode=\"reduce-overhead\") "
               "(or torch.cuda.graphs) replays all its kernels with one launch.");
        rec(d, "Fewer, larger kernels: a larger batch (the kernels grow, their count does not), "
               "fused or foreach optimizers (Adam(..., fused=True)), torch.compile to fuse "
               "elementwise ops.");
    } else {
        rec(d, "Capture the step in a CUDA graph (cudaStreamBeginCapture / cudaGraphLaunch): one "
               "launch replays all its kernels.");
        rec(d, "Fewer, larger kernels: a larger batch, fused kernels.");
    }
    return 1;
}

static const dc_func *sync_line(const diag_run *r)
{
    const dcause *c = &r->cause;
    const dc_func *f = NULL;
    for (int i = 0; i < c->nfunc; i++)
        if (strcmp(c->funcs[i].kind, "sync") == 0 && (!f || c->funcs[i].samples > f->samples))
            f = &c->funcs[i];
    return f;
}

static int gpu_sync(const diag_run *r, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    if (!(g->syncs_per_step >= 0.9) || !(g->busy_share < GPU_BOUND_SHARE) ||
        !(g->sync_idle_share >= SYNC_IDLE_SHARE))
        return 0;
    double idle = g->sync_idle_share;
    const dc_func *f = sync_line(r);
    char where[200] = "";
    if (f) fmt(where, sizeof(where), " at %s (%s:%d)", f->func, f->file, f->line);
    diag_head(d, "gpu-sync", "Synchronisation inside the step", idle,
              "the host waits for the GPU %.1f times per step%s; the queue drains, and the GPU "
              "is idle %.0f%% of the step after those waits until the host launches again",
              g->syncs_per_step, where, 100 * idle);
    ev(d, "syncs_per_step", g->syncs_per_step, "%.1f host waits for the GPU per step",
       g->syncs_per_step);
    ev(d, "sync_share", g->sync_share, "the host waited %.0f%% of the step", 100 * g->sync_share);
    ev(d, "gpu_busy_share", g->busy_share, "GPU busy %.0f%% of step time", 100 * g->busy_share);
    if (r->python) {
        rec(d, "Take the read-back out of the step: .item(), .cpu(), .tolist(), print(tensor), "
               "a boolean-mask index or nonzero() wait for every kernel queued before them. Log "
               "every N steps, keep running sums on the GPU, replace a mask index by torch.where "
               "or a multiply by the mask.");
    } else {
        rec(d, "Take the wait out of the step: a cudaDeviceSynchronize or blocking cudaMemcpy "
               "drains the queue; use events (cudaEventRecord / cudaStreamWaitEvent) and read "
               "results back every N steps.");
    }
    return 1;
}

static int pageable(const diag_run *r, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    double pb = (isfinite(g->h2d_pageable) ? g->h2d_pageable : 0) +
                (isfinite(g->d2h_pageable) ? g->d2h_pageable : 0);
    double all = (isfinite(g->h2d) ? g->h2d : 0) + (isfinite(g->d2h) ? g->d2h : 0);
    if (!(pb >= PAGEABLE_MIN_BYTES) || !(all > 0)) return 0;
    double share = g->step_ms > 0 && isfinite(g->copy_ms) ? g->copy_ms * (pb / all) / g->step_ms : NAN;
    char a[32], b[32];
    diag_head(d, "pageable-copies", "Copies from pageable host memory",
              isfinite(share) ? share : 0.02,
              "%s per step is copied between the host and the GPU from ordinary (pageable) "
              "memory: each copy is staged and blocks the host%s",
              mib(a, sizeof(a), pb),
              isfinite(share) ? "" : "");
    if (isfinite(g->h2d_pageable) && g->h2d_pageable > 0)
        ev(d, "h2d_pageable_bytes", g->h2d_pageable, "host to device: %s per step pageable of %s",
           mib(a, sizeof(a), g->h2d_pageable), mib(b, sizeof(b), g->h2d));
    if (isfinite(g->d2h_pageable) && g->d2h_pageable > 0)
        ev(d, "d2h_pageable_bytes", g->d2h_pageable, "device to host: %s per step pageable of %s",
           mib(a, sizeof(a), g->d2h_pageable), mib(b, sizeof(b), g->d2h));
    if (isfinite(share))
        ev(d, "copy_share", share, "the copies take %.0f%% of the step on the GPU", 100 * share);
    if (r->python)
        rec(d, "Copy from pinned memory without waiting: DataLoader(pin_memory=True) (or "
               "tensor.pin_memory() once for a buffer reused every step) and "
               ".to(device, non_blocking=True).");
    else
        rec(d, "Allocate the host buffers with cudaMallocHost (pinned) and copy with "
               "cudaMemcpyAsync on a stream.");
    return 1;
}

static int gpu_oom(const diag_run *r, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    double n = isfinite(g->ooms) && g->ooms > 0 ? g->ooms : g->oom_events;
    if (!g->have_alloc || !(n >= 1)) return 0;
    char a[32], b[32];
    int died = r->exit_known && (r->exit_code > 0 || r->exit_signal > 0);
    diag_head(d, "gpu-oom", "GPU out of memory", died ? 0.5 : 0.05,
              "the CUDA caching allocator ran out of memory %.0f time%s%s",
              n, n == 1 ? "" : "s", died ? " and the run ended with an error" : " (the script caught it)");
    ev(d, "ooms", n, "%.0f out-of-memory error%s", n, n == 1 ? "" : "s");
    if (g->alloc_peak > 0 && g->total > 0)
        ev(d, "peak_allocated_bytes", g->alloc_peak, "peak allocated %s of %s", mib(a, sizeof(a), g->alloc_peak),
           mib(b, sizeof(b), g->total));
    if (g->oom_snapshots >= 1)
        ev(d, "oom_snapshots", g->oom_snapshots,
           "the allocator's state at the OOM is in memory/oom-*.pickle (open it at "
           "https://pytorch.org/memory_viz)");
    rec(d, "Fit the step in memory: a smaller batch with gradient accumulation, activation "
           "checkpointing (torch.utils.checkpoint), bf16 autocast, or PYTORCH_CUDA_ALLOC_CONF="
           "expandable_segments:True when reserved memory is fragmented.");
    return 1;
}

static int alloc_retries(const diag_run *r, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    if (!g->have_alloc || !(g->retries >= 1) || g->ooms >= 1) return 0;
    char a[32], b[32];
    diag_head(d, "gpu-alloc-retries", "Allocator retries", 0.05,
              "the CUDA caching allocator freed its cache and retried %.0f time%s: each retry "
              "synchronises and slows that step",
              g->retries, g->retries == 1 ? "" : "s");
    ev(d, "alloc_retries", g->retries, "%.0f allocator retries (num_alloc_retries)", g->retries);
    if (g->reserved_peak > 0 && g->alloc_peak > 0)
        ev(d, "reserved_peak_bytes", g->reserved_peak, "peak reserved %s for peak allocated %s",
           mib(a, sizeof(a), g->reserved_peak), mib(b, sizeof(b), g->alloc_peak));
    rec(d, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less fragmentation), or a smaller "
           "batch / activation checkpointing to leave headroom.");
    return 1;
}

static int mem_growth(const diag_run *r, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    if (!g->have_alloc || !isfinite(g->alloc_q1) || !isfinite(g->alloc_last)) return 0;
    /* from the first quarter on (the optimizer's state and the first
     * batches are allocated at the start), growing through the middle to
     * the end */
    double grow = g->alloc_last - g->alloc_q1;
    double min = MEM_GROWTH_MIN, step = MEM_GROWTH_STEP;
    if (g->total > 0 && 0.05 * g->total > min) min = 0.05 * g->total;
    if (!(grow >= min) || !(g->alloc_mid > g->alloc_q1 + step) || !(g->alloc_last > g->alloc_mid + step))
        return 0;
    double dt = g->t_last - g->t_q1;
    double rate = dt > 0 ? grow / dt : NAN; /* bytes per second */
    double left = g->total > 0 ? (g->total - g->alloc_last) / rate : NAN;
    char a[32], b[32], c[32];
    diag_head(d, "gpu-memory-growth", "GPU memory grows", isfinite(left) && left < 3600 ? 0.3 : 0.1,
              "allocated GPU memory grew from %s to %s during training%s: something keeps tensors "
              "alive from step to step",
              mib(a, sizeof(a), g->alloc_q1), mib(b, sizeof(b), g->alloc_last),
              isfinite(left) && left > 0 ? "" : "");
    ev(d, "alloc_growth_bytes", grow, "+%s over %.0f s", mib(c, sizeof(c), grow), dt);
    if (isfinite(left) && left > 0)
        ev(d, "oom_in_s", left, "at this rate the GPU's memory is full in %.0f s", left);
    if (r->python)
        rec(d, "Keep numbers, not tensors: losses.append(loss.item()) or loss.detach() (a tensor "
               "that needs grad keeps its whole graph alive), and clear caches that hold outputs.");
    else
        rec(d, "Free what each step allocates (cudaFree, or reuse one buffer).");
    return 1;
}

int dg_cands(const diag_run *r, dfinding *cand, int room)
{
    int (*rules[])(const diag_run *, dfinding *) = {gpu_bound, launch_bound, gpu_sync, pageable,
                                                    gpu_oom,   alloc_retries, mem_growth};
    int n = 0;
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]) && n < room; i++) {
        if (!r->gs.have && i < 4) continue; /* the step rules need GPU records */
        memset(&cand[n], 0, sizeof(cand[n]));
        if (rules[i](r, &cand[n])) n++;
    }
    return n;
}

void dg_fold(const diag_run *r, dfinding *cand, int *nc)
{
    const dgpu_steps *g = &r->gs;
    if (!g->have) return;
    /* kernel evidence replaces the utilisation counter's (NVML counts a GPU
     * busy while one tiny kernel runs) and the host-timed small-op count */
    drop(cand, nc, "host-bound");
    drop(cand, nc, "tiny-ops");
    const dfinding *gb = find(cand, *nc, "gpu-bound");
    if (gb) {
        /* the GPU sets the pace: the host's code runs while the GPU works
         * (and its wait in .item() is that work) */
        int i = (int)(find(cand, *nc, "host-code") - cand);
        if (find(cand, *nc, "host-code")) {
            dfinding *d = &cand[gb - cand];
            ev(d, "host_code_share", cand[i].score,
               "the stack samples put %.0f%% of the training thread's time outside the model "
               "(%s): the host does it while the GPU works, so it costs no step time",
               100 * cand[i].score, cand[i].title);
            drop(cand, nc, "host-code");
        }
        return;
    }
    const dfinding *sy = find(cand, *nc, "gpu-sync");
    const dfinding *hc = find(cand, *nc, "host-code");
    if (sy && hc && strstr(hc->title, "Synchronisation")) drop(cand, nc, "host-code");
    /* the GPU's side of the other findings */
    for (int i = 0; i < *nc; i++)
        if (strcmp(cand[i].id, "input-bound") == 0 || strcmp(cand[i].id, "host-code") == 0)
            ev(&cand[i], "gpu_busy_share", g->busy_share,
               "meanwhile the GPU is busy only %.0f%% of the step (kernel records)",
               100 * g->busy_share);
}
