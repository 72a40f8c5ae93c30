/* Trace diff: a baseline and a test set of traces, operators and kernels
 * joined by name (src/trace/trace_diff.c). */
#ifndef TPF_TRACE_DIFF_H
#define TPF_TRACE_DIFF_H

#include <stdint.h>

#include "trace/trace.h"

enum { TD_OP = 0, TD_KERNEL = 1 };
enum { TD_ADDED, TD_REMOVED, TD_SLOWER, TD_FASTER, TD_SAME, TD_NSTATUS };

/* One name: a = baseline, b = test (summed over ranks). */
typedef struct tr_diff_row {
    int kind;               /* TD_OP, TD_KERNEL */
    const char *name;       /* owned by the result */
    uint64_t count_a, count_b;
    int64_t total_a, total_b;
    int64_t self_a, self_b; /* operators only */
    int status;             /* TD_ADDED ... TD_SAME */
} tr_diff_row;

typedef struct trace_diff_result {
    tr_diff_row *rows;      /* by |total_b - total_a|, largest first */
    size_t nrows;
    uint64_t count[TD_NSTATUS];
    int64_t kernel_delta[TD_NSTATUS], op_self_delta[TD_NSTATUS];
    int ranks[2];
    uint64_t steps[2], gpu_events[2], launches[2];
    int64_t step_mean[2], kernel_time[2], busy[2], idle[2];
    int top_k;
} trace_diff_result;

/* Analyse a[0..na) and b[0..nb) with opts (top_k: rows shown in text) and
 * join them. On success *out is owned by the caller (trace_diff_free).
 * Errors as trace_analyze; err: one line. */
int trace_diff(const char *const *a, int na, const char *const *b, int nb, const trace_opts *opts,
               trace_diff_result **out, char *err, size_t errlen);
void trace_diff_free(trace_diff_result *d);
int trace_diff_json(const trace_diff_result *d, buf *out);
int trace_diff_text(const trace_diff_result *d, buf *out, int color);

#endif
