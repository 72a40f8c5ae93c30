/* Step-time rules: a hang or irregular steps (unstable), a slow step every N
 * steps or a few one-off ones (step-spikes), time that follows the work
 * (variable-work), a level that moved (step-level). Irregular steps fold
 * into the finding that explains them (dr_unstable_folds).
 * Entries of diag_rules[] (diag.c); thresholds in rule_util.h and
 * docs/diagnosis.md. */
#include "report/rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"

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

int dr_cand_unstable(const diag_run *r, const dctx *c, dfinding *d)
{
    double t;
    char m[256];
    int hang = dr_fired(r, "hang", &t, m, sizeof(m)) && !dr_ended_after_loop(r, t) &&
               !dr_failed_after_loop(r, t);
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
    int regress = dr_fired(r, "step_regression", &tr, mr, sizeof(mr));
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

/* ---- folds: irregular steps go into the finding that explains them ------- */

/* the variation (not a hang): unstable steps, a level that moved, a slow
 * step every N steps */
static int variation(const dfinding *d)
{
    return (strcmp(d->id, "unstable") == 0 && strstr(d->title, "stopped") == NULL) ||
           strcmp(d->id, "step-level") == 0 ||
           (strcmp(d->id, "step-spikes") == 0 && dr_has_ev(d, "period_steps"));
}

/* the same but a slow step every N steps: the loop's own, which waiting
 * keeps no period of */
static int variation_unperiodic(const dfinding *d)
{
    return variation(d) && strcmp(d->id, "step-spikes") != 0;
}

static int one_off_spikes(const dfinding *d)
{
    return strcmp(d->id, "step-spikes") == 0 && !dr_has_ev(d, "period_steps");
}

/* a wait for every batch: loaders deliver them in bursts (two workers
 * finish together), the step time follows the wait */
static int waits_each_batch(const dfinding *d)
{
    return strcmp(d->ev[0].name, "data_wait_share") == 0;
}

static int starts_epochs(const dfinding *d)
{
    return dr_has_ev(d, "epoch_start_share");
}

static int waits_for_input(const dfinding *d)
{
    return dr_has_ev(d, "waits_for_input");
}

/* a step-time regression is a finding of its own, never folded */
static int regressed(const dfold_at *x)
{
    return dr_fired(x->r, "step_regression", NULL, NULL, 0);
}

static int into_input(const dfold_at *x, dfinding *from, dfinding *into)
{
    /* contention, when found, explains the variation (pass 10) */
    if (dr_select(x->cand, x->nc, &dr_cpu_wait) >= 0 || regressed(x)) return DF_NO;
    dr_cv_ev(into, x->c, " with the wait for each batch");
    return DF_DROP;
}

/* the slow steps an epoch-start finding explains are not also "a few slow steps" */
static int into_epochs(const dfold_at *x, dfinding *from, dfinding *into)
{
    return DF_DROP;
}

/* a batch from a hand-made producer (a queue fed by a thread) */
static int into_producer(const dfold_at *x, dfinding *from, dfinding *into)
{
    if (regressed(x)) return DF_NO;
    dr_cv_ev(into, x->c, " with the wait for each batch");
    return DF_DROP;
}

/* GC pauses, when they hold the slowest steps */
static int into_gc(const dfold_at *x, dfinding *from, dfinding *into)
{
    if (regressed(x) || !dr_has_ev(from, "slow_steps_gc_share")) return DF_NO;
    dr_cv_ev(into, x->c, ": the slowest steps held the pauses");
    return DF_DROP;
}

/* a thread taking the GIL: the training thread wins it back after a
 * varying number of the other thread's turns */
static int into_gil(const dfold_at *x, dfinding *from, dfinding *into)
{
    dr_cv_ev(into, x->c, ": winning the GIL back makes steps irregular");
    return DF_DROP;
}

/* waiting for a CPU (a level that moved may be the other jobs' load) */
static int into_cpu_wait(const dfold_at *x, dfinding *from, dfinding *into)
{
    dr_cv_ev(into, x->c, ": waiting for a CPU makes steps irregular");
    return DF_DROP;
}

/* The run's own threads queue for the cores (oversubscription without other
 * processes): at least half a core of run-queue wait makes the steps as
 * irregular as another job would (two DDP ranks of two threads on two cores:
 * p99 8x the median, run-queue wait 182% of a core) */
static int own_threads_wait(const dfinding *d)
{
    for (int k = 0; k < d->nev; k++)
        if (strcmp(d->ev[k].name, "runqueue_wait_pct") == 0) return d->ev[k].value >= 50;
    return 0;
}

const dfold dr_unstable_folds[] = {
    {1, variation, {{"input-bound", "storage-io"}, waits_each_batch}, into_input},
    {2, one_off_spikes, {{"input-bound"}, starts_epochs}, into_epochs},
    {3, variation_unperiodic, {{"host-code"}, waits_for_input}, into_producer},
    {4, variation, {{"gc-pauses"}, NULL}, into_gc},
    {9, variation_unperiodic, {{"gil-contention"}, NULL}, into_gil},
    {10, variation_unperiodic, DR_CPU_WAIT, into_cpu_wait},
    {11, variation_unperiodic, {{"oversubscription"}, own_threads_wait}, into_cpu_wait},
    {0},
};
