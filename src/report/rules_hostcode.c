/* Host-code rules: the training loop's own Python (host-code), a GPU starved by
 * the host (host-bound), per-op overhead (tiny-ops), evaluation too often
 * (eval-often).
 * Entries of diag_rules[] (diag.c); thresholds in rule_util.h and
 * docs/diagnosis.md. */
#include "report/rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/human.h"
#include "trainperf.h"

int dr_cand_host(const diag_run *r, const dctx *c, dfinding *d)
{
    /* kernel records measure what NVML's utilisation guesses (busy while one
     * tiny kernel runs): launch-bound and gpu-bound (rules_gpu.c) stand then */
    if (r->gs.have) return 0;
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

/* Whether f's line (its source text, from the profile's lines) holds one
 * of the n words w. */
static int line_has(const dcause *c, const dc_func *f, const char *const *w, size_t n)
{
    for (int p = 0; p < c->nproc; p++)
        for (int i = 0; i < c->procs[p].nlines; i++) {
            const dc_func *l = &c->procs[p].lines[i];
            if (l->line != f->line || strcmp(l->file, f->file) != 0) continue;
            for (size_t k = 0; k < n; k++)
                if (strstr(c->procs[p].src[i], w[k])) return 1;
        }
    return 0;
}

/* Whether f's line hands the loop to a framework (Lightning's fit, the HF
 * Trainer's train): its samples there are the framework's own code. */
static int framework_entry(const dcause *c, const dc_func *f)
{
    static const char *const w[] = {".fit(", "trainer.train(", "Trainer("};
    return line_has(c, f, w, sizeof(w) / sizeof(w[0]));
}

/* Whether f's line writes: a log or results file flushed every step is
 * I/O that reads ahead cannot fix. */
static int writes_at(const dcause *c, const dc_func *f)
{
    static const char *const w[] = {".write", "fsync", ".flush", ".dump", "print(", "savetxt",
                                    "to_csv", "writer."};
    return line_has(c, f, w, sizeof(w) / sizeof(w[0]));
}

/* Whether f's line logs metrics (an experiment tracker, a logger, a
 * progress bar): costly every step when steps are short. */
static int logs_at(const dcause *c, const dc_func *f)
{
    static const char *const w[] = {"wandb.log", "run.log(", "mlflow.log", "log_metric",
                                    "add_scalar", "add_histogram", "add_image", "logger.",
                                    "logging.", "self.log(", "self.log_dict(", "accelerator.log",
                                    "set_postfix", "experiment.log", ".log_dict("};
    return line_has(c, f, w, sizeof(w) / sizeof(w[0]));
}

/* Whether f's line builds tensors or arrays from host data: the whole
 * dataset converted again every step is the common case. */
static int converts_at(const dcause *c, const dc_func *f)
{
    static const char *const w[] = {"torch.tensor(", "torch.as_tensor(", "torch.from_numpy(",
                                    "np.array(", "np.asarray(", "numpy.array(", ".astype(",
                                    ".to_numpy(", ".values"};
    return line_has(c, f, w, sizeof(w) / sizeof(w[0]));
}

/* Whether f's line draws a batch by permuting every index: the legacy
 * np.random.choice without replacement, randperm sliced. */
static int permutes_at(const dcause *c, const dc_func *f)
{
    static const char *const w[] = {"replace=False", "randperm(", "permutation("};
    return line_has(c, f, w, sizeof(w) / sizeof(w[0]));
}

int dr_cand_hostcode(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    double train = c->ph_train + c->ph_compile;
    if (!c->have_pyprof || train < 5 || c->nfunc == 0) return 0;
    /* a framework's own loop (Lightning's, the HF Trainer's) sampled under
     * the script's call into it (`trainer.fit(...)`): no code of the
     * user's to move, so no share of the finding; the busiest other
     * function is the one named */
    double fw = 0;
    const dc_func *f = NULL;
    for (int i = 0; i < c->nfunc; i++) {
        if (framework_entry(c, &c->funcs[i])) {
            fw += c->funcs[i].samples;
            continue;
        }
        if (!f || c->funcs[i].samples > f->samples) f = &c->funcs[i];
    }
    if (!f) return 0;
    double share = (c->ph_other - fw) / train, sshare = c->ph_other / train;
    /* GC pauses are the gc-pauses finding's, not the user's code */
    int npause = 0;
    double gcs = r->sum_interval_ns > 0 ? dc_gc_pause(r, &npause) / (r->sum_interval_ns / 1e9) : 0;
    if (!(gcs > 0 && gcs < 1)) gcs = 0;
    /* the steps' own unlabelled share, timed by the hook (over the warm
     * steps: the first one holds the start-up) */
    double so = r->sum_interval_ns > 0 ? r->sum_phase_ns[PH_OTHER] / r->sum_interval_ns : NAN;
    if (r->warm_interval_ns > 0 && r->steps >= HOSTCODE_WARM_STEPS)
        so = r->warm_phase_ns[PH_OTHER] / r->warm_interval_ns;
    /* and the part of the optimizer phase the samples found outside the
     * optimizer's code (a closure running the user's logging) */
    if (isfinite(so)) so += dc_closure_extra_share(r);
    /* a run too short for many samples: the steps' own unlabelled share
     * (which holds the pauses outside phases) carries the size, the few
     * samples still name the function */
    if (train < HOSTCODE_MIN_SAMPLES) {
        if (!(so >= HOSTCODE_SHARE) || !(share >= HOSTCODE_SHARE)) return 0;
        share = so - gcs;
    } else {
        /* the sampler waits for the GIL while the collector runs, so its
         * samples cover the time outside GC pauses (the one taken just
         * after a pause is labelled gc by the hook): a share of that time */
        share *= 1 - gcs;
        /* and no more than the time outside every timed phase: the samples
         * estimate, the hook times; a framework's own code around a timed
         * phase (Lightning's optimizer-step wrapper) samples as outside */
        if (isfinite(so) && share > so) share = so;
    }
    if (!(share >= HOSTCODE_SHARE)) return 0;
    double fshare = f->samples / train;
    /* the kind of the unlabelled time: the kind with the most samples */
    const char *kinds[] = {"input",      "python",     "sync",   "io",        "wait",
                           "input-wait", "input-pool", "format", "pool-start", "input-block"};
    enum { NKINDS = sizeof(kinds) / sizeof(kinds[0]) };
    double ks[NKINDS] = {0};
    for (int i = 0; i < c->nfunc; i++)
        for (int k = 0; k < NKINDS; k++)
            if (strcmp(c->funcs[i].kind, kinds[k]) == 0) ks[k] += c->funcs[i].samples;
    int best = 0;
    for (int k = 1; k < NKINDS; k++)
        if (ks[k] > ks[best]) best = k;
    /* waiting for a pool is waiting for input too; its advice differs */
    int pool = best == 6, block = best == 9;
    if (pool) best = 5, ks[5] += ks[6];
    if (block) best = 5, ks[5] += ks[9];
    const char *kind = kinds[best];
    int logging = logs_at(c, f);
    /* the line converts host data itself (no Python below it, a C call);
     * in a function that prepares input (tokenises, builds batches) the
     * conversion is part of that preparation */
    int convert = !logging && best == 1 && strcmp(f->kind, "python") == 0 && converts_at(c, f);
    fmt(d->id, sizeof(d->id), "host-code");
    fmt(d->title, sizeof(d->title), "%s",
        best == 7   ? "Printing tensors in the training loop"
        : best == 8 ? "A process pool started in the training loop"
        : logging   ? "Logging in the training loop"
        : convert   ? "Data conversion in the training loop"
        : best == 0 ? "Input preparation in the training loop"
        : best == 3 ? "I/O in the training loop"
        : best == 2 ? "Synchronisation in the training loop"
        : best == 4 ? "Waiting in the training loop"
        : best == 5 ? "Waiting for input in the training loop"
                    : "Python code in the training loop");
    fmt(d->summary, sizeof(d->summary),
        "%.0f%% of training time is outside the model and the DataLoader: %.0f%% in %s "
        "(%s:%d), %s",
        100 * share, 100 * fshare, f->func, f->file, f->line,
        convert ? "tensors built from host data" : dc_kind_words(f->kind));
    d->score = share;
    ev(d, "unlabelled_share", share,
       "%.0f%% of %.0f stack samples of the training thread fell outside known phases%s",
       100 * sshare, train, gcs > 0 ? " (of the time outside GC pauses)" : "");
    for (int i = 0; i < c->nfunc && i < 4; i++)
        if (c->funcs[i].samples / train >= 0.03)
            ev(d, "function_share", c->funcs[i].samples / train, "%.0f%% in %s (%s:%d): %s",
               100 * c->funcs[i].samples / train, c->funcs[i].func, c->funcs[i].file,
               c->funcs[i].line,
               framework_entry(c, &c->funcs[i]) ? "the framework's own loop, not counted"
                                                 : dc_kind_words(c->funcs[i].kind));
    if (isfinite(r->sum_interval_ns) && r->sum_interval_ns > 0)
        ev(d, "data_wait_share", r->sum_phase_ns[PH_DATA] / r->sum_interval_ns,
           "DataLoader wait %.0f%% of step time (this time is not in a DataLoader)",
           100 * r->sum_phase_ns[PH_DATA] / r->sum_interval_ns);
    if (best == 8) {
        rec(d, "Start the pool once, before the loop, and keep it: %s:%d starts a pool of "
               "processes and stops it again (%.0f%% of training time: each worker is forked or "
               "spawned, and joined). Submit each step's work to the one pool, and submit the "
               "next step's before training on this one so it is ready in time (or move the work "
               "into a Dataset served by a DataLoader with persistent workers).",
            f->file, f->line, 100 * ks[8] / train);
    } else if (best == 7) {
        rec(d, "Print numbers, not tensors, and not every step: %s:%d turns tensors into text "
               "(%.0f%% of training time), and formatting a tensor walks its elements in Python. "
               "Print loss.item() (one float) or a few summary numbers every N steps; keep "
               "whole tensors for a debugger or torch.save.",
            f->file, f->line, 100 * fshare);
    } else if (logging && strcmp(c->framework, "lightning") == 0) {
        rec(d, "Log less in training_step: %s:%d takes %.0f%% of training time, and Lightning "
               "processes every self.log call each step whatever log_every_n_steps says "
               "(on_epoch=True also accumulates each value, prog_bar=True refreshes the bar). "
               "Log fewer values, only every N batches (`if batch_idx %% 50 == 0:`), and with "
               "on_epoch=False where the epoch mean is not needed.",
            f->file, f->line, 100 * fshare);
    } else if (logging) {
        rec(d, "Log every N steps, not every step: %s:%d takes %.0f%% of training time. Keep "
               "the metrics as tensors and log their mean every 50 or 100 steps (one .item() "
               "and one call to the logger per interval).",
            f->file, f->line, 100 * fshare);
    } else if (convert) {
        rec(d, "%s:%d converts host data to tensors or arrays every step (%.0f%% of training "
               "time): convert the dataset once, before the loop, and index the result in the "
               "step (or let a DataLoader convert one batch at a time when it does not fit in "
               "memory).",
            f->file, f->line, 100 * fshare);
    } else if ((best == 0 || best == 1) && permutes_at(c, f)) {
        rec(d, "%s:%d permutes the whole index range to draw one batch: np.random.choice(N, k, "
               "replace=False) and torch.randperm(N)[:k] cost O(N) every step (64 and 28 ms for "
               "N = 2M here). Shuffle once per epoch and take consecutive slices of the "
               "permutation, or draw with np.random.default_rng().choice (0.02 ms) or "
               "torch.randint when repeats are fine.",
            f->file, f->line);
    } else if (best == 0) {
        rec(d,
            "Prepare batches off the training thread: turn %s into a Dataset/IterableDataset "
            "served by a DataLoader with num_workers>0 (or a background thread filling a queue), "
            "so the next batch is ready when the step ends.",
            f->func);
        rec(d, "Make each batch cheaper: vectorise %s (one torch/numpy call instead of a Python "
               "loop), pre-tokenise or preprocess the dataset offline, memory-map it.",
            f->func);
    } else if (best == 3 && writes_at(c, f)) {
        rec(d, "Write less often, or off the training thread: buffer what %s writes and flush "
               "(or fsync: it waits for the disk) every N steps or at the end, or hand it to a "
               "background thread.",
            f->func);
    } else if (best == 3) {
        rec(d, "Read ahead: move the reads in %s to a DataLoader with workers or a background "
               "thread, and cache what is read every step.",
            f->func);
    } else if (best == 2) {
        rec(d, "Read results back less often: .item()/.cpu()/printing every N steps, not every "
               "step (each one waits for all queued work).");
    } else if (best == 5 && block) {
        /* the batch function blocks on the training thread (issue 39: a
         * synchronous get_batch() was "waiting for batches from a producer") */
        ev(d, "waits_for_input", ks[5] / train,
           "%.0f%% of the samples wait inside %s (%s:%d) on the training thread: a blocking "
           "call (a sleep, a lock, a remote read), and no producer prepares the next batch "
           "meanwhile",
           100 * ks[5] / train, f->func, f->file, f->line);
        rec(d, "Fetch the next batch while the model trains on this one: serve %s from a "
               "DataLoader with num_workers>0 (its workers prefetch), or call it ahead from a "
               "thread into a small queue.Queue; the wait then overlaps the step instead of "
               "adding to it.",
            f->func);
    } else if (best == 5) {
        ev(d, "waits_for_input", ks[5] / train,
           "%.0f%% of the samples wait for the next batch in %s (%s:%d): its producer is slower "
           "than the step",
           100 * ks[5] / train, f->func, f->file, f->line);
        /* where the producer spends it, when it is a thread of this process */
        if (c->bg.samples >= 0.3 * ks[5])
            ev(d, "producer_share", c->bg.samples / ks[5],
               "meanwhile another thread ran %s (%s:%d) in %.0f%% of them", c->bg.func,
               c->bg.file, c->bg.line, 100 * fmin(1, c->bg.samples / ks[5]));
        if (pool)
            rec(d, "The batch comes from a pool of workers (pool.map, futures) and the loop waits "
                   "for it: prefetch, submitting the next batch (map_async, imap, submit) before "
                   "training on this one, or a DataLoader with num_workers>0, which prefetches; "
                   "add workers while cores are idle.");
        else if (c->bg.samples >= 0.3 * ks[5])
            rec(d, "The producer of batches is slower than the step: its time goes to %s (%s:%d). "
                   "A producer thread shares the GIL with training: move the preparation to a "
                   "DataLoader with num_workers>0 (processes), or make %s cheaper.",
                c->bg.func, c->bg.file, c->bg.line, c->bg.func);
        else
            rec(d, "The producer of batches is slower than the step. A producer thread shares the "
                   "GIL with training: move the preparation to a DataLoader with num_workers>0 "
                   "(processes), or run several producers.");
        rec(d, "Make each batch cheaper: vectorise the preparation (one torch/numpy call instead "
               "of a Python loop per sample), or preprocess the dataset offline.");
    } else if (best == 4) {
        rec(d, "The training thread waits in %s (%s:%d): remove the sleep/lock, or move the "
               "work it waits for off the step.",
            f->func, f->file, f->line);
    } else {
        rec(d, "Move the work in %s (%s:%d) out of the step or make it cheaper: run it every N "
               "steps, vectorise it, or wrap the step in torch.compile.",
            f->func, f->file, f->line);
    }
    rec(d, "The sampled stacks: the report's flame graph (report.html), stacks.speedscope.json "
           "(speedscope.app, Perfetto) and pyprof/stacks-*.folded (flamegraph.pl).");
    (void)kind;
    dr_gpu_side(r, d);
    return 1;
}

int dr_cand_tiny_ops(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    /* host-timed op counts say nothing of a GPU's kernels: launch-bound
     * (rules_gpu.c) reads the kernels themselves */
    if (r->gs.have) return 0;
    /* on a GPU the backward returns once its kernels are queued: its time
     * per node is the launches', not the ops' */
    double per, n;
    if (r->ngpu > 0 || !dc_median_probe(c, &n, &per)) return 0;
    /* against the machine's floor at the time when the probes took it; else
     * against this machine's fastest (TINY_NODE_US) */
    double q, fl;
    int floor = dc_probe_floor(c, &q, &fl);
    if (!(n >= TINY_MIN_NODES) || !(floor ? q <= TINY_FLOOR_RATIO : per <= TINY_NODE_US * TINY_FACTOR))
        return 0;
    double sh[PH_COUNT];
    dc_warm_shares(r, sh);
    double model = 0;
    for (int p = PH_FORWARD; p <= PH_BACKWARD; p++)
        if (isfinite(sh[p])) model += sh[p];
    double over = floor ? 1 / q : TINY_NODE_US / per; /* the share of a node that is overhead */
    if (over > 1) over = 1;
    double score = model * over;
    diag_head(d, "tiny-ops", "Many tiny ops: per-op overhead bounds the step",
              score > 0.9 ? 0.9 : score,
              "backward runs %.0f autograd ops a step at %.1f µs each: at that size each op "
              "costs about what torch's own bookkeeping does (%.1f µs a node of one number on "
              "this CPU%s), not arithmetic; forward and backward are %.0f%% of step time",
              n, per, floor ? fl : TINY_NODE_US, floor ? ", measured beside it" : "", 100 * model);
    ev(d, "graph_nodes", n, "%.0f nodes in the backward graph (median of %d probes)", n,
       c->ngraph);
    ev(d, "backward_us_per_node", per, "backward took %.1f µs a node", per);
    if (floor)
        ev(d, "node_floor_ratio", q,
           "%.2fx the machine's floor beside it (a node of one number: %.1f µs; tiny at %.1fx "
           "or less)", q, fl, TINY_FLOOR_RATIO);
    /* the line that makes the ops: the busiest line of tensor ops outside
     * the model (plain Python lines are host-code's; backward and the
     * optimizer run what the forward built) */
    const dc_proc *pr = c->nproc ? &c->procs[0] : NULL;
    int li = -1, fwd = 0;
    for (int i = 0; pr && i < pr->nlines; i++) {
        if (li < 0 && strcmp(pr->lines[i].kind, "compute") == 0) li = i;
        if (strcmp(pr->lines[i].kind, "forward") == 0) fwd = 1;
    }
    if (li >= 0)
        rec(d, "Vectorise the loop that makes the small ops: batch the work over samples or "
               "positions into whole-tensor ops (the busiest line of tensor ops outside the "
               "model: %s:%d `%s`).",
            pr->lines[li].file, pr->lines[li].line, pr->src[li]);
    else if (fwd)
        rec(d, "The small ops are the model's own (many small layers, or a recurrent layer "
               "unrolled over time steps): a larger batch spreads the per-op cost over more "
               "samples.");
    else
        rec(d, "Vectorise the loop that makes the small ops: batch the work over samples or "
               "positions into whole-tensor ops.");
    rec(d, "torch.compile fuses chains of small ops into one kernel; a larger batch spreads the "
           "per-op cost over more samples.");
    return 1;
}

int dr_cand_eval_often(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    double share = dc_eval_share(r);
    /* with the run waiting for CPUs, its share with those waits left out */
    double batch_ms, step_ms, q, floor = dc_eval_floor_share(r, &batch_ms, &step_ms, &q);
    int held = share >= EVAL_OFTEN_SHARE || floor >= EVAL_OFTEN_SHARE;
    if (!held || !(c->eval_entries >= EVAL_OFTEN_MIN) || !(r->steps > 0)) return 0;
    /* evaluation points, not phases: a loop that evaluates its train and val
     * splits back to back every 20 steps evaluates once every 20 (issue 39
     * read "14 evaluations in 150 steps, one every 11") */
    double points = c->eval_points > 0 && c->eval_points <= c->eval_entries ? c->eval_points
                                                                              : c->eval_entries;
    double every = r->steps / points;
    char how[64];
    if (every < 1.5)
        fmt(how, sizeof(how), "one every step");
    else
        fmt(how, sizeof(how), "one every %.0f steps", every);
    /* many forwards of a row or two each, against training batches many
     * times larger: inference one step at a time (acting in an
     * environment, sampling), not a pass over held-out batches */
    double per = c->eval_fwd / c->eval_entries;
    double rows = c->eval_sized > 0 ? c->eval_rows / c->eval_sized : NAN;
    double batch = r->steps > 0 && r->samples > 0 ? r->samples / r->steps : NAN;
    /* or an "evaluation" spent much in the script's own Python: not a pass
     * of the model over held-out data but a loop around it (a simulator
     * stepped for a reinforcement-learning rollout: data the next steps
     * train on) */
    double host = c->ph_eval > 0 ? c->eval_host / c->ph_eval : NAN;
    int seq = (per >= EVAL_SEQ_FORWARDS && rows <= 2 && !(batch < 8 * rows)) ||
              host >= EVAL_HOST_SHARE;
    /* held at the floors alone: that share, after the contention (whose
     * score is the threads' wait share) that hid it */
    double score = share, wait, used, wshare;
    char at[64] = "";
    if (!(share >= EVAL_OFTEN_SHARE) && dc_waits_for_cpu(r, &wait, &used, &wshare)) {
        double cap = 0.99 * (wshare > 0.9 ? 0.9 : wshare);
        score = floor < cap ? floor : cap;
        fmt(at, sizeof(at), " without the waits for a CPU (%.0f%% with them)", 100 * share);
    }
    diag_head(d, "eval-often",
              seq ? "Inference between training steps takes much of the run"
                  : "Evaluation takes much of the run",
              score > 0.9 ? 0.9 : score,
              "%s is %.0f%% of the loop's time%s: %.0f %s in %.0f training steps (%s)%s",
              seq ? "inference outside training (eval mode or no grad)" : "evaluation",
              100 * (at[0] ? floor : share), at, points,
              seq ? "passes" : "evaluations", r->steps, how,
              seq ? ", each a run of forwards of one or two rows" : "");
    ev(d, "eval_share", share, "evaluation is %.0f%% of the run", 100 * share);
    dc_eval_floor_ev(d, floor, batch_ms, step_ms, q);
    if (points < c->eval_entries)
        ev(d, "evaluations", points,
           "%.0f evaluation points with training between them (%.0f evaluation phases: "
           "model.eval() or forwards without grad, back to back at a point), %.1f s in all",
           points, c->eval_entries, c->eval_s);
    else
        ev(d, "evaluations", c->eval_entries, "%.0f evaluations (model.eval() or forwards "
           "without grad), %.1f s in all", c->eval_entries, c->eval_s);
    if (seq) {
        char tb[48] = "";
        if (isfinite(batch)) fmt(tb, sizeof(tb), " (training batches: %.0f)", batch);
        ev(d, "eval_forwards_per_pass", per, "%.0f forwards a pass, %.1f rows each on average%s",
           per, rows, tb);
        if (host >= EVAL_HOST_SHARE)
            ev(d, "eval_host_share", host,
               "%.0f%% of that time in the script's own Python, outside the model and torch "
               "(an environment or simulator)",
               100 * host);
        rec(d, "If it collects what training learns from (a reinforcement-learning rollout), "
               "batch it: step several environments together and run the model on all of them "
               "in one forward (vectorised environments, or environments written as tensor "
               "ops); a forward of 16 rows costs about what one of a single row does.");
        rec(d, "If it samples to watch progress (text, images), sample less often or fewer "
               "tokens, or do it after training.");
        return 1;
    }
    const char *fw = c->framework;
    const char *less = strcmp(fw, "hf") == 0
                           ? "TrainingArguments(eval_steps=N) with N in the hundreds, or "
                             "eval_strategy=\"epoch\""
                       : strcmp(fw, "lightning") == 0
                           ? "Trainer(val_check_interval=N) with N in the hundreds, or "
                             "check_val_every_n_epoch"
                           : "every N steps (a few hundred) or once an epoch";
    rec(d, "Evaluate less often: %s, instead of %s; evaluating that often costs %.0f%% of the "
           "run for a figure that moves little from one step to the next.",
        less, how, 100 * share);
    rec(d, "Or evaluate on a fixed subset of the validation set%s, with a larger batch and "
           "under torch.no_grad().",
        strcmp(fw, "hf") == 0          ? " (a smaller eval_dataset)"
        : strcmp(fw, "lightning") == 0 ? " (Trainer(limit_val_batches=...))"
                                       : "");
    return 1;
}
