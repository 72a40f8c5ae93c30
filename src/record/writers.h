/* Text writers of the run directory (docs/run-format.md). Each appends to a
 * buf, so the same code feeds files and golden-file tests; none allocates
 * beyond the buf's cap. Return 0 or the buf's sticky error. */
#ifndef TPF_RECORD_WRITERS_H
#define TPF_RECORD_WRITERS_H

#include <stdint.h>
#include <sys/types.h>

#include "core/figs.h"
#include "core/frame.h"
#include "core/run.h"
#include "core/sink.h"
#include "record/safeout.h"
#include "util/buf.h"

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
int rec_procs_row(buf *b, double t, const frame_proc *p);

/* ---- steps.csv: start_mono_ns is t = 0 ---- */
int rec_steps_header(buf *b);
int rec_steps_row(buf *b, const agg_step *s, uint64_t start_mono_ns);
/* gpu_steps.csv (docs/run-format.md): one row per step of a process whose
 * GPU records were collected. */
int rec_gpu_steps_header(buf *b);
int rec_gpu_steps_row(buf *b, const gpu_step *g);

/* ---- alerts.jsonl: one line ---- */
int rec_alert_line(buf *b, const alert_event *e);

/* ---- run.json ---- */
/* ctx: the run's fixed facts (meta, start, interval); run: what is known
 * so far (GPUs of the first sample, sources, and once ended the exit and
 * duration). */
int rec_run_json(buf *b, const sink_ctx *ctx, const sink_run *run);

/* ---- summary.json ---- */

/* From the collector's figures at the end of the run (core/sink.h: steps,
 * res, alerts, sources, exit, duration, events_dropped, tally). */
int rec_summary_json(buf *b, const sink_run *s, uint64_t start_mono_ns);

/* Write b to path through path.tmp + rename, so readers never see half a file. */
int rec_write_atomic(const char *path, const buf *b);

#endif
