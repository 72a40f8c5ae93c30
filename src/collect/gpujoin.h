/* GPU records joined to the host's steps.
 *
 * The GPU runs behind the host: a step's kernels are launched during the
 * step and run during it or after it, and their records (gpu/cupti_inject.c)
 * reach the collector a flush period later, from another thread of the
 * process. So a finished step waits here until the GPU records of its
 * process have caught up with its end and settled (GJ_SETTLE_NS; or GJ_LAG_NS
 * has passed, or the run ended), and only then are its GPU figures made, over the step's host
 * interval [end - interval, end]: what share of the wall time the step
 * took had a kernel running. That is the figure that says whether the GPU or
 * the host sets the pace; it needs no launch-to-step bookkeeping and adds
 * no synchronisation.
 *
 * Bounded: at most GJ_MAX_PEND steps wait and GJ_MAX_RECS records are kept
 * per process (older ones are dropped and counted). Not thread-safe: the
 * collector thread owns it. */
#ifndef TPF_COLLECT_GPUJOIN_H
#define TPF_COLLECT_GPUJOIN_H

#include <stdint.h>
#include <sys/types.h>

#include "core/figs.h"
#include "probe/reader.h"

#define GJ_MAX_PEND 8192
#define GJ_MAX_RECS (1u << 19)
#define GJ_MAX_PROCS 64
#define GJ_LAG_NS 3000000000ull /* a step waits at most this long for its records */
/* CUPTI hands buffers over out of time order (a stream's buffer, the host's
 * synchronisation records), so a record past a step's end does not mean
 * that all of the step's have come: a step goes once the watermark had
 * passed its end GJ_SETTLE_NS ago (on an H200, 20% of a launch-bound run's
 * records came after the watermark had passed them) */
#define GJ_SETTLE_NS 600000000ull
/* after the last step: the GPU's work while it stays busy (gaps under
 * this) is the queue the steps left, counted in the run's per-step totals */
#define GJ_DRAIN_GAP_NS 2000000ull
#define GJ_WINDOW_NS 1000000000ull        /* a step-less process's figures: per second */
#define GJ_WINDOW_AFTER_NS 5000000000ull  /* of GPU time with no step, before windows start */

typedef struct gj gj;
typedef void (*gj_emit_fn)(void *ctx, const gpu_step *g);

/* *out is freed with gj_free. */
int gj_create(gj **out, gj_emit_fn emit, void *ctx);
void gj_free(gj *j);

/* A finished host step of process pid (copied). */
void gj_step(gj *j, const agg_step *s);
/* A GPU record (SEG_EV_GPU_*) of process pid. */
void gj_record(gj *j, pid_t pid, const seg_event *ev);
/* Make the figures of the steps whose records are in (final: of all), in
 * order of end time, and drop what no step can need any more. now_ns:
 * CLOCK_MONOTONIC. Steps of processes that never sent a GPU record make no
 * row; they are let go after GJ_LAG_NS. A process with records and no step
 * gets its figures per window of GJ_WINDOW_NS (tid 0, step = the window's
 * index) once GJ_WINDOW_AFTER_NS of its GPU time passed without a step, and
 * at the end. At the end, a process with steps also gets a drain row (drain
 * set): what the GPU ran after its last step while it stayed busy. */
void gj_flush(gj *j, uint64_t now_ns, int final);
/* Process pid's script took CUPTI over for its torch.profiler at ts_ns
 * (SEG_NAME_GPU_PAUSED), and gave it back (SEG_NAME_GPU_RESUMED): a step
 * of it that overlaps such a window gets no row (its records are the
 * profiler's), counted in gj_counts' paused. At most GJ_MAX_PAUSES windows
 * a process are kept (the oldest go: steps are joined within seconds). */
#define GJ_MAX_PAUSES 16
void gj_pause(gj *j, pid_t pid, uint64_t ts_ns);
void gj_resume(gj *j, pid_t pid, uint64_t ts_ns);
/* Process pid's CUPTI library enabled its activity kinds at ts_ns (on) or
 * disabled them (SEG_NAME_GPU_DETAIL_ON/OFF, `--gpu-trace windows`). Once a
 * process sent such a mark, only its steps wholly inside a window get a
 * row from kernel records (source cupti); a step outside gets one from its
 * CUDA events (source events: span_ns, no kernel figures) or none
 * (counted in gj_undetailed). At most GJ_MAX_PAUSES windows a process are
 * kept, the oldest going first. */
void gj_detail(gj *j, pid_t pid, uint64_t ts_ns, int on);
/* Records seen; those that came after every step that could hold them had
 * gone (or past the caps); steps with no row because a profiler held CUPTI. */
void gj_counts(const gj *j, uint64_t *records, uint64_t *late, uint64_t *paused);
/* Steps outside the kernel-detail windows that had no CUDA events either. */
uint64_t gj_undetailed(const gj *j);
/* A step's CUDA-event record (SEG_EV_GPU_STEP) belongs to the host step
 * that ended at most this long before the library's hook saw its end */
#define GJ_EV_MATCH_NS 2000000ull
#define GJ_MAX_EVS 8192 /* event records kept a process (the oldest go) */

/* The figures of one step from records (sorted by start), for tests too. */
typedef struct gj_rec {
    uint64_t b, e;
    uint64_t bytes;
    uint32_t kind; /* SEG_EV_GPU_* */
    uint32_t aux;  /* the event's name field */
} gj_rec;
void gj_figures(const gj_rec *r, size_t n, uint64_t max_dur, gpu_step *g);

#endif
