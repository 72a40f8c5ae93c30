/* The diagnosis: one primary bottleneck with its evidence and ranked fixes,
 * secondary findings and notes. Rules and thresholds: docs/diagnosis.md
 * (keep the two in step). */
#include "report/diag.h"
#include "report/diag_rule.h"
#include "report/report_ranks.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"

/* thresholds (docs/diagnosis.md, "Rules") */
#define MIN_STEPS DC_MIN_STEPS
#define MIN_SAMPLES 3
#define INPUT_SHARE 0.20 /* data wait share of step time */
#define FSDP_FITS_SHARE 0.05 /* training state over a rank's memory: DDP would do */
#define STRAGGLER_LOAD 1.2   /* the straggler's samples (tokens) a step over the others' */
#define ITER_PER_STEP_MIN 10 /* training iterators before one per step counts */
#define ITER_PER_STEP_MAX 2  /* steps per iterator at most */
#define COMM_SHARE 0.20
#define CKPT_SHARE 0.15
#define IO_IOWAIT_PCT 10.0
#define IO_PSI_PCT 10.0
#define IO_TREE_READ_BPS (1024.0 * 1024.0) /* the tree reads at least 1 MiB/s */
#define MAIN_WAITS_CPU 50.0                /* below this the main process waits rather than works */
#define HOST_GPU_UTIL 70.0
#define HOST_MAIN_CPU 80.0
#define HEALTHY_GPU_UTIL 80.0
#define STRAGGLER_RATIO 1.20
#define UNSTABLE_CV 0.5
#define UNSTABLE_TAIL 3.0 /* p99 / p50 */
#define UNSTABLE_EXCESS 0.05 /* the slow steps' time over the median, of the run's */
#define UNSTABLE_P95 1.5  /* p95 / p50: the variation reaches beyond a few steps */
#define UNSTABLE_MIN_SLOW 3 /* steps over UNSTABLE_TAIL x the median */
#define WORK_CORR 0.6       /* step time against tokens/samples per step */
#define WORK_CV 0.15        /* the work per step must itself vary */
#define THROTTLE_SHARE 0.10
#define MEM_AVAIL_MIN_PCT 5.0
#define PSI_MEM_FULL_PCT 5.0
#define SWAP_GROWTH_BYTES (256.0 * 1048576.0)
#define GPU_MEM_FULL_PCT 95.0

void diag_fmt(char *o, size_t n, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(o, n, f, ap);
    va_end(ap);
}

void diag_ev(dfinding *d, const char *name, double v, const char *f, ...)
{
    if (d->nev >= DIAG_MAX_EVIDENCE) return;
    devidence *e = &d->ev[d->nev++];
    diag_fmt(e->name, sizeof(e->name), "%s", name);
    e->value = v;
    va_list ap;
    va_start(ap, f);
    vsnprintf(e->text, sizeof(e->text), f, ap);
    va_end(ap);
}

void diag_head(dfinding *d, const char *id, const char *title, double score, const char *f, ...)
{
    fmt(d->id, sizeof(d->id), "%s", id);
    fmt(d->title, sizeof(d->title), "%s", title);
    d->score = score;
    va_list ap;
    va_start(ap, f);
    vsnprintf(d->summary, sizeof(d->summary), f, ap);
    va_end(ap);
}

void diag_rec(dfinding *d, const char *f, ...)
{
    if (d->nrec >= DIAG_MAX_RECS) return;
    va_list ap;
    va_start(ap, f);
    vsnprintf(d->rec[d->nrec++], sizeof(d->rec[0]), f, ap);
    va_end(ap);
}

/* One recommendation in the words of the run's code: Python (PyTorch) or
 * native. */
static void rec_lang(const diag_run *r, dfinding *d, const char *py, const char *native)
{
    rec(d, "%s", r->python ? py : native);
}

static void note(diag_result *g, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void note(diag_result *g, const char *f, ...)
{
    if (g->nnotes >= 8) return;
    va_list ap;
    va_start(ap, f);
    vsnprintf(g->notes[g->nnotes++], sizeof(g->notes[0]), f, ap);
    va_end(ap);
}

/* Figures the rules share. */
typedef struct ctx {
    int steps_ok, samples_ok, has_gpu;
    double share[PH_COUNT];
    dfig f;
    double gpu_util, gpu_util_min;
    double main_cpu, tree_cpu, sys_cpu, cpus, idle_cores;
    double iowait, psi_io, psi_mem, psi_mem_full;
    double avail_min_pct, swap_growth;
    int workers;
    double worker_cpu;
} ctx;

static int fired(const diag_run *r, const char *rule, double *t, char *m, size_t mn)
{
    for (int i = 0; i < r->nalerts; i++) {
        const dalert *a = &r->alerts[i];
        if (strcmp(a->rule, rule) == 0 && strcmp(a->state, "fired") == 0) {
            if (t) *t = a->t;
            if (m) fmt(m, mn, "%s", a->message);
            return 1;
        }
    }
    return 0;
}

/* a count from the run directory: 0..1e6, else 0 */
#define count_of(v) diag_int((v), 0, 1e6, 0)

static void make_ctx(const diag_run *r, ctx *c)
{
    memset(c, 0, sizeof(*c));
    c->steps_ok = r->steps >= MIN_STEPS;
    c->samples_ok = r->msamples >= MIN_SAMPLES;
    /* the figures the report's tables show: evidence prints the same numbers */
    diag_figures(r, &c->f);
    memcpy(c->share, c->f.share, sizeof(c->share));
    double su = 0;
    int ng = 0;
    c->gpu_util_min = NAN;
    for (int i = 0; i < r->ngpu; i++) {
        if (r->gpus[i].util.n <= 0) continue;
        double u = dstat_mean(&r->gpus[i].util);
        su += u;
        ng++;
        if (isnan(c->gpu_util_min) || u < c->gpu_util_min) c->gpu_util_min = u;
    }
    c->has_gpu = ng > 0;
    c->gpu_util = ng ? su / ng : NAN;
    c->main_cpu = dstat_mean(&r->main_cpu);
    c->tree_cpu = dstat_mean(&r->tree_cpu);
    c->sys_cpu = dstat_mean(&r->cpu);
    c->cpus = r->cpus > 0 ? r->cpus : NAN;
    /* rounded once to the tenth that the evidence shows, so the advice
     * derived from it never disagrees with the number printed beside it */
    c->idle_cores = isfinite(c->cpus) && isfinite(c->sys_cpu)
                        ? round(10 * c->cpus * (1 - c->sys_cpu / 100)) / 10
                        : NAN;
    if (c->idle_cores < 0) c->idle_cores = 0;
    c->iowait = dstat_mean(&r->iowait);
    c->psi_io = dstat_mean(&r->psi_io);
    c->psi_mem = dstat_mean(&r->psi_mem);
    c->psi_mem_full = dstat_mean(&r->psi_mem_full);
    double tot = r->mem_total.n ? r->mem_total.max : NAN;
    c->avail_min_pct = r->mem_avail.n && tot > 0 ? 100 * r->mem_avail.min / tot : NAN;
    c->swap_growth = r->swap.n && isfinite(r->swap_first) ? r->swap.max - r->swap_first : NAN;
    /* workers at once (the most child processes alive together), not the
     * distinct PIDs over the run: loaders restarted every epoch are new PIDs */
    c->workers = r->have_procs ? (r->max_procs > 0 ? count_of(r->max_procs) - 1 : 0)
                               : (r->tree_procs.n ? count_of(r->tree_procs.max) - 1 : -1);
    if (c->workers < 0 && r->have_procs) c->workers = 0;
    /* the zero-code hook knows the DataLoader's own count */
    if (r->cause.have_pyprof && r->cause.loader_iters > 0)
        c->workers = count_of(r->cause.loader_workers *
                              (r->cause.nprocs_py > 1 ? r->cause.nprocs_py : 1));
    c->worker_cpu = dstat_mean(&r->worker_cpu);
}

/* ---- the candidates ------------------------------------------------------ */

static int cand_memory(const diag_run *r, const ctx *c, dfinding *d)
{
    char a[32], b[32], m[256];
    double t;
    int strong = 0, weak = 0;
    if (isfinite(c->swap_growth) && c->swap_growth > SWAP_GROWTH_BYTES) {
        human_bytes(a, sizeof(a), c->swap_growth);
        ev(d, "swap_growth_bytes", c->swap_growth, "swap use grew by %s during the run", a);
        strong = 1;
    }
    if (isfinite(c->avail_min_pct) && c->avail_min_pct < MEM_AVAIL_MIN_PCT) {
        human_bytes(a, sizeof(a), r->mem_avail.min);
        ev(d, "mem_available_min_pct", c->avail_min_pct,
           "host memory available fell to %s (%.1f%% of total)", a, c->avail_min_pct);
        strong = 1;
    }
    if (isfinite(c->psi_mem_full) && c->psi_mem_full >= PSI_MEM_FULL_PCT) {
        ev(d, "psi_mem_full_pct", c->psi_mem_full,
           "all tasks stalled on memory %.0f%% of the time (PSI memory full)", c->psi_mem_full);
        strong = 1;
    }
    if (r->exit_signal == 9 && isfinite(c->avail_min_pct) && c->avail_min_pct < 10) {
        ev(d, "exit_signal", 9,
           "the run was killed (SIGKILL) while memory was low: likely the OOM killer");
        strong = 1;
    }
    /* growth of the tree only, from after warm-up (the first sample once a
     * step ended: imports and model state are in place) to the end, and
     * only when it persists: growing in both halves of the run */
    double t0 = r->cause.rss_warm_t, v0 = r->cause.rss_warm, t1 = r->cause.rss_last_t,
           v1 = r->cause.rss_last, vm = NAN, tt, vv, best = INFINITY;
    for (int k = 0; k < r->s_tree_rss.n && isfinite(v0); k++)
        if (dseries_value(&r->s_tree_rss, k, &tt, &vv) && fabs(tt - (t0 + t1) / 2) < best)
            best = fabs(tt - (t0 + t1) / 2), vm = vv;
    int grew = isfinite(v0) && isfinite(v1) && isfinite(vm) && t1 > t0 && v1 > v0 * 1.2 &&
               v1 - v0 > 64.0 * 1048576.0 && vm > v0 + 0.2 * (v1 - v0) && v1 > vm + 0.2 * (v1 - v0);
    /* and the floor rises: a leak never gives memory back, while batches of
     * varying shapes make the allocator's footprint swing up and down (the
     * lowest RSS of each third of the window, each above the one before) */
    if (grew) {
        double fl[3] = {INFINITY, INFINITY, INFINITY}, top0 = 0;
        /* the series' buckets are timed at their middle: every bucket that
         * overlaps the window counts (those of its first and last samples) */
        double half = r->s_tree_rss.width / 2, eps = 1e-6 * (t1 - t0);
        for (int k = 0; k < r->s_tree_rss.n; k++)
            if (dseries_value(&r->s_tree_rss, k, &tt, &vv) && tt + half > t0 - eps &&
                tt - half <= t1 + eps && vv > 0) {
                int third = (int)(3 * (tt - t0) / (t1 - t0));
                third = third > 2 ? 2 : third < 0 ? 0 : third;
                if (vv < fl[third]) fl[third] = vv;
                if (third == 0 && vv > top0) top0 = vv;
            }
        double g = v1 - v0;
        /* and the last third never comes down to what the first reached: a
         * footprint that rose after warm-up and then swung about a level
         * (variable shapes) is not growing */
        grew = isfinite(fl[0]) && isfinite(fl[1]) && isfinite(fl[2]) && fl[1] > fl[0] + 0.15 * g &&
               fl[2] > fl[0] + 0.4 * g && fl[2] > top0;
    }
    if (fired(r, "host_mem_growth", &t, m, sizeof(m)) && grew) {
        ev(d, "alert_host_mem_growth", t, "at %.0f s: %s", t, m);
        weak = 1;
    }
    if (fired(r, "gpu_mem_growth", &t, m, sizeof(m))) {
        ev(d, "alert_gpu_mem_growth", t, "at %.0f s: %s", t, m);
        weak = 1;
    }
    if (grew) weak = 1;
    if (!strong && !weak) return 0;
    fmt(d->id, sizeof(d->id), "memory-capacity");
    fmt(d->title, sizeof(d->title), "Memory capacity");
    /* a leak that persists outgrows any memory: ahead of a bare alert */
    d->score = strong ? 0.9 : grew ? 0.6 : 0.5;
    if (grew) {
        human_bytes(a, sizeof(a), v0);
        human_bytes(b, sizeof(b), v1);
        fmt(d->summary, sizeof(d->summary),
            "the process tree grew from %s after warm-up to %s and kept growing%s", a, b,
            strong ? "; memory ran short" : "");
        ev(d, "tree_rss_growth_bps", (v1 - v0) / (t1 - t0), "process-tree RSS grew from %s to %s",
           a, b);
        rec_lang(r, d,
                 "Find what grows every step: tensors kept across steps (e.g. summing `loss` "
                 "instead of `loss.item()`), lists of outputs, unbounded caches; "
                 "tracemalloc / torch.cuda.memory_snapshot() show the owners.",
                 "Find what grows every step: buffers allocated per step and never freed, "
                 "unbounded caches or queues; heaptrack or valgrind --tool=massif show the "
                 "owners.");
    } else {
        fmt(d->summary, sizeof(d->summary), "memory ran short during the run");
    }
    rec(d, "Reduce the memory per step: smaller batch with gradient accumulation to keep the "
           "effective batch, activation checkpointing, bf16/fp16 activations.");
    if (isfinite(c->swap_growth) && c->swap_growth > SWAP_GROWTH_BYTES)
        rec(d,
            "Swapping makes every step slower: keep the working set below physical memory "
            "(%s also cut host memory).",
            r->python ? "fewer DataLoader workers or a smaller prefetch_factor"
                      : "fewer loader processes or a shorter prefetch queue");
    return 1;
}

static int cand_throttle(const diag_run *r, const ctx *c, dfinding *d)
{
    double worst = 0;
    const dgpu *w = NULL;
    for (int i = 0; i < r->ngpu; i++) {
        const dgpu *g = &r->gpus[i];
        if (g->samples <= 0) continue;
        double s = g->slowdown_samples / g->samples;
        if (s > worst) worst = s, w = g;
    }
    if (!w || worst < THROTTLE_SHARE) return 0;
    diag_head(d, "throttling", "GPU throttling", 0.8 * worst,
                 "GPU %d ran with slowed clocks %.0f%% of the time (%s)", w->index, 100 * worst,
                 w->throttle_words);
    ev(d, "throttled_share", worst, "GPU %d clocks slowed in %.0f%% of samples: %s", w->index,
       100 * worst, w->throttle_words);
    if (w->temp.n)
        ev(d, "temp_max_c", w->temp.max, "GPU %d peaked at %.0f C", w->index, w->temp.max);
    if (w->power.n)
        ev(d, "power_mean_w", dstat_mean(&w->power), "GPU %d drew %.0f W on average", w->index,
           dstat_mean(&w->power));
    if (strstr(w->throttle_words, "thermal"))
        rec(d,
            "Thermal slowdown: check the cooling, fan curves and inlet temperature of this node.");
    if (strstr(w->throttle_words, "power"))
        rec(d, "Power limit: compare `nvidia-smi -q -d POWER` limits with the default; a lowered "
               "cap costs clock speed.");
    rec(d, "If only one node throttles, move the job or report the node; throttled GPUs also "
           "make the other ranks wait.");
    return 1;
}

/* System-wide I/O stalls count only when the watched tree itself reads:
 * PSI and iowait also rise for other jobs on a shared machine. When the
 * tree's reads are unknown (no /proc/PID/io), the system figures decide. */
static int io_evidence(const diag_run *r, const ctx *c)
{
    int stalls = (isfinite(c->iowait) && c->iowait >= IO_IOWAIT_PCT) ||
                 (isfinite(c->psi_io) && c->psi_io >= IO_PSI_PCT);
    if (!stalls) return 0;
    if (r->tree_read.n == 0) return 1;
    return dstat_mean(&r->tree_read) >= IO_TREE_READ_BPS;
}

static void add_io_evidence(const diag_run *r, const ctx *c, dfinding *d)
{
    char a[32];
    if (isfinite(c->iowait))
        ev(d, "cpu_iowait_pct", c->iowait, "CPU iowait averaged %.0f%%", c->iowait);
    if (isfinite(c->psi_io))
        ev(d, "psi_io_some_pct", c->psi_io, "tasks stalled on I/O %.0f%% of the time (PSI io some)",
           c->psi_io);
    if (r->tree_read.n) {
        human_bytes(a, sizeof(a), dstat_mean(&r->tree_read));
        ev(d, "tree_read_bps", dstat_mean(&r->tree_read), "the process tree read %s/s on average",
           a);
    }
}

/* How to load batches in n parallel loaders (more: "n or more"), in the
 * run's own terms. */
static const char *loaders(const diag_run *r, int n, int more, char *o, size_t on)
{
    if (r->python && strcmp(r->cause.framework, "hf") == 0)
        fmt(o, on, "TrainingArguments(dataloader_num_workers=%d)%s", n, more ? " or more" : "");
    else if (r->python)
        fmt(o, on, "DataLoader(num_workers=%d)%s", n, more ? " or more" : "");
    else if (r->trainer && r->trainer_workers > 0) {
        /* it already loads on threads: more of them */
        int w = 2 * r->trainer_workers > n ? 2 * r->trainer_workers : n;
        fmt(o, on, "%d%s background loaders (the bundled trainer: --workers %d; this run had %d)",
            w, more ? " or more" : "", w, r->trainer_workers);
    } else if (r->trainer)
        fmt(o, on, "%d%s background loaders (the bundled trainer: --workers %d)", n,
            more ? " or more" : "", n);
    else
        fmt(o, on, "%d%s background threads or processes feeding a bounded prefetch queue", n,
            more ? " or more" : "");
    return o;
}

/* What makes a loading line cheaper, from its text; collate: the line is
 * in a function that puts batches together, run once per batch. */
static const char *input_line_hint(const char *src, int collate)
{
    if (strstr(src, ".iloc") || strstr(src, ".loc[") || strstr(src, "iterrows") ||
        strstr(src, ".at["))
        return "a pandas row per sample is slow; convert the DataFrame once (df.to_numpy() or "
               "torch.tensor(df.values)) and index the array.";
    if (strstr(src, "Image.open") || strstr(src, "imread") || strstr(src, "decode") ||
        strstr(src, ".convert("))
        return "decode with a faster library (torchvision.io.decode_image, PIL-SIMD), or store "
               "the images decoded and resized ahead of training.";
    if (strstr(src, "tokeniz") || strstr(src, ".encode("))
        return "tokenise the dataset once ahead of training (datasets.map with batched=True) and "
               "load token ids.";
    if (strstr(src, "json") || strstr(src, "open(") || strstr(src, "read") ||
        strstr(src, "load("))
        return "read and parse once, ahead of training, into arrays (a NumPy memmap or tensors "
               "in memory).";
    if (strstr(src, "tensor(") || strstr(src, "np.array(") || strstr(src, "numpy.array("))
        return "a tensor built from Python lists is converted number by number; keep the "
               "samples as tensors or arrays ahead of training and put batches together with "
               "torch.stack or pad_sequence.";
    if (collate)
        return "the batch is put together in Python for every step in the training process; "
               "keep the samples as tensors and build the batch with whole-tensor ops "
               "(torch.stack, pad_sequence), or do the per-sample work once ahead of training.";
    return "it runs once per sample in the training process; do it once for the whole dataset "
           "ahead of training, or on the whole batch at once (a collate_fn or batched sampler).";
}

#define HANDOVER_MS 1.0 /* a DataLoader worker's cost to hand a batch over, about */

/* Loading in the training process (no workers) with no whole idle core:
 * loaders would still gain when the loading itself holds a core, since in
 * workers it overlaps the compute. Steps of D ms data and C ms compute on
 * t threads, over the k cores the run can have (its own use and the idle
 * ones), take about max(C, (D + C t) / k) + the handover;
 * worth saying from 1.3x (a short collate of 1.4 ms beside 1.6 ms of
 * 2-thread compute ran slower with workers here, a 27 ms decode beside 3.5
 * ms of compute 1.45x faster). */
static int loading_frees_a_core(const diag_run *r, const ctx *c, double *gain)
{
    /* the cores the run can have: its own and the idle ones (others'
     * work keeps the rest) */
    double d = c->f.data_p50, step = c->f.step_p50, k = c->tree_cpu / 100 + c->idle_cores;
    if (k > c->cpus) k = c->cpus;
    double t = r->cause.torch_threads > 0 ? r->cause.torch_threads : 1;
    if (!(d > 0) || !(step > d) || !(k >= 1.5)) return 0;
    if (t > k) t = k;
    double comp = step - d, par = (d + comp * t) / k;
    double next = (par > comp ? par : comp) + HANDOVER_MS;
    *gain = step / next;
    return *gain >= 1.3;
}

/* The fixes for an input-bound run, derived from the same figures the
 * evidence shows: whether the main process computes or waits while it loads,
 * the loaders already running and the idle cores (rounded as printed). */
static void input_recs(const diag_run *r, const ctx *c, dfinding *d)
{
    char l[160];
    double gain;
    double idle = c->idle_cores;
    int free_cores = isfinite(idle) ? count_of(floor(idle)) : -1;
    const char *what = r->python ? "worker processes" : "parallel";
    /* whether the run has, or is told to start, parallel loaders: the
     * advice on keeping them fed applies only then */
    int loaders_on = c->workers > 0 || r->trainer_workers > 0;
    /* workers handing over one or two samples at a time: the handover is
     * the batch's cost, whatever the cores */
    double per = r->steps > 0 && r->samples > 0 ? r->samples / r->steps : NAN;
    int tiny = c->workers > 0 && r->python && per <= 2;
    if (tiny)
        rec(d,
            "Batches of %.0f sample%s: each crosses from a worker to the training process on "
            "its own (pickled, sent, unpacked: about a millisecond). A larger batch_size (or a "
            "batch_sampler that groups samples) pays that once for many samples.",
            per, per < 1.5 ? "" : "s");
    if (c->workers <= 0 && isfinite(c->main_cpu) && c->main_cpu < MAIN_WAITS_CPU) {
        /* the loader waits (network, remote storage, locks, sleeps) rather
         * than computes: parallel loaders overlap the waits without cores */
        rec(d,
            "Load batches in parallel: %s. The main process used only %.0f%% CPU while "
            "waiting for data, so the wait is not computation and parallel loaders overlap it "
            "even on a busy machine.",
            loaders(r, 4, 1, l, sizeof(l)), c->main_cpu);
        loaders_on = 1;
    } else if (c->workers <= 0 && free_cores >= 1) {
        int nw = free_cores > 8 ? 8 : free_cores;
        rec(d,
            "Load batches in %s: %s. The main process ran at %.0f%% CPU%s while %.1f of %.0f "
            "cores were idle.",
            what, loaders(r, nw, 0, l, sizeof(l)), c->main_cpu,
            c->workers == 0 ? " with no worker processes" : "", idle, c->cpus);
        loaders_on = 1;
    } else if (c->workers > 0 && free_cores >= 1) {
        int to =
            c->workers * 2 <= c->workers + free_cores ? c->workers * 2 : c->workers + free_cores;
        if (r->python)
            rec(d,
                "Raise %s from %d to %d: the workers averaged %.0f%% CPU "
                "each and %.1f of %.0f cores were idle.",
                strcmp(r->cause.framework, "hf") == 0 ? "TrainingArguments(dataloader_num_workers)"
                                                      : "DataLoader num_workers",
                c->workers, to, isfinite(c->worker_cpu) ? c->worker_cpu : 0.0, idle, c->cpus);
        else
            rec(d,
                "Run more loaders: from %d to %d%s. The %d loader process%s averaged %.0f%% CPU "
                "each and %.1f of %.0f cores were idle.",
                c->workers, to, r->trainer ? " (the bundled trainer: --workers)" : "", c->workers,
                c->workers == 1 ? "" : "es", isfinite(c->worker_cpu) ? c->worker_cpu : 0.0, idle,
                c->cpus);
    } else if (c->workers == 0 && r->python && loading_frees_a_core(r, c, &gain)) {
        /* the training process loads at a core of its own: in workers the
         * loading runs on the core it leaves and on the idle part */
        rec(d,
            "Load batches in %s: %s. The training process loads them itself now, on one "
            "core, and the step waits (%.1f of %.1f ms); in workers the loading overlaps the "
            "step's compute on the core it leaves free and the %.1f of %.0f cores idle: up to "
            "about %.1fx the steps a second (a worker costs ~1 ms to hand a batch over).",
            what, loaders(r, 2, 0, l, sizeof(l)), c->f.data_p50, c->f.step_p50, idle, c->cpus,
            gain);
        loaders_on = 1;
    } else if (free_cores == 0 && !tiny) {
        /* no idle core: more loaders would take cores from the model */
        rec(d,
            "No whole core is idle (%.1f of %.0f cores idle on average): more loaders would compete "
            "with the model for cores. Make each batch cheaper instead (%s), or run where cores "
            "are free.",
            idle, c->cpus,
            r->python ? "move augmentation to the GPU, decode with a faster library, or "
                        "preprocess the dataset offline"
                      : "decode or augment with faster code, or preprocess the dataset offline");
    } else if (!tiny) {
        rec(d, "Load batches in parallel: %s, so the next batches load while a step computes.",
            loaders(r, 2, 0, l, sizeof(l)));
        loaders_on = 1;
    }
    if (c->has_gpu)
        rec(d, "%s",
            r->python ? "pin_memory=True in the DataLoader, and .to(device, non_blocking=True): "
                        "page-locked batches copy to the GPU asynchronously."
                      : "Copy batches to the GPU from page-locked host memory (cudaHostAlloc) "
                        "with cudaMemcpyAsync on a separate stream, so copies overlap compute.");
    if (!loaders_on) return;
    if (r->python) {
        int hf = strcmp(r->cause.framework, "hf") == 0;
        /* (not what the run already does) */
        if (!r->cause.loader_persistent)
            rec(d, "%s keeps the workers alive between epochs instead of "
                   "starting them again (and refilling their prefetch queues) every epoch.",
                hf ? "TrainingArguments(dataloader_persistent_workers=True)"
                   : "persistent_workers=True");
        if (!(r->cause.loader_prefetch >= 4))
            rec(d, "%s (default 2) gives each worker more batches in flight to absorb "
                   "slow samples.",
                hf ? "TrainingArguments(dataloader_prefetch_factor=4)" : "prefetch_factor=4");
    } else {
        rec(d, "Keep the loaders running across epochs, and let the queue hold 2-4 batches per "
               "loader to absorb slow samples.");
    }
}

/* Waiting for the DataLoader at every epoch's start: workers started again
 * for each iterator (persistent_workers off), slowly with spawn, which
 * imports the script's modules in each. A few steps, but a share of the
 * run like a steady wait. */
static int cand_epoch_starts(const diag_run *r, const ctx *c, dfinding *d)
{
    int n = 0;
    double mean = NAN, share = dc_epoch_start_cost(r, c->f.step_p50, &n, &mean);
    if (n < 2 || !(share >= INPUT_SHARE)) return 0;
    diag_head(d, "input-bound", "Input-bound at every epoch start", share,
                 "%s: %d epochs began with a %.0f ms step (the median is %.1f ms), %.0f%% of "
                 "training time",
                 "waiting for the DataLoader's workers to start", n, mean, c->f.step_p50,
                 100 * share);
    ev(d, "epoch_start_share", share, "%d epoch starts cost %.0f%% of training time", n,
       100 * share);
    ev(d, "data_wait_share", c->share[PH_DATA], "data wait is %.0f%% of step time",
       100 * c->share[PH_DATA]);
    if (c->workers >= 0 && r->cause.have_pyprof && r->cause.loader_iters > 0)
        ev(d, "worker_processes", c->workers, "%d DataLoader worker%s%s", c->workers,
           c->workers == 1 ? "" : "s",
           r->cause.loader_persistent ? "" : ", started again with every new iterator");
    rec_lang(r, d,
             "Keep the workers across epochs: DataLoader(persistent_workers=True) starts them "
             "once (with multiprocessing_context='spawn' or 'forkserver' each start imports the "
             "script's modules again, seconds per worker).",
             "Keep the loader threads or processes across epochs instead of starting them for "
             "each pass over the data.");
    rec(d, "Or make an epoch longer (fewer, larger passes), so the start-up is paid less often.");
    return 1;
}

/* `next(iter(loader))` in the step, or a DataLoader built inside the loop:
 * a new iterator (its sampler shuffled, its workers started, their queues
 * filled) for about every batch. The steps per training iterator, or 0. */
static double steps_per_iter(const diag_run *r)
{
    double it = r->cause.loader_train_iters;
    if (!r->cause.have_pyprof || !(it >= ITER_PER_STEP_MIN) || !(r->steps > 0)) return 0;
    double per = r->steps / it;
    return per <= ITER_PER_STEP_MAX ? per : 0;
}

/* A new iterator for about every batch: the wait for its first batch and
 * the start and stop of its workers (timed by the hook) are the loader's.
 * Either the script draws one batch of each iterator (`next(iter(loader))`)
 * or its epochs are that short (a dataset of one batch: full-batch
 * training through a DataLoader). */
static int cand_iter_per_step(const diag_run *r, const ctx *c, dfinding *d, double per)
{
    const dcause *rc = &r->cause;
    double cyc = rc->loader_train_cycle_s * 1e9 / r->sum_interval_ns;
    double s = c->share[PH_DATA] + (cyc > 0 ? cyc : 0);
    if (!(s >= INPUT_SHARE)) return 0;
    if (s > 1) s = 1;
    double epoch = rc->loader_train_batches / rc->loader_train_iters; /* batches */
    int whole = epoch > 0 && epoch <= per + 0.5; /* each iterator is used up */
    if (whole)
        diag_head(d, "input-bound", "Input-bound: an epoch every step", s,
                  "%s take %.0f%% of step time", "starting a DataLoader epoch of one or two "
                  "batches for each step and waiting for its first batch", 100 * s);
    else
        diag_head(d, "input-bound", "Input-bound: a new DataLoader iterator every step", s,
                  "%s take %.0f%% of step time", "starting a new DataLoader iterator for each "
                  "batch and waiting for its first batch", 100 * s);
    ev(d, "steps_per_iterator", per,
       "%.0f DataLoader iterators for %.0f steps: a new iterator every %.1f steps%s",
       rc->loader_train_iters, r->steps, per,
       whole ? ", each a whole epoch" : "");
    if (!whole && epoch > 0)
        ev(d, "batches_per_epoch", epoch, "each iterator could give %.0f batches", epoch);
    ev(d, "data_wait_share", c->share[PH_DATA], "data wait is %.0f%% of step time",
       100 * c->share[PH_DATA]);
    if (cyc > 0 && c->workers > 0)
        ev(d, "iterator_cycle_share", cyc,
           "starting and stopping the iterators' %d worker%s: %.0f%% of step time (%.1f ms "
           "each)",
           c->workers, c->workers == 1 ? "" : "s", 100 * cyc,
           1e3 * rc->loader_train_cycle_s / rc->loader_train_iters);
    if (whole) {
        if (c->workers > 0 && !rc->loader_persistent)
            rec(d, "persistent_workers=True: an epoch here is %.0f batch%s, so the %d workers "
                   "start and stop for every step without it.",
                epoch, epoch < 1.5 ? "" : "es", c->workers);
        rec(d, "A dataset of one or two batches fits in memory as tensors: build them once "
               "before the loop (on the GPU when there is one) and index them in the step, "
               "instead of a DataLoader that fetches and collates every sample again each "
               "step.");
        return 1;
    }
    rec(d, "Make one iterator and draw from it: `next(iter(loader))` (or a DataLoader built in "
           "the loop) starts a new iterator for every batch%s. Loop `for batch in loader:`, or "
           "create `it = iter(loader)` before the loop, call `next(it)` in the step and make a "
           "new one only at StopIteration (the end of an epoch).",
        c->workers > 0 ? ": its workers start, prefetch before the first batch comes, and stop "
                         "again"
                       : ", shuffling the whole index again");
    return 1;
}

static int cand_input(const diag_run *r, const ctx *c, dfinding *d)
{
    double s = c->share[PH_DATA], per = steps_per_iter(r);
    if (c->steps_ok && per > 0 && r->sum_interval_ns > 0) return cand_iter_per_step(r, c, d, per);
    if (!c->steps_ok || !(s >= INPUT_SHARE)) return 0;
    /* the wait must be the run's steady state, not a few slow batches (an
     * epoch's worker start-up, one slow read): with the steps that waited
     * longest left out, the rest still wait that share (when a zero-code
     * or steps.csv replay measured it per step) */
    int ntrim = 0;
    double steady = dc_steady_data_share(r, &ntrim);
    if (isfinite(steady) && !(steady >= INPUT_SHARE)) return cand_epoch_starts(r, c, d);
    double score = isfinite(steady) && steady < s ? steady : s;
    int io = io_evidence(r, c);
    diag_head(d, io ? "storage-io" : "input-bound", io ? "Storage I/O" : "Input-bound", score,
                 "%s takes %.0f%% of step time%s", "waiting for the next batch", 100 * s,
                 io ? ", and the data comes slowly off storage" : "");
    ev(d, "data_wait_share", s, "data wait is %.0f%% of step time", 100 * s);
    if (isfinite(steady) && ntrim > 0)
        ev(d, "steady_data_wait_share", steady,
           "%.0f%% without the %d steps that waited longest: every step waits, not a few", 100 * steady,
           ntrim);
    if (isfinite(c->f.data_p50) && isfinite(c->f.step_p50))
        ev(d, "data_wait_p50_ms", c->f.data_p50, "median data wait %.1f ms per step of %.1f ms",
           c->f.data_p50, c->f.step_p50);
    if (isfinite(c->main_cpu))
        ev(d, "main_cpu_pct", c->main_cpu, "main process CPU %.0f%% of one core", c->main_cpu);
    if (c->workers >= 0 && r->cause.have_pyprof && r->cause.loader_iters > 0)
        ev(d, "worker_processes", c->workers,
           "%d DataLoader worker%s at once%s", c->workers, c->workers == 1 ? "" : "s",
           r->nworkers > c->workers && !r->cause.loader_persistent
               ? " (started again with every new iterator: persistent_workers is off)"
               : "");
    else if (c->workers >= 0)
        ev(d, "worker_processes", c->workers, "%d %s process%s in the tree%s", c->workers,
           r->python ? "worker" : "child", c->workers == 1 ? "" : "es",
           r->nworkers > c->workers ? " at once (more were started and ended over the run)"
                                    : "");
    if (isfinite(c->idle_cores))
        ev(d, "idle_cores", c->idle_cores, "%.1f of %.0f cores idle on average", c->idle_cores,
           c->cpus);
    if (io) add_io_evidence(r, c, d);
    /* loading in the training process: the samples name the line it
     * spends the wait in (a pandas row, a decode, a parse, a tokenizer) */
    const dc_func *lf = NULL;
    const char *lsrc = NULL;
    double lsh = 0;
    if (r->python && c->workers <= 0 && dc_input_line(&r->cause, &lf, &lsrc, &lsh)) {
        ev(d, "input_line_share", lsh, "%.0f%% of the samples waiting for data were in %s (%s:%d)%s%s%s", 100 * lsh,
           lf->func, lf->file, lf->line, *lsrc ? ": `" : "", lsrc, *lsrc ? "`" : "");
        rec(d, "Make %s:%d cheaper, the line the wait is spent in: %s", lf->file, lf->line,
            input_line_hint(lsrc, strstr(lf->func, "collate") != NULL));
    }

    if (io) {
        rec(d,
            "Read the data from faster storage: copy the dataset to local NVMe or RAM (/dev/shm) "
            "before training, or cache decoded samples.");
        rec_lang(r, d,
                 "Overlap reading with compute: more DataLoader workers (num_workers) and "
                 "prefetch_factor, so reads are in flight while the model runs.",
                 "Overlap reading with compute: read ahead on background threads or processes "
                 "into a bounded queue, so reads are in flight while the model runs.");
        rec(d, "Fewer, larger reads: pack small files into shards (WebDataset, TFRecord, "
               "numpy memmap).");
        return 1;
    }
    input_recs(r, c, d);
    return 1;
}

/* The head of a rule on one phase's share of step time; 0 when the share
 * is below thr (or too few steps). */
static int phase_rule(const ctx *c, dfinding *d, int ph, double thr, const char *id,
                      const char *title, const char *doing, const char *of)
{
    double s = c->share[ph];
    if (!c->steps_ok || !(s >= thr)) return 0;
    diag_head(d, id, title, s, "%s takes %.0f%% of %s", doing, 100 * s, of);
    char nm[40];
    fmt(nm, sizeof(nm), "%s_share", diag_phase_names[ph]);
    ev(d, nm, s, "%s phases are %.0f%% of step time", diag_phase_names[ph], 100 * s);
    return 1;
}

static int cand_storage_ckpt(const diag_run *r, const ctx *c, dfinding *d)
{
    if (!phase_rule(c, d, PH_CHECKPOINT, CKPT_SHARE, "storage-io", "Storage I/O (checkpoints)",
                    "checkpointing", "the run's step time"))
        return 0;
    add_io_evidence(r, c, d);
    rec(d, "Checkpoint less often, or asynchronously (torch.distributed.checkpoint async_save, "
           "or copy the state to host memory and write it from a thread).");
    rec(d, "Write checkpoints to local disk first and copy them off the node in the background.");
    return 1;
}

/* A model sharded by FSDP whose whole training state fits on every rank
 * many times over: DDP's one all-reduce a step replaces an all-gather per
 * layer in forward and backward and a reduce-scatter. The state per rank
 * unsharded (parameters and gradients at 4 bytes, two fp32 optimizer
 * moments) over the memory a rank has (its GPU's, or the host's shared by
 * the ranks on it); NAN when unknown. */
static double fsdp_state_share(const diag_run *r, double *state, double *mem)
{
    const dcause *k = &r->cause;
    double procs = k->nprocs_py > 0 ? k->nprocs_py : 1;
    *state = k->params_all / procs * 16.0;
    *mem = NAN;
    for (int i = 0; i < r->ngpu; i++)
        if (r->gpus[i].mem_total > 0 && !(r->gpus[i].mem_total >= *mem))
            *mem = r->gpus[i].mem_total; /* the smallest GPU's */
    if (!(*mem > 0) && r->mem_total.n) {
        int nodes = r->nnodes > 1 ? r->nnodes : 1;
        *mem = r->mem_total.max / (procs / nodes);
    }
    return *state > 0 && *mem > 0 ? *state / *mem : NAN;
}

static int cand_comm(const diag_run *r, const ctx *c, dfinding *d)
{
    if (!phase_rule(c, d, PH_COMM, COMM_SHARE, "communication", "Communication",
                    "collective communication", "step time"))
        return 0;
    if (r->sf.ngroups > 1) ev(d, "ranks", r->sf.ngroups, "%d ranks", r->sf.ngroups);
    rr_overlap_t ov;
    if (rr_overlap(r, &ov))
        ev(d, "comm_exposed_ms", ov.exposed_ms,
           "per rank and step: %.1f ms of collectives in flight, %.1f ms exposed, %.1f ms "
           "overlapped with compute",
           ov.busy_ms, ov.exposed_ms, ov.overlapped_ms);
    char fsdp[600], unused[600];
    /* DDP's search for unused parameters: first when some never got a
     * gradient (their all-reduce is waste too), else after the rest */
    int lead = dc_ddp_unused_advice(r, unused, sizeof(unused)) == 2;
    if (lead) rec(d, "%s", unused);
    rr_fsdp_advice(r, fsdp, sizeof(fsdp));
    double state = NAN, mem = NAN, fits = fsdp[0] ? fsdp_state_share(r, &state, &mem) : NAN;
    if (fits <= FSDP_FITS_SHARE) {
        char a[32], b[32];
        human_bytes(a, sizeof(a), state);
        human_bytes(b, sizeof(b), mem);
        ev(d, "fsdp_state_share", fits,
           "the whole training state (parameters, gradients, two optimizer moments: about %s) "
           "is %.1f%% of the %s a rank has",
           a, 100 * fits, b);
        rec(d, "This model does not need sharding: its whole training state (about %s) fits on "
               "every rank. DistributedDataParallel sends one all-reduce of the gradients a step, "
               "overlapped with the backward, instead of an all-gather per layer in forward and "
               "backward and a reduce-scatter (a 1.6M-parameter MLP on 2 ranks over gloo: 79.5 ms "
               "a step under FSDP, 25.9 ms under DDP); or keep FSDP with "
               "reshard_after_forward=False (60.5 ms).",
            a);
    }
    if (fsdp[0]) rec(d, "%s", fsdp);
    if (fsdp[0]) {
        /* FSDP: the all-reduce advice below is DDP's */
    } else if (r->python) {
        rec(d, "Overlap gradients' all-reduce with the backward pass (DDP does so by bucket: "
               "tune bucket_cap_mb) and avoid synchronising calls in the step.");
        rec(d, "%s", r->cause.ddp_no_sync
                         ? "Communicate less often: accumulate more micro-batches under no_sync() "
                           "per optimizer step (the run already skips the all-reduce of some)."
                         : "Communicate less often: gradient accumulation with no_sync() on the "
                           "inner steps.");
    } else {
        rec(d, "Overlap gradients' all-reduce with the backward pass: start it per bucket of "
               "layers on its own stream as their gradients are ready.");
        rec(d, "Communicate less often: accumulate gradients over several micro-batches before "
               "each all-reduce.");
    }
    if (unused[0] && !lead) rec(d, "%s", unused);
    rec(d, "Check the interconnect: NCCL_DEBUG=INFO shows whether NVLink/InfiniBand are used "
           "or traffic falls back to TCP sockets.");
    return 1;
}

/* The straggler's work per step against the other ranks': samples (or,
 * with as many samples, tokens) a step. The ratio, or NAN when the steps
 * carry no such counts; *what names the count, *mine and *others its means. */
static double rank_load(const diag_run *r, int rank, const char **what, double *mine,
                        double *others)
{
    for (int k = 0; k < 2; k++) {
        double m = NAN, o = 0;
        int no = 0;
        for (int i = 0; i < r->sf.ngroups; i++) {
            const agg_group *g = r->sf.groups[i];
            if (!g->count || g->rank < 0) continue;
            double per = (double)(k ? g->tokens : g->samples) / (double)g->count;
            if (g->rank == rank) m = per;
            else o += per, no++;
        }
        if (!(m > 0) || !no || !(o > 0)) continue;
        o /= no;
        double ratio = m / o;
        if (k == 0 && fabs(ratio - 1) < 0.05) continue; /* the same batches: try tokens */
        *what = k ? "tokens" : "samples";
        *mine = m, *others = o;
        return ratio;
    }
    return NAN;
}

/* Evidence and the first fix when the straggler's steps carry more work. */
static void rank_load_advice(const diag_run *r, dfinding *d, int rank)
{
    const char *what = "";
    double mine = NAN, others = NAN, load = rank_load(r, rank, &what, &mine, &others);
    if (!(load >= STRAGGLER_LOAD)) return;
    ev(d, "straggler_load_ratio", load,
       "rank %d's steps carry %.0f %s each, the other ranks' %.0f on average (%.1fx)", rank,
       mine, what, others, load);
    rec(d, "Give every rank the same work per step: rank %d trains on %.1fx the %s of the others "
           "(%s), and synchronous training waits for the largest. Check the per-rank batch size "
           "and how the sampler splits the data%s.",
        rank, load, what,
        what[0] == 's' ? "a batch size set per rank or a sampler that splits unevenly"
                       : "longer sequences on that rank",
        what[0] == 't' ? ", and bucket the samples by length across ranks" : "");
}

/* Work only the straggler does, where the samples of its training thread
 * show it: evidence and the first recommendation. */
static void rank_only_work(const diag_run *r, dfinding *d, int rank)
{
    const dc_func *f;
    const char *src;
    double mine, others;
    if (!dc_rank_only_line(&r->cause, rank, &f, &src, &mine, &others)) return;
    int q = src[0] != 0;
    ev(d, "rank_only_share", mine,
       "rank %d spends %.0f%% of its samples at %s:%d%s%s%s (in %s), the other ranks %.0f%%", rank,
       100 * mine, f->file, f->line, q ? " `" : "", src, q ? "`" : "", f->func, 100 * others);
    rec(d,
        "Rank %d alone spends %.0f%% of its time at %s:%d%s%s%s: share that work across the "
        "ranks, run it every N steps, or move it off the training step (another process, after "
        "training).",
        rank, 100 * mine, f->file, f->line, q ? " (`" : "", src, q ? "`)" : "");
}

/* The rank the others wait for in collectives (synchronous training evens
 * the step times out, so their medians cannot show it). */
static int cand_waited_for(const diag_run *r, dfinding *d)
{
    rr_strag s;
    if (!rr_straggler(r, &s)) return 0;
    char why[320];
    rr_evidence(r, why, sizeof(why));
    fmt(d->id, sizeof(d->id), "straggler");
    fmt(d->title, sizeof(d->title), "Straggler");
    fmt(d->summary, sizeof(d->summary),
        "the other ranks wait %.1f ms a step (%.0f%% of step time) for rank %d, which spends "
        "it in its own %s",
        s.gap_ms, 100 * s.share, s.rank, s.loader ? "data loader" : "step");
    d->score = s.share + 0.3 > 0.9 ? 0.9 : s.share + 0.3;
    ev(d, "straggler_rank", s.rank, "%s", why);
    ev(d, "others_comm_wait_ms", s.others_wait_ms,
       "the other ranks wait %.1f ms a step in %s, rank %d %.1f ms", s.others_wait_ms, s.op, s.rank,
       s.own_wait_ms);
    if (s.loader) {
        ev(d, "extra_data_wait_ms", s.extra_data_ms, "rank %d waits %.1f ms a step more for data",
           s.rank, s.extra_data_ms);
        rec(d,
            "Speed up rank %d's input: more DataLoader workers (num_workers), pinned memory, "
            "prefetching; check its shard's storage and sample sizes.",
            s.rank);
    } else {
        ev(d, "extra_compute_ms", s.extra_compute_ms, "rank %d computes %.1f ms a step more",
           s.rank, s.extra_compute_ms);
        rank_load_advice(r, d, s.rank);
        rank_only_work(r, d, s.rank);
        rec(d,
            "Look at rank %d: its device clocks and temperature, other work on its host or CPU "
            "cores, work only it does (logging, checkpointing, evaluation on rank 0), uneven "
            "shards or sample lengths.",
            s.rank);
    }
    rec(d, "Balance the work across ranks: equal-sized shards, samples bucketed by length.");
    return 1;
}

static int cand_straggler(const diag_run *r, const ctx *c, dfinding *d)
{
    if (cand_waited_for(r, d)) return 1;
    double p[DIAG_MAX_RANKS];
    int n = 0, slow = -1;
    double worst = 0;
    for (int i = 0; i < r->sf.ngroups && n < DIAG_MAX_RANKS; i++) {
        const agg_group *g = r->sf.groups[i];
        if (g->rank < 0 || g->step_ns.count < MIN_STEPS) continue;
        p[n++] = sketch_quantile(&g->step_ns, 0.5) / 1e6;
    }
    if (n < 2) return 0;
    /* median of the ranks' medians */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && p[j] < p[j - 1]; j--) {
            double t = p[j];
            p[j] = p[j - 1];
            p[j - 1] = t;
        }
    double med = n % 2 ? p[n / 2] : (p[n / 2 - 1] + p[n / 2]) / 2;
    for (int i = 0; i < r->sf.ngroups; i++) {
        const agg_group *g = r->sf.groups[i];
        if (g->rank < 0 || g->step_ns.count < MIN_STEPS) continue;
        double q = sketch_quantile(&g->step_ns, 0.5) / 1e6;
        if (q > worst) worst = q, slow = g->rank;
    }
    double ratio = med > 0 ? worst / med : NAN;
    if (!(ratio >= STRAGGLER_RATIO)) return 0;
    fmt(d->id, sizeof(d->id), "straggler");
    fmt(d->title, sizeof(d->title), "Straggler");
    fmt(d->summary, sizeof(d->summary), "rank %d is %.0f%% slower than the median rank", slow,
        100 * (ratio - 1));
    /* every rank waits for the slowest at each collective, so a straggler
     * limits the whole job: weighted above its bare slowdown */
    d->score = ratio - 1 + 0.3 > 0.9 ? 0.9 : ratio - 1 + 0.3;
    ev(d, "slowest_rank", slow, "rank %d median step %.1f ms vs %.1f ms across ranks", slow, worst,
       med);
    (void)c;
    rank_load_advice(r, d, slow);
    rank_only_work(r, d, slow);
    rec(d,
        "Look at rank %d's node: GPU clocks and temperature, other jobs on the host, its "
        "data shard (uneven shard sizes or sample lengths).",
        slow);
    rec(d, "Balance the work: bucket samples by length, or give every rank equal-sized shards.");
    return 1;
}

static int cand_host(const diag_run *r, const ctx *c, dfinding *d)
{
    if (!c->has_gpu || !c->samples_ok || !(c->gpu_util < HOST_GPU_UTIL)) return 0;
    if (isfinite(c->share[PH_DATA]) && c->share[PH_DATA] >= INPUT_SHARE) return 0;
    int busy = isfinite(c->main_cpu) && c->main_cpu >= HOST_MAIN_CPU;
    fmt(d->id, sizeof(d->id), "host-bound");
    fmt(d->title, sizeof(d->title), "Host/launch-bound");
    if (busy)
        fmt(d->summary, sizeof(d->summary),
            "the GPU is busy only %.0f%% of the time while the main process keeps one core at "
            "%.0f%%",
            c->gpu_util, c->main_cpu);
    else
        fmt(d->summary, sizeof(d->summary), "the GPU is busy only %.0f%% of the time", c->gpu_util);
    d->score = (1 - c->gpu_util / 100) * (busy ? 0.8 : 0.5);
    ev(d, "gpu_util_pct", c->gpu_util, "GPU utilisation averaged %.0f%%", c->gpu_util);
    if (isfinite(c->main_cpu))
        ev(d, "main_cpu_pct", c->main_cpu, "main process CPU %.0f%% of one core", c->main_cpu);
    if (isfinite(c->share[PH_DATA]))
        ev(d, "data_wait_share", c->share[PH_DATA], "data wait only %.0f%% of step time",
           100 * c->share[PH_DATA]);
    if (r->python) {
        rec(d, "Launch fewer, larger kernels: torch.compile (mode=\"reduce-overhead\" adds CUDA "
               "graphs), fused optimizers (fused=True), larger batches.");
        rec(d, "Remove host-device synchronisations from the step: .item(), .cpu(), printing "
               "tensors, torch.cuda.synchronize(); log every N steps instead.");
        rec(d, "Profile a few steps (`trainperf run --profile` or torch.profiler) and look for "
               "gaps between kernels (`trainperf analyze`).");
    } else {
        rec(d, "Launch fewer, larger kernels: fuse small kernels, capture the step in a CUDA "
               "graph, larger batches.");
        rec(d, "Remove host-device synchronisations from the step: cudaDeviceSynchronize, "
               "blocking cudaMemcpy, reading results back every step; log every N steps instead.");
        rec(d, "Profile a few steps (Nsight Systems: nsys profile) and look for gaps between "
               "kernels.");
    }
    return 1;
}

/* The hang alert fired after the last step and the program then ended by
 * itself with status 0: it finished its loop and spent the time after it
 * (tear-down, a final evaluation or save), it did not hang. */
static int ended_after_loop(const diag_run *r, double alert_t)
{
    return r->exit_known && r->exit_code == 0 && r->exit_signal <= 0 &&
           isfinite(r->last_end_s) && r->last_end_s < alert_t;
}

static int by_start(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The steps past the warm-up slower than UNSTABLE_TAIL x the median among
 * the slowest kept; *episodes the runs they form: slow steps that follow
 * each other within two median steps are one episode; *all whether every
 * step kept was that slow. */
static int slow_episodes(const diag_run *r, double p50_ms, int *episodes, int *all,
                         double *excess_ms)
{
    double start[DC_MAX_SLOW][2];
    int n = 0;
    *all = r->cause.nslow == DC_MAX_SLOW;
    *excess_ms = 0;
    for (int i = 0; i < r->cause.nslow && i < DC_MAX_SLOW; i++) {
        if (!(r->cause.slow[i].ms > UNSTABLE_TAIL * p50_ms)) *all = 0;
        else if (r->cause.slow[i].step >= DC_WARM_STEPS) {
            start[n][0] = r->cause.slow[i].start;
            start[n][1] = r->cause.slow[i].end;
            *excess_ms += r->cause.slow[i].ms - p50_ms;
            n++;
        }
    }
    qsort(start, (size_t)n, sizeof(start[0]), by_start);
    int e = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || !(start[i][0] - start[i - 1][1] <= 2 * p50_ms / 1e3)) e++;
    *episodes = e;
    return n;
}

static int cand_unstable(const diag_run *r, const ctx *c, dfinding *d)
{
    double t;
    char m[256];
    int hang = fired(r, "hang", &t, m, sizeof(m)) && !ended_after_loop(r, t);
    double tail = isfinite(c->f.step_p99) && c->f.step_p50 > 0 ? c->f.step_p99 / c->f.step_p50 : NAN;
    /* variance needs more than one or two outliers (a warm-up step, one
     * slow batch): a CV carried by a tail that reaches p95, or a p99 tail
     * made of several slow steps (p99 of a short run is its slowest step) */
    double n = (double)r->sf.step_ns.count;
    double p95r = isfinite(c->f.step_p95) && c->f.step_p50 > 0 ? c->f.step_p95 / c->f.step_p50 : NAN;
    int episodes = 0, all = 0;
    double excess = 0;
    int nslow = slow_episodes(r, c->f.step_p50, &episodes, &all, &excess);
    /* (the slowest DC_MAX_SLOW are kept: all of them slow is many); and
     * spread over the run: one burst of slow steps in a row is one event
     * (another job took the cores for a moment), a spike, not instability;
     * and costing a share of the run: a dozen 5 ms spikes among a thousand
     * 1.5 ms steps (a progress bar redrawn, the machine's own jitter) are
     * 4% of it, not what holds the training back */
    int many = nslow >= UNSTABLE_MIN_SLOW && (nslow >= 0.01 * n || all) &&
               episodes >= UNSTABLE_MIN_SLOW &&
               (all || !(r->sum_interval_ns > 0) ||
                excess >= UNSTABLE_EXCESS * r->sum_interval_ns / 1e6);
    /* (the CV without the slowest 1%: two slow steps after warm-up make a
     * large CV on their own) */
    double tcv = dc_trimmed_cv(r);
    int noisy = n >= 10 && ((isfinite(c->f.step_cv) && c->f.step_cv >= UNSTABLE_CV &&
                             (!isfinite(tcv) || tcv >= UNSTABLE_CV) &&
                             isfinite(p95r) && p95r >= UNSTABLE_P95) ||
                            (isfinite(tail) && tail >= UNSTABLE_TAIL && many));
    double tr;
    char mr[256];
    int regress = fired(r, "step_regression", &tr, mr, sizeof(mr));
    if (!hang && !noisy && !regress) return 0;
    fmt(d->id, sizeof(d->id), "unstable");
    fmt(d->title, sizeof(d->title), hang ? "Unstable: steps stopped" : "Unstable step time");
    if (hang) {
        if (isfinite(r->last_end_s))
            fmt(d->summary, sizeof(d->summary),
                "no step completed after %.1f s; the hang alert fired at %.0f s (possible hang)",
                r->last_end_s, t);
        else
            fmt(d->summary, sizeof(d->summary), "step progress stopped (hang alert at %.0f s)", t);
        /* a run that stopped progressing is held back by nothing else */
        d->score = 1.0;
        ev(d, "hang_t", t, "at %.0f s: %s", t, m);
        if (isfinite(r->last_end_s))
            ev(d, "last_step_end_s", r->last_end_s, "last step ended at %.1f s of %.1f s",
               r->last_end_s, r->duration_s);
        rec(d, "Find where it waits: `py-spy dump --pid PID` (Python) or `gdb -p PID -batch -ex "
               "'thread apply all bt'` on the stuck process.");
        rec(d, "Distributed runs: a rank that died or skipped a collective leaves the others "
               "waiting; NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1 turn hangs into "
               "errors.");
        if (r->python)
            rec(d, "DataLoader workers that deadlock (e.g. after fork with threads) stop the "
                   "input: try multiprocessing_context='spawn' or num_workers=0 to confirm.");
        return 1;
    }
    fmt(d->summary, sizeof(d->summary), "step time varies: p99 %.1f ms is %.1fx the median %.1f ms",
        c->f.step_p99, tail, c->f.step_p50);
    d->score = noisy ? (isfinite(c->f.step_cv) && c->f.step_cv / 2 < 0.6 ? c->f.step_cv / 2 : 0.6) : 0.3;
    if (d->score < 0.2) d->score = 0.2;
    if (isfinite(c->f.step_cv)) ev(d, "step_time_cv", c->f.step_cv, "coefficient of variation %.2f", c->f.step_cv);
    if (isfinite(tail)) ev(d, "p99_over_p50", tail, "p99/p50 = %.1f", tail);
    if (regress) ev(d, "step_regression_t", tr, "at %.0f s: %s", tr, mr);
    /* name the measured cause of the slowest steps; one-off causes
     * (compiling, epoch boundaries) are not instability of the training */
    double oneoff = dc_explain_variability(r, d, c->f.step_p50);
    if (oneoff >= 0.5 && !regress) {
        fmt(d->id, sizeof(d->id), "step-spikes");
        fmt(d->title, sizeof(d->title), "A few slow steps");
        fmt(d->summary, sizeof(d->summary),
            "the slowest steps (p99 %.1f ms, median %.1f ms) are one-off events: compiling or "
            "epoch boundaries",
            c->f.step_p99, c->f.step_p50);
        d->score = 0.05;
    }
    /* steps that do more work take longer: batches of varying length
     * (dynamic padding, bucketing) or size; the time follows the work */
    double wcv = NAN, corr = dc_work_corr(r, &wcv);
    if (!regress && strcmp(d->id, "unstable") == 0 && corr >= WORK_CORR &&
        wcv >= WORK_CV) {
        int tok = r->cause.wk_tokens;
        fmt(d->id, sizeof(d->id), "variable-work");
        fmt(d->title, sizeof(d->title), "Step time follows the %s per step",
            tok ? "tokens" : "samples");
        fmt(d->summary, sizeof(d->summary),
            "steps vary with their batches' %s (%.0f to %.0f a step; correlation %.2f): the "
            "work per step varies, the training is not unstable",
            tok ? "tokens" : "samples", r->cause.wk_min, r->cause.wk_max, corr);
        d->score = 0.05;
        ev(d, "work_time_corr", corr, "step time against %s per step: correlation %.2f",
           tok ? "tokens" : "samples", corr);
        ev(d, "work_cv", wcv, "%s per step vary (coefficient of variation %.2f)",
           tok ? "tokens" : "samples", wcv);
        rec(d, "Nothing to fix for throughput: compare runs by %s/s, not steps/s.",
            tok ? "tokens" : "samples");
        rec(d, "For steadier steps (fewer allocator and, on GPUs, compile and cuDNN-tuning "
               "costs), bucket sequences by length or pad to a few fixed lengths.");
        return 1;
    }
    long long period = 0, first = 0;
    int nper = 0;
    double per_ms = 0;
    if (oneoff < 0.5 && !regress &&
        dc_periodic(r, c->f.step_p50, &period, &nper, &per_ms, &first)) {
        /* work the loop does every N steps (histograms, an evaluation or a
         * save left inside the step, gc.collect()): regular, not unstable.
         * Its cost: the excess of one such step over the median, once a
         * period, against the mean step */
        double mean = n > 0 && r->sum_interval_ns > 0 ? r->sum_interval_ns / 1e6 / n : NAN;
        double lost = isfinite(mean) && mean > 0 ? (per_ms - c->f.step_p50) / (period * mean) : NAN;
        fmt(d->id, sizeof(d->id), "step-spikes");
        fmt(d->title, sizeof(d->title), "A slow step every %lld steps", period);
        fmt(d->summary, sizeof(d->summary),
            "every %lld steps (from step %lld) a step takes %.1f ms, %.1fx the median %.1f ms: "
            "periodic work in the loop%s",
            period, first, per_ms, per_ms / c->f.step_p50, c->f.step_p50,
            isfinite(lost) ? "" : " (its cost not known)");
        d->score = isfinite(lost) && lost >= 0.1 ? (lost < 0.6 ? lost : 0.6) : 0.05;
        ev(d, "period_steps", (double)period, "%d of the slowest steps fall every %lld steps",
           nper, period);
        if (isfinite(lost))
            ev(d, "periodic_share", lost, "those steps cost %.1f%% of training time", 100 * lost);
        rec(d, "Find what the loop does every %lld steps (logging histograms or images, an "
               "evaluation, a save, gc.collect()): do it less often, or off the training thread.",
            period);
    }
    /* steady steps whose level moved: LBFGS doing fewer evaluations as
     * it converges, layers unfrozen after a few epochs, a curriculum */
    double loc, lo, hi, l0, l1;
    if (!regress && strcmp(d->id, "unstable") == 0 && dc_level_shift(r, &loc, &lo, &hi, &l0, &l1)) {
        diag_head(d, "step-level", "Step time changed during the run", 0.05,
                  "steps are steady from one to the next, but their floor moved between %.1f "
                  "and %.1f ms (%.1f ms at the start, %.1f ms at the end): the work per step "
                  "changed, the training is not unstable",
                  lo, hi, l0, l1);
        ev(d, "step_to_step_cv", loc, "step-to-step variation %.2f of the mean step", loc);
        ev(d, "level_ratio", hi / lo,
           "highest floor %.1fx the lowest (fastest steps of each eighth of the run)", hi / lo);
        rec(d, "Nothing to fix if the loop changes its work on purpose (a schedule, layers "
               "unfrozen, an optimizer that converges in fewer evaluations); compare runs over "
               "the same phase.");
        rec(d, "Otherwise find what changed at the step the level moved (steps.csv, or the "
               "timeline in trace.json).");
        return 1;
    }
    rec(d, "Look at the slow steps on the timeline (trace.json in Perfetto): periodic evaluation, "
           "checkpoints, logging or garbage collection show up as regular spikes.");
    if (!r->cause.have_pyprof && !nper) {
        /* nothing measured the causes (not a zero-code Python run) */
        if (r->python)
            rec(d, "Python's GC pauses (not measured in this run): gc.freeze() after start-up "
                   "makes them rarer.");
        rec(d, "Variable-size inputs (sequence lengths) vary the step time: bucket or pad to "
               "fixed sizes.");
    }
    return 1;
}

/* the compute share's evidence; ops: its part in tensor ops outside phases */
static void compute_ev(dfinding *d, double compute, double ops)
{
    if (ops >= 0.005)
        ev(d, "compute_share", compute,
           "model compute %.0f%% of step time: forward + backward + optimizer %.0f%%, tensor "
           "ops outside the model %.0f%% (sampled stacks)",
           100 * compute, 100 * (compute - ops), 100 * ops);
    else
        ev(d, "compute_share", compute, "forward + backward + optimizer %.0f%% of step time",
           100 * compute);
}

/* A model trained in float64 computes at half float32's rate on CPUs (and a
 * small fraction of it on most GPUs): the first change for a compute-bound
 * run, where the model does not need the precision. */
static void f64_rec(const diag_run *r, dfinding *d)
{
    double f = dc_f64_share(r);
    if (!(f >= 0.5)) return;
    ev(d, "params_float64_share", f, "%.0f%% of the model's parameters are float64", 100 * f);
    rec(d, "Train in float32 unless the model needs float64: model.float() and float32 inputs "
           "(or torch.set_default_dtype(torch.float32)); float64 arithmetic runs at half the "
           "float32 rate on CPUs and far less on most GPUs.");
}

static void healthy(const diag_run *r, const ctx *c, dfinding *d)
{
    fmt(d->id, sizeof(d->id), "compute-bound");
    d->score = 0;
    if (c->has_gpu) {
        fmt(d->title, sizeof(d->title), "GPU-compute-bound (healthy)");
        fmt(d->summary, sizeof(d->summary),
            "the GPU is busy %.0f%% of the time; no input, host or "
            "memory limit found",
            c->gpu_util);
        ev(d, "gpu_util_pct", c->gpu_util, "GPU utilisation averaged %.0f%%", c->gpu_util);
        if (isfinite(c->share[PH_DATA]))
            ev(d, "data_wait_share", c->share[PH_DATA], "data wait %.0f%% of step time",
               100 * c->share[PH_DATA]);
        f64_rec(r, d);
        if (r->python) {
            const dcause *k = &r->cause;
            int amp = k->amp_bf16 || k->amp_f16, comp = k->compile_frames > 0;
            rec(d, "Do less work per sample: %s%sfused/foreach optimizers, flash attention "
                   "(scaled_dot_product_attention)%s.",
                amp ? "" : "bf16 autocast, ", comp ? "" : "torch.compile, ",
                amp && comp ? " (the run already uses autocast and torch.compile)"
                : amp       ? " (the run already uses autocast)"
                : comp      ? " (the run already uses torch.compile)"
                            : "");
        } else {
            rec(d, "Do less work per sample: bf16/fp16 matrix multiplies on tensor cores, fused "
                   "kernels, flash attention.");
        }
        double head = NAN;
        for (int i = 0; i < r->ngpu; i++)
            if (r->gpus[i].mem_used.n && r->gpus[i].mem_total > 0) {
                double h = r->gpus[i].mem_total - r->gpus[i].mem_used.max;
                if (isnan(head) || h < head) head = h;
            }
        if (isfinite(head) && head > 0.25 * r->gpus[0].mem_total) {
            char a[32];
            human_bytes(a, sizeof(a), head);
            rec(d, "%s of GPU memory stayed free: a larger batch may raise throughput.", a);
        }
        return;
    }
    /* no verdict without positive evidence: compute-bound needs the step
     * to be mostly model compute (forward, backward, optimizer) */
    /* over the warm steps: a first step spent starting loader workers or
     * compiling is not the loop's steady state (the sums keep it) */
    double sh[PH_COUNT];
    dc_warm_shares(r, sh);
    double compute = 0;
    int known = 0;
    for (int p = PH_FORWARD; p <= PH_OPTIMIZER; p++)
        if (isfinite(sh[p])) compute += sh[p], known = 1;
    /* of training time: evaluation and checkpoints are not training */
    double notrain = (isfinite(sh[PH_EVAL]) ? sh[PH_EVAL] : 0) +
                     (isfinite(sh[PH_CHECKPOINT]) ? sh[PH_CHECKPOINT] : 0);
    /* tensor ops outside every phase (a model of bare tensors, the loss, a
     * hand-written update) are model compute too: the part of the steps'
     * unlabelled time the stack sampler found in them */
    double ops = 0;
    const dcause *dc = &r->cause;
    if (known && dc->have_pyprof && dc->ph_compute > 0 && isfinite(sh[PH_OTHER]))
        ops = sh[PH_OTHER] * dc->ph_compute / (dc->ph_compute + dc->ph_other);
    compute += ops;
    if (known && notrain < 0.99) compute /= 1 - notrain, ops /= 1 - notrain;
    if (!known || compute < 0.5) {
        fmt(d->id, sizeof(d->id), "undetermined");
        fmt(d->title, sizeof(d->title), "No bottleneck identified");
        if (known)
            fmt(d->summary, sizeof(d->summary),
                "model compute is only %.0f%% of step time and no measured cause explains the "
                "rest",
                100 * compute);
        else
            fmt(d->summary, sizeof(d->summary),
                "the steps carry no phases and no measured cause limits them");
        if (known)
            compute_ev(d, compute, ops);
        if (isfinite(sh[PH_OTHER]))
            ev(d, "other_share", sh[PH_OTHER], "%.0f%% of step time outside known phases",
               100 * sh[PH_OTHER]);
        if (isfinite(c->tree_cpu))
            ev(d, "tree_cpu_pct", c->tree_cpu, "the process tree used %.1f of %.0f cores",
               c->tree_cpu / 100, isfinite(c->cpus) ? c->cpus : 0.0);
        rec(d, "%s",
            r->python ? "Label the rest of the step: trainperf.phase(\"name\") around the code "
                        "between optimizer steps, or run under `trainperf run` (zero-code mode "
                        "samples the training thread's stacks)."
                      : "Label the rest of the step with tpf_range_push/pop so the report can "
                        "attribute it.");
        return;
    }
    fmt(d->title, sizeof(d->title), "Compute-bound on the CPU");
    fmt(d->summary, sizeof(d->summary),
        "model compute is %.0f%% of step time; no input, host-code or memory limit found",
        100 * compute);
    compute_ev(d, compute, ops);
    if (isfinite(c->tree_cpu))
        ev(d, "tree_cpu_pct", c->tree_cpu,
           "the process tree used %.0f%% CPU (%.1f cores) of %.0f cores", c->tree_cpu,
           c->tree_cpu / 100, isfinite(c->cpus) ? c->cpus : 0.0);
    if (isfinite(sh[PH_DATA]))
        ev(d, "data_wait_share", sh[PH_DATA], "data wait %.0f%% of step time",
           100 * sh[PH_DATA]);
    /* a step this small is bookkeeping per op, not arithmetic: more work
     * per op is the fix; more threads (ops this small run on one) or a
     * GPU's launches would not help */
    double sn, sus;
    int small = r->python && dc_small_steps(r, c->f.step_p50, &sn, &sus);
    double opt = dc_optimizer_share(r);
    if (known && notrain < 0.99) opt /= 1 - notrain;
    if (dc_optimizer_advice(r, d, opt, small))
        fmt(d->summary, sizeof(d->summary),
            "model compute is %.0f%% of step time, %.0f%% in the optimizer step; no input, "
            "host-code or memory limit found",
            100 * compute, 100 * opt);
    if (small) {
        ev(d, "step_us_per_node", sus,
           "a step takes %.0f µs for a backward graph of %.0f nodes: %.0f µs a node, about "
           "torch's own cost per op (forward, backward and optimizer)",
           1e3 * c->f.step_p50, sn, sus);
        rec(d, "The steps are too small to keep the CPU computing: each op costs about its "
               "dispatch overhead, whatever the batch. A larger batch (or several steps' "
               "samples at once) raises samples/s nearly in proportion; torch.compile fuses "
               "the ops. A GPU would not help at this size.");
    }
    if (!small && isfinite(c->tree_cpu) && isfinite(c->cpus) && c->cpus >= 2 &&
        c->tree_cpu < 60 * c->cpus && isfinite(c->idle_cores) && c->idle_cores >= 1)
        rec(d, "The run used %.1f of %.0f cores: %s if the machine is yours.", c->tree_cpu / 100,
            c->cpus,
            r->python ? "raise the intra-op threads (torch.set_num_threads / OMP_NUM_THREADS)"
                      : "compute each step on more threads (OMP_NUM_THREADS for OpenMP or BLAS "
                        "code)");
    f64_rec(r, d);
    if (small) return;
    if (r->python) {
        /* what the run already does is not advised again */
        const dcause *k = &r->cause;
        int bf16 = k->amp_bf16 || (k->params_all > 0 && k->params_bf16 >= 0.5 * k->params_all);
        int comp = k->compile_frames > 0;
        if (bf16 && comp)
            rec(d, "Use a GPU or accelerator if one is available (the run already computes in "
                   "bf16 and under torch.compile).");
        else
            rec(d, "Use a GPU or accelerator if one is available; on the CPU, %s cut%s the "
                   "compute per step%s.",
                bf16 ? "torch.compile" : comp ? "bf16 autocast (on CPUs with AMX/AVX512-BF16)"
                                              : "bf16 (on CPUs with AMX/AVX512-BF16) and "
                                                "torch.compile",
                bf16 || comp ? "s" : "",
                bf16 ? " (the run already computes in bf16)"
                : comp ? " (the run already uses torch.compile)" : "");
    } else {
        rec(d, "Use a GPU or accelerator if one is available; on the CPU, an optimised BLAS and "
               "vectorised kernels cut the compute per step.");
    }
}

/* the cause rules that need no resource samples (dc_cand_hostcode, _gc,
 * _compile, and from _anomaly on: indices in diag_compute's causes[]) */
static int dc_step_level_rule(size_t i)
{
    return i == 0 || i == 3 || i == 4 || i >= 6;
}

static void copy_finding(dfinding *dst, const dfinding *src)
{
    memcpy(dst, src, sizeof(*dst));
}

/* Whether the finding carries evidence of that name. */
static int has_ev(const dfinding *d, const char *name)
{
    for (int k = 0; k < d->nev; k++)
        if (strcmp(d->ev[k].name, name) == 0) return 1;
    return 0;
}

/* The index of the last candidate with this id, -1 when none. */
static int cand_find(const dfinding *cand, int nc, const char *id)
{
    int at = -1;
    for (int i = 0; i < nc; i++)
        if (strcmp(cand[i].id, id) == 0) at = i;
    return at;
}

/* Removes cand[*at] (folded into another finding) and sets *at to -1; the
 * indices a and b (either may be NULL) follow the candidates they name. */
static void cand_drop(dfinding *cand, int *nc, int *at, int *a, int *b)
{
    for (int i = *at; i + 1 < *nc; i++)
        copy_finding(&cand[i], &cand[i + 1]);
    (*nc)--;
    if (a && *a > *at) (*a)--;
    if (b && *b > *at) (*b)--;
    *at = -1;
}

/* The step-time variation as evidence of the finding that explains it. */
static void cv_ev(dfinding *d, const ctx *c, const char *why)
{
    if (isfinite(c->f.step_cv))
        ev(d, "step_time_cv", c->f.step_cv, "step time varies (coefficient of variation %.2f)%s",
           c->f.step_cv, why);
}

void diag_compute(diag_run *r)
{
    diag_result *g = &r->diag;
    memset(g, 0, sizeof(*g));
    ctx c;
    make_ctx(r, &c);

    dfinding cand[36]; /* one a rule, at most */
    int nc = 0;
    int (*rules[])(const diag_run *, const ctx *, dfinding *) = {
        cand_memory, cand_throttle,  cand_input, cand_storage_ckpt,
        cand_comm,   cand_straggler, cand_host,  cand_unstable,
    };
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        memset(&cand[nc], 0, sizeof(cand[nc]));
        if (rules[i](r, &c, &cand[nc])) nc++;
    }
    /* causes measured by the zero-code hook and the sched source */
    int (*causes[])(const diag_run *, dfinding *) = {
        dc_cand_hostcode, dc_cand_contention, dc_cand_oversub, dc_cand_gc, dc_cand_compile,
        dc_cand_gil, dc_cand_anomaly, dc_cand_unused_grads, dc_cand_eval_grad, dc_cand_tiny_ops,
        dc_cand_profiler, dc_cand_tracer, dc_cand_debug, dc_cand_ddp_unused, dc_cand_opt_remade,
        dc_cand_eval_often, dc_cand_uneven_end,
    };
    _Static_assert(sizeof(rules) / sizeof(rules[0]) + sizeof(causes) / sizeof(causes[0]) <=
                       sizeof(cand) / sizeof(cand[0]),
                   "a candidate for every rule");
    for (size_t i = 0; i < sizeof(causes) / sizeof(causes[0]); i++) {
        memset(&cand[nc], 0, sizeof(cand[nc]));
        if ((c.samples_ok || dc_step_level_rule(i)) && causes[i](r, &cand[nc])) nc++;
    }
    /* what the GPU's records say, and what the host-time findings mean then */
    nc += dg_cands(r, cand + nc, (int)(sizeof(cand) / sizeof(cand[0])) - nc);
    dg_fold(r, cand, &nc);
    /* contention explains irregular steps: the unstable finding (unless a
     * hang or regression) folds into it */
    int ic = cand_find(cand, nc, "cpu-contention"), iu = -1;
    /* as does a busy process the run itself started beside training (the
     * threads' wait for a CPU is its doing): the folds below treat it so */
    int iov = cand_find(cand, nc, "oversubscription");
    if (ic < 0 && iov >= 0 && has_ev(&cand[iov], "other_procs_cores")) ic = iov;
    for (int i = 0; i < nc; i++)
        if ((strcmp(cand[i].id, "unstable") == 0 && strstr(cand[i].title, "stopped") == NULL) ||
            strcmp(cand[i].id, "step-level") == 0 ||
            (strcmp(cand[i].id, "step-spikes") == 0 && has_ev(&cand[i], "period_steps")))
            iu = i;
    /* so does waiting for batches: loaders deliver them in bursts (two
     * workers finish together), the step time follows the data wait */
    int ii = -1;
    for (int i = 0; i < nc; i++)
        if (strcmp(cand[i].id, "input-bound") == 0 || strcmp(cand[i].id, "storage-io") == 0)
            if (cand[i].ev[0].name[0] && strcmp(cand[i].ev[0].name, "data_wait_share") == 0) ii = i;
    if (ic < 0 && ii >= 0 && iu >= 0 && !fired(r, "step_regression", NULL, NULL, 0)) {
        cv_ev(&cand[ii], &c, " with the wait for each batch");
        cand_drop(cand, &nc, &iu, NULL, NULL);
    }
    /* the slow steps an epoch-start finding explains are not also "a few
     * slow steps" */
    int iep = -1, ione = -1;
    for (int i = 0; i < nc; i++) {
        if (has_ev(&cand[i], "epoch_start_share")) iep = i;
        if (strcmp(cand[i].id, "step-spikes") == 0 && !has_ev(&cand[i], "period_steps")) ione = i;
    }
    if (iep >= 0 && ione >= 0) {
        if (ii > ione) ii--;
        cand_drop(cand, &nc, &ione, &iu, &ic);
    }
    /* and waiting for a batch from a hand-made producer (a queue fed by a
     * thread): the step time follows the wait, as with a DataLoader */
    int ih = cand_find(cand, nc, "host-code");
    if (ih >= 0 && iu >= 0 && strcmp(cand[iu].id, "step-spikes") != 0 &&
        has_ev(&cand[ih], "waits_for_input") && !fired(r, "step_regression", NULL, NULL, 0)) {
        cv_ev(&cand[ih], &c, " with the wait for each batch");
        cand_drop(cand, &nc, &iu, &ic, NULL);
    }
    /* and GC pauses, when they hold the slowest steps */
    int ig = cand_find(cand, nc, "gc-pauses");
    if (ig >= 0 && iu >= 0 && !fired(r, "step_regression", NULL, NULL, 0)) {
        if (has_ev(&cand[iu], "slow_steps_gc_share")) {
            cv_ev(&cand[ig], &c, ": the slowest steps held the pauses");
            cand_drop(cand, &nc, &iu, &ic, NULL);
        }
    }
    /* the other ranks' wait for a straggler is not communication: what
     * the collectives cost on their own is the straggler's own wait (it
     * arrives last and waits only for the transfer) */
    int ist = cand_find(cand, nc, "straggler"), icom = cand_find(cand, nc, "communication");
    rr_strag st;
    if (ist >= 0 && icom >= 0 && has_ev(&cand[ist], "others_comm_wait_ms") &&
        rr_straggler(r, &st) && st.step_ms > 0) {
        double own = st.own_wait_ms / st.step_ms;
        ev(&cand[ist], "comm_share", cand[icom].score,
           "collectives take %.0f%% of step time on average over the ranks; the transfers "
           "themselves %.0f%% (rank %d's own wait), the rest is waiting for rank %d",
           100 * cand[icom].score, 100 * own, st.rank, st.rank);
        if (!(own >= COMM_SHARE))
            cand_drop(cand, &nc, &icom, &iu, &ic);
        else
            cand[icom].score = own;
    }
    /* and, on one host, a rank slowed in its own step by less than twice
     * the threshold (gap share < 20%, or < 1.4x the median rank: score
     * < 0.5) while the run's threads waited for a CPU: that rank got fewer
     * cycles (a slow loader, or a larger gap, stays a straggler finding) */
    int is = cand_find(cand, nc, "straggler");
    if (ic >= 0 && is >= 0 && r->nnodes <= 1 && cand[is].score < 0.5 &&
        !strstr(cand[is].summary, "data loader")) {
        ev(&cand[ic], "straggler_rank", cand[is].ev[0].value,
           "%s: ranks on this host share its cores", cand[is].summary);
        cand_drop(cand, &nc, &is, &iu, &ic);
    }
    /* and collectives on one host whose share is within twice the
     * threshold: ranks that wait for a CPU also arrive late at every
     * all-reduce and move its bytes slowly (gloo reduces on the CPU), so
     * the share is not the run's own; it stays as contention's evidence */
    int icm = cand_find(cand, nc, "communication");
    if (ic >= 0 && icm >= 0 && r->nnodes <= 1 && cand[icm].score < 2 * COMM_SHARE) {
        ev(&cand[ic], "comm_share", cand[icm].score,
           "collectives took %.0f%% of step time while the ranks waited for CPUs (measure "
           "again on free cores before tuning communication)",
           100 * cand[icm].score);
        cand_drop(cand, &nc, &icm, &iu, &ic);
    }
    /* and waiting for batches when the loader workers themselves waited
     * for a CPU most of the time they wanted one: workers starved by other
     * jobs, not slow storage or heavy batches (storage-io, which has its
     * own evidence, stays); the fix is contention's */
    int iib = cand_find(cand, nc, "input-bound");
    double lwait = NAN, lbusy = NAN;
    double lshare = ic >= 0 && iib >= 0 ? dc_loader_starved(r, &lwait, &lbusy) : NAN;
    if (isfinite(lshare)) {
        ev(&cand[ic], "loader_runq_share", lshare,
           "DataLoader workers starved of CPU: fetching %.0f%% of their time, they waited for "
           "a CPU %.0f%% of the time they wanted one; the %.0f%% data wait is theirs",
           100 * lbusy, 100 * lshare, 100 * cand[iib].score);
        cand_drop(cand, &nc, &iib, &iu, &ic);
    }
    /* and a thread taking the GIL: the training thread wins it back after
     * a varying number of the other thread's turns */
    int igl = cand_find(cand, nc, "gil-contention");
    if (igl >= 0 && iu >= 0 && strcmp(cand[iu].id, "step-spikes") != 0) {
        cv_ev(&cand[igl], &c, ": winning the GIL back makes steps irregular");
        cand_drop(cand, &nc, &iu, &ic, &igl);
    }
    /* (a slow step every N steps is the loop's own: waiting for a CPU
     * keeps no period; a level that moved may be the other jobs' load) */
    if (ic >= 0 && iu >= 0 && strcmp(cand[iu].id, "step-spikes") != 0) {
        cv_ev(&cand[ic], &c, ": waiting for a CPU makes steps irregular");
        cand_drop(cand, &nc, &iu, NULL, NULL);
    }
    /* the communication finding carries find_unused_parameters' fix */
    int idu = cand_find(cand, nc, "ddp-find-unused");
    if (idu >= 0 && cand_find(cand, nc, "communication") >= 0)
        cand_drop(cand, &nc, &idu, NULL, NULL);
    /* rank by score; stable for equal scores (rule order = priority) */
    for (int i = 1; i < nc; i++)
        for (int j = i; j > 0 && cand[j].score > cand[j - 1].score; j--) {
            dfinding t;
            copy_finding(&t, &cand[j]);
            copy_finding(&cand[j], &cand[j - 1]);
            copy_finding(&cand[j - 1], &t);
        }

    /* a short run: step evidence alone carries the step-level findings;
     * resource-based ones need samples (docs/diagnosis.md) */
    int nstep = 0;
    for (int i = 0; i < nc; i++)
        if (dc_step_level(cand[i].id)) nstep++;
    if (c.steps_ok && !c.samples_ok && nstep > 0) {
        int k = 0;
        for (int i = 0; i < nc; i++)
            if (dc_step_level(cand[i].id)) copy_finding(&cand[k++], &cand[i]);
        nc = k;
        copy_finding(&g->primary, &cand[0]);
        for (int i = 1; i < nc && g->nsec < DIAG_MAX_FINDINGS; i++)
            copy_finding(&g->sec[g->nsec++], &cand[i]);
        note(g, "A short run: %.0f resource sample%s, so only findings from the steps are made.",
             r->msamples, r->msamples == 1 ? "" : "s");
    } else if (!c.steps_ok || !c.samples_ok) {
        g->insufficient = 1;
        if (r->steps == 0 && r->cause.have_pyprof && r->cause.eval_s > 0 &&
            r->cause.ph_eval >= 0.5 * r->cause.samples)
            /* the hook saw forwards under no_grad / eval() and nothing else */
            fmt(g->insufficient_why, sizeof(g->insufficient_why),
                "no training steps were recorded: the program only evaluated (%.1f s of forward "
                "passes under no_grad or eval(), no backward or optimizer step); the verdict is "
                "about training steps",
                r->cause.eval_s);
        else if (r->steps == 0)
            fmt(g->insufficient_why, sizeof(g->insufficient_why),
                "no training steps were recorded (the program was not instrumented, or ended "
                "before its first step)");
        else if (!c.steps_ok)
            fmt(g->insufficient_why, sizeof(g->insufficient_why),
                "only %.0f step%s recorded; at least %d are needed to name a bottleneck", r->steps,
                r->steps == 1 ? "" : "s", MIN_STEPS);
        else
            fmt(g->insufficient_why, sizeof(g->insufficient_why),
                "only %.0f resource sample%s; at least %d are needed", r->msamples,
                r->msamples == 1 ? "" : "s", MIN_SAMPLES);
        fmt(g->primary.id, sizeof(g->primary.id), "insufficient-data");
        fmt(g->primary.title, sizeof(g->primary.title), "Not enough data");
        fmt(g->primary.summary, sizeof(g->primary.summary), "%s", g->insufficient_why);
        /* findings that need no steps (memory, hang, throttling) still stand */
        for (int i = 0; i < nc && g->nsec < DIAG_MAX_FINDINGS; i++)
            if (strcmp(cand[i].id, "memory-capacity") == 0 ||
                strcmp(cand[i].id, "throttling") == 0 || strcmp(cand[i].id, "unstable") == 0)
                copy_finding(&g->sec[g->nsec++], &cand[i]);
    } else if (nc > 0 && cand[0].score < 0.1) {
        /* only minor findings: the healthy verdict leads, they follow */
        healthy(r, &c, &g->primary);
        for (int i = 0; i < nc && g->nsec < DIAG_MAX_FINDINGS; i++)
            copy_finding(&g->sec[g->nsec++], &cand[i]);
    } else if (nc > 0) {
        copy_finding(&g->primary, &cand[0]);
        for (int i = 1; i < nc && g->nsec < DIAG_MAX_FINDINGS; i++)
            copy_finding(&g->sec[g->nsec++], &cand[i]);
        /* contention is about the machine: say what the run itself is
         * limited by once it gets its cores */
        int only_env = 1;
        for (int i = 0; i < nc; i++)
            if (strcmp(cand[i].id, "cpu-contention") != 0 && cand[i].score >= 0.1) only_env = 0;
        if (only_env && strcmp(cand[0].id, "cpu-contention") == 0 && g->nsec < DIAG_MAX_FINDINGS) {
            /* ahead of the minor findings, as when no contention leads */
            int at = 0;
            while (at < g->nsec && g->sec[at].score >= 0.1) at++;
            for (int i = g->nsec; i > at; i--)
                copy_finding(&g->sec[i], &g->sec[i - 1]);
            g->nsec++;
            dfinding *h = &g->sec[at];
            memset(h, 0, sizeof(*h));
            healthy(r, &c, h);
        }
    } else {
        healthy(r, &c, &g->primary);
    }

    /* summaries are sentences */
    g->primary.summary[0] = (char)toupper((unsigned char)g->primary.summary[0]);
    for (int i = 0; i < g->nsec; i++)
        g->sec[i].summary[0] = (char)toupper((unsigned char)g->sec[i].summary[0]);

    /* notes: context a reader should know */
    if (!c.has_gpu)
        note(g, "GPU metrics were not available, so this diagnosis makes no GPU findings (%s).",
             r->nvml_source[0] ? r->nvml_source : (r->ngpu_run ? "no samples" : "no GPU used"));
    if (r->exit_known && r->exit_signal > 0)
        note(g, "The command was ended by signal %d%s.", r->exit_signal,
             r->exit_signal == 9 ? " (SIGKILL: the OOM killer or a job scheduler)" : "");
    else if (r->exit_known && r->exit_code > 0)
        note(g, "The command exited with status %d: the figures cover the run until then.",
             r->exit_code);
    else if (!r->exit_known && r->have_run)
        note(g,
             "The run did not record how it ended (still running, or the collector was killed).");
    if (isfinite(r->events_dropped) && r->events_dropped > 0)
        note(g, "%.0f probe events were dropped (rings full): step figures undercount.",
             r->events_dropped);
    if (r->io_error[0])
        note(g,
             "Writing the run directory failed (%s): %.0f step rows, %.0f metrics rows and %.0f "
             "trace events were not written; summary.json still counts every step.",
             r->io_error, isfinite(r->lost_steps) ? r->lost_steps : 0,
             isfinite(r->lost_rows) ? r->lost_rows : 0, isfinite(r->lost_trace) ? r->lost_trace : 0);
    if (r->recovered)
        note(g, "The collector was killed; `trainperf report` recovered the run from live/ "
                "(what it had drained was on disk, the rest came from the probes' rings).");
    for (int i = 0; i < r->ngpu; i++) {
        const dgpu *gp = &r->gpus[i];
        if (gp->mem_used.n && gp->mem_total > 0 &&
            100 * gp->mem_used.max / gp->mem_total >= GPU_MEM_FULL_PCT)
            note(g,
                 "GPU %d memory peaked at %.0f%% of capacity: little headroom for larger batches.",
                 gp->index, 100 * gp->mem_used.max / gp->mem_total);
    }
    double th;
    if (fired(r, "hang", &th, NULL, 0) && ended_after_loop(r, th) && isfinite(r->duration_s))
        note(g,
             "The program ran %.1f s after its last step and then exited normally (work after "
             "the training loop, or a slow exit), so the hang alert is not a finding.",
             r->duration_s - r->last_end_s);
    if (r->nalerts_fired > 0)
        note(g, "%d alert%s fired during the run (see Alerts).", r->nalerts_fired,
             r->nalerts_fired == 1 ? "" : "s");
}

static void write_finding(jw *w, const dfinding *d)
{
    jw_obj_begin(w);
    jw_kstr(w, "id", d->id);
    jw_kstr(w, "title", d->title);
    jw_kstr(w, "summary", d->summary);
    jw_knum(w, "score", round(d->score * 1000) / 1000);
    jw_key(w, "evidence");
    jw_arr_begin(w);
    for (int i = 0; i < d->nev; i++) {
        jw_obj_begin(w);
        jw_kstr(w, "name", d->ev[i].name);
        jw_knum(w, "value", d->ev[i].value);
        jw_kstr(w, "text", d->ev[i].text);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_key(w, "recommendations");
    jw_arr_begin(w);
    for (int i = 0; i < d->nrec; i++)
        jw_str(w, d->rec[i]);
    jw_arr_end(w);
    jw_obj_end(w);
}

void diag_write_json(const diag_run *r, jw *w)
{
    const diag_result *g = &r->diag;
    jw_obj_begin(w);
    jw_kint(w, "version", 1);
    jw_kbool(w, "insufficient_data", g->insufficient);
    if (g->insufficient)
        jw_kstr(w, "insufficient_reason", g->insufficient_why);
    else {
        jw_key(w, "insufficient_reason");
        jw_null(w);
    }
    jw_key(w, "primary");
    write_finding(w, &g->primary);
    jw_key(w, "secondary");
    jw_arr_begin(w);
    for (int i = 0; i < g->nsec; i++)
        write_finding(w, &g->sec[i]);
    jw_arr_end(w);
    jw_key(w, "notes");
    jw_arr_begin(w);
    for (int i = 0; i < g->nnotes; i++)
        jw_str(w, g->notes[i]);
    jw_arr_end(w);
    jw_obj_end(w);
}
