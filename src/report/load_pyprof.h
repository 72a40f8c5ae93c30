/* What the zero-code hook and the sched source recorded, loaded for the
 * diagnosis: where unlabelled time goes (the sampled Python stacks), GC
 * pauses, torch.compile, evaluation, DataLoader epochs, settings, and who got
 * the CPU (run-queue wait). The bottom layer of report/: it reads pyprof/ and
 * takes the rows report_load.c hands it, and calls nothing of report/ above
 * it. The rules that read these figures: report/rules.h. */
#ifndef TPF_REPORT_LOAD_PYPROF_H
#define TPF_REPORT_LOAD_PYPROF_H

#define DC_MAX_FUNCS 8
#define DC_MAX_EVENTS 256 /* compile events, GC pauses and epochs kept, each */
#define DC_MAX_SLOW 32    /* slowest training steps kept for cause matching */
/* steps numbered below this are the run warming up (allocator, optimizer
 * state, lazy initialisation, caches): slow for a known reason, so not
 * instability; across 400 saved runs a step of 1-4 was 3x the median 2-3x
 * as often as one past 50 */
#define DC_WARM_STEPS 5
#define DC_MIN_STEPS 5 /* steps a verdict on them needs */
#define DC_LEVELS 32      /* buckets of the step-time level over the run */
#define DC_DWIN 16        /* windows of the data-wait share over the run */

#include <stddef.h>

#include "core/sketch.h"

typedef struct dc_func {
    char func[96];
    char file[160]; /* base name */
    int line;
    char kind[12]; /* input, python, sync, io, wait, input-wait, input-pool, format, pool-start */
    double samples;
    double lead; /* samples of the process whose line and kind these are */
} dc_func;

/* One process's training thread as its samples saw it: its rank (-1 none)
 * and the user lines they fell in, most first (profile.lines_top) */
#define DC_MAX_PROCS 32
#define DC_PROC_LINES 10
typedef struct dc_proc {
    int pid, rank;
    double samples;
    int nlines;
    dc_func lines[DC_PROC_LINES]; /* kind: the phase most of the line's samples were in */
    char src[DC_PROC_LINES][84];  /* the line's source text */
} dc_proc;

typedef struct dc_event {
    double t, dur; /* seconds since run start */
    char what[200];
} dc_event;

typedef struct dc_slow {
    double start, end, ms; /* training time of the step (eval/checkpoint taken out) */
    long long step;        /* its number in the stream (-1: unknown) */
} dc_slow;

/* An optimizer class of the run (settings "optimizers"): the parameters it
 * updates, whether its update runs fused or foreach, and whether it could */
typedef struct dc_opt {
    char cls[32];
    double params;
    int fused, foreach, can_fuse, can_foreach;
} dc_opt;

/* A dense embedding table of the model (settings "embeddings"): rows,
 * width, rows one forward looks up (NaN: not seen), whether an optimizer
 * updates it and whether another module shares its weight */
typedef struct dc_emb {
    char name[64];
    double rows, dim, lookups;
    int optimized, tied;
} dc_emb;

/* A DistributedDataParallel model (settings "ddp"): find_unused_parameters,
 * static_graph; its trainable parameters, those never seen with a gradient
 * (over `walks` looks at the gradients) and the first of their names */
typedef struct dc_ddp {
    int find_unused, static_graph;
    double params, never, walks;
    char never_names[120];
} dc_ddp;

/* The CUDA caching allocator as the hook read it (events' "cuda"): the
 * process that held the most. */
typedef struct dgpu_alloc {
    int have;
    double total, alloc_first, alloc_last, alloc_peak, reserved_peak, reserved_last;
    double t_first, t_last, retries, ooms, oom_events, oom_snapshots;
    double t_q1, alloc_q1, alloc_mid; /* the series at its first quarter and its middle */
} dgpu_alloc;

typedef struct dcause {
    int have_pyprof; /* pyprof/events-*.json found */
    int nprocs_py;   /* processes that wrote one */
    double hz, samples, ph_other, ph_train, ph_startup, ph_eval, ph_compile, ph_data;
    double ph_opt; /* of ph_train, samples in the optimizer's own code (a closure's not) */
    double eval_host; /* eval-phase samples outside the model and torch ops */
    double ph_compute; /* samples in tensor ops outside the model (in the steps' other time) */
    int nfunc;
    dc_func funcs[DC_MAX_FUNCS];
    dc_func bg; /* other threads' busiest user code while the training thread was outside phases */
    int nproc;
    dc_proc procs[DC_MAX_PROCS];
    /* threads_cpu: the training threads' time (span, on-CPU, run-queue wait,
     * summed over processes) and the other Python thread with the most CPU
     * (its CPU share of its span, where it ran: the GIL's competitor) */
    double tt_span_s, tt_cpu_s, tt_runq_s;
    /* each process's training thread alone: its rank (-1 none), span, CPU and
     * run-queue seconds */
    int ntt;
    struct {
        int rank;
        double span_s, cpu_s, runq_s;
    } tt[64];
    dc_func hog;
    double hog_cpu_share;
    char hog_name[64];
    double gc_n[3], gc_pause_s, gc_max_s;
    int ngc;
    dc_event gc[DC_MAX_EVENTS];
    double compile_s, compile_frames, recompiles;
    int ncomp;
    dc_event comp[DC_MAX_EVENTS];
    char recompile_reason[200];
    double loader_iters, loader_workers;
    double opt_made_train;       /* optimizers made after training began */
    int amp_bf16, amp_f16;       /* autocast regions to that dtype, on any device */
    double params_bf16;          /* of params_all, those in bfloat16 */
    double loader_train_iters;   /* iterators begun outside evaluation */
    double loader_train_cycle_s; /* their workers' start and stop, seconds */
    double loader_train_batches; /* their epochs' batches (len(loader)), NAN if unknown */
    /* pyprof/loader-*.json: the DataLoader workers' time fetching batches
     * and the span they ran (their busy share, dc_loader_starved) */
    double ldr_fetch_s, ldr_span_s;
    int nldr_files;
    int loader_persistent;
    double loader_prefetch; /* the largest prefetch_factor of a loader with workers (0: unknown) */
    int nepochs;
    dc_event epochs[DC_MAX_EVENTS];
    double eval_s, eval_entries;
    double eval_points; /* entries with training between them (train and val back to back: one) */
    double torch_threads, cpus_allowed;
    char framework[16];
    int ddp_no_sync; /* a DDP forward ran under no_sync(): the run accumulates gradients */
    /* settings that slow every step (events "settings", profile
     * "anomaly_samples"): the sampler's half-second ticks while training and
     * those with anomaly detection on; samples taking an op's traceback;
     * the timed modules' parameters, all and float64 */
    double set_ticks, anomaly_ticks, anomaly_samples, params_all, params_f64;
    /* the timed modules' parameters that get a gradient no optimizer
     * updates, those an optimizer updates, and all of them */
    double params_grad_unused, params_optimized, params_timed;
    double eval_fwd, eval_fwd_grad; /* forwards labelled evaluation; with grad on */
    double eval_rows, eval_sized;   /* their rows (first dimension), over those with a tensor */
    /* the gaps from one evaluation forward's start to the next's in a
     * phase, every process's (events eval.forward_gaps): counts by bucket,
     * bucket k from 1 µs x 1.05^k (EVAL_GAP_BASE) */
#define EVAL_GAP_BUCKETS 256
#define EVAL_GAP_BASE 1.05
    double eval_gaps, eval_gap_n[EVAL_GAP_BUCKETS];
    /* the optimizer that updates the most parameters (of nopt classes); the
     * parameters of the dense embeddings an optimizer updates (untied: a
     * shared weight's gradient is dense) and the largest of them */
    int nopt;
    dc_opt opt;
    int npypid, pypid[64]; /* the processes the hook ran in (events files) */
    int have_ddp;
    dc_ddp ddp;
    /* how each process with a rank ended (events "exit"): it reached the
     * interpreter's shutdown, and the exception that ended it ("" none) */
    int nexit;
    struct {
        int rank, ended;
        char error[160];
    } exits[DC_MAX_PROCS];
    /* the exception that ended a process (the lowest rank's of those that
     * failed) and where the user's code raised it ("" none) */
    int fail_rank;
    char fail_error[160], fail_where[160];
    double emb_params;
    dc_emb emb;
    /* torch.profiler recording (events "profiler": the spans the script's
     * own profiler recorded, trainperf's --profile windows left out) and
     * training samples in its Python code (processing, writing traces) */
    int nprof;
    dc_event prof[DC_MAX_EVENTS];
    double prof_samples;
    /* a tool tracing the training thread's Python (settings "tracer*"):
     * ticks it was seen at, its name, kind (debugger, coverage, profiler,
     * tracer) and hook (sys.settrace, sys.setprofile, sys.monitoring) */
    double tracer_ticks;
    char tracer[84], tracer_kind[16], tracer_how[20];
    /* debugging aids (settings "tracemalloc_ticks", events "debug"): checks
     * that found tracemalloc tracing; Python's development mode or debug
     * allocator; CUDA_LAUNCH_BLOCKING=1; PYTORCH_NO_CUDA_MEMORY_CACHING=1 */
    double tracemalloc_ticks;
    int dev_mode, malloc_debug, cuda_blocking, no_cuda_cache;
    /* probes of one backward's graph (events "graph"): nodes, ns */
    int ngraph;
    double graph[64][3]; /* nodes, ns, and the machine's floor beside it (ns a node; 0: none) */
    double sampler_cost_s;

    /* steps.csv: eval/checkpoint time taken out of training step time */
    double eval_steps, eval_ns, ckpt_ns;
    int nslow;
    dc_slow slow[DC_MAX_SLOW];
    double tr_n, tr_s, tr_ss; /* training ms of the steps after step 0: sum, sum of squares */
    double tw_n, tw_s, tw_ss; /* the same, of the steps past DC_WARM_STEPS */
    /* step-to-step change of the training ms (|this - previous row|), and
     * the level over the run: DC_LEVELS buckets of lv_width steps each
     * (count and the two lowest: a floor that slow steps do not move),
     * pairs merged as the run grows. Steady steps whose level moved (a
     * schedule, unfreezing layers) are not unstable */
    double lv_prev;
    sketch lv_diff;
    double lv[DC_LEVELS][3];
    int lv_nb;
    long long lv_width;
    /* the work of each warm step (tokens, else samples) against its
     * training time: sums for their correlation */
    double wk_n, wk_x, wk_y, wk_xx, wk_yy, wk_xy, wk_min, wk_max;
    int wk_tokens; /* the work is tokens */
    /* data wait of warm training steps, and the steps that waited longest
     * (data, training time), so a few slow batches can be told apart from
     * a steady wait (dc_steady_data_share) */
    double dw_n, dw_sum, dw_iv_sum;
    int ndwtop;
    double dwtop[DC_MAX_SLOW][2];
    /* the same in DC_DWIN windows of dwin_width steps (data, training
     * time, steps), neighbours merged when full: the share's spread over
     * the run (dc_window_data_share) */
    double dwin[DC_DWIN][3];
    int dwin_nb;
    long long dwin_width;

    /* metrics.csv, sched source */
    double runq_n, runq_sum, runnable_n, runnable_sum, runnable_max, usable_n, usable_sum,
        thr_n, thr_sum;
    /* the same two between the first step's end and the last step's (what
     * the training itself asked of the scheduler, without start-up) */
    double tq_n, tq_sum, tn_n, tn_sum;
    double rss_warm; /* tree RSS at the first sample after the first step ended */
    double rss_warm_t, rss_last, rss_last_t, rss_mid;
    dgpu_alloc alloc; /* GPU runs: the CUDA allocator */
} dcause;

/* Read pyprof/events-*.json and loader-*.json of run_dir into c (missing
 * files leave have_pyprof 0; damaged ones are skipped); t0: the run's start
 * on the monotonic clock, seconds (0 unknown). */
void dc_load_pyprof(dcause *c, const char *run_dir, double t0);
/* One row of steps.csv (report_load.c's load_steps): its times, seconds
 * since the run's start, and its phases, ns. */
void dc_step(dcause *c, long long step, double start, double end, double train_ns,
             double eval_ns, double ckpt_ns, double data_ns);
/* One sample of metrics.csv (load_metrics: values and valid flags by
 * metric_table index), with the span of the training steps. */
void dc_metric(dcause *c, double first_end_s, double last_end_s, double t, const double *v,
               const int *ok);
/* dst gets the two lowest of dst and src (a level's floor: lv[k][1..2]). */
void dc_low2_merge(double *dst, const double *src);
/* An events file's rank (pyprof/events-<pid>.json "rank": RANK as the
 * environment had it); -1 when none or not a rank. */
struct jr_node;
int dc_events_rank(const struct jr_node *root);
/* A warm step's work (tokens, else samples; 0: not counted) and training time. */
void dc_work(dcause *c, double tokens, double samples, double train_ns);

#endif
