/* Contention rules: the machine takes the run's speed: other jobs' CPU use
 * (cpu-contention), more threads than cores (oversubscription), another
 * Python thread holding the GIL (gil-contention), GPU clocks slowed
 * (throttling).
 * Entries of diag_rules[] (diag.c); thresholds in rule_util.h and
 * docs/diagnosis.md. */
#include "report/rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"

int dr_cand_throttle(const diag_run *r, const dctx *c, dfinding *d)
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

int dr_cand_contention(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    double wait, used, share;
    if (!dc_waits_for_cpu(r, &wait, &used, &share)) return 0;
    double cpus = c->usable_n ? round(c->usable_sum / c->usable_n) : (r->cpus > 0 ? r->cpus : NAN);
    double sys = r->cpu.n ? r->cpu.sum / r->cpu.n : NAN; /* % of all cores */
    double outside = isfinite(sys) && r->cpus > 0 ? sys / 100 * r->cpus - used / 100 : NAN;
    if (outside < 0) outside = 0;
    /* the tree itself wanting more threads than cores is oversubscription,
     * its own finding; contention is others taking the cores */
    if (!(outside >= 0.3)) return 0;
    diag_head(d, "cpu-contention", "CPU contention", share > 0.9 ? 0.9 : share,
              "the run's threads waited for a CPU %.0f%% of the time they wanted one: other "
              "processes used %.1f of %.0f cores",
              100 * share, outside, isfinite(cpus) ? cpus : 0.0);
    ev(d, "runqueue_wait_pct", wait,
       "run-queue wait %.0f%% of a core (schedstat), against %.0f%% of a core of CPU used", wait,
       used);
    ev(d, "cpu_outside_tree_cores", outside, "processes outside the run used %.1f cores", outside);
    if (r->psi_cpu.n)
        ev(d, "psi_cpu_some_pct", r->psi_cpu.sum / r->psi_cpu.n,
           "some task waited for a CPU %.0f%% of the time (PSI cpu)", r->psi_cpu.sum / r->psi_cpu.n);
    if (c->thr_n && c->thr_sum / c->thr_n > 1)
        ev(d, "cgroup_throttled_pct", c->thr_sum / c->thr_n,
           "the cgroup's CPU quota throttled it %.0f%% of the time", c->thr_sum / c->thr_n);
    rec(d, "Run where the cores are free, or reserve them: a scheduler allocation with "
           "exclusive cores, taskset/cpuset for this run, or stop the other jobs.");
    rec(d, "Until then, use fewer threads than the cores you actually get (torch.set_num_threads "
           "/ OMP_NUM_THREADS): threads that wait for a core slow every step.");
    return 1;
}

#define OTHER_BUSY_CPU 40  /* % of one core: a process of the run that computes */
#define OTHER_MIN_SAMPLES 4

/* The processes of the run that are neither the training processes (the
 * hook runs in them) nor DataLoader workers, yet kept a core busy: a
 * helper the script started (an evaluation job, a data converter) that
 * takes cores from training. Their count, the cores they used, and the
 * busiest in *top (-1 when none). */
static double other_busy(const diag_run *r, double *cores, int *top)
{
    const dcause *c = &r->cause;
    double n = 0, best = 0;
    *cores = 0;
    *top = -1;
    for (int i = 0; i < r->noproc; i++) {
        double m = r->oproc[i].n >= OTHER_MIN_SAMPLES ? r->oproc[i].cpu_sum / r->oproc[i].n : 0;
        int hooked = 0;
        for (int k = 0; k < c->npypid; k++)
            hooked |= c->pypid[k] == r->oproc[i].pid;
        if (hooked || r->oproc[i].loader || !(m >= OTHER_BUSY_CPU)) continue;
        n++;
        *cores += m / 100;
        if (m > best) best = m, *top = i;
    }
    return n;
}

int dr_cand_oversub(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    double cores = c->usable_n ? round(c->usable_sum / c->usable_n) : (r->cpus > 0 ? r->cpus : NAN);
    if (!isfinite(cores) || cores <= 0) return 0;
    double procs = c->nprocs_py > 1 ? c->nprocs_py : 1;
    double threads = isfinite(c->torch_threads) && c->torch_threads > 0 ? c->torch_threads : NAN;
    double workers = c->loader_workers * procs;
    double want = isfinite(threads) ? threads * procs + workers : NAN;
    /* while it trained (start-up, one thread importing, dilutes the mean
     * of a short run), or over the run where too few samples fell there */
    double runnable = c->tn_n >= 2 ? c->tn_sum / c->tn_n
                      : c->runnable_n ? c->runnable_sum / c->runnable_n : NAN;
    double wait = c->tq_n >= 2 ? c->tq_sum / c->tq_n : c->runq_n ? c->runq_sum / c->runq_n : NAN;
    /* loader workers count when they compute (sleeping ones wait on I/O) */
    double wcpu = r->worker_cpu.n ? r->worker_cpu.sum / r->worker_cpu.n : NAN;
    double busy_workers = isfinite(wcpu) && wcpu >= 40 ? workers : 0;
    /* other busy processes of the run count with the cores they used */
    double ocores;
    int top = 0;
    double others = c->have_pyprof ? other_busy(r, &ocores, &top) : 0;
    if (!others) ocores = 0;
    want = isfinite(threads) ? threads * procs + busy_workers + round(ocores) : NAN;
    /* the run asks for more busy threads than its cores, and its threads
     * were seen queueing: the configuration, confirmed by the scheduler */
    int cfg = isfinite(want) && want > cores * 1.25;
    /* (as clearly as the configuration: 2.5 runnable threads on 2 cores
     * with 41% of a core waiting was two spawn workers importing torch
     * beside a healthy loop) */
    int meas = isfinite(runnable) && runnable > cores * 1.25 && isfinite(wait) && wait >= 50;
    if (!cfg || !meas) return 0;
    workers = busy_workers;
    fmt(d->id, sizeof(d->id), "oversubscription");
    fmt(d->title, sizeof(d->title), "CPU oversubscription");
    char more[96] = "";
    if (round(ocores) >= 1)
        fmt(more, sizeof(more), " + %.0f core%s of %.0f other process%s of the run",
            round(ocores), round(ocores) == 1 ? "" : "s", others, others == 1 ? "" : "es");
    if (isfinite(want))
        fmt(d->summary, sizeof(d->summary),
            "the run asks for %.0f busy threads (%.0f intra-op thread%s x %.0f process%s + %.0f "
            "loader worker%s%s) on %.0f usable cores",
            want, threads, threads == 1 ? "" : "s", procs, procs == 1 ? "" : "es", workers,
            workers == 1 ? "" : "s", more, cores);
    else
        fmt(d->summary, sizeof(d->summary),
            "%.1f threads of the run were runnable on average for %.0f usable cores", runnable,
            cores);
    double s = (want - cores) / want;
    d->score = s < 0.2 ? 0.2 : s > 0.8 ? 0.8 : s;
    if (isfinite(runnable))
        ev(d, "runnable_threads", runnable, "%.1f runnable threads on average (max %.0f)", runnable,
           c->runnable_max);
    if (isfinite(wait)) ev(d, "runqueue_wait_pct", wait, "run-queue wait %.0f%% of a core", wait);
    ev(d, "usable_cores", cores, "%.0f cores usable (affinity and cgroup quota)", cores);
    if (round(ocores) >= 1) {
        ev(d, "other_procs_cores", ocores,
           "%.0f other process%s of the run (not training, not DataLoader workers) used %.1f "
           "cores; the busiest, pid %d (%s), %.0f%% of one",
           others, others == 1 ? "" : "es", ocores, r->oproc[top].pid, r->oproc[top].name,
           r->oproc[top].cpu_sum / r->oproc[top].n);
        rec(d, "Pid %d (%s), started within the run, kept %.0f%% of a core busy while the model "
               "trained: stop it, run it after training or elsewhere, or leave it a core of its "
               "own (fewer intra-op threads).",
            r->oproc[top].pid, r->oproc[top].name, r->oproc[top].cpu_sum / r->oproc[top].n);
    }
    double left = cores - workers - round(ocores);
    int per = (int)floor((left > procs ? left : procs) / procs);
    if (per < 1) per = 1;
    rec(d,
        "Give each process %d intra-op thread%s: torch.set_num_threads(%d) at start-up or "
        "OMP_NUM_THREADS=%d (torchrun sets 1 per process unless told otherwise).",
        per, per == 1 ? "" : "s", per, per);
    if (workers > 0)
        rec(d, "Fewer DataLoader workers (num_workers): %.0f worker processes compete with the "
               "model's threads for %.0f cores.",
            workers, cores);
    rec(d, "Or use fewer processes per node (torchrun --nproc-per-node) so threads x processes "
           "+ workers fits the cores.");
    return 1;
}

/* Another Python thread of the process takes the GIL from the training
 * thread: the training thread sleeps (neither on a CPU nor waiting for
 * one: schedstat) through much of its steps, outside the DataLoader and
 * its own waits, while a thread running Python keeps a core busy. Every
 * torch call gives the GIL up and must win it back, after up to the switch
 * interval (5 ms) of the other thread's Python. */
int dr_cand_gil(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    double train = c->ph_train + c->ph_compile;
    if (!(c->tt_span_s >= GIL_MIN_SPAN_S) || !(c->hog_cpu_share >= GIL_HOG_CPU) ||
        !(train >= HOSTCODE_MIN_SAMPLES) || !(c->hog.samples >= GIL_HOG_SAMPLES * c->samples))
        return 0;
    double on = c->tt_cpu_s / c->tt_span_s, q = c->tt_runq_s / c->tt_span_s;
    double sleep = 1 - on - q;
    /* the sleeps that are the loop's own: waiting for batches, for a
     * producer, for I/O or results, in a sleep or a lock */
    double data = r->sum_interval_ns > 0 ? r->sum_phase_ns[PH_DATA] / r->sum_interval_ns : 0;
    double own = 0;
    for (int i = 0; i < c->nfunc; i++)
        if (strcmp(c->funcs[i].kind, "python") != 0 && strcmp(c->funcs[i].kind, "input") != 0)
            own += c->funcs[i].samples / train;
    /* with a GPU the training thread also sleeps while the autograd
     * engine's device threads run backward */
    double bwd = 0;
    if (r->ngpu > 0 && r->sum_interval_ns > 0)
        bwd = r->sum_phase_ns[PH_BACKWARD] / r->sum_interval_ns;
    double share = sleep - data - own - bwd;
    if (!(share >= GIL_SHARE)) return 0;
    if (share > 0.9) share = 0.9;
    const dc_func *h = &c->hog;
    diag_head(d, "gil-contention", "Another Python thread holds the GIL", share,
              "the training thread slept %.0f%% of its time, not in the DataLoader nor a wait of "
              "its own, while thread \"%s\" ran Python on %.0f%% of a core in %s (%s:%d): they "
              "share one interpreter lock",
              100 * share, c->hog_name, 100 * c->hog_cpu_share, h->func, h->file, h->line);
    ev(d, "training_thread_sleep_share", sleep,
       "training thread: on a CPU %.0f%%, waiting for a CPU %.0f%%, asleep %.0f%% of %.1f s "
       "(schedstat)",
       100 * on, 100 * q, 100 * sleep, c->tt_span_s);
    ev(d, "hog_cpu_share", c->hog_cpu_share,
       "thread \"%s\" used %.0f%% of a core; the sampler found it in %s (%s:%d)", c->hog_name,
       100 * c->hog_cpu_share, h->func, h->file, h->line);
    if (data > 0.01 || own > 0.01)
        ev(d, "own_wait_share", data + own,
           "of the sleep, %.0f%% of the time was the loop's own (DataLoader %.0f%%, waits and "
           "I/O %.0f%%) and is not counted",
           100 * (data + own), 100 * data, 100 * own);
    rec(d, "Move %s out of the training process's threads: a multiprocessing.Process (or a "
           "DataLoader worker, if it makes batches) has an interpreter of its own.",
        h->func);
    rec(d, "Or make it hold the GIL less: run it less often, sleep between rounds, or "
           "vectorise it (numpy/torch calls release the GIL while they compute).");
    rec(d, "As a stopgap, sys.setswitchinterval(0.001) makes the thread hand the GIL back "
           "sooner (default 5 ms), at some cost to its own speed.");
    return 1;
}
