/* TensorBoard exporter: RUN/events.out.tfevents.<secs>.<host>, written here
 * in C (docs/exporters.md): TFRecord framing (length, masked CRC-32C of the
 * length, Event protobuf, masked CRC-32C of the data) around hand-encoded
 * Event/Summary messages: scalars keyed by the training step, alerts as text.
 *
 * Records gather in a capped buffer on the collector thread; a writer thread
 * of its own puts them on disk, so a slow disk (NFS, a full page cache) never
 * holds the collector. When the writer is that far behind, whole samples are
 * dropped and counted. A target that cannot be written (a directory or a
 * full disk at its name) is said once (sink_ctx.warn) and the exporter goes
 * quiet; the file keeps its whole records. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "record/exp_counters.h"
#include "record/exporter.h"
#include "core/metrics.h"
#include "record/tfevents.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/buf.h"
#include "util/err.h"

#define TFEV_PENDING_MAX (1u << 20) /* records waiting for the writer */
#define TFEV_REC_MAX (64u << 10)    /* one encoded Event */

/* ---- CRC-32C (Castagnoli), table-driven, built once ---- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t tfev_crc32c(const void *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *s = p;
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = crc_table[(c ^ *s++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t tfev_masked_crc(const void *p, size_t n)
{
    uint32_t c = tfev_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding (only what Event/Summary need) ---- */

typedef struct pb {
    unsigned char *d;
    size_t len, cap;
    int err;
} pb;

static void pb_put(pb *b, const void *p, size_t n)
{
    if (b->err) return;
    if (b->len + n > b->cap) {
        b->err = TPF_ETOOBIG;
        return;
    }
    memcpy(b->d + b->len, p, n);
    b->len += n;
}

static void pb_varint(pb *b, uint64_t v)
{
    unsigned char t[10];
    size_t n = 0;
    do {
        t[n] = (unsigned char)(v & 0x7F);
        v >>= 7;
        if (v) t[n] |= 0x80;
        n++;
    } while (v);
    pb_put(b, t, n);
}

static void pb_tag(pb *b, unsigned field, unsigned wire) { pb_varint(b, (uint64_t)(field << 3 | wire)); }

static void pb_bytes(pb *b, unsigned field, const void *p, size_t n)
{
    pb_tag(b, field, 2);
    pb_varint(b, n);
    pb_put(b, p, n);
}

static void pb_le(pb *b, uint64_t v, int n)
{
    unsigned char t[8];
    for (int i = 0; i < n; i++) t[i] = (unsigned char)(v >> (8 * i));
    pb_put(b, t, (size_t)n);
}

static void pb_double(pb *b, unsigned field, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    pb_tag(b, field, 1);
    pb_le(b, u, 8);
}

static void pb_float(pb *b, unsigned field, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    pb_tag(b, field, 5);
    pb_le(b, u, 4);
}

/* A nested message: encode it into tmp first, then copy with its length. */
static void pb_msg(pb *b, unsigned field, const pb *inner)
{
    if (inner->err && !b->err) b->err = inner->err;
    pb_bytes(b, field, inner->d, inner->len);
}

/* Summary.Value{tag, simple_value} */
static void value_scalar(pb *summary, const char *tag, float v)
{
    unsigned char m[512];
    pb val = {m, 0, sizeof(m), 0};
    pb_bytes(&val, 1, tag, strlen(tag));
    pb_float(&val, 2, v);
    pb_msg(summary, 1, &val);
}

/* Summary.Value{tag, metadata{plugin_data{plugin_name:"text"}},
 * tensor{dtype: DT_STRING, tensor_shape{}, string_val}}: the text plugin's
 * format, a scalar string tensor. */
static void value_text(pb *summary, const char *tag, const char *text)
{
    unsigned char m[4096], md[64], pd[32], tn[3072];
    pb plug = {pd, 0, sizeof(pd), 0};
    pb_bytes(&plug, 1, "text", 4);
    pb meta = {md, 0, sizeof(md), 0};
    pb_msg(&meta, 1, &plug);
    pb_tag(&meta, 4, 0); /* data_class: DATA_CLASS_TENSOR */
    pb_varint(&meta, 2);
    pb tensor = {tn, 0, sizeof(tn), 0};
    pb_tag(&tensor, 1, 0); /* dtype: DT_STRING */
    pb_varint(&tensor, 7);
    pb_bytes(&tensor, 2, "", 0); /* tensor_shape: a scalar */
    size_t n = strlen(text);
    if (n > 2048) n = 2048;
    pb_bytes(&tensor, 8, text, n);
    pb val = {m, 0, sizeof(m), 0};
    pb_bytes(&val, 1, tag, strlen(tag));
    pb_msg(&val, 9, &meta);
    pb_msg(&val, 8, &tensor);
    pb_msg(summary, 1, &val);
}

/* TFRecord framing of one serialized Event into out. */
static int frame_record(buf *out, const void *data, size_t n)
{
    unsigned char h[12];
    uint64_t len = n;
    for (int i = 0; i < 8; i++) h[i] = (unsigned char)(len >> (8 * i));
    uint32_t c = tfev_masked_crc(h, 8);
    for (int i = 0; i < 4; i++) h[8 + i] = (unsigned char)(c >> (8 * i));
    unsigned char t[4];
    c = tfev_masked_crc(data, n);
    for (int i = 0; i < 4; i++) t[i] = (unsigned char)(c >> (8 * i));
    buf_append(out, h, 12);
    buf_append(out, data, n);
    return buf_append(out, t, 4);
}

int tfev_event(buf *out, double wall_time, int64_t step, const char *file_version,
               const tfev_value *v, int nv)
{
    /* Scratch on the heap, not in TLS: the library is dlopen'd by Python,
     * where large static TLS blocks cannot be allocated. */
    unsigned char *ev = malloc(2 * TFEV_REC_MAX);
    if (!ev) return TPF_ENOMEM;
    unsigned char *sm = ev + TFEV_REC_MAX;
    pb e = {ev, 0, TFEV_REC_MAX, 0};
    pb_double(&e, 1, wall_time);
    if (file_version) {
        pb_bytes(&e, 3, file_version, strlen(file_version));
    } else {
        pb_tag(&e, 2, 0);
        pb_varint(&e, (uint64_t)step);
        pb s = {sm, 0, TFEV_REC_MAX - 64, 0};
        for (int i = 0; i < nv; i++) {
            if (v[i].text)
                value_text(&s, v[i].tag, v[i].text);
            else
                value_scalar(&s, v[i].tag, (float)v[i].value);
        }
        pb_msg(&e, 5, &s);
    }
    int rc = e.err ? e.err : frame_record(out, e.d, e.len);
    free(ev);
    return rc;
}

/* ---- the exporter ---- */

#define TFEV_MAX_VALUES 512

typedef struct tfev {
    exp_counters ctrs; /* first: on_probe is exp_counters_on_probe */
    int fd;
    off_t size;             /* whole records on disk (writer side) */
    const sink_ctx *ctx;
    char path[PATH_MAX + 64];
    int warned;             /* the failure was said (collector side) */
    double start_unix_s;
    uint64_t start_mono_ns;
    buf pending;            /* collector side */
    buf inflight;           /* writer side */
    pthread_t th;
    pthread_mutex_t mu;     /* guards busy, quit, werr, the swap */
    pthread_cond_t cv;
    int has_thread, busy, quit, werr;
    uint64_t lost;          /* samples dropped: the writer was too far behind */
    /* values of the sample being built */
    tfev_value vals[TFEV_MAX_VALUES];
    char tags[TFEV_MAX_VALUES][128];
    int nv;
    /* interval deltas */
    uint64_t prev_phase[AGG_NPHASES], prev_other, prev_interval;
    uint64_t prev_gpu_interval, prev_gpu_busy, prev_gpu_sync; /* figs_gpu at the last sample */
    uint64_t prev_count[AGG_MAX_GROUPS];
    double prev_t;
    int64_t step;           /* the step of the last record */
    char alert_text[16][1024];
    int nalert;
} tfev;
_Static_assert(offsetof(tfev, ctrs) == 0, "ctrs comes first");

static void write_fd(tfev *t, const buf *b)
{
    /* After a failure nothing more is written: the file keeps whole records. */
    if (__atomic_load_n(&t->werr, __ATOMIC_ACQUIRE)) return;
    const char *p = b->data;
    size_t n = b->len;
    while (n > 0) {
        ssize_t w = write(t->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            /* Disk full: these records are lost, cut back to the last whole
             * one; the run goes on. */
            int e = w < 0 ? errno : ENOSPC;
            if (ftruncate(t->fd, t->size) != 0) {
                /* a torn record stays at the end: TensorBoard stops there */
            }
            __atomic_store_n(&t->werr, err_from_errno(e), __ATOMIC_RELEASE);
            return;
        }
        p += w;
        n -= (size_t)w;
    }
    t->size += (off_t)b->len;
}

/* Say once that the event file could not be written (collector thread). */
static void tfev_said(tfev *t)
{
    int e = __atomic_load_n(&t->werr, __ATOMIC_ACQUIRE);
    if (!e || t->warned) return;
    t->warned = 1;
    if (t->ctx->warn) t->ctx->warn(t->ctx->error_arg, t->path, e);
}

static void *tfev_writer(void *arg)
{
    tfev *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->busy && !t->quit) pthread_cond_wait(&t->cv, &t->mu);
        if (!t->busy && t->quit) break;
        pthread_mutex_unlock(&t->mu);
        write_fd(t, &t->inflight);
        buf_reset(&t->inflight);
        pthread_mutex_lock(&t->mu);
        t->busy = 0;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Hand pending to the writer if it is idle; never wait for it. */
static void tfev_flush(void *st, const sink_run *run)
{
    tfev *t = st;
    tfev_said(t);
    if (t->warned) buf_reset(&t->pending); /* quiet from here on */
    if (!t->pending.len) return;
    if (!t->has_thread) {
        write_fd(t, &t->pending);
        buf_reset(&t->pending);
        return;
    }
    if (pthread_mutex_trylock(&t->mu) != 0) return;
    if (!t->busy) {
        buf x = t->inflight;
        t->inflight = t->pending;
        t->pending = x;
        t->busy = 1;
        pthread_cond_signal(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
}

static void put(tfev *t, const char *tag, double v)
{
    if (t->nv == TFEV_MAX_VALUES || !isfinite(v)) return;
    snprintf(t->tags[t->nv], sizeof(t->tags[0]), "%s", tag);
    t->vals[t->nv].tag = t->tags[t->nv];
    t->vals[t->nv].value = v;
    t->vals[t->nv].text = NULL;
    t->nv++;
}

static void putf(tfev *t, const fval *f, const char *tag, double scale)
{
    if (f->ok) put(t, tag, f->v * scale);
}

static double unix_of(const tfev *t, uint64_t mono_ns)
{
    return t->start_unix_s + ((double)mono_ns - (double)t->start_mono_ns) / 1e9;
}

/* Append one event; when the writer is too far behind, drop it (counted). */
static void emit(tfev *t, double wall, int64_t step, const tfev_value *v, int nv)
{
    if (t->pending.len > TFEV_PENDING_MAX - TFEV_REC_MAX) {
        t->lost++;
        return;
    }
    size_t before = t->pending.len;
    if (tfev_event(&t->pending, wall, step, NULL, v, nv) != 0) {
        t->pending.len = before; /* never a torn record */
        if (t->pending.data) t->pending.data[before] = 0;
        t->pending.err = 0;
        t->lost++;
    }
}

static void tfev_sample(void *st, const coll_frame *f, const sink_run *run)
{
    tfev *t = st;
    const figs *a = run ? run->steps : NULL;
    char tag[96];
    t->nv = 0;
    /* The step axis: the leading rank's completed steps. */
    int64_t step = 0;
    for (int i = 0; a && i < a->ngroups; i++)
        if ((int64_t)a->groups[i]->count > step) step = (int64_t)a->groups[i]->count;
    t->step = step;

    putf(t, &f->step_rate, "throughput/steps_per_s", 1);
    /* samples and tokens only once the steps report them, as /metrics has
     * them: a run that counts no tokens has no token rate, not a rate of 0 */
    if (a && a->samples) putf(t, &f->sample_rate, "throughput/samples_per_s", 1);
    if (a && a->tokens) putf(t, &f->token_rate, "throughput/tokens_per_s", 1);
    putf(t, &f->step_time_ms, "step_time/interval_mean_ms", 1);
    putf(t, &f->data_wait_share, "data_wait/share_pct", 100);
    if (a && a->count) {
        put(t, "step_time/p50_ms", sketch_quantile(&a->step_ns, 0.5) / 1e6);
        put(t, "step_time/p90_ms", sketch_quantile(&a->step_ns, 0.9) / 1e6);
        put(t, "step_time/p99_ms", sketch_quantile(&a->step_ns, 0.99) / 1e6);
        put(t, "data_wait/p95_ms", sketch_quantile(&a->data_ns, 0.95) / 1e6);
        uint64_t di = a->interval_ns - t->prev_interval;
        if (di > 0) {
            for (int k = 0; k < AGG_NPHASES; k++) {
                snprintf(tag, sizeof(tag), "phase/%s_pct", agg_phase_names[k]);
                put(t, tag, 100.0 * (double)(a->phase_ns[k] - t->prev_phase[k]) / (double)di);
            }
            put(t, "phase/other_pct", 100.0 * (double)(a->other_ns - t->prev_other) / (double)di);
        }
        /* GPU runs: what the kernel records say of the steps joined since
         * the last sample (collect/gpujoin.h) */
        const figs_gpu *g = &a->gpu;
        uint64_t gi = g->interval_ns - t->prev_gpu_interval;
        if (g->warm_steps && gi > 0) {
            put(t, "gpu/busy_pct", 100.0 * (double)(g->busy_ns - t->prev_gpu_busy) / (double)gi);
            put(t, "gpu/sync_wait_pct", 100.0 * (double)(g->sync_ns - t->prev_gpu_sync) / (double)gi);
            put(t, "gpu/kernel_us_p50", sketch_quantile(&g->kernel_dur_ns, 0.5) / 1e3);
        }
        t->prev_gpu_interval = g->interval_ns;
        t->prev_gpu_busy = g->busy_ns;
        t->prev_gpu_sync = g->sync_ns;
        memcpy(t->prev_phase, a->phase_ns, sizeof(t->prev_phase));
        t->prev_other = a->other_ns;
        t->prev_interval = a->interval_ns;
    }
    if (a && t->prev_t > 0 && f->t > t->prev_t) {
        for (int i = 0; i < a->ngroups; i++) {
            const agg_group *g = a->groups[i];
            if (g->rank >= 0)
                snprintf(tag, sizeof(tag), "rank/%d/steps_per_s", g->rank);
            else
                snprintf(tag, sizeof(tag), "rank/pid%d/steps_per_s", (int)g->pid);
            put(t, tag, (double)(g->count - t->prev_count[i]) / (f->t - t->prev_t));
        }
    }
    for (int i = 0; a && i < a->ngroups && i < AGG_MAX_GROUPS; i++) t->prev_count[i] = a->groups[i]->count;
    t->prev_t = f->t;
    for (int i = 0; i < t->ctrs.n; i++) {
        exp_counter *c = &t->ctrs.c[i];
        if (!c->fresh) continue;
        if (c->rank >= 0)
            snprintf(tag, sizeof(tag), "counters/%s/rank%d", c->name, c->rank);
        else
            snprintf(tag, sizeof(tag), "counters/%s/pid%d", c->name, (int)c->pid);
        put(t, tag, c->v);
        c->fresh = 0;
    }
    /* System and process-tree figures straight from the metric table. */
    for (size_t i = 0; i < metric_table_len; i++) {
        const metric_def *m = &metric_table[i];
        if (m->kind == METRIC_TEXT || !m->counter || !strcmp(m->counter, "throughput") ||
            !strcmp(m->counter, "data_wait"))
            continue; /* the step figures are above, under their own names */
        int proc = !strncmp(m->name, "tree_", 5) || !strncmp(m->name, "main_", 5);
        snprintf(tag, sizeof(tag), "%s/%s", proc ? "process" : "host", m->name);
        putf(t, metric_val(m, f), tag, 1);
    }
    for (int g = 0; g < f->ngpu && g < FRAME_MAX_GPUS; g++) {
        for (size_t i = 0; i < metric_gpu_table_len; i++) {
            const metric_def *m = &metric_gpu_table[i];
            if (m->kind == METRIC_TEXT) continue;
            snprintf(tag, sizeof(tag), "gpu%d/%s", f->gpu[g].index, m->name);
            putf(t, metric_val(m, &f->gpu[g]), tag, 1);
        }
    }
    double wall = unix_of(t, f->mono_ns);
    if (t->nv) emit(t, wall, step, t->vals, t->nv);
    /* Alerts of this sample as text, after the scalars of their step. */
    for (int i = 0; i < t->nalert; i++) {
        tfev_value tv = {"alerts", 0, t->alert_text[i]};
        emit(t, wall, step, &tv, 1);
    }
    t->nalert = 0;
}

static void tfev_alert(void *st, const alert_event *e)
{
    tfev *t = st;
    if (t->nalert == (int)(sizeof(t->alert_text) / sizeof(t->alert_text[0]))) {
        t->lost++;
        return;
    }
    snprintf(t->alert_text[t->nalert++], sizeof(t->alert_text[0]), "**%s** %s at %.0f s (%s): %s",
             e->rule ? e->rule : "?", e->fired ? "fired" : "cleared", e->t, e->expr ? e->expr : "",
             e->message);
}

static void tfev_close(void *st, const sink_run *run)
{
    tfev *t = st;
    if (!t) return;
    tfev_flush(t, run);
    if (run && run->tally) run->tally->exporter_lost += t->lost;
    if (t->has_thread) {
        pthread_mutex_lock(&t->mu);
        while (t->busy) pthread_cond_wait(&t->cv, &t->mu);
        t->quit = 1;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->th, NULL);
        t->has_thread = 0;
    }
    if (t->fd >= 0) {
        write_fd(t, &t->pending);
        close(t->fd);
        if (run) tfev_said(t);
    }
    buf_free(&t->pending);
    buf_free(&t->inflight);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

static int tfev_init(void **st, const sink_ctx *ctx)
{
    /* On unless the caller's export config turns it off (embedded mode has
     * none: on). */
    const rec_export_config *cfg = ctx->config;
    if ((cfg && !cfg->tensorboard) || !ctx->run_dir) return 1;
    tfev *t = calloc(1, sizeof(*t));
    if (!t) return TPF_ENOMEM;
    t->start_unix_s = ctx->start_unix_s;
    t->start_mono_ns = ctx->start_mono_ns;
    buf_init(&t->pending, TFEV_PENDING_MAX);
    buf_init(&t->inflight, TFEV_PENDING_MAX);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->ctx = ctx;
    /* Host names may hold what a file name cannot. */
    char host[64];
    size_t k = 0;
    const char *hn = ctx->meta && ctx->meta->host && *ctx->meta->host ? ctx->meta->host : "localhost";
    for (const char *h = hn; *h && k + 1 < sizeof(host); h++)
        host[k++] = (*h == '/' || *h == ' ') ? '_' : *h;
    host[k] = 0;
    char name[160];
    snprintf(name, sizeof(name), "events.out.tfevents.%.0f.%s", floor(ctx->start_unix_s), host);
    snprintf(t->path, sizeof(t->path), "TensorBoard event file %s/%s", ctx->run_dir, name);
    /* A fresh file, never through a planted link (util/afile.h). */
    int dfd = afile_dir_open(ctx->run_dir);
    t->fd = dfd < 0 ? dfd : afile_create_at(dfd, name, O_WRONLY | O_APPEND);
    if (dfd >= 0) close(dfd);
    if (t->fd < 0) {
        if (ctx->warn) ctx->warn(ctx->error_arg, t->path, t->fd);
        t->fd = -1;
        tfev_close(t, NULL);
        return 1; /* the run goes on without it */
    }
    tfev_event(&t->pending, ctx->start_unix_s, 0, "brain.Event:2", NULL, 0);
    write_fd(t, &t->pending);
    buf_reset(&t->pending);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&t->th, NULL, tfev_writer, t) == 0) t->has_thread = 1;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    *st = t;
    return 0;
}

const sink_ops rec_sink_tensorboard = {
    .name = "tensorboard",
    .init = tfev_init,
    .on_sample = tfev_sample,
    .on_probe = exp_counters_on_probe,
    .on_alert = tfev_alert,
    .flush = tfev_flush,
    .close = tfev_close,
};
