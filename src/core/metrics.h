/* The metric table: the single source for metrics.csv columns, trace counter
 * names and the report's labels (htop's Process_fields idea). Order here is
 * column order in metrics.csv (docs/run-format.md). */
#ifndef TPF_CORE_METRICS_H
#define TPF_CORE_METRICS_H

#include <stddef.h>

#include "core/frame.h"

typedef enum metric_kind {
    METRIC_GAUGE = 0,  /* a level (bytes, %, count) */
    METRIC_RATE = 1,   /* per second over the interval */
    METRIC_TEXT = 2,   /* a char array, not an fval */
} metric_kind;

typedef struct metric_def {
    const char *name;    /* CSV column; for GPU metrics the part after "gpu<N>_" */
    const char *unit;    /* for people: "%", "bytes", "B/s", "steps/s" ... */
    const char *help;    /* one line for people */
    int kind;            /* metric_kind */
    int decimals;        /* digits after the point in CSV */
    size_t off;          /* offsetof in coll_frame (or gpu_frame) */
    const char *counter; /* trace counter grouping it ("cpu"), or NULL */
} metric_def;

/* System, process-tree and step metrics (coll_frame fields), in column order
 * after `t`. */
extern const metric_def metric_table[];
extern const size_t metric_table_len;
/* Per-core CPU ("cpu<N>_pct"), one column per core. */
extern const metric_def metric_core;
/* Per-GPU metrics (gpu_frame fields), columns "gpu<N>_<name>". */
extern const metric_def metric_gpu_table[];
extern const size_t metric_gpu_table_len;

/* The value of m in frame/gpu base (NULL for METRIC_TEXT). */
const fval *metric_val(const metric_def *m, const void *base);
/* The text of a METRIC_TEXT metric. */
const char *metric_text(const metric_def *m, const void *base);
/* The entry named name in metric_table or NULL. */
const metric_def *metric_find(const char *name);

#endif
