/* Aggregation of probe events: per-thread step state machines, phase times,
 * run totals, quantile sketches and the live figures of a coll_frame.
 *
 * Streaming and bounded: nothing is kept per event or per step; each finished
 * step is handed to the sinks (steps.csv, trace) through agg_sink and folded
 * into totals and sketches. Not thread-safe: the collector thread owns it. */
#ifndef TPF_COLLECT_AGG_H
#define TPF_COLLECT_AGG_H

#include <stdint.h>
#include <sys/types.h>

#include "collect/frame.h"
#include "collect/sketch.h"
#include "probe/reader.h"

/* The predefined phases, index = TPF_PHASE_* - 1. */
#define AGG_NPHASES 7
extern const char *const agg_phase_names[AGG_NPHASES];

#define AGG_MAX_DEPTH 64      /* range nesting tracked per thread */
#define AGG_MAX_THREADS 4096  /* threads tracked per process */
#define AGG_MAX_GROUPS 256    /* ranks (or rank-less processes) with own figures */

/* One finished step (a row of steps.csv). Times are CLOCK_MONOTONIC ns. */
typedef struct agg_step {
    int rank, local_rank; /* -1: none */
    pid_t pid, tid;
    uint64_t step;        /* 0-based on this thread */
    uint64_t begin_ns, end_ns;
    uint64_t duration_ns, interval_ns;
    uint64_t phase_ns[AGG_NPHASES];
    uint64_t other_ns;
    uint64_t samples, tokens;
} agg_step;

/* One closed range (for the trace). */
typedef struct agg_range {
    pid_t pid, tid;
    tpf_name name;
    uint64_t begin_ns, end_ns;
    int depth;            /* 0 = outermost */
} agg_range;

/* Where finished things go; any pointer may be NULL. Called synchronously
 * from agg_event. */
typedef struct agg_sink {
    void *ctx;
    void (*step)(void *ctx, const agg_step *s);
    void (*range)(void *ctx, const agg_range *r);
    void (*counter)(void *ctx, pid_t pid, pid_t tid, tpf_name name, uint64_t ts_ns, double v);
    void (*mark)(void *ctx, pid_t pid, pid_t tid, tpf_name name, uint64_t ts_ns);
} agg_sink;

/* Figures of one rank (or of one rank-less process). */
typedef struct agg_group {
    int rank;             /* -1 when the process had none */
    pid_t pid;            /* the first process seen in the group */
    uint64_t count, interval_ns, samples, tokens;
    uint64_t data_ns, comm_ns; /* data wait, comm wait (exclusive of other phases) */
    /* since the watch last took them (agg_group_take_live) */
    uint64_t live_count, live_interval_ns, live_data_ns, live_comm_ns;
    sketch step_ns;
} agg_group;

typedef struct agg {
    agg_sink sink;
    /* run totals */
    uint64_t count;
    uint64_t interval_ns, duration_ns, other_ns, samples, tokens;
    uint64_t phase_ns[AGG_NPHASES];
    double interval_sq_ms; /* sum of squared step intervals in ms^2, for cv */
    uint64_t first_end_ns, last_end_ns; /* 0: none yet */
    uint64_t unmatched_pops, untracked_threads, untracked_groups;
    sketch step_ns;       /* step interval (what throughput sees) */
    sketch data_ns;       /* data wait per step */
    agg_group *groups[AGG_MAX_GROUPS];
    int ngroups;
    /* since the last agg_live */
    uint64_t live_count, live_interval_ns, live_data_ns, live_samples, live_tokens;
} agg;

typedef struct agg_proc agg_proc;

/* *out is freed with agg_free. */
int agg_create(agg **out, const agg_sink *sink);
void agg_free(agg *a);

/* Per-process state (one per segment). rank/local_rank -1 when none. */
int agg_proc_create(agg_proc **out, pid_t pid, int rank, int local_rank);
void agg_proc_free(agg_proc *p);

/* Feed one event of process p (events of one thread in publication order). */
void agg_event(agg *a, agg_proc *p, const seg_event *ev);

/* Fill the step fields of f for the interval since the previous call
 * (dt seconds long) and start a new interval. now_ns: CLOCK_MONOTONIC. */
void agg_live(agg *a, coll_frame *f, double dt, uint64_t now_ns);

/* Run throughput: steps per second of one rank (mean over ranks), samples and
 * tokens per second summed over ranks; NAN when unknown (no steps, or no
 * samples/tokens were ever given). */
void agg_rates(const agg *a, double *steps_per_s, double *samples_per_s, double *tokens_per_s);

#endif
