/* One sample of everything the collector watches, and the shape of a source.
 *
 * core/ is the neutral module every stage includes and that includes no other
 * stage: collect/ fills these types, watch/ and record/ read them
 * (docs/architecture.md).
 *
 * Sources (procfs, nvml, ...) fill their part of a coll_frame at each sample;
 * the aggregator adds the live step figures; alerts, the status line and the
 * sinks read it. Every value carries a valid flag: unknown is never 0. */
#ifndef TPF_CORE_FRAME_H
#define TPF_CORE_FRAME_H

#include <stdint.h>
#include <sys/types.h>

/* A sampled value: ok == 0 means unknown (unsupported, unreadable, no source). */
typedef struct fval {
    double v;
    uint8_t ok;
} fval;

static inline fval fv(double v) { return (fval){v, 1}; }
static inline void fv_set(fval *f, double v) { f->v = v; f->ok = 1; }

#define FRAME_MAX_GPUS 16
#define FRAME_MAX_CPUS 1024

typedef struct gpu_frame {
    int index;             /* NVML index */
    char name[96];
    char uuid[96];
    fval util_pct, mem_util_pct;
    fval mem_used_bytes, mem_total_bytes;
    fval temp_c, power_w;
    fval energy_j;         /* used during this interval */
    fval energy_total_j;   /* since the run started */
    fval sm_mhz, mem_mhz;
    fval pcie_rx_bps, pcie_tx_bps, nvlink_rx_bps, nvlink_tx_bps;
    fval proc_mem_bytes, proc_sm_pct; /* summed over the watched tree */
    fval throttle_mask;    /* clock-event reasons bit mask (as a double) */
    char throttle[160];    /* decoded words joined by '+', "" when none */
    uint8_t lost;          /* the GPU fell off the bus (NVML error 15) */
    uint8_t in_use;        /* a process of the watched tree holds a context here */
} gpu_frame;

/* One process of the watched tree, as of a sample (a row of procs.csv). */
typedef struct frame_proc {
    pid_t pid, ppid;
    char comm[16]; /* NUL-terminated */
    fval cpu_pct;  /* % of one core over the interval; unknown on first sight
                      unless the process was born during the interval */
    fval rss_bytes;
    int threads;
    fval read_bytes, write_bytes; /* cumulative, /proc/PID/io; unknown if unreadable */
    fval gpu_mem_bytes;           /* device memory (GPU source); unknown without it */
    fval runq_pct; /* its threads' run-queue wait, % of one core (sched source) */
} frame_proc;

typedef struct coll_frame {
    double t;              /* seconds since run start */
    uint64_t mono_ns;      /* CLOCK_MONOTONIC of the sample */
    double dt;             /* seconds since the previous sample (0 for the first) */

    /* system (procfs) */
    int ncpu;
    fval cpu_pct, cpu_iowait_pct;
    fval cpu_core_pct[FRAME_MAX_CPUS];
    fval mem_total_bytes, mem_used_bytes, mem_available_bytes, swap_used_bytes;
    fval psi_cpu_some_pct, psi_mem_some_pct, psi_mem_full_pct, psi_io_some_pct, psi_io_full_pct;
    fval disk_read_bps, disk_write_bps, net_rx_bps, net_tx_bps;

    /* the watched process tree (procfs) */
    fval tree_procs, tree_threads, tree_cpu_pct, tree_rss_bytes, tree_read_bps, tree_write_bps;
    fval main_cpu_pct;
    /* who got the CPU (sched source) */
    fval tree_runq_pct;    /* run-queue wait of the tree's threads, % of one core */
    fval tree_runnable;    /* threads of the tree runnable (state R) at the sample */
    fval cpus_usable;      /* CPUs the root may use: affinity, capped by cgroup cpu.max */
    fval cg_throttled_pct; /* cgroup CPU throttled time over the interval, % */
    const pid_t *tree_pids; /* valid during this sample only */
    int ntree;
    const frame_proc *procs; /* the tree's processes; valid during this sample only */
    int nprocs;

    /* steps (from the segments), filled by the aggregator */
    fval steps;            /* completed so far, all ranks */
    fval step_rate, sample_rate, token_rate; /* over the interval */
    fval data_wait_share;  /* data share of step interval time over the interval, 0-1 */
    fval step_time_ms;     /* mean step interval over this sample interval */
    fval step_time_median_ms; /* running median over the run */
    fval step_time_p90_ms;    /* running 90th percentile over the run */
    fval since_last_step_s; /* time since the last step ended (any rank) */
    /* time since every training loop ended (collect/agg.h): unknown while
     * one runs; time since a process still shutting down began to */
    fval loop_ended_s, shutdown_s;
    /* the rank the others wait for (collect/ranks.c): straggler_rank (-1 none) has the
     * least comm wait; the others wait straggler_wait_ms a step more, straggler_pct
     * of step time; straggler_data_ms: its data wait beyond the others' */
    fval straggler_pct, straggler_wait_ms, straggler_data_ms;
    int straggler_rank;

    /* GPUs the run uses (nvml) */
    int ngpu;
    gpu_frame gpu[FRAME_MAX_GPUS];
} coll_frame;

/* What a source may know of the run. */
typedef struct src_ctx {
    pid_t root_pid;        /* the watched command (or this process, embedded) */
    const char *run_dir;
    double interval_s;
    uint32_t flags;        /* TPF_START_* */
} src_ctx;

/* A source: a small module with the same shape as the others (nvtop's
 * per-vendor tables). init returns 0, or an error with last_error() saying why
 * once; the run goes on without it. sample fills its part of the frame and
 * returns 0, or an error (the source is then stopped and its error recorded). */
typedef struct src_ops {
    const char *name;
    int (*init)(void **state, const src_ctx *ctx);
    int (*sample)(void *state, const src_ctx *ctx, coll_frame *f);
    const char *(*last_error)(void *state); /* static or owned by state; may be NULL */
    void (*close)(void *state);
} src_ops;

#endif
