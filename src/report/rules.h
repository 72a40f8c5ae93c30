/* The rules of the diagnosis: one entry of diag_rules[] (diag.c) each, its
 * check in the file of its family (rules_<family>.c) and what it folds
 * into beside it. A new rule takes one table entry and one function in one
 * file; its thresholds and reasoning go to docs/diagnosis.md, whose rule
 * table a unit test holds against diag_rules[] (test_diag.c). */
#ifndef TPF_REPORT_RULES_H
#define TPF_REPORT_RULES_H

#include "report/rule_util.h"

/* What a rule reads. DN_SAMPLES also gates it: with fewer than MIN_SAMPLES
 * resource samples it is not run; DN_METRICS reads them too, but the rule
 * stands without them (on an alert, the exit, a GPU's own records). */
enum {
    DN_STEPS = 1 << 0,   /* steps.csv */
    DN_SAMPLES = 1 << 1, /* metrics.csv / procs.csv samples */
    DN_EVENTS = 1 << 2,  /* the zero-code hook's events (pyprof/events-*.json) */
    DN_STACKS = 1 << 3,  /* its sampled stacks (profile in the events files) */
    DN_GPU = 1 << 4,     /* GPU records (NVML columns of metrics.csv) */
    DN_RANKS = 1 << 5,   /* two ranks or more (comm/, per-rank steps) */
    DN_ALERTS = 1 << 6,  /* alerts.jsonl */
    DN_METRICS = 1 << 7, /* resource samples, when there are any */
    DN_KERNELS = 1 << 8, /* GPU kernel records joined to steps (summary steps.gpu, gpu_steps.csv) */
};

/* Where a rule's findings stand when the run is short of data. */
enum {
    DK_SHORT = 1 << 0,    /* a run with steps but too few resource samples: from the steps alone */
    DK_NO_STEPS = 1 << 1, /* too little data for a verdict: still listed as secondary */
};

/* A check: 0 when the rule does not hold; else 1 with d filled (d is
 * zeroed): id, title, score (share of step time it explains, 0..1), a
 * summary, evidence and fixes (rule_util.h's fmt/ev/rec). */
typedef int (*drule_check)(const diag_run *r, const dctx *c, dfinding *d);

typedef struct drule {
    const char *id;    /* the finding's id */
    const char *also;  /* other ids its check may name, space-separated ("" none) */
    int needs, keep;   /* DN_*, DK_* */
    drule_check check;
    const dfold *folds; /* what its findings fold into, ended by a zero entry; NULL none */
} drule;

/* The table, in priority order (equal scores keep it), and the verdicts
 * when no rule holds. */
extern const drule diag_rules[];
extern const int diag_nrules;
extern const char *const diag_verdicts[];
/* 1 when the fold graph (each rule's ids -> the ids it folds into) of rules
 * has no cycle; else 0 with the cycle in why ("a -> b -> a"). */
int diag_folds_acyclic(const drule *rules, int n, char *why, size_t wn);

/* ---- the checks and their folds, by family -------------------------------- */

/* rules_memory.c */
int dr_cand_memory(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_gc(const diag_run *r, const dctx *cx, dfinding *d);
/* rules_input.c */
int dr_cand_input(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_storage_ckpt(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_ckpt_cost(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_input_cost(const diag_run *r, const dctx *c, dfinding *d);
extern const dfold dr_input_folds[];
/* rules_hostcode.c */
int dr_cand_host(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_hostcode(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_tiny_ops(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_eval_often(const diag_run *r, const dctx *cx, dfinding *d);
/* rules_contention.c */
int dr_cand_throttle(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_contention(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_oversub(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_gil(const diag_run *r, const dctx *cx, dfinding *d);
/* rules_distributed.c */
int dr_cand_comm(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_straggler(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_ddp_unused(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_uneven_end(const diag_run *r, const dctx *cx, dfinding *d);
extern const dfold dr_comm_folds[], dr_straggler_folds[], dr_ddp_unused_folds[];
/* rules_steps.c */
int dr_cand_unstable(const diag_run *r, const dctx *c, dfinding *d);
extern const dfold dr_unstable_folds[];
/* rules_compile.c */
int dr_cand_compile(const diag_run *r, const dctx *cx, dfinding *d);
/* rules_settings.c */
int dr_cand_anomaly(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_unused_grads(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_eval_grad(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_profiler(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_tracer(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_debug(const diag_run *r, const dctx *cx, dfinding *d);
int dr_cand_opt_remade(const diag_run *r, const dctx *cx, dfinding *d);
/* rules_gpu.c */
int dr_cand_gpu_bound(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_launch_bound(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_gpu_sync(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_pageable(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_gpu_oom(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_alloc_retries(const diag_run *r, const dctx *c, dfinding *d);
int dr_cand_gpu_mem_growth(const diag_run *r, const dctx *c, dfinding *d);
extern const dfold dr_hostcode_gpu_folds[];
/* rules_attached.c: an attached run's verdicts from py-spy's stacks
 * (pyprof/attach.json), not in diag_rules[]: diag.c runs them beside the
 * rules that need no hook */
#define ATT_MIN_SAMPLES 50      /* training-thread samples for a verdict */
#define ATT_HOSTCODE_SHARE 0.50 /* outside every phase: user lines calling tensor ops count too */
#define ATT_MODEL_SHARE 0.50    /* forward + backward + optimizer: compute-bound */
int dr_att_input(const diag_run *r, const dctx *c, dfinding *d);
int dr_att_hostcode(const diag_run *r, const dctx *c, dfinding *d);
void dr_att_healthy(const diag_run *r, const dctx *c, dfinding *d);
/* the GPU's busy share as evidence of a host-time finding (GPU runs only) */
void dr_gpu_side(const diag_run *r, dfinding *d);

#endif
