/* The diagnosis: runs every rule of diag_rules[] over a loaded run, folds
 * the findings another explains into it (the fold graph: each rule's
 * folds, checked for cycles once), ranks them and names one primary
 * bottleneck, the secondary findings and notes. The rules are in
 * rules_<family>.c (rules.h); thresholds and reasoning in
 * docs/diagnosis.md (keep the two in step). */
#include "report/diag.h"
#include "report/rules.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"

static void note(diag_result *g, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void note(diag_result *g, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void note(diag_result *g, const char *f, ...)
{
    if (g->nnotes >= 8) return;
    va_list ap;
    va_start(ap, f);
    vsnprintf(g->notes[g->nnotes++], sizeof(g->notes[0]), f, ap);
    va_end(ap);
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

/* "No limit found" is said only while no named phase other than model
 * compute holds NAMED_PHASE_SHARE of the step in the run's own breakdown
 * (whatever else, contention, leads): else the tail names that phase. */
#define NAMED_PHASE_SHARE 0.10
static void limit_tail(const diag_run *r, const dctx *c, const char *none, char *o, size_t n)
{
    static const int ph[] = {PH_DATA, PH_COMM, PH_EVAL, PH_CHECKPOINT};
    static const char *const what[] = {"waiting for data", "communication", "evaluation",
                                       "checkpointing"};
    int best = -1;
    double top = 0;
    for (int i = 0; i < 4; i++) {
        double s = c->share[ph[i]];
        /* evaluation between steps may be kept out of the steps: its share of the loop */
        if (ph[i] == PH_EVAL && !(s >= dc_eval_share(r))) s = dc_eval_share(r);
        if (s >= NAMED_PHASE_SHARE && s > top) top = s, best = i;
    }
    if (best < 0)
        fmt(o, n, "%s", none);
    else
        fmt(o, n, "%s takes %.0f%% of the loop's time", what[best], 100 * top);
}

static void healthy(const diag_run *r, const dctx *c, dfinding *d)
{
    char tail[96];
    fmt(d->id, sizeof(d->id), "compute-bound");
    d->score = 0;
    if (r->gs.have) {
        /* kernel records, and no rule held: gpu-bound did not either (busy
         * < 85%), so the GPU waited for the host part of every step, for no
         * cause measured */
        fmt(d->id, sizeof(d->id), "undetermined");
        fmt(d->title, sizeof(d->title), "GPU partly idle, no cause found");
        fmt(d->summary, sizeof(d->summary),
            "a kernel ran %.0f%% of each step; the GPU waited for the host the rest, and no "
            "measured cause (input, launches, synchronisation, host code) explains it",
            100 * r->gs.busy_share);
        ev(d, "gpu_busy_share", r->gs.busy_share, "GPU busy %.0f%% of step time (kernel records)",
           100 * r->gs.busy_share);
        ev(d, "kernels_per_step", r->gs.kernels_per_step, "%.0f kernels per step, median %.1f us",
           r->gs.kernels_per_step, r->gs.kernel_us_p50);
        rec(d, "Open trace.json in https://ui.perfetto.dev: the GPU tracks under the process show "
               "where in each step the GPU has nothing to run, beside the host's phases.");
        rec(d, "Label the host's work around those gaps with tpf_range_push/pop (or "
               "trainperf.phase in Python) so the report can attribute it.");
        return;
    }
    if (c->has_gpu) {
        fmt(d->title, sizeof(d->title), "GPU-compute-bound (healthy)");
        limit_tail(r, c, "no input, host or memory limit found", tail, sizeof(tail));
        fmt(d->summary, sizeof(d->summary), "the GPU is busy %.0f%% of the time; %s", c->gpu_util,
            tail);
        ev(d, "gpu_util_pct", c->gpu_util, "GPU utilisation averaged %.0f%%", c->gpu_util);
        if (isfinite(c->share[PH_DATA]))
            ev(d, "data_wait_share", c->share[PH_DATA], "data wait %.0f%% of step time",
               100 * c->share[PH_DATA]);
        f64_rec(r, d);
        dr_rec_less_work(r, d, "");
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
        if (r->python && dc->have_pyprof) {
            /* the run was watched with the zero-code hook: its stacks were
             * sampled and named no cause; say what would tell, not to do
             * what the run already did */
            ev(d, "stack_samples", dc->samples,
               "%.0f stack samples of the training thread named no single cause", dc->samples);
            rec(d, "Take a profiler window of a few steps to see the ops the unexplained time "
                   "runs: `trainperf profile RUN --steps 5` while it runs, or `trainperf run "
                   "--profile 1,1,3`; and label the code between optimizer steps with "
                   "trainperf.phase(\"name\").");
        } else {
            rec(d, "%s",
                r->python ? "Label the rest of the step: trainperf.phase(\"name\") around the code "
                            "between optimizer steps, or run under `trainperf run` (zero-code mode "
                            "samples the training thread's stacks)."
                          : "Label the rest of the step with tpf_range_push/pop so the report can "
                            "attribute it.");
        }
        return;
    }
    fmt(d->title, sizeof(d->title), "Compute-bound on the CPU");
    limit_tail(r, c, "no input, host-code or memory limit found", tail, sizeof(tail));
    fmt(d->summary, sizeof(d->summary), "model compute is %.0f%% of step time; %s",
        100 * compute, tail);
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
            "model compute is %.0f%% of step time, %.0f%% in the optimizer step; %s",
            100 * compute, 100 * opt, tail);
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

static void copy_finding(dfinding *dst, const dfinding *src)
{
    memcpy(dst, src, sizeof(*dst));
}

/* ---- the table ------------------------------------------------------------ */

/* In priority order: equal scores keep it. */
const drule diag_rules[] = {
    {"memory-capacity", "", DN_METRICS | DN_ALERTS, DK_NO_STEPS, dr_cand_memory, NULL},
    {"gpu-oom", "", DN_EVENTS, DK_SHORT | DK_NO_STEPS, dr_cand_gpu_oom, NULL},
    {"gpu-memory-growth", "", DN_EVENTS, DK_SHORT | DK_NO_STEPS, dr_cand_gpu_mem_growth, NULL},
    {"throttling", "", DN_GPU | DN_METRICS, DK_NO_STEPS, dr_cand_throttle, NULL},
    {"input-bound", "storage-io", DN_STEPS | DN_EVENTS, DK_SHORT, dr_cand_input, dr_input_folds},
    {"storage-io", "", DN_STEPS, DK_SHORT, dr_cand_storage_ckpt, NULL},
    {"checkpoint-cost", "", DN_STEPS, DK_SHORT, dr_cand_ckpt_cost, NULL},
    {"input-cost", "", DN_STEPS | DN_EVENTS, DK_SHORT, dr_cand_input_cost, NULL},
    {"communication", "", DN_STEPS | DN_RANKS, DK_SHORT, dr_cand_comm, dr_comm_folds},
    {"straggler", "", DN_STEPS | DN_RANKS | DN_STACKS, DK_SHORT, dr_cand_straggler,
     dr_straggler_folds},
    {"host-bound", "", DN_GPU | DN_SAMPLES, 0, dr_cand_host, NULL},
    {"gpu-bound", "", DN_STEPS | DN_KERNELS, DK_SHORT, dr_cand_gpu_bound, NULL},
    {"launch-bound", "", DN_STEPS | DN_KERNELS, DK_SHORT, dr_cand_launch_bound, NULL},
    {"gpu-sync", "", DN_STEPS | DN_KERNELS | DN_STACKS, DK_SHORT, dr_cand_gpu_sync, NULL},
    {"pageable-copies", "", DN_STEPS | DN_KERNELS, DK_SHORT, dr_cand_pageable, NULL},
    {"gpu-alloc-retries", "", DN_EVENTS, DK_SHORT, dr_cand_alloc_retries, NULL},
    {"unstable", "step-spikes variable-work step-level", DN_STEPS | DN_ALERTS,
     DK_SHORT | DK_NO_STEPS, dr_cand_unstable, dr_unstable_folds},
    {"host-code", "", DN_STEPS | DN_STACKS, DK_SHORT, dr_cand_hostcode, dr_hostcode_gpu_folds},
    {"cpu-contention", "", DN_SAMPLES, 0, dr_cand_contention, NULL},
    {"oversubscription", "", DN_SAMPLES | DN_EVENTS, 0, dr_cand_oversub, NULL},
    {"gc-pauses", "", DN_STEPS | DN_EVENTS, DK_SHORT, dr_cand_gc, NULL},
    {"recompile", "", DN_EVENTS, DK_SHORT, dr_cand_compile, NULL},
    {"gil-contention", "", DN_SAMPLES | DN_EVENTS | DN_STACKS, 0, dr_cand_gil, NULL},
    {"anomaly-detection", "", DN_EVENTS | DN_STACKS, 0, dr_cand_anomaly, NULL},
    {"unused-gradients", "", DN_EVENTS, 0, dr_cand_unused_grads, NULL},
    {"eval-grad", "", DN_EVENTS, 0, dr_cand_eval_grad, NULL},
    {"tiny-ops", "", DN_EVENTS | DN_STACKS, 0, dr_cand_tiny_ops, NULL},
    {"profiler", "", DN_EVENTS | DN_STACKS, 0, dr_cand_profiler, NULL},
    {"python-tracer", "", DN_EVENTS, 0, dr_cand_tracer, NULL},
    {"debug-settings", "", DN_EVENTS, 0, dr_cand_debug, NULL},
    {"ddp-find-unused", "", DN_EVENTS | DN_RANKS, 0, dr_cand_ddp_unused, dr_ddp_unused_folds},
    {"optimizer-remade", "", DN_STEPS | DN_EVENTS, 0, dr_cand_opt_remade, NULL},
    {"eval-often", "", DN_STEPS | DN_EVENTS | DN_STACKS, 0, dr_cand_eval_often, NULL},
    {"uneven-end", "", DN_EVENTS | DN_RANKS, 0, dr_cand_uneven_end, NULL},
};
const int diag_nrules = (int)(sizeof(diag_rules) / sizeof(diag_rules[0]));
#define NRULES (sizeof(diag_rules) / sizeof(diag_rules[0]))

/* the primary when no rule holds, or too little data for any */
const char *const diag_verdicts[] = {"compute-bound", "undetermined", "insufficient-data", NULL};

/* ---- the fold graph ------------------------------------------------------- */

#define MAX_IDS 96

static int id_index(const char **ids, int *n, const char *id, size_t len)
{
    for (int i = 0; i < *n; i++)
        if (strlen(ids[i]) == len && strncmp(ids[i], id, len) == 0) return i;
    if (*n >= MAX_IDS) return -1;
    ids[*n] = id;
    return (*n)++;
}

/* the ids a rule's findings may carry: its id and the words of also */
static int rule_ids(const char **ids, int *n, const drule *u, int *out, int max)
{
    int k = 0, i = id_index(ids, n, u->id, strlen(u->id));
    if (i >= 0) out[k++] = i;
    for (const char *p = u->also; *p && k < max;) {
        size_t len = strcspn(p, " ");
        if (len && (i = id_index(ids, n, p, len)) >= 0) out[k++] = i;
        p += len;
        p += strspn(p, " ");
    }
    return k;
}

/* depth-first: 1 when a cycle is reachable from v (its path left in path) */
static int cycle_from(int v, unsigned char (*edge)[MAX_IDS], int n, int *state, int *path, int *np)
{
    state[v] = 1;
    path[(*np)++] = v;
    for (int w = 0; w < n; w++) {
        if (!edge[v][w]) continue;
        if (state[w] == 1) {
            path[(*np)++] = w;
            return 1;
        }
        if (state[w] == 0 && cycle_from(w, edge, n, state, path, np)) return 1;
    }
    state[v] = 2;
    (*np)--;
    return 0;
}

int diag_folds_acyclic(const drule *rules, int nr, char *why, size_t wn)
{
    const char *ids[MAX_IDS];
    static unsigned char edge[MAX_IDS][MAX_IDS];
    int n = 0, state[MAX_IDS] = {0}, path[MAX_IDS + 1], np = 0;
    memset(edge, 0, sizeof(edge));
    for (int k = 0; k < nr; k++) {
        int from[8], nf = rule_ids(ids, &n, &rules[k], from, 8);
        for (const dfold *f = rules[k].folds; f && f->merge; f++)
            for (int t = 0; t < 3 && f->into.ids[t]; t++) {
                int to = id_index(ids, &n, f->into.ids[t], strlen(f->into.ids[t]));
                for (int i = 0; i < nf && to >= 0; i++)
                    edge[from[i]][to] = 1;
            }
    }
    if (why && wn) why[0] = '\0';
    for (int v = 0; v < n; v++) {
        if (state[v] || !cycle_from(v, edge, n, state, path, &np)) continue;
        int at = 0; /* the path from the node the cycle closes on */
        while (path[at] != path[np - 1]) at++;
        size_t o = 0;
        for (int i = at; i < np && why && o < wn; i++)
            o += (size_t)snprintf(why + o, wn - o, "%s%.*s", i > at ? " -> " : "",
                                  (int)strcspn(ids[path[i]], " "), ids[path[i]]);
        return 0;
    }
    return 1;
}

static pthread_once_t folds_once = PTHREAD_ONCE_INIT;
static int folds_ok;
static void folds_check(void)
{
    folds_ok = diag_folds_acyclic(diag_rules, diag_nrules, NULL, 0);
}

/* Removes candidate at (folded into another finding). */
static void cand_drop(dfinding *cand, int *who, int *nc, int at)
{
    for (int i = at; i + 1 < *nc; i++) {
        copy_finding(&cand[i], &cand[i + 1]);
        who[i] = who[i + 1];
    }
    (*nc)--;
}

/* Every rule's folds, in pass order: a finding another one explains goes
 * into it (its evidence there), or is changed by it. */
static void fold_all(const diag_run *r, const dctx *c, dfinding *cand, int *who, int *nc)
{
    int last = 0;
    for (size_t k = 0; k < NRULES; k++)
        for (const dfold *f = diag_rules[k].folds; f && f->merge; f++)
            if (f->pass > last) last = f->pass;
    for (int pass = 1; pass <= last; pass++)
        for (size_t k = 0; k < NRULES; k++)
            for (const dfold *f = diag_rules[k].folds; f && f->merge; f++) {
                if (f->pass != pass) continue;
                int i = -1;
                for (int j = 0; j < *nc; j++)
                    if (who[j] == (int)k) i = j;
                if (i < 0 || (f->from && !f->from(&cand[i]))) continue;
                int t = dr_select(cand, *nc, &f->into);
                if (t < 0 || t == i) continue;
                dfold_at x = {r, c, cand, *nc};
                if (f->merge(&x, &cand[i], &cand[t]) == DF_DROP) cand_drop(cand, who, nc, i);
            }
}

/* rank by score; stable for equal scores (rule order = priority) */
static void rank_by_score(dfinding *cand, int *who, int nc)
{
    for (int i = 1; i < nc; i++)
        for (int j = i; j > 0 && cand[j].score > cand[j - 1].score; j--) {
            dfinding t;
            copy_finding(&t, &cand[j]);
            copy_finding(&cand[j], &cand[j - 1]);
            copy_finding(&cand[j - 1], &t);
            int w = who[j];
            who[j] = who[j - 1];
            who[j - 1] = w;
        }
}

/* ---- an attached run (`trainperf attach`) --------------------------------- */

/* What a rule reads that only the zero-code hook records: attached, it is
 * not run (diagnosis.attached.unavailable names it). */
#define DN_HOOK (DN_STEPS | DN_EVENTS | DN_STACKS | DN_KERNELS | DN_RANKS)

/* the attached run's own checks, from py-spy's stacks (rules_attached.c) */
static const drule att_rules[] = {
    {"input-bound", "", DN_STACKS, 0, dr_att_input, NULL},
    {"host-code", "", DN_STACKS, 0, dr_att_hostcode, NULL},
};
#define NATT (int)(sizeof(att_rules) / sizeof(att_rules[0]))

/* 1 when rule k needs the hook and no attached check stands for it */
static int att_unavailable(int k)
{
    if (!(diag_rules[k].needs & DN_HOOK)) return 0;
    for (int i = 0; i < NATT; i++)
        if (strcmp(att_rules[i].id, diag_rules[k].id) == 0) return 0;
    return 1;
}

/* The verdicts the stacks and the resources support, no more: the rules
 * that read only resource samples and GPU metrics, and the stack checks. */
static void attached_compute(diag_run *r, const dctx *c)
{
    diag_result *g = &r->diag;
    dfinding cand[NRULES + NATT];
    int who[NRULES + NATT], nc = 0;
    for (int k = 0; k < NATT; k++) {
        memset(&cand[nc], 0, sizeof(cand[nc]));
        if (att_rules[k].check(r, c, &cand[nc])) who[nc] = k, nc++;
    }
    for (size_t k = 0; k < NRULES; k++) {
        if ((diag_rules[k].needs & DN_HOOK) || ((diag_rules[k].needs & DN_SAMPLES) && !c->samples_ok))
            continue;
        memset(&cand[nc], 0, sizeof(cand[nc]));
        if (diag_rules[k].check(r, c, &cand[nc])) who[nc] = NATT + (int)k, nc++;
    }
    rank_by_score(cand, who, nc);
    const dattach *a = &r->at;
    int stacks = a->have && a->samples >= ATT_MIN_SAMPLES;
    int at = 0;
    if (nc > 0 && cand[0].score >= 0.1) {
        copy_finding(&g->primary, &cand[0]);
        at = 1;
    } else if (stacks) {
        dr_att_healthy(r, c, &g->primary);
    } else {
        g->insufficient = 1;
        const char *why = a->sampler_error[0]                              ? a->sampler_error
                          : a->pystacks[0] && strcmp(a->pystacks, "ok") != 0 ? a->pystacks
                                                                             : "";
        fmt(g->insufficient_why, sizeof(g->insufficient_why),
            "no training thread's Python stacks were sampled (%.0f samples%s%s)",
            a->have && isfinite(a->samples) ? a->samples : 0, why[0] ? "; " : "", why);
        fmt(g->primary.id, sizeof(g->primary.id), "insufficient-data");
        fmt(g->primary.title, sizeof(g->primary.title), "Not enough data");
        fmt(g->primary.summary, sizeof(g->primary.summary), "%s", g->insufficient_why);
    }
    /* contention is about the machine: what the stacks say of the run
     * itself follows it, as in a run's diagnosis */
    if (at && stacks && strcmp(cand[0].id, "cpu-contention") == 0 && (nc < 2 || cand[1].score < 0.1))
        dr_att_healthy(r, c, &g->sec[g->nsec++]);
    for (int i = at; i < nc && g->nsec < DIAG_MAX_FINDINGS; i++) copy_finding(&g->sec[g->nsec++], &cand[i]);

    int nun = 0;
    for (int k = 0; k < diag_nrules; k++) nun += att_unavailable(k);
    note(g, "Attached: verdicts from %.0f Python stack samples of %d training process%s "
            "(py-spy, from outside) and the resources; %d findings need the zero-code hook "
            "(`trainperf run`): not available attached (diagnosis.attached.unavailable).",
         a->have && isfinite(a->samples) ? a->samples : 0, a->train_procs,
         a->train_procs == 1 ? "" : "es", nun);
    if (isfinite(a->steps))
        note(g, "Steps: %.0f, told from the stacks (the optimizer's step() entered every %.3f s).",
             a->steps, a->period_s);
    else
        note(g, "Steps: unknown%s%s.", a->steps_why[0] ? ": " : "", a->steps_why);
}

void diag_compute(diag_run *r)
{
    diag_result *g = &r->diag;
    memset(g, 0, sizeof(*g));
    dctx c;
    dr_ctx_make(r, &c);
    pthread_once(&folds_once, folds_check);

    if (r->attached) {
        attached_compute(r, &c);
        goto notes;
    }
    dfinding cand[NRULES]; /* one a rule, at most */
    int who[NRULES];       /* the rule of each */
    int nc = 0;
    for (size_t k = 0; k < NRULES; k++) {
        if ((diag_rules[k].needs & DN_SAMPLES) && !c.samples_ok) continue;
        memset(&cand[nc], 0, sizeof(cand[nc]));
        if (diag_rules[k].check(r, &c, &cand[nc])) who[nc++] = (int)k;
    }
    /* a cycle in the table would fold findings away for ever: none folds
     * then (test_diag.c holds the table acyclic) */
    if (folds_ok) fold_all(r, &c, cand, who, &nc);
    rank_by_score(cand, who, nc);

    /* a short run: step evidence alone carries the step-level findings;
     * resource-based ones need samples (docs/diagnosis.md) */
    int nstep = 0;
    for (int i = 0; i < nc; i++)
        if (diag_rules[who[i]].keep & DK_SHORT) nstep++;
    if (c.steps_ok && !c.samples_ok && nstep > 0) {
        int k = 0;
        for (int i = 0; i < nc; i++)
            if (diag_rules[who[i]].keep & DK_SHORT) copy_finding(&cand[k++], &cand[i]);
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
        else if (r->steps == 0 && r->noroom_procs > 0)
            /* the probes found the disk under their segments full */
            fmt(g->insufficient_why, sizeof(g->insufficient_why),
                "no training steps were recorded: the disk under the probes' segments (live/) was "
                "full, so %.0f process%s could not record and %.0f events were lost",
                r->noroom_procs, r->noroom_procs == 1 ? "" : "es",
                isfinite(r->noroom_events) ? r->noroom_events : 0);
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
            if (diag_rules[who[i]].keep & DK_NO_STEPS)
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

notes:
    /* summaries are sentences */
    g->primary.summary[0] = (char)toupper((unsigned char)g->primary.summary[0]);
    for (int i = 0; i < g->nsec; i++)
        g->sec[i].summary[0] = (char)toupper((unsigned char)g->sec[i].summary[0]);

    /* notes: context a reader should know */
    if (!c.has_gpu)
        note(g, r->gs.have ? "NVML's GPU metrics were not available (%s); the GPU findings come "
                             "from the kernel records."
                           : "GPU metrics were not available, so this diagnosis makes no GPU "
                             "findings (%s).",
             r->nvml_source[0] ? r->nvml_source : (r->ngpu_run ? "no samples" : "no GPU used"));
    /* the kernel figures cover the windows only: say so, and what the rest had */
    if (r->gs.have && r->gs.event_steps > 0)
        note(g,
             "The kernel figures (GPU busy, kernels, copies, waits) come from %.0f warm steps "
             "in CUPTI's windows (`--gpu-trace windows`); the other %.0f steps have their GPU "
             "time from CUDA events only: %.2f ms a step, %.0f%% of their host time.",
             r->gs.warm_steps, r->gs.event_steps, r->gs.gpu_ms, 100 * r->gs.gpu_share);
    if (!r->gs.have && isfinite(r->gs.win_busy_share) && isfinite(r->gs.win_s))
        note(g,
             "No steps, but the GPU's kernel records: a kernel ran %.0f%% of the time over %.0f "
             "s of GPU activity (gpu_steps.csv, tid 0: one row a second). Mark steps "
             "(tpf_step_begin/end) for per-step figures and a verdict.",
             100 * r->gs.win_busy_share, r->gs.win_s);
    if (r->exit_known && r->exit_signal > 0)
        note(g, "The command was ended by signal %d%s.", r->exit_signal,
             r->exit_signal == 9 ? " (SIGKILL: the OOM killer or a job scheduler)" : "");
    else if (r->exit_known && r->exit_code > 0 && r->cause.fail_error[0]) {
        /* where it failed, from the exception the hook recorded */
        char when[96] = "";
        if (isfinite(r->last_end_s) && isfinite(r->duration_s) && r->duration_s > r->last_end_s)
            fmt(when, sizeof(when), ", %.1f s after the last step", r->duration_s - r->last_end_s);
        note(g, "The command failed with status %d: %s%s%s%s. The figures cover the run until "
                "then.",
             r->exit_code, r->cause.fail_error, r->cause.fail_where[0] ? ", raised in " : "",
             r->cause.fail_where, when);
    } else if (r->exit_known && r->exit_code > 0)
        note(g, "The command exited with status %d: the figures cover the run until then.",
             r->exit_code);
    else if (!r->exit_known && r->have_run && !r->attached)
        note(g,
             "The run did not record how it ended (still running, or the collector was killed).");
    if (isfinite(r->noroom_procs) && r->noroom_procs > 0 && r->steps > 0)
        note(g,
             "The disk holding the probes' segments was full: %.0f process%s found no room and "
             "%.0f events were lost: step figures undercount (free space there, or give /dev/shm "
             "room).",
             r->noroom_procs, r->noroom_procs == 1 ? "" : "es",
             isfinite(r->noroom_events) ? r->noroom_events : 0);
    else if (isfinite(r->events_dropped) && r->events_dropped > 0)
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
    if (dr_fired(r, "hang", &th, NULL, 0) && dr_ended_after_loop(r, th) && isfinite(r->duration_s))
        note(g,
             "The program ran %.1f s after its last step and then exited normally (work after "
             "the training loop, or a slow exit), so the hang alert is not a finding.",
             r->duration_s - r->last_end_s);
    else if (dr_fired(r, "hang", &th, NULL, 0) && dr_failed_after_loop(r, th))
        note(g, "The program was running when it raised that exception, after its last step: "
                "the hang alert is not a finding.");
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
    if (r->attached) {
        /* what the stacks told, and the findings only the hook can make */
        const dattach *a = &r->at;
        jw_key(w, "attached");
        jw_obj_begin(w);
        jw_knum(w, "stack_samples", a->have ? a->samples : NAN);
        jw_kint(w, "training_processes", a->train_procs);
        jw_knum(w, "steps", a->steps);
        jw_knum(w, "step_period_s", a->period_s);
        jw_kstr(w, "steps_unknown_why", isfinite(a->steps) ? NULL : a->steps_why);
        jw_key(w, "unavailable");
        jw_arr_begin(w);
        for (int k = 0; k < diag_nrules; k++)
            if (att_unavailable(k)) jw_str(w, diag_rules[k].id);
        jw_arr_end(w);
        jw_obj_end(w);
    }
    jw_obj_end(w);
}
