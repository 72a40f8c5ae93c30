/* Sinks: where the collector's data goes (metrics.csv, steps.csv, trace.json,
 * summary.json, exporters ...). A sink is a table of functions, like a
 * source (core/frame.h src_ops); the sinks of a run are one static array
 * (record/sinks.c rec_sinks) that the caller hands to the collector, so
 * collect/ never names a sink and record/ never names the collector.
 *
 * Every call comes from the collector thread, in this order:
 *
 *   init                   once, in coll_create, before the first sample
 *   on_sample, flush       at each sample (flush: after every sink had the
 *                          sample and the steps and alerts that came with it)
 *   on_step, on_probe      as the probes' events are drained (steps in order
 *                          of end time within a drain round)
 *   on_alert               when a rule fires or clears
 *   close                  once: at the end of the run (run->ended) or, when
 *                          the run was abandoned, with run == NULL
 *
 * A sink must never block the collector for long (a slow consumer drops
 * updates, never steps: docs/architecture.md) and never stops the run: a
 * failure is reported through ctx->error and the sink carries on or goes
 * quiet. Any function pointer but init and close may be NULL.
 *
 * This interface is shared by every sink author: add fields to the ends of
 * sink_ctx / sink_run only. */
#ifndef TPF_CORE_SINK_H
#define TPF_CORE_SINK_H

#include <stdint.h>
#include <sys/types.h>

#include "core/figs.h"
#include "core/frame.h"
#include "core/run.h"

enum alert_severity { ALERT_INFO = 0, ALERT_WARNING = 1, ALERT_CRITICAL = 2 };

/* A rule that fired or cleared (watch/alerts.c makes them). */
typedef struct alert_event {
    double t;             /* frame time */
    const char *rule;     /* rule name (e.g. "gpu_underused", or "user1"); owned by the set */
    const char *expr;     /* the rule as text; owned by the set */
    int fired;            /* 1 fired, 0 cleared */
    int severity;         /* enum alert_severity */
    double value;         /* the metric's value when it fired/cleared */
    char message[256];    /* for people: "GPU 0 utilisation 12% for 30 s" */
} alert_event;

/* The run's fixed facts (run.json), borrowed for the run. */
typedef struct run_meta {
    const char *mode;     /* "run" | "embedded" */
    char *const *argv;    /* NULL-terminated; may be NULL */
    const char *cwd, *host, *kernel;
    int cpus;
    double mem_total_bytes; /* NaN when unknown */
    pid_t root_pid;
    int auto_hook;        /* -1: not applicable */
    int nalert_rules;
    const char *const *alert_rules;
    const char *segments_dir; /* the probes' segment directory (record/segdir.h); NULL: live/ */
} run_meta;

/* What a sink knows for its whole life (borrowed until close). */
typedef struct sink_ctx {
    const char *run_dir;
    uint64_t start_mono_ns;   /* t = 0 (CLOCK_MONOTONIC) */
    double start_unix_s;      /* wall clock at t = 0 */
    double interval_s;
    uint32_t flags;           /* TPF_START_* */
    const run_meta *meta;
    /* coll_opts.sink_config as given by the caller (options of sinks that
     * take them, such as exporters); may be NULL. */
    const void *config;
    /* Record a failure (what: a file or endpoint name, err: TPF_E*); the
     * run's first one shows in coll_summary.io_error. */
    void (*error)(void *arg, const char *what, int err);
    void *error_arg;
    /* An output the run can do without (an exporter: TensorBoard's event
     * file) cannot be written: what names it (the path), err the reason. Its
     * sink calls this once and goes quiet; the caller says so once. Not a
     * failure of the run directory's own files (error above). May be NULL. */
    void (*warn)(void *arg, const char *what, int err);
} sink_ctx;

/* Counts sinks publish for others (written by the trace sink, read by the
 * summary sink, which closes after it). */
/* Rows and events a failing file system cost (record/safeout.h), and the
 * first such error ("" when none). */
typedef struct sink_lost {
    uint64_t steps, metrics, procs, alerts, trace_events;
    char error[200];
} sink_lost;

typedef struct sink_tally {
    uint64_t trace_written, trace_dropped;
    uint64_t exporter_lost;   /* updates exporters dropped (slow consumers) */
    sink_lost lost;
} sink_tally;

/* The collector's figures as of a call; borrowed for the call. */
typedef struct sink_run {
    const coll_frame *frame;  /* the latest sample; NULL before the first */
    uint64_t nsamples;        /* samples taken so far (1 at the first sample) */
    /* metrics.csv layout, fixed by the first sample */
    int ncpu_cols, ngpu_cols;
    const int *gpu_cols;      /* NVML index of each gpu<k>_ column group */
    const gpu_frame *gpus0;   /* the run's GPUs as of the first sample */
    const figs *steps;        /* step figures (core/figs.h) */
    const run_res *res;       /* resource aggregates (core/run.h) */
    int nalerts;
    const run_alert *alerts;  /* alerts that fired */
    int nsources;
    const run_source *sources;
    uint64_t events_dropped;  /* by the probes */
    int ended;                /* 1 at close after the run ended */
    run_exit exit;
    double end_unix_s, duration_s;
    sink_tally *tally;
    /* Probes that found no room for their segment or a ring (a full disk,
     * probe/segment.h): how many processes, and the events they could not
     * record (counted in events_dropped too). */
    uint64_t noroom_procs, noroom_events;
    /* nothing in the processes records steps (`trainperf attach`): the step
     * counts are unknown (null), not 0 */
    int steps_unknown;
} sink_run;

/* A probe event other than a step, for sinks that show them (the trace). */
enum sink_probe_kind { SINK_PROCESS = 0, SINK_RANGE = 1, SINK_COUNTER = 2, SINK_MARK = 3, SINK_GPU = 4 };

typedef struct sink_probe {
    int kind;                 /* enum sink_probe_kind */
    pid_t pid, tid;
    int rank;                 /* SINK_PROCESS: -1 none */
    const agg_range *range;   /* SINK_RANGE */
    const char *name;         /* range, counter or mark name; NULL: unknown id */
    uint64_t ts_ns;           /* COUNTER, MARK */
    double value;             /* COUNTER */
    const struct seg_event *gpu; /* GPU: the record (probe/reader.h); name: a kernel's */
} sink_probe;

typedef struct sink_ops {
    const char *name;
    /* 0: in use; 1: not wanted in this run (e.g. an exporter not asked for);
     * < 0: TPF_E* -- coll_create fails with it (the run's own files). */
    int (*init)(void **state, const sink_ctx *ctx);
    void (*on_sample)(void *state, const coll_frame *f, const sink_run *run);
    void (*on_step)(void *state, const agg_step *s);
    /* A step's GPU figures, some time after its on_step (GPU runs only). */
    void (*on_gpu_step)(void *state, const gpu_step *g);
    void (*on_probe)(void *state, const sink_probe *p);
    void (*on_alert)(void *state, const alert_event *e);
    void (*flush)(void *state, const sink_run *run);
    /* Write what is left and free state. run == NULL: abandoned. */
    void (*close)(void *state, const sink_run *run);
    /* After each drain round: put what it produced on disk, so a collector
     * killed next loses nothing it had drained. May be NULL. */
    void (*on_drain)(void *state);
} sink_ops;

#endif
