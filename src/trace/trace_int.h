/* Internal to the trace analysis (trace_an.c builds, trace_out.c renders). */
#ifndef TPF_ANALYZE_TRACE_INT_H
#define TPF_ANALYZE_TRACE_INT_H

#include <stdint.h>

#include "trace/trace.h"

/* Kernel types; as bits they label overlaps (HTA's weights). */
enum { KT_COMP = 1, KT_COMM = 2, KT_MEM = 4, KT_OTHER = 8 };

typedef struct tr_kernel {
    char *name;
    int type;
    uint64_t count;
    int64_t sum, min, max;
    double std;             /* sample standard deviation, ns */
} tr_kernel;

typedef struct tr_op {
    char *name;
    uint64_t count;
    int64_t self, total;
} tr_op;

typedef struct tr_stream {
    int64_t stream;
    uint64_t kernels;
    int64_t host_wait, kernel_wait, other;
} tr_stream;

typedef struct tr_launch {
    uint64_t count;
    int64_t cpu_sum, gpu_sum, delay_sum, cpu_max, delay_max;
    uint64_t cpu_outliers, delay_outliers, short_kernels;
} tr_launch;

typedef struct tr_step {
    long num;
    int64_t ts, dur;
    uint64_t kernels;
    int64_t span, busy, compute, comm, overlap;
    tr_launch launch;
} tr_step;

typedef struct tr_rank {
    char *path;
    long rank;
    const char *rank_from;  /* "distributedInfo", "file name", "order" */
    uint64_t bytes, events, records;
    int array_form, unterminated, ts_rounded, trimmed;
    uint64_t gpu_events, unmatched;
    int64_t kernel_time, idle, compute, non_compute, busy;
    int64_t label_time[8];  /* by mask of KT_COMP|KT_COMM|KT_MEM */
    int64_t comm_total, overlap;
    tr_launch launch;
    tr_kernel *kernels;     /* top kernels by total time */
    size_t nkernels;
    tr_op *ops_self, *ops_total;
    size_t nops_self, nops_total;
    tr_stream *streams;
    size_t nstreams;
    tr_step *steps;
    size_t nsteps;
} tr_rank;

typedef struct tr_straggler {
    long rank, step;
    int64_t dur, median;
} tr_straggler;

struct trace_result {
    trace_opts opts;
    tr_rank *ranks;
    int nranks;
    tr_straggler *stragglers;
    size_t nstragglers;
};

#endif
