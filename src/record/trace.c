/* trace.json writer (see trace.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/metrics.h"
#include "record/fmt.h"
#include "probe/reader.h"
#include "record/trace.h"
#include "util/human.h"
#include "record/writers.h"
#include "record/safeout.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/err.h"
#include "util/jsonw.h"

/* Pending events beyond this go to the writer (bounded memory). While the
 * writer is busy, range and step events stop at TRACE_PENDING_SOFT (dropped,
 * counted); counters, marks and alerts may use the rest up to the hard cap. */
#define TRACE_PENDING_FLUSH (1u << 20)
#define TRACE_PENDING_SOFT (32u << 20)
#define TRACE_PENDING_MAX (64u << 20)

/* Whole events or none (record/safeout.h); nothing goes before the '['. */
static int trace_put(rec_trace *t, const char *p, size_t n)
{
    if (n == 0) return 0;
    if (t->size == 0 && p[0] != '[') {
        for (size_t i = 0; i < n; i++) t->lost_events += p[i] == '\n';
        return TPF_EIO;
    }
    return rec_append_whole(t->fd, &t->size, p, n, &t->lost_events);
}

static void *trace_writer(void *arg)
{
    rec_trace *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->busy && !t->quit) pthread_cond_wait(&t->cv, &t->mu);
        if (!t->busy) break; /* quit, nothing left */
        pthread_mutex_unlock(&t->mu);
        /* A failed write (disk full) loses these events, never the run. */
        int rc = trace_put(t, t->inflight.data, t->inflight.len);
        pthread_mutex_lock(&t->mu);
        if (rc && !t->err) t->err = rc;
        buf_reset(&t->inflight);
        t->busy = 0;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

int rec_trace_open(rec_trace *t, const char *path, uint64_t start_mono_ns, uint64_t max_events)
{
    memset(t, 0, sizeof(*t));
    t->fd = -1;
    t->start_mono_ns = start_mono_ns;
    t->max_events = max_events ? max_events : REC_TRACE_MAX_EVENTS;
    buf_init(&t->pending, TRACE_PENDING_MAX);
    buf_init(&t->inflight, TRACE_PENDING_MAX);
    snprintf(t->path, sizeof(t->path), "%s", path);
    char base[256];
    int dfd = afile_dir_of(path, base, sizeof(base));
    int fd = dfd < 0 ? dfd : afile_create_at(dfd, base, O_WRONLY | O_APPEND);
    if (dfd >= 0) close(dfd);
    if (fd < 0) return t->err = fd;
    t->fd = fd;
    /* Without the thread (no resources) the writes are made in place. */
    if (pthread_mutex_init(&t->mu, NULL) == 0) {
        if (pthread_cond_init(&t->cv, NULL) == 0) {
            if (pthread_create(&t->writer, NULL, trace_writer, t) == 0)
                t->has_writer = 1;
            else
                pthread_cond_destroy(&t->cv);
        }
        if (!t->has_writer) pthread_mutex_destroy(&t->mu);
    }
    buf_puts(&t->pending, "[");
    return rec_trace_flush(t);
}

/* Range and step events wait for no one: with the writer behind, drop them. */
static int backlogged(rec_trace *t)
{
    if (t->pending.len < TRACE_PENDING_SOFT) return 0;
    rec_trace_flush(t);
    return t->pending.len >= TRACE_PENDING_SOFT;
}

static double us(const rec_trace *t, uint64_t ns)
{
    return ((double)ns - (double)t->start_mono_ns) / 1e3;
}

/* Start one event: the separator, then the caller appends the object. */
static buf *ev_begin(rec_trace *t)
{
    if (t->pending.len >= TRACE_PENDING_FLUSH) rec_trace_flush(t);
    buf_puts(&t->pending, t->nevents ? ",\n" : "\n");
    t->nevents = 1;
    return &t->pending;
}

static void put_name(buf *b, const char *name)
{
    buf_puts(b, "\"name\":");
    json_escape(b, name, strlen(name));
}

void rec_trace_process(rec_trace *t, pid_t pid, int rank)
{
    if (t->fd < 0) return;
    char name[64];
    if (pid == 0)
        snprintf(name, sizeof(name), "trainperf");
    else if (rank >= 0)
        snprintf(name, sizeof(name), "rank %d (pid %d)", rank, (int)pid);
    else
        snprintf(name, sizeof(name), "pid %d", (int)pid);
    buf *b = ev_begin(t);
    buf_printf(b, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{",
               (int)pid);
    put_name(b, name);
    buf_puts(b, "}}");
    /* Ranks sort by rank in the viewer; trainperf's counters go first. */
    b = ev_begin(t);
    buf_printf(b, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,"
                  "\"args\":{\"sort_index\":%d}}",
               (int)pid, pid == 0 ? -1 : rank >= 0 ? rank : 1000000);
}

/* Longest range name the probe keeps (127 bytes), escaped, plus the rest. */
#define TRACE_LINE_MAX 1024

/* ts and dur from integer nanoseconds: exact, and far cheaper than %f. */
static void put_ts_dur(const rec_trace *t, fmt_line *l, uint64_t begin_ns, uint64_t dur_ns)
{
    FMT_LIT(l, ",\"ts\":");
    int64_t rel = begin_ns >= t->start_mono_ns ? (int64_t)(begin_ns - t->start_mono_ns)
                                               : -(int64_t)(t->start_mono_ns - begin_ns);
    fmt_fixed(l, rel, 3);
    FMT_LIT(l, ",\"dur\":");
    fmt_fixed(l, (int64_t)dur_ns, 3);
}

static void put_pid_tid(fmt_line *l, pid_t pid, pid_t tid)
{
    FMT_LIT(l, ",\"pid\":");
    fmt_i64(l, pid);
    FMT_LIT(l, ",\"tid\":");
    fmt_i64(l, tid);
}

/* The separator before an event (the array form has no trailing comma). */
static void put_sep(rec_trace *t, fmt_line *l)
{
    if (t->pending.len >= TRACE_PENDING_FLUSH) rec_trace_flush(t);
    if (t->nevents)
        FMT_LIT(l, ",\n");
    else
        FMT_LIT(l, "\n");
    t->nevents = 1;
}

void rec_trace_step(rec_trace *t, const agg_step *s)
{
    if (t->fd < 0) return;
    if (t->written >= t->max_events || backlogged(t)) {
        t->dropped++;
        return;
    }
    t->written++;
    char line[TRACE_LINE_MAX];
    fmt_line l = {line};
    put_sep(t, &l);
    FMT_LIT(&l, "{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"step ");
    fmt_u64(&l, s->step);
    *l.p++ = '"';
    put_pid_tid(&l, s->pid, s->tid);
    put_ts_dur(t, &l, s->begin_ns, s->duration_ns);
    FMT_LIT(&l, ",\"args\":{\"samples\":");
    fmt_u64(&l, s->samples);
    FMT_LIT(&l, ",\"tokens\":");
    fmt_u64(&l, s->tokens);
    FMT_LIT(&l, "}}");
    buf_append(&t->pending, line, (size_t)(l.p - line));
}

void rec_trace_range(rec_trace *t, const agg_range *r, const char *name)
{
    if (t->fd < 0) return;
    /* Steps matter more than ranges: the last tenth is kept for them. */
    if (t->written >= t->max_events - t->max_events / 10 || backlogged(t)) {
        t->dropped++;
        return;
    }
    t->written++;
    char fallback[32];
    if (!name) {
        snprintf(fallback, sizeof(fallback), "range %u", (unsigned)r->name);
        name = fallback;
    }
    size_t nlen = strnlen(name, 256);
    int phase = r->name >= TPF_PHASE_DATA && r->name <= TPF_PHASE_CHECKPOINT;
    char line[TRACE_LINE_MAX];
    fmt_line l = {line};
    put_sep(t, &l);
    if (phase)
        FMT_LIT(&l, "{\"ph\":\"X\",\"cat\":\"phase\",\"name\":");
    else
        FMT_LIT(&l, "{\"ph\":\"X\",\"cat\":\"range\",\"name\":");
    if (nlen < 256 && fmt_json_plain(name, nlen)) {
        *l.p++ = '"';
        fmt_mem(&l, name, nlen);
        *l.p++ = '"';
    } else {
        /* Rare: escape through the buf (the line so far goes first). */
        buf_append(&t->pending, line, (size_t)(l.p - line));
        json_escape(&t->pending, name, strlen(name));
        l.p = line;
    }
    put_pid_tid(&l, r->pid, r->tid);
    put_ts_dur(t, &l, r->begin_ns, r->end_ns - r->begin_ns);
    *l.p++ = '}';
    buf_append(&t->pending, line, (size_t)(l.p - line));
}

/* Counters, marks and alerts have a budget of the same size of their own
 * (metadata is not counted: one pair per process). */
static int other_ok(rec_trace *t)
{
    if (t->fd < 0) return 0;
    if (t->other_written >= t->max_events) {
        t->other_dropped++;
        return 0;
    }
    t->other_written++;
    return 1;
}

static void put_args_group(rec_trace *t, const char *counter, const char *name,
                           const metric_def *tab, size_t n, const void *base, double ts)
{
    int any = 0;
    for (size_t i = 0; i < n; i++)
        if (tab[i].counter && strcmp(tab[i].counter, counter) == 0 && tab[i].kind != METRIC_TEXT &&
            metric_val(&tab[i], base)->ok)
            any = 1;
    if (!any || !other_ok(t)) return;
    buf *b = ev_begin(t);
    buf_puts(b, "{\"ph\":\"C\",");
    put_name(b, name);
    buf_printf(b, ",\"pid\":0,\"tid\":0,\"ts\":%.3f,\"args\":{", ts);
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        if (!tab[i].counter || strcmp(tab[i].counter, counter) != 0 || tab[i].kind == METRIC_TEXT)
            continue;
        const fval *v = metric_val(&tab[i], base);
        if (!v->ok || !isfinite(v->v)) continue;
        buf_printf(b, "%s\"%s\":%.*f", first ? "" : ",", tab[i].name, tab[i].decimals, v->v);
        first = 0;
    }
    buf_puts(b, "}}");
}

void rec_trace_frame(rec_trace *t, const coll_frame *f, int ngpu, const int *gpu_index)
{
    if (t->fd < 0) return;
    double ts = f->t * 1e6;
    /* Each distinct counter group of the table, in table order. */
    for (size_t i = 0; i < metric_table_len; i++) {
        const char *c = metric_table[i].counter;
        if (!c) continue;
        size_t j;
        for (j = 0; j < i; j++)
            if (metric_table[j].counter && strcmp(metric_table[j].counter, c) == 0) break;
        if (j < i) continue;
        put_args_group(t, c, c, metric_table, metric_table_len, f, ts);
    }
    for (int g = 0; g < ngpu && g < FRAME_MAX_GPUS; g++) {
        const gpu_frame *gf = gpu_index ? rec_frame_gpu(f, gpu_index[g])
                                        : g < f->ngpu ? &f->gpu[g] : NULL;
        if (!gf || gf->lost) continue;
        char name[16];
        snprintf(name, sizeof(name), "gpu%d", g);
        put_args_group(t, "gpu", name, metric_gpu_table, metric_gpu_table_len, gf, ts);
    }
}

void rec_trace_counter(rec_trace *t, pid_t pid, const char *name, uint64_t ts_ns, double v)
{
    if (!isfinite(v) || !other_ok(t)) return;
    buf *b = ev_begin(t);
    buf_puts(b, "{\"ph\":\"C\",");
    put_name(b, name ? name : "counter");
    buf_printf(b, ",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"value\":%.10g}}", (int)pid,
               us(t, ts_ns), v);
}

void rec_trace_mark(rec_trace *t, pid_t pid, pid_t tid, const char *name, uint64_t ts_ns)
{
    if (!other_ok(t)) return;
    buf *b = ev_begin(t);
    buf_puts(b, "{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"mark\",");
    put_name(b, name ? name : "mark");
    buf_printf(b, ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f}", (int)pid, (int)tid, us(t, ts_ns));
}

/* A GPU track's tid: beyond any Linux tid (pid_max <= 2^22), one per device
 * and stream; host waits on a track of their own per device. */
static int32_t gpu_tid(int device, uint32_t stream, int wait)
{
    return 1000000000 + device * 1000000 + (wait ? 999999 : (int32_t)(stream % 999999u));
}

static void gpu_track(rec_trace *t, pid_t pid, int32_t tid, int device, uint32_t stream, int wait)
{
    for (int i = 0; i < t->ngpu_tracks; i++)
        if (t->gpu_tracks[i].pid == pid && t->gpu_tracks[i].tid == tid) return;
    if (t->ngpu_tracks == REC_TRACE_GPU_TRACKS) return; /* unnamed, still shown */
    t->gpu_tracks[t->ngpu_tracks].pid = pid;
    t->gpu_tracks[t->ngpu_tracks++].tid = tid;
    char name[64];
    if (wait)
        snprintf(name, sizeof(name), "GPU %d: host waits", device);
    else
        snprintf(name, sizeof(name), "GPU %d stream %u", device, stream);
    buf *b = ev_begin(t);
    buf_printf(b, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{",
               (int)pid, (int)tid);
    put_name(b, name);
    buf_puts(b, "}}");
    b = ev_begin(t);
    buf_printf(b, "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%d,"
                  "\"args\":{\"sort_index\":%d}}",
               (int)pid, (int)tid, tid);
}

void rec_trace_gpu(rec_trace *t, pid_t pid, const seg_event *ev, const char *name)
{
    if (t->fd < 0) return;
    if (t->gpu_written >= t->max_events / 4 || backlogged(t)) {
        t->gpu_dropped++;
        return;
    }
    t->gpu_written++;
    int device = 0, wait = 0;
    uint32_t stream = 0;
    char label[96];
    const char *cat = "gpu";
    switch (ev->kind) {
    case SEG_EV_GPU_KERNEL:
        device = GPU_KB_DEVICE(ev->arg);
        stream = GPU_KB_STREAM(ev->arg);
        if (!name) name = "kernel";
        cat = ev->arg & GPU_KB_COMM ? "gpu,comm" : "gpu,kernel";
        break;
    case SEG_EV_GPU_COPY: {
        int k = GPU_CN_COPY(ev->name);
        device = GPU_CN_DEVICE(ev->name);
        char sz[32];
        human_bytes(sz, sizeof(sz), (double)ev->arg);
        snprintf(label, sizeof(label), "memcpy %s %s%s",
                 k == GPU_COPY_HTOD ? "HtoD" : k == GPU_COPY_DTOH ? "DtoH" : k == GPU_COPY_DTOD ? "DtoD" : "PtoP",
                 sz,
                 GPU_CN_SRC(ev->name) == GPU_MEM_PAGEABLE || GPU_CN_DST(ev->name) == GPU_MEM_PAGEABLE
                     ? " (pageable)" : "");
        name = label;
        cat = "gpu,copy";
        break;
    }
    case SEG_EV_GPU_MEMSET: {
        char sz[32];
        human_bytes(sz, sizeof(sz), (double)ev->arg);
        snprintf(label, sizeof(label), "memset %s", sz);
        device = (int)ev->name;
        name = label;
        cat = "gpu,memset";
        break;
    }
    case SEG_EV_GPU_SYNC:
        wait = 1;
        snprintf(label, sizeof(label), "%s",
                 ev->name == 1 ? "event synchronize" : ev->name == 2 ? "stream wait event"
                 : ev->name == 3 ? "stream synchronize" : ev->name == 4 ? "device synchronize"
                                                         : "synchronize");
        name = label;
        cat = "gpu,sync";
        break;
    default: return;
    }
    int32_t tid = gpu_tid(device & 0xff, stream, wait);
    gpu_track(t, pid, tid, device & 0xff, stream, wait);
    buf *b = ev_begin(t);
    buf_printf(b, "{\"ph\":\"X\",\"cat\":\"%s\",", cat);
    put_name(b, name);
    char line[160];
    fmt_line l = {line};
    put_pid_tid(&l, pid, tid);
    put_ts_dur(t, &l, ev->ts_ns, ev->end_ns > ev->ts_ns ? ev->end_ns - ev->ts_ns : 0);
    *l.p++ = '}';
    buf_append(b, line, (size_t)(l.p - line));
}

void rec_trace_alert(rec_trace *t, const alert_event *e)
{
    if (!other_ok(t)) return;
    buf *b = ev_begin(t);
    buf_puts(b, "{\"ph\":\"i\",\"s\":\"g\",\"cat\":\"alert\",");
    put_name(b, e->rule ? e->rule : "alert");
    buf_printf(b, ",\"pid\":0,\"tid\":0,\"ts\":%.3f,\"args\":{\"state\":\"%s\",\"message\":",
               e->t * 1e6, e->fired ? "fired" : "cleared");
    json_escape(b, e->message, strnlen(e->message, sizeof(e->message)));
    buf_puts(b, "}}");
}

int rec_trace_flush(rec_trace *t)
{
    if (t->fd < 0) return t->err;
    if (!t->has_writer) {
        if (t->pending.err && !t->err) t->err = t->pending.err;
        if (t->pending.len > 0) {
            int rc = trace_put(t, t->pending.data, t->pending.len);
            /* A failed write (disk full) loses these events, never the run. */
            if (rc && !t->err) t->err = rc;
        }
        buf_reset(&t->pending);
        return t->err;
    }
    pthread_mutex_lock(&t->mu);
    if (t->pending.err && !t->err) t->err = t->pending.err;
    if (!t->busy && t->pending.len > 0) {
        buf tmp = t->inflight;
        t->inflight = t->pending;
        t->pending = tmp;
        buf_reset(&t->pending);
        t->busy = 1;
        pthread_cond_broadcast(&t->cv);
    }
    int err = t->err;
    pthread_mutex_unlock(&t->mu);
    return err;
}

int rec_trace_close(rec_trace *t)
{
    if (t->fd >= 0) {
        if (t->has_writer) {
            pthread_mutex_lock(&t->mu);
            while (t->busy) pthread_cond_wait(&t->cv, &t->mu);
            pthread_mutex_unlock(&t->mu);
            rec_trace_flush(t);
            pthread_mutex_lock(&t->mu);
            t->quit = 1;
            pthread_cond_broadcast(&t->cv);
            pthread_mutex_unlock(&t->mu);
            pthread_join(t->writer, NULL);
            pthread_cond_destroy(&t->cv);
            pthread_mutex_destroy(&t->mu);
            t->has_writer = 0;
        } else {
            rec_trace_flush(t);
        }
        /* The closing bracket on its own, after every event: when the disk
         * filled, what is there is whole events, and this still ends it
         * (or "[]" when not even the '[' got out). */
        const char *end = t->size ? "\n]\n" : "[]\n";
        int rc = rec_append_whole(t->fd, &t->size, end, strlen(end), NULL);
        if (rc && !t->err) t->err = rc;
        if (close(t->fd) != 0 && !t->err) t->err = err_from_errno(errno);
        t->fd = -1;
        /* Not even "[]" fitted (no byte free): an empty trace.json is no
         * JSON, and no trace.json is "no trace" to every reader. */
        if (rc && t->size == 0) {
            char base[256];
            int dfd = afile_dir_of(t->path, base, sizeof(base));
            if (dfd >= 0) {
                unlinkat(dfd, base, 0);
                close(dfd);
            }
        }
    }
    buf_free(&t->pending);
    buf_free(&t->inflight);
    return t->err;
}
