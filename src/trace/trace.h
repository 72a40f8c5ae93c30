/* Analysis of torch.profiler (Kineto/Chrome) traces, one file per rank:
 * GPU temporal breakdown, kernel types and overlaps, top kernels, idle time
 * per stream, communication/computation overlap, launch statistics, top CPU
 * operators, per-step figures and stragglers across ranks; and merging of
 * per-rank traces into one timeline. Memory is bounded: events are streamed
 * (trace_json.h), spilled to a temporary file in compact form and read back
 * in time order by a k-way merge; only summaries stay in memory. */
#ifndef TPF_ANALYZE_TRACE_H
#define TPF_ANALYZE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

typedef struct trace_opts {
    int compat_hta;     /* reproduce HolisticTraceAnalysis: 1 = 0.5.0 (PyPI
                         * HolisticTraceAnalysis), 2 = 0.6 (traceinsight) */
    int top_k;          /* rows in top tables; 0 = 10 */
    int has_rank;       /* analyse only the file(s) of this rank */
    long rank;
    int has_steps;      /* restrict to ProfilerStep#lo..#hi (inclusive) */
    long step_lo, step_hi;
    int jobs;           /* files analysed at once; 0 = one per online CPU */
    int seq_len;        /* kernel sequence length; 0 = 3 */
    int bins;           /* time-series bins over each file; 0 = 40, at most 1000 */
} trace_opts;

#define TRACE_MAX_JOBS 64

/* The number of threads trace_analyze uses for n files with these options. */
int trace_jobs(const trace_opts *o, int n);

/* The result (opaque; built by trace_analyze, freed by trace_result_free). */
typedef struct trace_result trace_result;

/* Analyse n trace files. On success *out owns a result (free it with
 * trace_result_free). Errors: TPF_EINVAL (arguments), TPF_ENOENT/TPF_EACCES/
 * TPF_EIO (unreadable file), TPF_EFORMAT (invalid JSON or gzip; err names the
 * file and byte offset), TPF_ETOOBIG (a table hit its cap), TPF_ENOMEM.
 * err: one line. Thread-safe with distinct arguments. */
int trace_analyze(const char *const *paths, int n, const trace_opts *opts, trace_result **out,
                  char *err, size_t errlen);
void trace_result_free(trace_result *r);

/* Warnings of an analysis (two files claiming one rank, events skipped for
 * numbers out of range, ...): *lines points into r, valid while r is. */
size_t trace_result_warnings(const trace_result *r, const char *const **lines);

/* Render: machine JSON (times as integer nanoseconds, *_ns), terminal text
 * (aligned tables; ANSI colour when color), or markdown. 0 or buf's error. */
int trace_result_json(const trace_result *r, buf *out);
int trace_result_text(const trace_result *r, buf *out, int color);
int trace_result_markdown(const trace_result *r, buf *out);

/* Merge n per-rank traces into one Chrome trace at out_path (on success err
 * may hold a note of what was not kept apart: say it): every rank gets
 * its own processes (pids remapped so ranks never collide, named "rank R"),
 * flow ids are kept apart per rank, and all times are put on one clock
 * (baseTimeNanoseconds when present) starting at 0. align_start: start every
 * rank at 0 instead (for ranks whose clocks disagree). Streaming: memory does
 * not grow with the traces. Errors as trace_analyze, plus TPF_EIO for the
 * output. */
int trace_merge(const char *const *paths, int n, const char *out_path, int align_start,
                char *err, size_t errlen);

/* As trace_merge, with file i's times shifted by offsets_s[i] seconds
 * (the run directories of a job's nodes, aligned by report/report_ranks.c). */
int trace_merge_offsets(const char *const *paths, int n, const char *out_path,
                        const double *offsets_s, char *err, size_t errlen);

/* Write the trace at path to out_path with its time series added as counter
 * events, as HTA's generate_trace_with_counters does: "Queue Length" per
 * stream (id = stream) and "Memcpy BW" per kind of copy (named by the kind).
 * Computed as trace_analyze computes them with opts (--compat hta: HTA's
 * launch list and trimming). The other top-level members of the file are
 * not copied, except distributedInfo.rank and baseTimeNanoseconds. Written
 * to a temporary file and renamed. Errors as trace_analyze, TPF_EIO for the
 * output. */
int trace_write_counters(const char *path, const trace_opts *opts, const char *out_path, char *err,
                         size_t errlen);

/* The trace files (*.json, *.json.gz) directly inside dir, sorted by name.
 * On success *paths (n entries, possibly 0) is owned by the caller: free it
 * with trace_paths_free. TPF_ENOENT/TPF_EACCES/TPF_EIO when dir cannot be
 * listed, TPF_ETOOBIG beyond 65536 files. */
int trace_list_dir(const char *dir, char ***paths, int *n);
void trace_paths_free(char **paths, int n);

/* Command-line arguments to trace files: a directory stands for the traces
 * in it (an empty one is TPF_ENOENT), anything else is kept as given. *paths
 * as trace_list_dir. err: one line. */
int trace_expand_args(const char *const *args, int n, char ***paths, int *np, char *err, size_t errlen);

/* The rank of a file: distributedInfo.rank, else a number after "rank" in the
 * file name ("rank-3", "rank_3", "rank3"), else -1. */
long trace_rank_from_name(const char *path);

#endif
