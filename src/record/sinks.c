/* The run directory's sinks (see sinks.h, core/sink.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "record/exporter.h"
#include "record/sinks.h"
#include "record/status.h"
#include "record/safeout.h"
#include "record/trace.h"
#include "record/writers.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/err.h"

#define SINK_OUT_FLUSH (256u << 10) /* steps.csv goes out early past this */
#define SINK_OUT_MAX (16u << 20)

/* ---- a streamed file: lines gather in b and go out at each flush ---- */

typedef struct stream {
    const sink_ctx *ctx;
    const char *name;
    int fd;
    buf b;
    int err;
    uint64_t size, lost; /* bytes on disk (whole rows); rows not written */
    int dead;            /* its header never got out: no rows after it */
} stream;

static void note(const sink_ctx *ctx, const char *what, int err)
{
    if (ctx->error) ctx->error(ctx->error_arg, what, err ? err : TPF_EIO);
}

static int stream_open(void **state, const sink_ctx *ctx, const char *name)
{
    stream *o = calloc(1, sizeof(*o));
    if (!o) return TPF_ENOMEM;
    o->ctx = ctx;
    o->name = name;
    buf_init(&o->b, SINK_OUT_MAX);
    /* A fresh file, never through a planted link (util/afile.h). */
    int dfd = afile_dir_open(ctx->run_dir);
    o->fd = dfd < 0 ? dfd : afile_create_at(dfd, name, O_WRONLY | O_APPEND);
    if (dfd >= 0) close(dfd);
    if (o->fd < 0) {
        int rc = o->fd;
        buf_free(&o->b);
        free(o);
        return rc;
    }
    *state = o;
    return 0;
}

static void stream_write(stream *o)
{
    if (o->b.err && !o->err) {
        o->err = o->b.err;
        note(o->ctx, o->name, o->err);
    }
    if (o->fd >= 0 && o->b.len) {
        /* Disk full and the like: whole rows or none (record/safeout.h);
         * the lost rows are counted, the run goes on. */
        uint64_t lost0 = o->lost;
        int header = o->size == 0 && !o->dead; /* the batch opens with the header */
        int rc = o->dead ? TPF_EIO : rec_append_whole(o->fd, &o->size, o->b.data, o->b.len, &o->lost);
        if (o->dead) {
            for (size_t i = 0; i < o->b.len; i++) o->lost += o->b.data[i] == '\n';
        } else if (rc) {
            if (!o->err) o->err = rc;
            note(o->ctx, o->name, rc);
            if (o->size == 0) o->dead = 1;
        }
        /* A header that never got out is no row lost (it was counted as one). */
        if (header && o->size == 0 && o->lost > lost0) o->lost--;
    }
    buf_reset(&o->b);
}

/* The stream's losses into the run's tally (summary.json "io"). */
static void stream_tally(stream *o, const sink_run *run)
{
    if (!run || !run->tally) return;
    sink_lost *l = &run->tally->lost;
    if (strcmp(o->name, "gpu_steps.csv") == 0) { /* its losses are the error line's */
        if (o->err && !l->error[0])
            snprintf(l->error, sizeof(l->error), "%s: %s", o->name, tpf_strerror(o->err));
        return;
    }
    uint64_t *slot = strcmp(o->name, "steps.csv") == 0     ? &l->steps
                     : strcmp(o->name, "metrics.csv") == 0 ? &l->metrics
                     : strcmp(o->name, "procs.csv") == 0   ? &l->procs
                                                           : &l->alerts;
    *slot = o->lost;
    if (o->err && !l->error[0])
        snprintf(l->error, sizeof(l->error), "%s: %s", o->name, tpf_strerror(o->err));
}

static void stream_flush(void *state, const sink_run *run)
{
    stream_write(state);
    stream_tally(state, run);
}

static void stream_drain(void *state)
{
    stream *o = state;
    if (o->b.len) stream_write(o);
}

static void stream_close(void *state, const sink_run *run)
{
    stream *o = state;
    stream_write(o);
    stream_tally(o, run);
    if (o->fd >= 0) close(o->fd);
    buf_free(&o->b);
    free(o);
}

/* ---- metrics.csv ---- */

static int metrics_init(void **state, const sink_ctx *ctx)
{
    return stream_open(state, ctx, "metrics.csv");
}

static void metrics_sample(void *state, const coll_frame *f, const sink_run *run)
{
    stream *o = state;
    /* The first sample fixes the per-core and per-GPU columns. */
    if (run->nsamples == 1) rec_metrics_header(&o->b, run->ncpu_cols, run->ngpu_cols);
    rec_metrics_row(&o->b, f, run->ncpu_cols, run->ngpu_cols, run->gpu_cols);
}

const sink_ops rec_sink_metrics = {
    .name = "metrics.csv", .init = metrics_init, .on_sample = metrics_sample,
    .flush = stream_flush, .close = stream_close,
};

/* ---- procs.csv ---- */

static int procs_init(void **state, const sink_ctx *ctx)
{
    int rc = stream_open(state, ctx, "procs.csv");
    if (rc == 0) rec_procs_header(&((stream *)*state)->b);
    return rc;
}

static void procs_sample(void *state, const coll_frame *f, const sink_run *run)
{
    stream *o = state;
    for (int k = 0; k < f->nprocs; k++) rec_procs_row(&o->b, f->t, &f->procs[k]);
}

const sink_ops rec_sink_procs = {
    .name = "procs.csv", .init = procs_init, .on_sample = procs_sample, .flush = stream_flush,
    .close = stream_close,
};

/* ---- steps.csv ---- */

static int steps_init(void **state, const sink_ctx *ctx)
{
    int rc = stream_open(state, ctx, "steps.csv");
    if (rc == 0) rec_steps_header(&((stream *)*state)->b);
    return rc;
}

static void steps_step(void *state, const agg_step *s)
{
    stream *o = state;
    rec_steps_row(&o->b, s, o->ctx->start_mono_ns);
    if (o->b.len >= SINK_OUT_FLUSH) stream_write(o);
}

const sink_ops rec_sink_steps = {
    .name = "steps.csv", .init = steps_init, .on_step = steps_step, .flush = stream_flush,
    .close = stream_close,
    .on_drain = stream_drain,
};

/* ---- alerts.jsonl ---- */

static int alerts_init(void **state, const sink_ctx *ctx)
{
    return stream_open(state, ctx, "alerts.jsonl");
}

static void alerts_alert(void *state, const alert_event *e)
{
    stream *o = state;
    rec_alert_line(&o->b, e);
}

const sink_ops rec_sink_alerts = {
    .name = "alerts.jsonl", .init = alerts_init, .on_alert = alerts_alert, .flush = stream_flush,
    .close = stream_close,
};

/* ---- gpu_steps.csv: made at the first GPU step, so a run without GPU
 * records has none ---- */

typedef struct gpu_steps_out {
    const sink_ctx *ctx;
    stream *o; /* NULL until the first row; after a failed open too */
    int failed;
} gpu_steps_out;

static int gpu_steps_init(void **state, const sink_ctx *ctx)
{
    gpu_steps_out *g = calloc(1, sizeof(*g));
    if (!g) return TPF_ENOMEM;
    g->ctx = ctx;
    *state = g;
    return 0;
}

static void gpu_steps_row(void *state, const gpu_step *s)
{
    gpu_steps_out *g = state;
    if (!g->o && !g->failed) {
        void *st = NULL;
        int rc = stream_open(&st, g->ctx, "gpu_steps.csv");
        if (rc) {
            g->failed = 1;
            note(g->ctx, "gpu_steps.csv", rc);
            return;
        }
        g->o = st;
        rec_gpu_steps_header(&g->o->b);
    }
    if (!g->o) return;
    rec_gpu_steps_row(&g->o->b, s);
    if (g->o->b.len >= SINK_OUT_FLUSH) stream_write(g->o);
}

static void gpu_steps_flush(void *state, const sink_run *run)
{
    gpu_steps_out *g = state;
    if (g->o) stream_flush(g->o, run);
}

static void gpu_steps_drain(void *state)
{
    gpu_steps_out *g = state;
    if (g->o) stream_drain(g->o);
}

static void gpu_steps_close(void *state, const sink_run *run)
{
    gpu_steps_out *g = state;
    if (g->o) stream_close(g->o, run);
    free(g);
}

const sink_ops rec_sink_gpu_steps = {
    .name = "gpu_steps.csv", .init = gpu_steps_init, .on_gpu_step = gpu_steps_row,
    .flush = gpu_steps_flush, .close = gpu_steps_close, .on_drain = gpu_steps_drain,
};

/* ---- trace.json ---- */

typedef struct trace_sink {
    const sink_ctx *ctx;
    rec_trace t;
} trace_sink;

static int trace_init(void **state, const sink_ctx *ctx)
{
    trace_sink *ts = calloc(1, sizeof(*ts));
    if (!ts) return TPF_ENOMEM;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/trace.json", ctx->run_dir);
    ts->ctx = ctx;
    int rc = rec_trace_open(&ts->t, path, ctx->start_mono_ns, 0);
    if (rc) {
        free(ts);
        return rc;
    }
    rec_trace_process(&ts->t, 0, -1);
    *state = ts;
    return 0;
}

static void trace_sample(void *state, const coll_frame *f, const sink_run *run)
{
    trace_sink *ts = state;
    rec_trace_frame(&ts->t, f, run->ngpu_cols, run->gpu_cols);
}

static void trace_step(void *state, const agg_step *s)
{
    trace_sink *ts = state;
    rec_trace_step(&ts->t, s);
}

static void trace_probe(void *state, const sink_probe *p)
{
    trace_sink *ts = state;
    switch (p->kind) {
    case SINK_PROCESS: rec_trace_process(&ts->t, p->pid, p->rank); break;
    case SINK_RANGE: rec_trace_range(&ts->t, p->range, p->name); break;
    case SINK_COUNTER: rec_trace_counter(&ts->t, p->pid, p->name, p->ts_ns, p->value); break;
    case SINK_MARK: rec_trace_mark(&ts->t, p->pid, p->tid, p->name, p->ts_ns); break;
    case SINK_GPU: rec_trace_gpu(&ts->t, p->pid, p->gpu, p->name); break;
    default: break;
    }
}

static void trace_alert(void *state, const alert_event *e)
{
    trace_sink *ts = state;
    rec_trace_alert(&ts->t, e);
}

static void trace_tally(trace_sink *ts, const sink_run *run)
{
    if (!run || !run->tally) return;
    run->tally->trace_written = ts->t.written;
    run->tally->trace_dropped = ts->t.dropped;
    run->tally->lost.trace_events = ts->t.lost_events;
    if (ts->t.err && !run->tally->lost.error[0])
        snprintf(run->tally->lost.error, sizeof(run->tally->lost.error), "trace.json: %s",
                 tpf_strerror(ts->t.err));
}

static void trace_flush(void *state, const sink_run *run)
{
    trace_sink *ts = state;
    int err = rec_trace_flush(&ts->t);
    if (err) note(ts->ctx, "trace.json", err);
    trace_tally(ts, run);
}

static void trace_drain(void *state)
{
    trace_sink *ts = state;
    /* Hands the events to the writer thread; never waits for the disk. */
    if (ts->t.pending.len) rec_trace_flush(&ts->t);
}

static void trace_close(void *state, const sink_run *run)
{
    trace_sink *ts = state;
    if (ts->t.fd >= 0 && rec_trace_close(&ts->t)) note(ts->ctx, "trace.json", ts->t.err);
    trace_tally(ts, run);
    free(ts);
}

const sink_ops rec_sink_trace = {
    .name = "trace.json", .init = trace_init, .on_sample = trace_sample, .on_step = trace_step,
    .on_probe = trace_probe, .on_alert = trace_alert, .flush = trace_flush, .close = trace_close,
    .on_drain = trace_drain,
};

/* ---- run.json and summary.json ---- */

typedef struct summary_sink {
    const sink_ctx *ctx;
    int run_json_done;
} summary_sink;

static int summary_init(void **state, const sink_ctx *ctx)
{
    summary_sink *s = calloc(1, sizeof(*s));
    if (!s) return TPF_ENOMEM;
    s->ctx = ctx;
    *state = s;
    return 0;
}

/* Write a JSON document built into b (rc: the builder's result) as
 * RUN/name, atomically; record a failure; free b. */
static void put_doc(const sink_ctx *ctx, const char *name, buf *b, int rc)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/%s", ctx->run_dir, name);
    if (rc == 0) rc = rec_write_atomic(path, b);
    if (rc) note(ctx, name, rc);
    buf_free(b);
}

static void write_run_json(const sink_ctx *ctx, const sink_run *run)
{
    buf b;
    buf_init(&b, 1u << 20);
    put_doc(ctx, "run.json", &b, rec_run_json(&b, ctx, run));
}

static void summary_flush(void *state, const sink_run *run)
{
    summary_sink *s = state;
    if (s->run_json_done) return;
    /* run.json once the first sample has fixed the GPUs, again at the end. */
    write_run_json(s->ctx, run);
    s->run_json_done = 1;
}

static void summary_close(void *state, const sink_run *run)
{
    summary_sink *s = state;
    if (run && run->ended) {
        buf b;
        buf_init(&b, 4u << 20);
        put_doc(s->ctx, "summary.json", &b, rec_summary_json(&b, run, s->ctx->start_mono_ns));
        write_run_json(s->ctx, run);
    }
    free(s);
}

const sink_ops rec_sink_summary = {
    .name = "summary.json", .init = summary_init, .flush = summary_flush, .close = summary_close,
};

/* ---- the space reserve: closes before the trace (see rec_sinks) ---- */

static int reserve_init(void **state, const sink_ctx *ctx)
{
    /* Room for the last rows, the trace's ']', summary.json, run.json and
     * the reports, should the disk fill during the run (record/safeout.h). */
    struct stat st;
    int dfd = afile_dir_open(ctx->run_dir);
    /* Usually made already when the directory was claimed (rundir.h). */
    if (dfd >= 0 && fstatat(dfd, REC_RESERVE_NAME, &st, AT_SYMLINK_NOFOLLOW) != 0)
        rec_reserve_make(ctx->run_dir);
    if (dfd >= 0) close(dfd);
    *state = (void *)ctx->run_dir;
    return 0;
}

static void reserve_close(void *state, const sink_run *run)
{
    rec_reserve_release(state);
}

const sink_ops rec_sink_reserve = {
    .name = "reserve",
    .init = reserve_init,
    .close = reserve_close,
};

/* The run's sinks, in call and close order. Exporters add a line here. The
 * reserve closes after the streamed CSV files and before the trace: on a full
 * disk the CSVs' last rows are counted as lost rather than eating the room
 * kept for the trace's ']', summary.json, run.json and the reports. */
const sink_ops *const rec_sinks[] = {
    &rec_sink_metrics, &rec_sink_procs,      &rec_sink_steps,       &rec_sink_gpu_steps,
    &rec_sink_alerts,
    &rec_sink_reserve, &rec_sink_trace,      &rec_sink_prometheus,  &rec_sink_tensorboard,
    &rec_sink_summary, &rec_sink_status,
};
const size_t rec_nsinks = sizeof(rec_sinks) / sizeof(rec_sinks[0]);
