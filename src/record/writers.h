/* Text writers of the run directory (docs/run-format.md). Each appends to a
 * buf, so the same code feeds files and golden-file tests; none allocates
 * beyond the buf's cap. Return 0 or the buf's sticky error. */
#ifndef TPF_RECORD_WRITERS_H
#define TPF_RECORD_WRITERS_H

#include <stdint.h>
#include <sys/types.h>

#include "collect/agg.h"
#include "collect/frame.h"
#include "collect/procfs.h"
#include "record/safeout.h"
#include "util/buf.h"
#include "watch/alerts.h"

/* ---- CSV cells (RFC 4180) ---- */

/* An fval with `decimals` digits after the point; empty when unknown. */
int rec_csv_num(buf *b, fval v, int decimals);
/* Text, quoted when it holds a comma, quote, CR or LF. */
int rec_csv_str(buf *b, const char *s);

/* ---- metrics.csv: columns fixed for the run by ncpu and ngpu ---- */
int rec_metrics_header(buf *b, int ncpu, int ngpu);
/* gpu_index[k]: the NVML index whose values go into the gpu<k>_ columns
 * (the run's GPUs as of the first sample, run.json "gpus" order); a GPU the
 * frame does not have leaves its cells empty. NULL: frame position k. */
int rec_metrics_row(buf *b, const coll_frame *f, int ncpu, int ngpu, const int *gpu_index);
/* The GPU of frame f with NVML index idx, or NULL. */
const gpu_frame *rec_frame_gpu(const coll_frame *f, int idx);

/* ---- procs.csv ---- */
int rec_procs_header(buf *b);
/* gpu_mem: the process's device memory, or unknown. */
int rec_procs_row(buf *b, double t, const procfs_proc *p, fval gpu_mem);

/* ---- steps.csv: start_mono_ns is t = 0 ---- */
int rec_steps_header(buf *b);
int rec_steps_row(buf *b, const agg_step *s, uint64_t start_mono_ns);

/* ---- alerts.jsonl: one line ---- */
int rec_alert_line(buf *b, const alert_event *e);

/* ---- run.json ---- */
#define REC_MAX_SOURCES 8

typedef struct rec_source {
    const char *name;
    char status[200];     /* "ok", "disabled" or why it failed */
} rec_source;

typedef struct rec_exit {
    int known;            /* 0: null (running, embedded) */
    int code;             /* exit code, or 128 + signal */
    int signal;           /* 0: none */
} rec_exit;

typedef struct rec_runinfo {
    const char *mode;     /* "run" | "embedded" */
    char *const *argv;    /* NULL-terminated; may be NULL */
    const char *cwd, *host, *kernel;
    int cpus;
    double mem_total_bytes; /* NaN when unknown */
    double start_unix_s;
    uint64_t start_mono_ns;
    int ended;
    double end_unix_s, duration_s;
    double interval_s;
    pid_t root_pid;
    rec_exit exit;
    int ngpu;
    const gpu_frame *gpus; /* ngpu entries: index, uuid, name, mem_total_bytes */
    int nsources;
    const rec_source *sources;
    int auto_hook;        /* -1: not applicable */
    int nalerts;
    const char *const *alert_rules;
} rec_runinfo;

int rec_run_json(buf *b, const rec_runinfo *ri);

/* ---- summary.json ---- */

typedef struct rec_stat {
    uint64_t n;
    double sum, min, max;
} rec_stat;

#define REC_MAX_REASONS 16

typedef struct rec_gpu_res {
    int index;
    char name[96];
    rec_stat util, mem_used, power, temp;
    double mem_total;     /* NaN when unknown */
    double energy_j;      /* summed intervals */
    int energy_ok;
    uint64_t samples, throttled;
    int nreasons;
    char reason[REC_MAX_REASONS][32];
    uint64_t reason_n[REC_MAX_REASONS];
} rec_gpu_res;

/* Resource aggregates over every sample of the run. */
typedef struct rec_res {
    uint64_t samples;
    int cpus;
    rec_stat m[64];       /* parallel to metric_table */
    int ngpu;
    rec_gpu_res gpu[FRAME_MAX_GPUS];
} rec_res;

void rec_res_init(rec_res *r);
void rec_res_add(rec_res *r, const coll_frame *f);

#define REC_MAX_ALERTS 256

typedef struct rec_alert_note {
    char rule[64];
    double t;
    char message[256];
} rec_alert_note;

typedef struct rec_summary {
    double duration_s;
    rec_exit exit;
    uint64_t start_mono_ns;
    const agg *agg;
    uint64_t events_dropped;   /* by the probes */
    const rec_res *res;
    int nalerts;
    const rec_alert_note *alerts;
    uint64_t trace_written, trace_dropped;
    int nsources;
    const rec_source *sources;
    const rec_loss *loss;      /* may be NULL: "io" written as nothing lost */
} rec_summary;

int rec_summary_json(buf *b, const rec_summary *s);

/* Write b to path through path.tmp + rename, so readers never see half a file. */
int rec_write_atomic(const char *path, const buf *b);

#endif
