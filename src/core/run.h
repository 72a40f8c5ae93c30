/* Run-level figures and facts every stage shares: resource aggregates over
 * the samples (computed once, by the collector, through run_res_add), the
 * sources' status, the exit of the watched command and the alerts that
 * fired. summary.json and run.json are written from these (record/). */
#ifndef TPF_CORE_RUN_H
#define TPF_CORE_RUN_H

#include <stdint.h>

#include "core/frame.h"

#define RUN_MAX_SOURCES 8

typedef struct run_source {
    const char *name;
    char status[200];     /* "ok", "disabled" or why it failed */
} run_source;

typedef struct run_exit {
    int known;            /* 0: null (running, embedded) */
    int code;             /* exit code, or 128 + signal */
    int signal;           /* 0: none */
} run_exit;

/* count, sum, min, max of the known values (min/max +-inf while n == 0). */
typedef struct run_stat {
    uint64_t n;
    double sum, min, max;
} run_stat;

#define RUN_MAX_REASONS 16
#define RUN_MAX_METRICS 64    /* run_res.m covers the first 64 rows of metric_table */

typedef struct run_gpu_res {
    int index;
    char name[96];
    run_stat util, mem_used, power, temp;
    double mem_total;     /* NaN when unknown */
    double energy_j;      /* summed intervals */
    int energy_ok;
    uint64_t samples, throttled;
    int nreasons;
    char reason[RUN_MAX_REASONS][32];
    uint64_t reason_n[RUN_MAX_REASONS];
} run_gpu_res;

/* Resource aggregates over every sample of the run. */
typedef struct run_res {
    uint64_t samples;
    int cpus;
    run_stat m[RUN_MAX_METRICS]; /* parallel to metric_table */
    int ngpu;
    run_gpu_res gpu[FRAME_MAX_GPUS];
} run_res;

void run_res_init(run_res *r);
/* Fold one sample in: every metric_table value, GPUs by NVML index. */
void run_res_add(run_res *r, const coll_frame *f);
/* Mean of the known values; NaN when none. */
double run_stat_mean(const run_stat *s);

#define RUN_MAX_ALERTS 256

/* An alert that fired (summary.json "alerts"). */
typedef struct run_alert {
    char rule[64];
    double t;
    char message[256];
} run_alert;

/* Names from before the move to core/ (record/writers.h had them), kept so
 * that code written against them still builds. */
typedef run_exit rec_exit;
typedef run_source rec_source;
#define REC_MAX_SOURCES RUN_MAX_SOURCES

#endif
