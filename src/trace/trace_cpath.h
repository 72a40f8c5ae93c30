/* Critical path of one iteration (as HTA's critical_path_analysis): a graph
 * of CPU operators, runtime calls, kernels and synchronisations with their
 * dependencies, its longest path, a summary by category and by name, and an
 * overlay trace (the original events plus the path) that Perfetto opens. */
#ifndef TPF_TRACE_CPATH_H
#define TPF_TRACE_CPATH_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/* Edge types; the time of the path is the sum of its edges' weights. */
enum {
    CP_CPU,         /* time inside a CPU operator or runtime call */
    CP_KERNEL,      /* a kernel (or memory copy/set) running */
    CP_LAUNCH,      /* from a launch call's start to its kernel's start */
    CP_KGAP,        /* a kernel waiting for the previous one on its stream */
    CP_DEP,         /* next operator on a thread (weight 0: idle is not work) */
    CP_SYNC,        /* kernel end -> the CPU call that waited for it (weight 0) */
    CP_NTYPES
};

typedef struct cp_row {
    char *name;
    int type;       /* CP_CPU, CP_KERNEL, CP_LAUNCH (name: the launch call), CP_KGAP */
    uint64_t edges;
    int64_t time;
} cp_row;

typedef struct trace_cpath trace_cpath;

/* Critical path of one window of one trace. step/has_step: ProfilerStep#N;
 * ann/ann_index: the ann_index-th range of a user annotation; neither: the
 * last step but one, or the whole trace. top_k rows by name. hta: HTA
 * 0.5's graph (one kernel per launch, so a CUDA graph's other kernels are
 * left out; no GPU -> CPU edge for a blocking call in a trace without
 * cuda_sync events). *out owned by the caller (trace_cpath_free). Errors as
 * trace_analyze (TPF_EINVAL: no such step or range), err one line. */
int trace_cpath_run(const char *path, int has_step, long step, const char *ann, long ann_index, int top_k,
                    int hta, trace_cpath **out, char *err, size_t errlen);
void trace_cpath_free(trace_cpath *c);
int trace_cpath_json(const trace_cpath *c, buf *out);
int trace_cpath_text(const trace_cpath *c, buf *out, int color);

/* The overlay: the original trace's events, the path as events of its own
 * process ("critical path"), and flow arrows along the path between the
 * original events. Written to out_path.tmpPID and renamed. */
int trace_cpath_overlay(const trace_cpath *c, const char *out_path, char *err, size_t errlen);

#endif
