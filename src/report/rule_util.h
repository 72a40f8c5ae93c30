/* What the rules of the diagnosis share (the rule files, rules_*.c, and
 * the engine, diag.c): their thresholds, the figures every rule reads
 * (dctx), the writers of a finding, the fold types, and the analyses of the
 * loaded run more than one rule uses. It calls only the load layer
 * (report_load.c, load_pyprof.c) and report_ranks.c's rank figures, never
 * a rule. Thresholds and reasoning: docs/diagnosis.md (keep the two in step). */
#ifndef TPF_REPORT_RULE_UTIL_H
#define TPF_REPORT_RULE_UTIL_H

#include <stddef.h>

#include "report/report_load.h"

/* The writers of a finding (diag_base.h) by short names: the rules read
 * better; variables named fmt, ev or rec are left alone. */
#define fmt(...) diag_fmt(__VA_ARGS__)
#define ev(...) diag_ev(__VA_ARGS__)
#define rec(...) diag_rec(__VA_ARGS__)

/* ---- thresholds (docs/diagnosis.md) --------------------------------------- */
#define MIN_STEPS DC_MIN_STEPS
#define MIN_SAMPLES 3
#define INPUT_SHARE 0.20 /* data wait share of step time */
#define INPUT_CLOSE 0.08 /* within this of INPUT_SHARE a run reads either way: both named */
#define INPUT_COST_SHARE 0.10 /* a data wait under INPUT_SHARE that is an "also found" */
#define FSDP_FITS_SHARE 0.05 /* training state over a rank's memory: DDP would do */
#define STRAGGLER_LOAD 1.2   /* the straggler's samples (tokens) a step over the others' */
#define ITER_PER_STEP_MIN 10 /* training iterators before one per step counts */
#define ITER_PER_STEP_MAX 2  /* steps per iterator at most */
#define COMM_SHARE 0.20
#define COMM_TINY_BYTES (64.0 * 1024) /* collectives' bytes per rank and step: latency, not bandwidth */
#define COMM_MINOR 0.05 /* collectives a wait for a CPU explains: minor, after the contention */
/* collectives on one host moving less than this (a rank's bytes a step over
 * their own time) while the ranks wait for CPUs wait for the cores too */
#define COMM_CPU_STARVED_BPS (200.0 * 1024 * 1024)
#define CKPT_SHARE 0.15
#define CKPT_COST_SHARE 0.05 /* checkpoint time that is a finding of its own */
#define IO_IOWAIT_PCT 10.0
#define IO_PSI_PCT 10.0
#define IO_TREE_READ_BPS (1024.0 * 1024.0) /* the tree reads at least 1 MiB/s */
#define MAIN_WAITS_CPU 50.0                /* below this the main process waits rather than works */
#define HOST_GPU_UTIL 70.0
#define HOST_MAIN_CPU 80.0
#define HEALTHY_GPU_UTIL 80.0
#define STRAGGLER_RATIO 1.20
#define STRAGGLER_SAME_CPU 1.25 /* the straggler's CPU over the others': no extra work */
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
#define HOSTCODE_SHARE 0.20   /* unlabelled time that is the user's code */
#define HOSTCODE_MIN_SAMPLES 20
#define HOSTCODE_WARM_STEPS 10  /* steps before the warm ones' shares are used */
#define LEVEL_MIN_STEPS 20
#define LEVEL_LOCAL_CV 0.15 /* step-to-step variation of steady steps */
#define LEVEL_RATIO 1.5     /* highest over lowest level */
#define LEVEL_SEGMENTS 8    /* of the run, for the levels */
#define GIL_MIN_SPAN_S 2.0  /* of the training thread's schedstat readings */
#define GIL_HOG_CPU 0.5     /* the other thread's CPU, share of one core */
#define GIL_HOG_SAMPLES 0.3 /* and seen in Python code in this share of the samples */
#define GIL_SHARE 0.15      /* training-thread sleep that is the GIL's */
#define UNUSED_MIN_SHARE 0.2      /* parameters with a gradient no optimizer uses */
#define EVAL_GRAD_MIN_FWD 3       /* evaluation forwards with grad on, at least */
#define EVAL_GRAD_MIN_SHARE 0.05  /* evaluation's share of the run, at least */
#define EVAL_OFTEN_SHARE 0.4      /* evaluation's share of the loop that is too much */
#define EVAL_OFTEN_MIN 3          /* evaluations, at least */
#define EVAL_HOST_SHARE 0.3       /* of the eval samples in the script's Python: a simulator */
#define EVAL_SEQ_FORWARDS 20      /* forwards a pass, at least, for inference one row at a time */
/* Under CPU contention a wall-clock share is the scheduler's as much as the
 * run's: the same script evaluating every 20 steps read 16-29% of the loop
 * beside four CPU burners, 35-37% without (its own timers), as training's
 * 2-thread ops waited longer for their threads. Both sides at their floor
 * (the low quantile: the batches and steps no wait fell in) compare them
 * on the run's own work. */
/* the fastest 2% (at least the fastest one): at a 64% run-queue share 1 of
 * 49 steps ran without a wait, the next 3.5x slower; the 10% quantile was
 * still a stalled step and halved evaluation's share */
#define EVAL_FLOOR_Q 0.02
#define EVAL_FLOOR_MIN_GAPS 20
#define PROF_MIN_SHARE 0.5   /* of the training the profiler recorded, at least */
#define PROF_COST 0.5        /* score per unit recorded: its cost on small ops (1.8x measured) */
#define TRACER_MIN_TICKS 2   /* 1 s of training checked: a hook is there or not */
/* score: a line tracer (sys.settrace: debuggers, coverage) made an MLP
 * loop with its DataLoader ~1.6x slower (the script 5.4 s against 4.1 s,
 * ~2 s of both importing torch; 1.15-1.3x its steps alone), a call profiler
 * (sys.setprofile: cProfile) ~1.5x (5.2 s); it inflates every Python-side
 * finding (input, host code), so a line tracer leads them */
#define TRACER_COST_LINE 0.5
#define TRACER_COST_CALL 0.3
#define DEBUG_TRACEMALLOC 0.5 /* score per unit of training traced: 2.1x measured */
#define DEBUG_CUDA 0.3        /* a CUDA debugging variable on a GPU run */
#define DEBUG_MINOR 0.05      /* Python's debug allocator: 1.1x, minor */
/* a step at the per-op floor: its backward at <= 3x the cost of a node of
 * a few numbers, and the whole step <= 40 µs a node (an MLP of 16 nodes:
 * 26 µs at batch 1, 31 at batch 64, both bound by overhead; 58-730 µs for
 * models with real work per op, measured here) */
#define SMALL_NODE_US (4 * TINY_NODE_US)
#define SMALL_STEP_US_NODE 45.0
#define INPUT_LINE_SHARE 0.25     /* of the samples waiting for data, in one line */
#define INPUT_LINE_MIN_SAMPLES 5
#define OPT_HEAVY_SHARE 0.3       /* of the step in the optimizer, for its advice */
#define EMB_MIN_SHARE 0.5         /* of the updated parameters in dense embeddings */
#define EMB_FEW_ROWS 0.1          /* rows one forward looks up, of the table, at most */
#define TINY_MIN_NODES 300        /* autograd nodes of one backward, at least */
#define TINY_NODE_US 3.3          /* backward µs a node of tiny tensors, on this machine's CPU */
#define TINY_FACTOR 2             /* at most this many times that: half of it overhead */
/* With the machine's floor beside each probe (the hook: a backward of a
 * chain of ops on one number, taken right after the probed one), a node at
 * most this many times the floor is a tiny op, whatever the CPU's speed at
 * the time (a shared CPU runs 1.7x slower for seconds): a per-sample loss
 * loop measured 0.95-1.03x, the same loss on whole tensors 2.5-2.8x */
#define TINY_FLOOR_RATIO 1.6
#define CONTEND_WAIT_SHARE 0.20 /* run-queue wait / (wait + CPU used) */
#define CONTEND_MIN_WAIT 15.0   /* % of one core */
/* DataLoader workers starved of CPU: their run-queue wait is at least half
 * of the time they wanted a CPU, and 2% of a core each (an idle worker's
 * rare wake-up is not starvation) */
#define LOADER_STARVED_SHARE 0.5
#define LOADER_STARVED_WAIT 2.0
#define LOADER_IDLE_BUSY 0.5   /* fetching share of the workers' span */
#define GC_SHARE 0.05           /* GC pauses / training time */
#define ONEOFF_FACTOR 3.0       /* a slow step: over 3x the median */
#define STEADY_TRIM 0.05        /* share of steps with the longest data waits left out */
#define STEADY_TRIM_MIN 3

/* ---- what every rule reads ------------------------------------------------ */

/* Figures the rules share. */
typedef struct dctx {
    int steps_ok, samples_ok, has_gpu;
    double share[PH_COUNT];
    dfig f;
    double gpu_util, gpu_util_min;
    double main_cpu, tree_cpu, sys_cpu, cpus, idle_cores;
    double iowait, psi_io, psi_mem, psi_mem_full;
    double avail_min_pct, swap_growth;
    int workers;
    double worker_cpu;
} dctx;

/* The figures of r every rule reads (c is filled whole). */
void dr_ctx_make(const diag_run *r, dctx *c);
/* Whether alert `rule` fired: its time and message when asked. */
int dr_fired(const diag_run *r, const char *rule, double *t, char *m, size_t mn);
/* a count from the run directory: 0..1e6, else 0 */
#define count_of(v) diag_int((v), 0, 1e6, 0)
/* Whether the finding carries evidence of that name. */
int dr_has_ev(const dfinding *d, const char *name);
/* The step-time variation as evidence of the finding that explains it. */
void dr_cv_ev(dfinding *d, const dctx *c, const char *why);
/* One recommendation in the words of the run's code: Python (PyTorch) or native. */
void dr_rec_lang(const diag_run *r, dfinding *d, const char *py, const char *native);
/* A phase whose share of step time reaches thr: 1 with d's head filled. */
int dr_phase_rule(const dctx *c, dfinding *d, int ph, double thr, const char *id,
                  const char *title, const char *doing, const char *of);
/* The hang alert fired after the last step and the program then exited 0. */
int dr_ended_after_loop(const diag_run *r, double alert_t);
/* The compute-bound advice (less work per sample: autocast, torch.compile,
 * fused optimizers...; what the run already uses left out); where: "" or
 * " on the GPU". */
void dr_rec_less_work(const diag_run *r, dfinding *d, const char *where);
int dr_failed_after_loop(const diag_run *r, double alert_t);
int dr_comm_error(const char *e);

/* ---- folds: a finding another explains goes into it ----------------------- */

/* Which finding a fold goes into: the last candidate with ids[0] that pred
 * accepts (NULL: any), else the same with ids[1], ... */
typedef struct dsel {
    const char *ids[3];
    int (*pred)(const dfinding *d);
} dsel;

/* The candidates while the folds run. */
typedef struct dfold_at {
    const diag_run *r;
    const dctx *c;
    dfinding *cand;
    int nc;
} dfold_at;

enum { DF_NO, DF_DROP, DF_KEEP }; /* not folded; folded in and gone; both stay, changed */

/* One fold of a rule's finding (from) into another (into). Folds run in
 * `pass` order over every rule: a fold reads findings that an earlier one
 * may have changed or removed. from: which of the rule's findings folds
 * (NULL: any); merge: DF_NO, or it added its evidence and says whether the
 * rule's finding goes (DF_DROP) or stays (DF_KEEP). */
typedef struct dfold {
    int pass;
    int (*from)(const dfinding *d);
    dsel into;
    int (*merge)(const dfold_at *x, dfinding *from, dfinding *into);
} dfold;

/* The index of the candidate s selects, -1 when none. */
int dr_select(const dfinding *cand, int nc, const dsel *s);
/* The finding that says the run waited for a CPU: cpu-contention, else an
 * oversubscription by a busy process the run started beside training. */
int dr_waits_for_cpu(const dfinding *d);
#define DR_CPU_WAIT {{"cpu-contention", "oversubscription"}, dr_waits_for_cpu}
extern const dsel dr_cpu_wait;

/* ---- analyses of the loaded run that several rules use --------------------- */

/* The user function (not the loop's own line) where the training thread's
 * samples waiting for data fell most, loading in the main process (no
 * workers): its lines most first (a Dataset's __getitem__ spends the wait on
 * a few lines: the pandas row and the tensor made of it) and the function's
 * share of those samples. 1 when that share is >= 25%, else 0. */
#define DC_INPUT_LINES 3
typedef struct dc_input_fn {
    const dc_func *line[DC_INPUT_LINES];
    const char *src[DC_INPUT_LINES];
    int n;
    double share;
} dc_input_fn;
int dc_input_line(const dcause *c, dc_input_fn *o);
/* The user line that rank's training thread spent a share of its samples in
 * that most exceeds the other ranks' mean share of it (work only it does):
 * 1 with *f, *src and the two shares set when it leads by >= 20 points and
 * holds >= 25% of its samples, else 0. */
int dc_rank_only_line(const dcause *c, int rank, const dc_func **f, const char **src,
                      double *share, double *others);

/* The run's steady-step levels: 1 when step-to-step changes are small
 * (robust: their median) while the level over the run moved by 1.5x or
 * more; *local the step-to-step variation (CV), *lo, *hi the lowest and
 * highest level (ms) and *from, *to the first and last. */
int dc_level_shift(const diag_run *r, double *local, double *lo, double *hi, double *from,
                   double *to);
/* The slow steps that began an epoch (a new DataLoader iterator): how many
 * (*n), their mean training ms, and their excess over the median step as
 * a share of training time. */
double dc_epoch_start_cost(const diag_run *r, double p50_ms, int *n, double *mean_ms);
/* The correlation of the steps' training time with their work, and the
 * work's coefficient of variation; NAN when not known (too few steps,
 * work not counted or constant). */
double dc_work_corr(const diag_run *r, double *work_cv);

/* A CPU run whose steps are at the per-op floor (median step p50_ms over
 * the probed backward's nodes): 1 with the nodes and the step's µs a node. */
int dc_small_steps(const diag_run *r, double p50_ms, double *nodes, double *step_us_node);
/* The fix for DDP's find_unused_parameters=True, for the communication
 * finding too: 2 when it names parameters that never got a gradient, 1
 * for the flag alone, 0 ("") when the run does not set it. */
int dc_ddp_unused_advice(const diag_run *r, char *out, size_t n);
/* sh[PH_COUNT]: each phase's share of step time over the warm steps (after
 * step 0), or over all steps when fewer than 2 x DC_MIN_STEPS */
void dc_warm_shares(const diag_run *r, double *sh);
/* the share of the model's parameters in float64 (NaN: not known) */
double dc_f64_share(const diag_run *r);
/* The optimizer's share of the warm step (a closure's forward and backward
 * left out), and the advice when it is a large part of a compute-bound step:
 * sparse embeddings, a fused or foreach update, a larger batch (not when
 * small: the per-op floor's advice says it). 1 when it added any. */
double dc_optimizer_share(const diag_run *r);
int dc_optimizer_advice(const diag_run *r, dfinding *d, double share, int small);
/* Name the measured cause of the slowest steps in an unstable-step finding;
 * returns the share of the slow steps explained by one-off causes (compile,
 * epoch boundaries), 0..1. */
double dc_explain_variability(const diag_run *r, dfinding *d, double p50_ms);
/* Slow steps that recur every *period steps (logging histograms, a
 * periodic evaluation left in the step, a manual gc.collect): 1 when at
 * least 3 of the steps over 3x the median, and 70% of them, fall on one
 * residue of the longest such period; *nmatch those steps, *mean_ms their
 * mean, *first the earliest. 0 otherwise. */
int dc_periodic(const diag_run *r, double p50_ms, long long *period, int *nmatch,
                double *mean_ms, long long *first);
/* The coefficient of variation of the warm steps' training time with the
 * slowest 1% (at least 3) left out: a spread that is not carried by a few
 * outliers (the first steps after warm-up, one stall). NAN with < 10. */
double dc_trimmed_cv(const diag_run *r);
/* Data wait / training time of the warm steps with the few steps that
 * waited longest left out (epoch starts, worker start-up, one slow batch):
 * the wait a run has on every step. *ntrim gets how many were left out.
 * NAN with fewer than 5 steps. */
double dc_steady_data_share(const diag_run *r, int *ntrim);
/* The median of the data-wait share over the run's windows of steps, the
 * first (start-up: workers starting, the first batches) left out; NAN with
 * fewer than 4 such windows. *lo, *hi: the lowest and highest. */
double dc_window_data_share(const diag_run *r, double *lo, double *hi);
/* The loader workers' run-queue wait as a share of their wait + CPU (0..1)
 * when they were starved of CPU, else NAN: the share ≥ LOADER_STARVED_SHARE,
 * the wait ≥ LOADER_STARVED_WAIT % of a core per worker, and the workers
 * fetched batches less than LOADER_IDLE_BUSY of their time (spare capacity:
 * slow storage or heavy batches keep them fetching). *wait gets their mean
 * wait per worker (% of a core), *busy their fetching share, when known. */
double dc_loader_starved(const diag_run *r, double *wait, double *busy);
/* The share of the run evaluating (of the steps' intervals; else the
 * hook's eval time over the run). */
double dc_eval_share(const diag_run *r);
/* The run's threads waited for a CPU (cpu-contention's test of the wait:
 * run-queue wait >= CONTEND_MIN_WAIT % of a core and >= CONTEND_WAIT_SHARE
 * of wait + CPU used): 1 with *wait (% of a core), *used and *share set
 * (when known), else 0. */
int dc_waits_for_cpu(const diag_run *r, double *wait, double *used, double *share);
/* Evaluation's share of the loop with the waits for a CPU taken out of
 * both sides, on a run whose threads waited for one (dc_waits_for_cpu):
 * an evaluation batch at a low quantile of the gaps between evaluation
 * forwards, a training step at the same quantile of the warm steps, each
 * times its count; the quantile is EVAL_FLOOR_Q. NAN without contention or with fewer than
 * EVAL_FLOOR_MIN_GAPS gaps or DC_MIN_STEPS steps. *batch_ms, *step_ms:
 * the two floors; *q the quantile. */
double dc_eval_floor_share(const diag_run *r, double *batch_ms, double *step_ms, double *q);
/* Its evidence (eval_floor_share) into d; nothing when floor is NAN. */
void dc_eval_floor_ev(dfinding *d, double floor, double batch_ms, double step_ms, double q);
/* GC pauses while training (less those in a compile and after the last
 * step) over training time; *npause the pauses of >= 2 ms. */
double dc_gc_pause(const diag_run *r, int *npause);
/* The forward and backward a closure ran inside the optimizer step, as a
 * share of the warm step. */
double dc_closure_extra_share(const diag_run *r);
/* The median probe of one backward's graph (events "graph"): 1 with its
 * nodes and its µs a node, 0 with none. */
int dc_median_probe(const dcause *c, double *nodes, double *us_node);
/* The median over the probes of a node's cost against the machine's floor
 * taken beside it, and the floor's median in µs: 0 when a probe has no
 * floor (a run recorded before the hook took one). */
int dc_probe_floor(const dcause *c, double *ratio, double *floor_us);
/* The words for a kind of host code (dc_func.kind). */
const char *dc_kind_words(const char *k);

#endif
