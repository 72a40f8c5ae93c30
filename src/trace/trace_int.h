/* Internal to the trace analysis (trace_an.c builds, trace_out.c renders). */
#ifndef TPF_ANALYZE_TRACE_INT_H
#define TPF_ANALYZE_TRACE_INT_H

#include <stdint.h>

#include "trace/trace.h"
#include "util/jsonw.h"
#include "util/table.h"

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

/* GPU time per user annotation (record_function): kernels launched while it
 * was the innermost annotation on the launching thread, and the time of the
 * matching gpu_user_annotation ranges. */
typedef struct tr_ann {
    char *name;
    uint64_t ranges, kernels;
    int64_t cpu, gpu, gpu_ann;
} tr_ann;

typedef struct tr_seq {
    char *names[8];         /* SEQ_MAX_LEN */
    uint64_t count;
    int64_t total;
} tr_seq;

typedef struct tr_queue {
    int64_t stream;
    uint64_t kernels;
    uint32_t max;
    double mean;            /* time-weighted over the stream's span */
} tr_queue;

typedef struct tr_bw {
    char *name;
    uint64_t count;
    int64_t bytes, time;
    double peak;            /* GB/s of the fastest copy */
} tr_bw;

typedef struct tr_memdev {
    int64_t key;            /* device type << 8 | (id + 1) */
    int64_t peak, peak_ts, reserved_peak, alloc_bytes, free_bytes;
    uint64_t allocs, frees;
    char *peak_cat;         /* annotation/op innermost at the peak, or NULL */
} tr_memdev;

typedef struct tr_memcat {
    char *name;
    int dev;                /* index into mem */
    int64_t bytes;
    uint64_t count;
} tr_memcat;

/* A time series in the rank's bins (trace_extra.h, TS_*): per bin the
 * time-weighted mean and the maximum; NAN where it has no value. */
typedef struct tr_series {
    int kind;
    char *name;             /* "stream 7", "Memcpy HtoD", a counter's label */
    int64_t key;            /* stream, or a counter's pid */
    uint64_t samples;       /* change points seen (launches, copies, counter samples) */
    double vmax, overall;   /* maximum; time-weighted mean over the file */
    uint64_t lost;          /* copies past the in-flight cap (in means, not maxima) */
    double *mean, *max;     /* ts_bins each; one allocation from mean */
} tr_series;

typedef struct tr_rank {
    char *path;
    long rank;
    const char *rank_from;  /* "distributedInfo", "file name", "order" */
    uint64_t bytes, events, records;
    int array_form, unterminated, ts_rounded, trimmed;
    uint64_t gpu_events, unmatched;
    uint64_t bad_numbers;   /* events dropped: ts/dur out of range (1e999) */
    uint64_t nonfinite, trailing, negdur, dups, collide; /* said as warnings (trace_analyze) */
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
    tr_ann *anns;
    size_t nanns;
    tr_seq *seqs;
    size_t nseqs;
    int seq_len;
    uint64_t seq_dropped;
    tr_queue *queues;
    size_t nqueues;
    tr_bw *bws;
    size_t nbws;
    tr_memdev *mem;
    size_t nmem;
    tr_memcat *memcats;
    size_t nmemcats;
    int64_t ts_t0, ts_t1, ts_w;  /* bins: ts_bins of ts_w ns from ts_t0, the last cut at ts_t1 */
    int ts_bins;
    tr_series *series;
    size_t nseries;
    uint64_t series_dropped, counter_events;
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
    char **warnings;        /* one line each, e.g. two files of one rank */
    size_t nwarnings;
};

/* Append a warning line to r (at most 64 are kept). 0 or TPF_ENOMEM. */
int trace_warn(trace_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- one iteration's events, for the critical path (trace_cpath.c) ---- */

enum { TW_CPU = 0, TW_RUNTIME, TW_KERNEL, TW_MEMCPY, TW_MEMSET, TW_SYNC, TW_OTHER };

typedef struct tw_ev {
    int64_t ts, dur, corr, stream;
    int64_t prev_end;       /* device work: the latest end of earlier work on its
                             * stream in the whole trace (INT64_MIN none) */
    uint32_t name, thread;
    uint8_t kind;           /* TW_* */
} tw_ev;

typedef struct tr_window {
    tw_ev *ev;              /* time order (ts, then longer first) */
    size_t n;
    char *arena;            /* names: arena + noff[id] */
    uint32_t *noff;
    uint32_t nnames;
    int64_t (*threads)[2];  /* pid, tid per thread id */
    uint32_t nthreads;
    int64_t lo, hi;         /* the window, ns */
    char what[256];         /* "ProfilerStep#5", "[param|...] #1", "the whole trace" */
} tr_window;

/* What to take: a ProfilerStep number (has_step), the index-th range of a
 * user annotation (ann), or by default the last step but one (the last is
 * often cut short), or the whole trace without steps. */
typedef struct tw_select {
    int has_step;
    long step;
    const char *ann;
    long ann_index;
    int hta;                /* HTA's join: one device row per launch (CUDA graphs) */
} tw_select;

#define TW_MAX_EVENTS (4u << 20)

/* The events of one window of path: CPU events inside it and the GPU work
 * they launched (joined by correlation). 0, or an error with err set.
 * *w owned by the caller: trace_window_free. */
int trace_window(const char *path, const tw_select *sel, tr_window *w, char *err, size_t errlen);
/* A call HTA counts as enqueueing device work (its runtime-launch list). */
int hta_queue_name(const char *name);
void trace_window_free(tr_window *w);

/* trace_extra.c: render the annotation, sequence, queue, bandwidth and
 * memory tables of a rank. */
struct jw;
void trace_extra_json(struct jw *w, const tr_rank *k);
void trace_extra_text(buf *o, const tr_rank *k, int md, int color);
void trace_extra_rank_free(tr_rank *k);

/* A column of a trace table, described once for every format: text and
 * Markdown take the heading, width and flags; JSON the key; both read the
 * member the jw_field names. Text shows a count as it is, a time (ns) as ms
 * with 3 decimals and a name cut by trace_short_name, the name last (after
 * the numbers); JSON has the raw values in the order of the columns. */
enum { TRC_COUNT, TRC_MS, TRC_NAME };
typedef struct tr_col {
    tbl_col col;
    jw_field f;
    int show; /* TRC_COUNT, TRC_MS or TRC_NAME */
} tr_col;
#define TR_COL(head, width, flags, show, type, key, T, member)                                     \
    {{head, width, flags}, JW_FIELD(type, key, T, member), TRC_##show}
/* nrows rows of `size` bytes from rows as one table (layout TBL_SUB). */
void tr_table(buf *o, int fmt, int color, const char *title, const tr_col *c, int n,
              const void *rows, size_t nrows, size_t size);
/* The same rows as "key": [{...}, ...]. */
void tr_table_json(jw *w, const char *key, const tr_col *c, int n, const void *rows,
                   size_t nrows, size_t size);
#define TR_NCOLS(c) ((int)(sizeof(c) / sizeof((c)[0])))

/* trace_out.c: s cut to fit n bytes ("..." at a UTF-8 boundary), on one
 * line: the name cell of the analyser's tables. */
void trace_short_name(char *dst, size_t n, const char *s);

#endif
