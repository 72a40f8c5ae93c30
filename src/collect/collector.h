/* The collector: a thread that drains the probes' segments (every ~25 ms, so
 * rings never fill), samples the sources every interval, aggregates, checks
 * alerts and hands everything to the sinks it was given (core/sink.h; the
 * run directory's files are record/sinks.h, docs/run-format.md).
 *
 *   coll_create -> coll_start (first sample, run.json, thread) ->
 *   coll_finish (stop, final drain and sample, summary.json, run.json
 *   again) -> coll_free. A live view (the CLI's status line) is a sink too
 *   (record/status.h).
 *
 * Errors writing files (disk full) are recorded and the run goes on: they
 * never stop the watched program. */
#ifndef TPF_COLLECT_COLLECTOR_H
#define TPF_COLLECT_COLLECTOR_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/frame.h"
#include "core/run.h"
#include "core/sink.h"
#include "watch/alerts.h"

typedef struct coll_opts {
    const char *run_dir;     /* exists and is writable (rec_rundir_prepare) */
    /* The probes' segment directory off the run directory (record/segdir.h),
     * scanned with run_dir/live; NULL: live/ only. Segments of exited
     * processes are removed from it once drained (they hold memory). */
    const char *seg_dir;
    const char *mode;        /* "run" | "embedded" | "attached" */
    char *const *argv;       /* the watched command, NULL-terminated; NULL: root_pid's own */
    pid_t root_pid;          /* the watched process tree's root */
    double interval_s;       /* sampling interval; <= 0: 1.0 */
    double drain_s;          /* segment drain period; <= 0: 0.025 */
    uint32_t flags;          /* TPF_START_* */
    int auto_hook;           /* run.json options.auto; -1: not applicable */
    alert_set *alerts;       /* may be NULL; borrowed, used only by the collector thread */
    uint64_t start_mono_ns;  /* t = 0 (CLOCK_MONOTONIC); 0: now */
    double start_unix_s;     /* wall clock at t = 0; 0: now */
    /* Where the data goes (core/sink.h), in call order: record/sinks.h
     * rec_sinks for a run directory. Borrowed for the run. */
    const sink_ops *const *sinks;
    size_t nsinks;
    const void *sink_config; /* handed to the sinks as sink_ctx.config */
    /* Sources the caller drives itself (attach's Python stacks): listed in
     * run.json's sources with their status, never sampled here. Copied. */
    const run_source *extra_sources;
    int nextra;
    int no_steps;            /* nothing records steps (attach): summary.json's counts are null */
} coll_opts;

typedef struct coll coll;

/* Open the run's files and init the sources. *out freed with coll_free.
 * Errors: TPF_EINVAL, TPF_ENOMEM, file-system errors creating the files. */
int coll_create(coll **out, const coll_opts *o);
/* Take the first sample, write run.json and start the thread. */
int coll_start(coll *c);
/* Stop the thread, drain every segment a last time, take a last sample and
 * write summary.json and run.json (with ex and the duration). Returns 0 or
 * the first file error of the run (every file is still written as far as
 * it could be). Call once. */
int coll_finish(coll *c, const run_exit *ex);
void coll_free(coll *c);

#define COLL_MAX_WARNINGS 8
#define COLL_WARNING_MAX (PATH_MAX + 96)

/* End-of-run figures for the CLI (valid after coll_finish). NaN: unknown. */
typedef struct coll_summary {
    double duration_s;
    uint64_t steps;
    double steps_per_s, samples_per_s, tokens_per_s;
    double step_p50_ms, step_p95_ms;
    double data_share, data_p95_ms;
    double tree_cpu_mean_pct, tree_rss_max_bytes;
    int ngpu;
    int gpu_index[FRAME_MAX_GPUS];  /* NVML index */
    double gpu_util_mean_pct[FRAME_MAX_GPUS], gpu_mem_max_bytes[FRAME_MAX_GPUS];
    double gpu_mem_total_bytes[FRAME_MAX_GPUS];
    uint64_t events_dropped, trace_dropped;
    uint64_t noroom_procs, noroom_events; /* probes without room (sink_run) */
    int nalerts;
    char io_error[200];      /* "" or the first file error of the run */
    sink_lost lost;          /* what a full disk cost (record/safeout.h) */
    int bad_segments;        /* segments skipped as unreadable */
    char bad_segment[PATH_MAX + 64]; /* the first one's path */
    int nsources;
    run_source sources[RUN_MAX_SOURCES];
    uint64_t exporter_lost;  /* updates Prometheus/TensorBoard dropped */
    int nwarnings;           /* outputs the run did without (sink_ctx.warn) */
    char warnings[COLL_MAX_WARNINGS][COLL_WARNING_MAX];
    int warning_err[COLL_MAX_WARNINGS]; /* TPF_E* of each */
} coll_summary;

void coll_get_summary(const coll *c, coll_summary *out);

/* The watched tree's root changes (a restarted command, `run --restart`):
 * sources see it from their next sample. Thread-safe. */
void coll_set_root(coll *c, pid_t root);

#endif
