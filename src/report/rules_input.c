/* Input rules: the steps wait for their batches (input-bound: a steady wait,
 * every epoch start, a new iterator every step) or for storage (storage-io:
 * reads, checkpoints).
 * Entries of diag_rules[] (diag.c); thresholds in rule_util.h and
 * docs/diagnosis.md. */
#include "report/rules.h"
#include "report/failures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"

/* System-wide I/O stalls count only when the watched tree itself reads:
 * PSI and iowait also rise for other jobs on a shared machine. When the
 * tree's reads are unknown (no /proc/PID/io), the system figures decide. */
static int io_evidence(const diag_run *r, const dctx *c)
{
    int stalls = (isfinite(c->iowait) && c->iowait >= IO_IOWAIT_PCT) ||
                 (isfinite(c->psi_io) && c->psi_io >= IO_PSI_PCT);
    if (!stalls) return 0;
    if (r->tree_read.n == 0) return 1;
    return dstat_mean(&r->tree_read) >= IO_TREE_READ_BPS;
}

static void add_io_evidence(const diag_run *r, const dctx *c, dfinding *d)
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
/* What a DataLoader worker adds per batch on this kind of machine: a
 * TensorDataset batch that costs 0.1-0.6 ms in the training process (batch
 * 8-128) took 1.5-2.3 ms through one or two workers, +1.37 to +1.49 ms
 * (bench/bench_loader.py, 2 shared cores, torch 2.13); the lower side kept. A figure from a bench, not a start-up
 * calibration: measuring it means starting worker processes and importing
 * torch in them, on the cores the run starts on. */
#define WORKER_BATCH_MS 1.2

/* Batches cheaper to make than a worker costs to hand over (issue 41): with
 * no workers, the data wait per batch is the whole cost of making it; with
 * workers, their CPU per batch (handover included) is. 1: cheaper. */
static int batch_cheaper_than_worker(const diag_run *r, const dctx *c, double *cost)
{
    if (!r->python || !isfinite(c->f.data_p50) || !isfinite(c->f.step_p50)) return 0;
    if (c->workers <= 0) {
        *cost = c->f.data_p50;
        return *cost < WORKER_BATCH_MS;
    }
    if (!isfinite(c->worker_cpu)) return 0;
    *cost = c->worker_cpu / 100 * c->workers * c->f.step_p50;
    return *cost < 2 * WORKER_BATCH_MS;
}

/* The fixes for a batch cheaper to make than to hand over: no workers,
 * then indexing once per batch, then a larger batch. */
static void cheap_batch_recs(const diag_run *r, const dctx *c, dfinding *d, double cost)
{
    double step = c->f.step_p50, data = c->f.data_p50;
    if (c->workers > 0)
        rec(d,
            "num_workers=0: the %d workers spend about %.1f ms of CPU per batch (%.0f%% each "
            "over a %.1f ms step), no more than a worker costs to hand a batch over (~%.1f ms "
            "measured on 2 cores, bench/bench_loader.py): made in the training process the "
            "batch costs that work without the transfer, so the %.1f ms wait per step should "
            "fall, not rise.",
            c->workers, cost, c->worker_cpu, step, WORKER_BATCH_MS, data);
    double gain = step / (step - data + data / 4);
    rec(d,
        "Index the dataset once per batch: DataLoader(ds, sampler=BatchSampler(RandomSampler(ds), "
        "batch_size, drop_last=False), batch_size=None) with a dataset whose __getitem__ takes "
        "the list of indices (a TensorDataset does: ds[idx] slices each tensor once), instead of "
        "one __getitem__ per sample and a collate that stacks them. Making a batch costs %.2f "
        "ms of the %.2f ms step now; one slice per tensor instead of per sample should remove "
        "most of it: up to about %.1fx the steps a second.",
        data, step, gain);
    rec(d,
        "Not more DataLoader workers: a batch costs %.2f ms to make here, less than a worker "
        "costs to hand one over (~%.1f ms), so workers would make the step slower. A larger "
        "batch_size makes the per-batch costs (the loader's and the model's per-step overhead) "
        "a smaller share of each sample (it changes the optimisation: scale the learning "
        "rate).",
        cost, WORKER_BATCH_MS);
}

/* Loading in the training process (no workers) with no whole idle core:
 * loaders would still gain when the loading itself holds a core, since in
 * workers it overlaps the compute. Steps of D ms data and C ms compute on
 * t threads, over the k cores the run can have (its own use and the idle
 * ones), take about max(C, (D + C t) / k) + the handover;
 * worth saying from 1.3x (a short collate of 1.4 ms beside 1.6 ms of
 * 2-thread compute ran slower with workers here, a 27 ms decode beside 3.5
 * ms of compute 1.45x faster). */
static int loading_frees_a_core(const diag_run *r, const dctx *c, double *gain)
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
static void input_recs(const diag_run *r, const dctx *c, dfinding *d)
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
    double rq_wait, rq_used, rq_share, cost;
    if (!tiny && batch_cheaper_than_worker(r, c, &cost)) {
        cheap_batch_recs(r, c, d, cost);
        if (c->has_gpu) rec(d, "%s", "pin_memory=True in the DataLoader, and "
                                     ".to(device, non_blocking=True): page-locked batches "
                                     "copy to the GPU asynchronously.");
        return;
    }
    if (c->workers <= 0 && isfinite(c->main_cpu) && c->main_cpu < MAIN_WAITS_CPU &&
        dc_waits_for_cpu(r, &rq_wait, &rq_used, &rq_share)) {
        /* a low CPU share while the run's threads queue for a core says
         * nothing of waiting on I/O: the loading may be computation that
         * could not get a CPU (issue 29 item 4) */
        rec(d,
            "Load batches in parallel: %s, once the run has cores of its own. The main "
            "process used %.0f%% CPU while waiting for data, but the run's threads also "
            "waited for a CPU (%.0f%% of a core in the run queue, %.0f%% of the time they "
            "wanted one): the loading may be computation starved of a core rather than a "
            "wait on storage, and parallel loaders help only with cores to run on.",
            loaders(r, 4, 1, l, sizeof(l)), c->main_cpu, rq_wait, 100 * rq_share);
        loaders_on = 1;
    } else if (c->workers <= 0 && isfinite(c->main_cpu) && c->main_cpu < MAIN_WAITS_CPU) {
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
static int dr_cand_epoch_starts(const diag_run *r, const dctx *c, dfinding *d)
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
    dr_rec_lang(r, d,
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
static int dr_cand_iter_per_step(const diag_run *r, const dctx *c, dfinding *d, double per)
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

/* A wait near the line (issue 41): the same script read input-bound 24%
 * on one run and compute-bound 82% on the next. The verdict names both
 * sides and what would move it, so a run on either side says the same. */
static void name_both(const dctx *c, dfinding *d, double share)
{
    double comp = c->share[PH_FORWARD] + c->share[PH_BACKWARD] + c->share[PH_OPTIMIZER];
    diag_fmt(d->title, sizeof(d->title), "%s", "Input-bound, close to compute-bound");
    diag_fmt(d->summary, sizeof(d->summary),
             "input wait %.0f%% beside model compute %.0f%%: near the %.0f%% line, so another "
             "run can read compute-bound; the loader limits the steps only while it waits "
             "that much, and a cheaper batch moves the run to its model",
             100 * share, 100 * comp, 100 * INPUT_SHARE);
}

/* Loading in the training process: the samples name the line it spends
 * the wait in (a pandas row, a decode, a parse, a tokenizer), as evidence
 * and as the first fix. */
static void input_line_rec(const diag_run *r, const dctx *c, dfinding *d)
{
    dc_input_fn in;
    if (!r->python || c->workers > 0 || !dc_input_line(&r->cause, &in)) return;
    /* the function's lines, most first: `src` (file:line), ... */
    char q[400] = "", hint[DC_INPUT_LINES * 84 + 4] = "";
    for (int i = 0; i < in.n; i++) {
        size_t k = strlen(q), h = strlen(hint);
        if (*in.src[i])
            fmt(q + k, sizeof(q) - k, "%s`%s` (%s:%d)", i ? "; " : ": ", in.src[i],
                in.line[i]->file, in.line[i]->line);
        else
            fmt(q + k, sizeof(q) - k, "%s%s:%d", i ? "; " : ": ", in.line[i]->file,
                in.line[i]->line);
        fmt(hint + h, sizeof(hint) - h, "%s\n", in.src[i]);
    }
    const dc_func *lf = in.line[0];
    ev(d, "input_line_share", in.share, "%.0f%% of the samples waiting for data were in %s%s",
       100 * in.share, lf->func, q);
    char also[64] = "";
    for (int i = 1; i < in.n; i++) {
        size_t k = strlen(also);
        fmt(also + k, sizeof(also) - k, "%s%d", i == 1 ? " (and line " : ", ", in.line[i]->line);
    }
    if (in.n > 1) fmt(also + strlen(also), sizeof(also) - strlen(also), ")");
    rec(d, "Make %s:%d%s cheaper, where the wait is spent: %s", lf->file, lf->line, also,
        input_line_hint(hint, strstr(lf->func, "collate") != NULL));
}

int dr_cand_input(const diag_run *r, const dctx *c, dfinding *d)
{
    double s = c->share[PH_DATA], per = steps_per_iter(r);
    if (c->steps_ok && per > 0 && r->sum_interval_ns > 0) return dr_cand_iter_per_step(r, c, d, per);
    if (!c->steps_ok || !(s >= INPUT_SHARE)) return 0;
    /* the wait must be the run's steady state, not a few slow batches (an
     * epoch's worker start-up, one slow read): with the steps that waited
     * longest left out, the rest still wait that share (when a zero-code
     * or steps.csv replay measured it per step) */
    int ntrim = 0;
    double steady = dc_steady_data_share(r, &ntrim);
    /* the share a typical stretch of the run waits (the median of its
     * windows, start-up's left out) decides: one run's contended seconds
     * move it less than the mean (issue 41: the same script read 24% and
     * 17% on two runs) */
    double wlo = NAN, whi = NAN, win = dc_window_data_share(r, &wlo, &whi);
    double held = isfinite(win) ? win : steady;
    if (isfinite(held) && !(held >= INPUT_SHARE)) return dr_cand_epoch_starts(r, c, d);
    double score = isfinite(held) && held < s ? held : s;
    int io = io_evidence(r, c);
    diag_head(d, io ? "storage-io" : "input-bound", io ? "Storage I/O" : "Input-bound", score,
                 "%s takes %.0f%% of step time%s", "waiting for the next batch", 100 * s,
                 io ? ", and the data comes slowly off storage" : "");
    if (!io && score < INPUT_SHARE + INPUT_CLOSE) name_both(c, d, score);
    ev(d, "data_wait_share", s, "data wait is %.0f%% of step time", 100 * s);
    if (isfinite(steady) && ntrim > 0)
        ev(d, "steady_data_wait_share", steady,
           "%.0f%% without the %d steps that waited longest: every step waits, not a few", 100 * steady,
           ntrim);
    if (isfinite(win))
        ev(d, "window_data_wait_share", win,
           "%.0f%% in the median stretch of the run (%.0f-%.0f%% over its windows of steps, "
           "start-up left out)",
           100 * win, 100 * wlo, 100 * whi);
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
    input_line_rec(r, c, d);

    if (io) {
        rec(d,
            "Read the data from faster storage: copy the dataset to local NVMe or RAM (/dev/shm) "
            "before training, or cache decoded samples.");
        dr_rec_lang(r, d,
                 "Overlap reading with compute: more DataLoader workers (num_workers) and "
                 "prefetch_factor, so reads are in flight while the model runs.",
                 "Overlap reading with compute: read ahead on background threads or processes "
                 "into a bounded queue, so reads are in flight while the model runs.");
        rec(d, "Fewer, larger reads: pack small files into shards (WebDataset, TFRecord, "
               "numpy memmap).");
        dr_gpu_side(r, d);
        return 1;
    }
    input_recs(r, c, d);
    dr_gpu_side(r, d);
    return 1;
}

/* A data wait under input-bound's line still costs the run (issue 39: a
 * per-sample augmentation made 18% of the step a wait, and the verdict said
 * compute-bound with the wait a number in its summary): from
 * INPUT_COST_SHARE of step time it is an "also found" with the line the wait
 * is spent in and the fixes that fit the batch's cost, minor (under the 0.1
 * at which a finding leads), so the verdict on the loop stays. */
int dr_cand_input_cost(const diag_run *r, const dctx *c, dfinding *d)
{
    double s = c->share[PH_DATA];
    if (!c->steps_ok || !(s >= INPUT_COST_SHARE) || steps_per_iter(r) > 0) return 0;
    dfinding *full = calloc(1, sizeof(*full));
    int said = !full || dr_cand_input(r, c, full); /* input-bound (or storage-io) says it */
    free(full);
    if (said) return 0;
    diag_head(d, "input-cost", "Data loading costs step time", s,
              "waiting for the next batch takes %.0f%% of step time: under the %.0f%% at which "
              "the loader limits the run, but time the model does not compute",
              100 * s, 100 * INPUT_SHARE);
    ev(d, "data_wait_share", s, "data wait is %.0f%% of step time", 100 * s);
    if (isfinite(c->f.data_p50) && isfinite(c->f.step_p50))
        ev(d, "data_wait_p50_ms", c->f.data_p50, "median data wait %.1f ms per step of %.1f ms",
           c->f.data_p50, c->f.step_p50);
    if (c->workers >= 0 && r->cause.have_pyprof && r->cause.loader_iters > 0)
        ev(d, "worker_processes", c->workers, "%d DataLoader worker%s at once", c->workers,
           c->workers == 1 ? "" : "s");
    input_line_rec(r, c, d);
    input_recs(r, c, d);
    if (d->score >= 0.1) d->score = 0.099;
    return 1;
}

int dr_cand_storage_ckpt(const diag_run *r, const dctx *c, dfinding *d)
{
    if (!dr_phase_rule(c, d, PH_CHECKPOINT, CKPT_SHARE, "storage-io", "Storage I/O (checkpoints)",
                    "checkpointing", "the run's step time"))
        return 0;
    add_io_evidence(r, c, d);
    rec(d, "Checkpoint less often, or asynchronously (torch.distributed.checkpoint async_save, "
           "or copy the state to host memory and write it from a thread).");
    rec(d, "Write checkpoints to local disk first and copy them off the node in the background.");
    return 1;
}

/* Checkpoint time under storage-io's threshold still costs the run: from
 * CKPT_COST_SHARE of step time it is a finding with its share, its period
 * (steps and seconds between saves) and the fixes. */
int dr_cand_ckpt_cost(const diag_run *r, const dctx *c, dfinding *d)
{
    double s = c->share[PH_CHECKPOINT];
    if (s >= CKPT_SHARE) return 0; /* storage-io says it, with the I/O evidence */
    if (!dr_phase_rule(c, d, PH_CHECKPOINT, CKPT_COST_SHARE, "checkpoint-cost",
                       "Checkpoints cost step time", "checkpointing", "the run's step time"))
        return 0;
    fail_ckpt k;
    if (fail_ckpt_load(r->dir, &k) == 0 && k.n > 0) {
        ev(d, "checkpoints", k.n, "%d checkpoint%s, %.2f s each on average (longest %.2f s)", k.n,
           k.n == 1 ? "" : "s", k.cost_s, k.max_s);
        if (r->steps >= k.n && k.n >= 2) {
            ev(d, "steps_per_checkpoint", r->steps / k.n, "one checkpoint every %.0f steps",
               r->steps / k.n);
            size_t at = strlen(d->summary);
            snprintf(d->summary + at, sizeof(d->summary) - at,
                     ": %d saves, one every %.0f steps, %.2f s each", k.n, r->steps / k.n,
                     k.cost_s);
        }
        if (isfinite(k.interval_s))
            ev(d, "checkpoint_interval_s", k.interval_s, "one checkpoint every %.1f s",
               k.interval_s);
    }
    /* a cost beside the step's own work, not what limits it: a minor finding (score under
     * the 0.1 at which a finding leads the diagnosis), so the verdict on the loop stays */
    if (d->score >= 0.1) d->score = 0.099;
    rec(d, "Checkpoint less often: each save stops training for its whole duration.");
    rec(d, "Save asynchronously: copy the state to host memory and write it from a background "
           "thread or process (torch.distributed.checkpoint.async_save), so training goes on "
           "while the file is written.");
    rec(d, "Save less state: the model's state_dict without the optimizer's between full "
           "checkpoints, or in a smaller dtype (bf16) when resuming exactly is not needed.");
    return 1;
}

/* ---- folds ---------------------------------------------------------------- */

static int input_bound(const dfinding *d)
{
    return strcmp(d->id, "input-bound") == 0;
}

/* Waiting for batches when the loader workers themselves waited for a CPU
 * most of the time they wanted one: workers starved by other jobs, not
 * slow storage or heavy batches (storage-io, with its own evidence,
 * stays); the fix is contention's. */
static int into_cpu_wait(const dfold_at *x, dfinding *from, dfinding *into)
{
    double wait = NAN, busy = NAN, share = dc_loader_starved(x->r, &wait, &busy);
    if (!isfinite(share)) return DF_NO;
    ev(into, "loader_runq_share", share,
       "DataLoader workers starved of CPU: fetching %.0f%% of their time, they waited for "
       "a CPU %.0f%% of the time they wanted one; the %.0f%% data wait is theirs",
       100 * busy, 100 * share, 100 * from->score);
    return DF_DROP;
}

const dfold dr_input_folds[] = {
    {8, input_bound, DR_CPU_WAIT, into_cpu_wait},
    {0},
};
