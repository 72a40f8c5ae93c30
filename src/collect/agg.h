/* Aggregation of probe events: per-thread step state machines, phase times,
 * run totals, quantile sketches and the live figures of a coll_frame.
 *
 * Streaming and bounded: nothing is kept per event or per step; each finished
 * step is handed to the sinks (steps.csv, trace) through agg_sink and folded
 * into the figures (core/figs.h). Not thread-safe: the collector thread owns it. */
#ifndef TPF_COLLECT_AGG_H
#define TPF_COLLECT_AGG_H

#include <stdint.h>
#include <sys/types.h>

#include "core/figs.h"
#include "core/frame.h"
#include "probe/reader.h"

#define AGG_MAX_DEPTH 64      /* range nesting tracked per thread */
#define AGG_MAX_THREADS 4096  /* threads tracked per process */

/* Where finished things go; any pointer may be NULL. Called synchronously
 * from agg_event. */
typedef struct agg_sink {
    void *ctx;
    void (*step)(void *ctx, const agg_step *s);
    void (*range)(void *ctx, const agg_range *r);
    void (*counter)(void *ctx, pid_t pid, pid_t tid, tpf_name name, uint64_t ts_ns, double v);
    void (*mark)(void *ctx, pid_t pid, pid_t tid, tpf_name name, uint64_t ts_ns);
    /* a step's GPU figures, once its GPU records are in (collect/gpujoin.h) */
    void (*gpu_step)(void *ctx, const gpu_step *g);
    /* each GPU record as it comes (the trace's GPU tracks) */
    void (*gpu_record)(void *ctx, pid_t pid, const seg_event *ev);
} agg_sink;

struct gj;

typedef struct agg {
    figs f;               /* the run's step figures (core/figs.h) */
    agg_sink sink;
    struct gj *gpu;       /* GPU records waiting for their steps */
    /* since the last agg_live */
    uint64_t live_count, live_interval_ns, live_data_ns, live_samples, live_tokens;
    /* the training loops: processes whose loop runs (they stepped or fetched
     * a batch, and neither said it ended nor exited since), when the last
     * one ended (0: one runs); processes in their shutdown and since when
     * the first of them is */
    int loops_open, exiting;
    uint64_t loop_end_ns, exit_ns;
} agg;

typedef struct agg_proc agg_proc;

/* *out is freed with agg_free. */
int agg_create(agg **out, const agg_sink *sink);
void agg_free(agg *a);

/* Per-process state (one per segment). rank/local_rank -1 when none. */
int agg_proc_create(agg_proc **out, pid_t pid, int rank, int local_rank);
void agg_proc_free(agg_proc *p);
/* The process has gone (now_ns: CLOCK_MONOTONIC): its loop, if it ran,
 * ended. Call before agg_proc_free. */
void agg_proc_end(agg *a, agg_proc *p, uint64_t now_ns);
/* The process's rank from now on (one given in code after the open). */
void agg_proc_set_rank(agg_proc *p, int rank, int local_rank);

/* Feed one event of process p (events of one thread in publication order). */
void agg_event(agg *a, agg_proc *p, const seg_event *ev);

/* GPU steps whose records are in go to sink.gpu_step (final: all of them,
 * at the end of the run). now_ns: CLOCK_MONOTONIC. */
void agg_gpu_flush(agg *a, uint64_t now_ns, int final);

/* Fill the step fields of f for the interval since the previous call
 * (dt seconds long) and start a new interval. now_ns: CLOCK_MONOTONIC. */
void agg_live(agg *a, coll_frame *f, double dt, uint64_t now_ns);

#endif
