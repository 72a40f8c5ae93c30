/* A run directory loaded for analysis, and the diagnosis made from it.
 *
 * diag_load reads run.json, summary.json (optional), steps.csv, metrics.csv,
 * procs.csv and alerts.jsonl into bounded aggregates: histograms for
 * quantiles and fixed-size, progressively coarsened series for charts, so a
 * month-long run costs the same memory as a minute-long one. */
#ifndef TPF_REPORT_REPORT_LOAD_H
#define TPF_REPORT_REPORT_LOAD_H

#include <limits.h>
#include <stddef.h>

#include "core/figs.h"
#include "util/buf.h"
#include "util/human.h"
#include "util/jsonr.h"
#include "util/jsonw.h"
#include "report/diag_base.h"
#include "report/load_gpu.h"
#include "report/load_pyprof.h"

#define DIAG_SERIES_CAP 240 /* points per chart series */
#define DIAG_HIST_BINS 1200 /* log-spaced, 2% apart: 1 us .. ~3e4 s */
#define DIAG_MAX_ALERTS 200
#define DIAG_GPU_INDEX_MAX 256 /* metrics.csv gpu<N>_ columns looked for, N below this */
#define DIAG_CHART_GPUS 16
#define DIAG_LIST_GPUS 16  /* GPUs listed in the GPU sections unless --all-ranks (the rest said) */ /* GPUs drawn in one html chart (the rest said, not drawn) */

/* Streaming statistics of one value; n == 0 means unknown. */
typedef struct dstat {
    double n, sum, sumsq, min, max;
} dstat;

/* A time series downsampled to at most DIAG_SERIES_CAP buckets by merging
 * neighbours when full (the bucket width doubles each time). */
typedef struct dseries {
    double t0, width; /* bucket k covers [t0 + k*width, t0 + (k+1)*width) */
    int n;            /* buckets in use */
    double sum[DIAG_SERIES_CAP];
    double cnt[DIAG_SERIES_CAP];
} dseries;

/* Log-bucketed histogram for quantiles with ~1% relative error. */
typedef struct dhist {
    double n, zero; /* values <= 0 counted apart */
    unsigned bins[DIAG_HIST_BINS];
} dhist;

enum {
    PH_DATA,
    PH_FORWARD,
    PH_BACKWARD,
    PH_OPTIMIZER,
    PH_COMM,
    PH_EVAL,
    PH_CHECKPOINT,
    PH_OTHER,
    PH_COUNT
};
extern const char *const diag_phase_names[PH_COUNT];

/* The rank view of the reports (report_ranks.c): what the step figures
 * (r->sf groups, core/figs.h) do not hold. */
typedef struct drank {
    int rank; /* -1: none */
    int pid, tid;
    int node;              /* index of its run directory in a many-node report */
    int group;             /* its step figures: index in sf.groups, -1 none (diag_index_ranks) */
    char top_op[32];       /* its most frequent collective (comm/), "" unknown */
    double comm_bytes, comm_ops, comm_busbw_sum, comm_busbw_n;
    double comm_busy_ns;   /* time with a collective in flight (union of ops), warm steps */
    /* model FLOPs (flops/): of one step and the peak FLOP/s MFU is taken
     * against; 0 unknown (no step has zero FLOPs, no device a zero peak) */
    double flops_step, peak_flops, flops_at; /* flops_at: the counted step, -1 declared */
    double flops_at_ns;    /* that step's interval (slowed by counting), 0 unknown */
    char flops_src[16];    /* "counted" or "declared" */
    char peak_src[160];    /* where the peak comes from, or why there is none */
    dseries s_step;        /* own time (ms: step less data and comm waits) over time: the html heatmap */
} drank;

#define DIAG_MAX_COMM_OPS 64 /* kinds of collective (the hooks know about 20) */

/* One kind of collective over the run (comm/ops-*.csv). */
typedef struct dcommop {
    char op[32];
    double n, bytes, dur_ns, wait_ns, busbw_sum, busbw_n;
} dcommop;

/* One node (run directory) of a many-node report. */
typedef struct dnode {
    char dir[1024];
    char host[128];
    int cpus, nranks;
    double offset_s;       /* added to its times to put them on node 0's clock */
    double wall_offset_s;  /* what the wall-clock anchors alone said */
    double align_err_s;    /* NAN: not aligned on collectives */
    double align_n;        /* collectives matched */
    double cpu_mean, tree_cpu_mean, rss_max, gpu_util_mean;
} dnode;

typedef struct dgpu {
    int index;
    int node; /* its run directory in a many-node report */
    char name[96];
    double mem_total; /* bytes, NAN unknown */
    dstat util, mem_util, mem_used, temp, power, energy;
    dstat util_train; /* util over the training window (first step's start to the last's end) */
    double throttle_samples, slowdown_samples, samples;
    char throttle_words[160];
    dseries s_util, s_mem;
} dgpu;

typedef struct dalert {
    double t;
    int node; /* its run directory in a many-node report */
    char rule[48];
    char state[12];
    char severity[12];
    char message[256];
} dalert;


/* `trainperf attach` (run.json mode "attached"): the Python stacks py-spy
 * read from outside, as pyprof/attach.json sums them (docs/run-format.md). */
enum { DA_DATA, DA_FORWARD, DA_BACKWARD, DA_OPTIMIZER, DA_OTHER, DA_N };
typedef struct dattach {
    int have;                /* pyprof/attach.json read */
    double rate_hz;
    int train_procs, python_procs, failed_procs;
    double samples;          /* the training threads' samples, all training processes */
    double ph[DA_N];         /* of them, by phase */
    double steps, period_s;  /* told from the stacks; NAN unknown */
    char steps_why[240];     /* why unknown, of the first training process */
    char sampler_error[160]; /* py-spy's first failure */
    char pystacks[160];      /* run.json sources.pystacks */
    /* the user's line the first training thread was in most */
    char top_func[96], top_file[200];
    int top_line;
    double top_samples;
    char top_phase[16];
} dattach;

typedef struct diag_run {
    char dir[PATH_MAX]; /* a run dir path of any legal length */
    char name[256]; /* last path component, for titles */
    jr_doc run, summary;
    int have_run, have_summary;
    int have_steps, have_metrics, have_procs, have_alerts;

    /* run.json */
    char command[1024];  /* argv joined by spaces */
    int python;          /* a Python/PyTorch run: advice may name PyTorch APIs */
    int trainer;         /* argv[0] is the bundled examples/trainer */
    int trainer_workers; /* its --workers N (loader threads), 0 when not given */
    char host[128];
    int cpus;
    double duration_s, start_unix_s, interval_s;
    int exit_known, exit_code, exit_signal; /* exit_code/-signal -1 when null */
    int ngpu_run;                           /* GPUs listed in run.json */
    char nvml_source[160];                  /* run.json sources.nvml */

    /* steps.csv */
    double steps;             /* rows */
    figs sf;                  /* the rows through the collector's own aggregation (core/figs.h) */
    double first_end_s, last_end_s, first_start_s;
    double sum_interval_ns, sum_duration_ns, sum_phase_ns[PH_COUNT];
    double warm_interval_ns, warm_phase_ns[PH_COUNT]; /* the same, each thread's first step left out */
    double samples, tokens;
    int nstreams;
    dhist h_data;                       /* for the data-wait chart */
    dseries s_sample_rate, s_step_rate; /* from steps: per bucket counts */
    dseries s_phase[PH_COUNT];          /* phase ms per step over time */

    /* metrics.csv */
    double msamples;
    dstat cpu, iowait, mem_used, mem_avail, mem_total, swap, psi_cpu, psi_mem, psi_mem_full, psi_io,
        psi_io_full, disk_r, disk_w, tree_cpu, main_cpu, tree_rss, tree_procs, tree_read,
        tree_write, net_rx, net_tx, data_wait_share;
    double swap_first;
    dseries s_cpu, s_tree_cpu, s_main_cpu, s_mem_used_pct, s_tree_rss, s_data_wait_share,
        s_metric_sample_rate;
    int ngpu, capgpu;
    dgpu *gpus; /* grown as GPUs appear (run.json, metrics.csv, each node's) */

    /* procs.csv */
    int root_pid;
    int nworkers; /* distinct non-root processes seen */
    double max_procs;
    dstat worker_cpu; /* per worker process per sample */
    /* the loader workers' run-queue wait (procs.csv runq_pct) and CPU over
     * the samples where both are known: the DataLoader's (pt_data_worker)
     * when any, else every non-root process's */
    double ldr_runq, ldr_cpu, ldr_n, nonroot_runq, nonroot_cpu, nonroot_n;
    /* the non-root processes: their CPU (% of one core) summed over their
     * samples, the sample count, and whether any sample named the process
     * a DataLoader worker */
    int noproc, capoproc;
    struct doproc {
        int pid, loader;
        char name[32];
        double cpu_sum, n;
    } *oproc; /* grown as processes appear */

    /* alerts.jsonl */
    int nalerts, nalerts_fired, nalerts_dropped;
    dalert alerts[DIAG_MAX_ALERTS];

    /* summary.json extras */
    double events_dropped, trace_events;
    /* summary.json steps.no_room: probes that found no room on a full disk */
    double noroom_procs, noroom_events;
    /* summary.json "io": what a full disk cost; run.json "recovered" */
    double lost_steps, lost_rows, lost_trace;
    char io_error[200];
    int recovered;

    dgpu_steps gs; /* GPU records joined to the steps (load_gpu.h) */
    dcause cause; /* pyprof/ and the sched columns (load_pyprof.h) */
    /* ranks, comm/ and many nodes (report_ranks.c) */
    int nranks, capranks;
    drank *ranks;          /* grown as ranks appear: one summary each, no step table */
    int last_rank;         /* the slot the last steps.csv row went to */
    int ranks_indexed;     /* ranks sorted by rank, groups found (diag_index_ranks) */
    int all_ranks;         /* every rank's row in text/md/html (report --all-ranks) */
    int have_comm;
    int ncommops;
    double commops_dropped; /* rows of collectives past DIAG_MAX_COMM_OPS kinds */
    dcommop commops[DIAG_MAX_COMM_OPS];
    int nnodes, capnodes;  /* 0 or 1: one run directory */
    dnode *nodes;          /* grown as run directories are added */
    int cur_node;          /* node being loaded */
    double cur_offset_s;   /* its clock offset */

    int attached; /* run.json mode "attached" */
    dattach at;

    diag_result diag;
} diag_run;

/* Headline figures of a run (NAN when unknown), shared by every format and
 * by compare. Step figures are figs_headline's (core/figs.h), the same code
 * summary.json is written with: they leave out each thread's first
 * (warm-up) step. */
typedef struct dfig {
    double duration_s, steps, steps_per_s, samples_per_s, tokens_per_s;
    double step_p50, step_p95, step_p99, step_mean, step_max, step_cv;
    double data_p50, data_p95, data_p99, data_mean, data_max, data_share;
    double share[PH_COUNT];
    double cpu_mean, cpu_max, tree_cpu_mean, tree_cpu_max, main_cpu_mean, main_cpu_max;
    double rss_mean, rss_max, mem_avail_min, mem_total, swap_max, iowait_mean;
    double psi_cpu, psi_mem, psi_io, disk_read, disk_write, procs_max;
    double gpu_util_mean, gpu_mem_max, gpu_power_mean, gpu_temp_max;
    figs_view v; /* the step figures as summary.json has them */
} dfig;

void diag_figures(const diag_run *r, dfig *f);

/* Formatting for people; "?" for NAN (unknown is never shown as 0). Bytes:
 * human_bytes (util/human.h). */
const char *diag_fmt_dur(char *o, size_t n, double s);                /* 1h 02m, 3m 20s, 4.2 s */
const char *diag_fmt_num(char *o, size_t n, const char *f, double v); /* f: one %f/%g */
/* The command's exit as words: "0", "1", "signal 9 (SIGKILL)", "unknown". */
const char *diag_fmt_exit(const diag_run *r, char *o, size_t n);

/* Load run_dir. TPF_ENOENT (no such directory, or none of its files) or
 * TPF_EFORMAT (a file is damaged) with one line in err. *out freed with
 * diag_free. */
int diag_load(const char *run_dir, diag_run **out, char *err, size_t errlen);
void diag_free(diag_run *r);
/* As diag_load, for a further node of a job: run.json, summary.json,
 * metrics.csv, procs.csv and alerts.jsonl only (its steps.csv, comm/ and
 * flops/ are read into the job's run by rr_load_job). */
int diag_load_node(const char *run_dir, diag_run **out, char *err, size_t errlen);
/* Add another node's run directory to r (a many-node job): its steps.csv,
 * with its clock shifted by offset_s, as node r->cur_node. */
int diag_load_node_steps(diag_run *r, const char *run_dir, double offset_s, char *err,
                         size_t errlen);

/* Make room for need elements of size sz in *arr (capacity *cap, doubled):
 * 0, or TPF_ENOMEM with *arr untouched. New room is zeroed. */
int diag_grow(void **arr, int *cap, int need, size_t sz);

/* Sort r->ranks by rank (rank-less ones last) and link each to its step
 * figures, for diag_find_rank and diag_rank_group; done by diag_load and
 * again once a job's nodes are added. */
void diag_index_ranks(diag_run *r);
const drank *diag_find_rank(const diag_run *r, int rank);      /* NULL: none */
const agg_group *diag_rank_group(const diag_run *r, int rank); /* NULL: none */

/* How many GPUs the GPU sections list (DIAG_LIST_GPUS unless all_ranks). */
int diag_gpus_listed(const diag_run *r);

/* Helpers shared with the report and compare. */
double diag_median(double *v, int n); /* sorts v; NAN when n < 1 */
double dstat_mean(const dstat *s);
double dhist_quantile(const dhist *h, double q);
int dseries_value(const dseries *s, int k, double *t, double *v); /* 1 when bucket k has data */

#endif
