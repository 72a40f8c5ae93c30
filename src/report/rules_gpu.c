/* Rules on what the GPU records of a run say (docs/diagnosis.md, "GPU").
 *
 * The host's clock is not the GPU's: kernels run after they are launched,
 * and the host waits wherever it reads a result. So on a run with GPU
 * records the question "what holds the step back" is first asked of the
 * GPU: how much of each step's wall time had a kernel running (busy share,
 * collect/gpujoin.h). Busy most of the time: the GPU sets the pace (healthy;
 * the host's waits in .item() are the GPU's work). Idle with many tiny
 * kernels: the host cannot launch them fast enough. Idle after a host wait:
 * a synchronisation drained the queue. Idle while the training thread waits
 * for data: input (rules_input.c adds the GPU's side). The allocator rules
 * read the hook's CUDA memory figures (dcause.alloc). The rules that read
 * host time stand aside where these say otherwise: host-bound and tiny-ops
 * when there are kernel records, host-code folds into gpu-bound or gpu-sync
 * (dr_hostcode_gpu_folds). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report/rules.h"
#include "util/human.h"

#define GPU_BOUND_SHARE 0.85   /* busy share of the step: the GPU sets the pace */
#define GPU_IDLE_SHARE 0.50    /* below: the GPU waits for the host most of the step */
#define LAUNCH_KERNELS 20      /* kernels per step ... */
#define LAUNCH_KERNEL_US 50.0  /* ... of this median duration or less: launch-bound */
#define PAGEABLE_MIN_BYTES (1024.0 * 1024.0) /* per step */
#define SYNC_IDLE_SHARE 0.05   /* of the step, GPU idle after host waits */
#define READBACK_LINE_SHARE 0.25 /* of the training thread's samples, on a read-back line */
#define MEM_GROWTH_MIN (256.0 * 1024 * 1024)
#define MEM_GROWTH_STEP (64.0 * 1024 * 1024)

/* ---- rules ---- */

/* Bytes a warm step copies from or to pageable host memory. */
static double pageable_bytes(const dgpu_steps *g)
{
    return (isfinite(g->h2d_pageable) ? g->h2d_pageable : 0) +
           (isfinite(g->d2h_pageable) ? g->d2h_pageable : 0);
}

static const char *mib(char *o, size_t n, double b)
{
    human_bytes(o, n, b);
    return o;
}

int dr_cand_gpu_bound(const diag_run *r, const dctx *c, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    if (!g->have) return 0;
    double compute = g->busy_share;
    if (isfinite(g->comm_kernel_ms) && g->step_ms > 0) compute -= g->comm_kernel_ms / g->step_ms;
    /* Copies from pinned memory are the GPU's work too (its copy engines):
     * kernels and copies that fill the step leave the host nothing to
     * speed up. Their sum bounds the union from above (a copy on a side
     * stream may overlap kernels); pageable copies are the host's cost
     * (pageable-copies), not counted here. */
    double copy = g->step_ms > 0 && isfinite(g->copy_ms) && pageable_bytes(g) < PAGEABLE_MIN_BYTES
                      ? g->copy_ms / g->step_ms
                      : 0;
    double occupied = compute + copy < 1 ? compute + copy : 1;
    if (!(compute >= GPU_BOUND_SHARE) && !(occupied >= GPU_BOUND_SHARE)) return 0;
    if (compute >= GPU_BOUND_SHARE || !(copy >= 0.01))
        diag_head(d, "gpu-bound", "GPU-bound (healthy)", compute,
                  "a kernel ran %.0f%% of each step's time: the GPU sets the pace, the host keeps "
                  "up",
                  100 * g->busy_share);
    else
        diag_head(d, "gpu-bound", "GPU-bound (healthy)", occupied,
                  "kernels ran %.0f%% of each step's time and copies from pinned memory %.0f%% "
                  "more: the GPU sets the pace, the host keeps up",
                  100 * g->busy_share, 100 * copy);
    ev(d, "gpu_busy_share", g->busy_share,
       "GPU busy %.0f%% of step time (the union of kernel intervals over the warm steps; p10 "
       "step %.0f%%)",
       100 * g->busy_share, 100 * g->busy_p10);
    ev(d, "kernels_per_step", g->kernels_per_step, "%.0f kernels per step, median %.1f us",
       g->kernels_per_step, g->kernel_us_p50);
    if (copy >= 0.01)
        ev(d, "copy_share", copy, "copies between host and GPU %.0f%% of the step (%.2f ms)",
           100 * copy, g->copy_ms);
    if (g->syncs_per_step >= 0.5)
        ev(d, "sync_share", g->sync_share,
           "the host waited for the GPU %.0f%% of the step (%.1f waits per step): that wait is "
           "the GPU's work still running, not host code",
           100 * g->sync_share, g->syncs_per_step);
    dr_rec_less_work(r, d, " on the GPU");
    const dgpu_alloc *al = &r->cause.alloc;
    if (al->have && al->total > 0 && al->reserved_peak > 0 && al->reserved_peak < 0.6 * al->total) {
        char a[32];
        rec(d, "%s of the GPU's memory was never reserved by PyTorch: a larger batch may raise "
               "throughput.",
            mib(a, sizeof(a), al->total - al->reserved_peak));
    }
    return 1;
}

int dr_cand_launch_bound(const diag_run *r, const dctx *c, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    if (!g->have) return 0;
    if (!(g->busy_share < GPU_IDLE_SHARE) || !(g->kernels_per_step >= LAUNCH_KERNELS) ||
        !(g->kernel_us_p50 <= LAUNCH_KERNEL_US))
        return 0;
    double data = r->warm_interval_ns > 0 ? r->warm_phase_ns[PH_DATA] / r->warm_interval_ns : NAN;
    if (isfinite(data) && data >= 0.20) return 0; /* the input rule's */
    double idle = 1 - g->busy_share;
    diag_head(d, "launch-bound", "Launch-bound (GPU idle between kernels)", idle * 0.9,
              "the GPU is idle %.0f%% of each step: %.0f kernels per step of %.1f us median, each "
              "taking the host longer to launch than the GPU to run",
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

/* A source line that reads a result back from the GPU: the host waits
 * there for every kernel queued before it (.item(), .cpu(), .tolist(),
 * .numpy(), nonzero, masked_select, unique, or a boolean-mask index such
 * as x[x > 0] or x[mask], which must count the selected elements first). */
/* The code of a source line: its comment and trailing blanks cut (a '#'
 * outside quotes). */
static void code_of(char *o, size_t n, const char *s)
{
    size_t k = 0;
    char q = 0;
    for (; *s && k + 1 < n; s++) {
        if (q) {
            if (*s == q) q = 0;
        } else if (*s == '\'' || *s == '"') {
            q = *s;
        } else if (*s == '#') {
            break;
        }
        o[k++] = *s;
    }
    while (k > 0 && (o[k - 1] == ' ' || o[k - 1] == '\t')) k--;
    o[k] = 0;
}

static int readback_src(const char *line)
{
    char s[96];
    code_of(s, sizeof(s), line);
    static const char *const calls[] = {".item(", ".cpu(", ".tolist(", ".numpy(", "nonzero(",
                                         "masked_select(", ".unique(", "torch.unique("};
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
        if (strstr(s, calls[i])) return 1;
    for (const char *b = strchr(s, '['); b; b = strchr(b + 1, '[')) {
        const char *e = strchr(b, ']');
        if (!e) break;
        char in[84];
        size_t n = (size_t)(e - b - 1) < sizeof(in) - 1 ? (size_t)(e - b - 1) : sizeof(in) - 1;
        memcpy(in, b + 1, n);
        in[n] = 0;
        if (strstr(in, " > ") || strstr(in, " < ") || strstr(in, "==") || strstr(in, "!=") ||
            strstr(in, ">=") || strstr(in, "<=") || strstr(in, "mask"))
            return 1;
    }
    return 0;
}

/* The training threads' busiest read-back line (readback_src) and its
 * share of their samples, or NULL. */
static const dc_func *readback_line(const diag_run *r, double *share, char *src, size_t n)
{
    const dcause *c = &r->cause;
    const dc_func *best = NULL;
    *share = 0;
    for (int p = 0; p < c->nproc; p++) {
        const dc_proc *pr = &c->procs[p];
        for (int i = 0; i < pr->nlines && pr->samples > 0; i++) {
            double sh = pr->lines[i].samples / pr->samples;
            if (sh > *share && readback_src(pr->src[i])) {
                *share = sh;
                best = &pr->lines[i];
                code_of(src, n, pr->src[i]);
            }
        }
    }
    return best;
}

int dr_cand_gpu_sync(const diag_run *r, const dctx *c, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    if (!g->have) return 0;
    if (!(g->syncs_per_step >= 0.9) || !(g->busy_share < GPU_BOUND_SHARE)) return 0;
    double idle = g->sync_idle_share, line_share = 0;
    char src[96] = "";
    const dc_func *rb = readback_line(r, &line_share, src, sizeof(src));
    if (!(idle >= SYNC_IDLE_SHARE)) {
        /* The synchronisation records may not show the wait where it
         * happens (on an H200 a boolean-mask index's wait read 9 us while
         * 58% of the host's samples sat on its line, the GPU 40% idle):
         * the host's time on a read-back line is the same cost, measured
         * from the host's side. */
        if (!rb || !(line_share >= READBACK_LINE_SHARE)) return 0;
        double gpu_idle = 1 - g->busy_share;
        diag_head(d, "gpu-sync", "Synchronisation inside the step",
                  line_share < gpu_idle ? line_share : gpu_idle,
                  "the host spends %.0f%% of its time at %s:%d, a read-back that waits for "
                  "every kernel queued before it; the GPU is idle %.0f%% of the step",
                  100 * line_share, rb->file, rb->line, 100 * gpu_idle);
        ev(d, "readback_line_share", line_share,
           "%.0f%% of the training thread's samples at %s:%d `%s`", 100 * line_share, rb->file,
           rb->line, src);
    } else {
        const dc_func *f = sync_line(r);
        char where[200] = "";
        if (f)
            fmt(where, sizeof(where), " at %s (%s:%d)", f->func, f->file, f->line);
        else if (rb && line_share >= READBACK_LINE_SHARE)
            fmt(where, sizeof(where), " at `%s` (%s:%d)", src, rb->file, rb->line);
        diag_head(d, "gpu-sync", "Synchronisation inside the step", idle,
                  "the host waits for the GPU %.1f times per step%s; the queue drains, and the "
                  "GPU is idle %.0f%% of the step after those waits until the host launches again",
                  g->syncs_per_step, where, 100 * idle);
    }
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

int dr_cand_pageable(const diag_run *r, const dctx *c, dfinding *d)
{
    const dgpu_steps *g = &r->gs;
    if (!g->have) return 0;
    double pb = pageable_bytes(g);
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

int dr_cand_gpu_oom(const diag_run *r, const dctx *c, dfinding *d)
{
    const dgpu_alloc *g = &r->cause.alloc;
    double n = isfinite(g->ooms) && g->ooms > 0 ? g->ooms : g->oom_events;
    if (!g->have || !(n >= 1)) return 0;
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

int dr_cand_alloc_retries(const diag_run *r, const dctx *c, dfinding *d)
{
    const dgpu_alloc *g = &r->cause.alloc;
    if (!g->have || !(g->retries >= 1) || g->ooms >= 1) return 0;
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

int dr_cand_gpu_mem_growth(const diag_run *r, const dctx *c, dfinding *d)
{
    const dgpu_alloc *g = &r->cause.alloc;
    if (!g->have || !isfinite(g->alloc_q1) || !isfinite(g->alloc_last)) return 0;
    /* from the first quarter on (the optimizer's state and the first
     * batches are allocated at the start), growing through the middle to
     * the end */
    double grow = g->alloc_last - g->alloc_q1;
    double dt = g->t_last - g->t_q1;
    double rate = dt > 0 ? grow / dt : NAN; /* bytes per second */
    double left = g->total > 0 ? (g->total - g->alloc_last) / rate : NAN;
    /* 5% of the GPU (a large GPU's caches settle in steps of that), unless
     * at that rate it is full within the hour: 1.4 GiB in half a second on a
     * 141 GiB H200 is 1% of it, and full in under two minutes */
    double min = MEM_GROWTH_MIN, step = MEM_GROWTH_STEP;
    if (g->total > 0 && 0.05 * g->total > min && !(isfinite(left) && left > 0 && left < 3600))
        min = 0.05 * g->total;
    if (!(grow >= min) || !(g->alloc_mid > g->alloc_q1 + step) || !(g->alloc_last > g->alloc_mid + step))
        return 0;
    char a[32], b[32], e[32];
    diag_head(d, "gpu-memory-growth", "GPU memory grows", isfinite(left) && left < 3600 ? 0.3 : 0.1,
              "allocated GPU memory grew from %s to %s during training%s: something keeps tensors "
              "alive from step to step",
              mib(a, sizeof(a), g->alloc_q1), mib(b, sizeof(b), g->alloc_last),
              isfinite(left) && left > 0 ? "" : "");
    ev(d, "alloc_growth_bytes", grow, "+%s over %.0f s", mib(e, sizeof(e), grow), dt);
    if (isfinite(left) && left > 0)
        ev(d, "oom_in_s", left, "at this rate the GPU's memory is full in %.0f s", left);
    if (r->python)
        rec(d, "Keep numbers, not tensors: losses.append(loss.item()) or loss.detach() (a tensor "
               "that needs grad keeps its whole graph alive), and clear caches that hold outputs.");
    else
        rec(d, "Free what each step allocates (cudaFree, or reuse one buffer).");
    return 1;
}


/* host-code on a GPU run: when the GPU sets the pace, the host's code runs
 * while the GPU works (and its wait in .item() is that work); a wait the
 * gpu-sync finding measured is that finding's */
static int host_code_any(const dfinding *d) { return strcmp(d->id, "host-code") == 0; }
static int host_code_sync(const dfinding *d)
{
    return host_code_any(d) && strstr(d->title, "Synchronisation") != NULL;
}

static int into_gpu_bound(const dfold_at *x, dfinding *from, dfinding *into)
{
    ev(into, "host_code_share", from->score,
       "the stack samples put %.0f%% of the training thread's time outside the model (%s): the "
       "host runs it while the GPU works, so it costs no step time",
       100 * from->score, from->title);
    return DF_DROP;
}

static int into_gpu_sync(const dfold_at *x, dfinding *from, dfinding *into)
{
    ev(into, "host_code_share", from->score, "the stack samples: %s", from->summary);
    return DF_DROP;
}

const dfold dr_hostcode_gpu_folds[] = {
    {12, host_code_any, {{"gpu-bound"}, NULL}, into_gpu_bound},
    {13, host_code_sync, {{"gpu-sync"}, NULL}, into_gpu_sync},
    {0},
};

/* The GPU's side of a host-time finding (input, host code): how busy the
 * GPU was meanwhile. */
void dr_gpu_side(const diag_run *r, dfinding *d)
{
    if (r->gs.have)
        ev(d, "gpu_busy_share", r->gs.busy_share,
           "meanwhile the GPU is busy only %.0f%% of the step (kernel records)",
           100 * r->gs.busy_share);
}
