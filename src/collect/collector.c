/* The collector thread (see collector.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "collect/agg.h"
#include "collect/collector.h"
#include "collect/nvml.h"
#include "collect/procfs.h"
#include "collect/sched.h"
#include "probe/reader.h"
#include "core/metrics.h"
#include "trainperf.h"
#include "util/err.h"

/* The sources, in sampling order: procfs first, so tree_pids is set when
 * nvml looks for the tree's GPU processes. */
static const src_ops *const coll_sources[] = {&procfs_source, &sched_source, &nvml_source};
#define COLL_NSOURCES (int)(sizeof(coll_sources) / sizeof(coll_sources[0]))

#define COLL_MAX_SEGS 65536      /* segment files remembered over a run */
#define COLL_SCAN_NS 100000000ull /* look for new segments, dead producers */
#define COLL_PEND_MAX 4096       /* steps sorted by end time per drain */
#define COLL_MAX_SINKS 16
#define COLL_OPEN_RETRIES 100    /* a segment still initialising */

enum { SEG_OPEN = 0, SEG_CLOSED = 1, SEG_BAD = 2, SEG_WAIT = 3, SEG_GONE = 4 };

typedef struct coll_seg {
    char file[64];
    ino_t ino;
    int shm; /* in the segment directory (o.seg_dir), not in live/ */
    int state;
    int retries;
    seg_reader *r;
    agg_proc *p;
    pid_t pid;
} coll_seg;

typedef struct coll_sink {
    const sink_ops *ops;
    void *state;
} coll_sink;

typedef struct coll_src {
    const src_ops *ops;
    void *state;
    int on;
} coll_src;

struct coll {
    coll_opts o;
    char run_dir[PATH_MAX];
    src_ctx ctx;
    coll_src src[RUN_MAX_SOURCES];
    run_source status[RUN_MAX_SOURCES];
    int nsrc;

    agg *agg;
    run_res res;
    sink_ctx sctx;
    coll_sink sinks[COLL_MAX_SINKS];
    int nsinks;
    sink_tally tally;
    frame_proc *procrows;        /* the sample's tree processes (frame.procs) */
    int ncpu_cols, ngpu_cols, header_done;
    int gpu_cols[FRAME_MAX_GPUS]; /* NVML index of each gpu<k>_ column group */

    coll_seg *segs;
    int nsegs, capsegs;
    coll_seg *cur;               /* the segment being drained */
    agg_step *pend;
    int npend;
    uint64_t dropped_closed;     /* probe drops of closed segments */
    int nbad_segs;               /* segments skipped as unreadable */
    char bad_seg[PATH_MAX + 64]; /* the first of them */
    char seg_dir[PATH_MAX];      /* o.seg_dir copied; "" when none */

    coll_frame frame;            /* the collector thread's working frame */
    uint64_t last_sample_ns, next_sample_ns, last_scan_ns;
    int nsamples;

    alert_event aev[16];
    run_alert notes[RUN_MAX_ALERTS];
    int nnotes, nalert_rules;
    const char **alert_rules;
    uint64_t events_dropped;     /* by the probes, as of coll_finish */
    uint64_t noroom_procs, noroom_events; /* probes without room (sink_run) */

    /* shared with other threads */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, running, finished;
    pthread_t th;

    int first_err;
    char err_text[200];
    char warns[COLL_MAX_WARNINGS][COLL_WARNING_MAX]; /* sink_ctx.warn, in order */
    int warn_err[COLL_MAX_WARNINGS];
    int nwarns;

    /* run.json */
    run_meta meta;
    char **own_argv;
    char host[256], kernel[256], cwd[PATH_MAX];
    int cpus;
    double mem_total;
    gpu_frame gpu0[FRAME_MAX_GPUS];
    run_exit exit;
    double end_unix_s, duration_s;
    int ended;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void note_err(coll *c, const char *what, int err)
{
    if (c->first_err) return;
    c->first_err = err ? err : TPF_EIO;
    snprintf(c->err_text, sizeof(c->err_text), "%s: %s", what, tpf_strerror(c->first_err));
}

/* ---- sinks ---- */

static void sink_error(void *arg, const char *what, int err) { note_err(arg, what, err); }

static void sink_warn(void *arg, const char *what, int err)
{
    coll *c = arg;
    if (c->nwarns == COLL_MAX_WARNINGS) return;
    c->warn_err[c->nwarns] = err ? err : TPF_EIO;
    snprintf(c->warns[c->nwarns++], COLL_WARNING_MAX, "%s: %s", what,
             tpf_strerror(err ? err : TPF_EIO));
}

/* The collector's figures as the sinks see them at this call. */
static void run_view(coll *c, sink_run *r)
{
    memset(r, 0, sizeof(*r));
    r->frame = c->nsamples ? &c->frame : NULL;
    r->nsamples = (uint64_t)c->nsamples;
    r->ncpu_cols = c->ncpu_cols;
    r->ngpu_cols = c->ngpu_cols;
    r->gpu_cols = c->gpu_cols;
    r->gpus0 = c->gpu0;
    r->steps = &c->agg->f;
    r->res = &c->res;
    r->nalerts = c->nnotes;
    r->alerts = c->notes;
    r->nsources = c->nsrc;
    r->sources = c->status;
    r->steps_unknown = c->o.no_steps;
    r->events_dropped = c->events_dropped;
    r->noroom_procs = c->noroom_procs;
    r->noroom_events = c->noroom_events;
    r->ended = c->ended;
    r->exit = c->exit;
    r->end_unix_s = c->end_unix_s;
    r->duration_s = c->duration_s;
    r->tally = &c->tally;
}

static void probe_out(coll *c, const sink_probe *p)
{
    for (int i = 0; i < c->nsinks; i++)
        if (c->sinks[i].ops->on_probe) c->sinks[i].ops->on_probe(c->sinks[i].state, p);
}

/* ended: the run's end (coll_finish); otherwise abandoned (run == NULL). */
static void sinks_close(coll *c, int ended)
{
    sink_run r;
    run_view(c, &r);
    for (int i = 0; i < c->nsinks; i++) c->sinks[i].ops->close(c->sinks[i].state, ended ? &r : NULL);
    c->nsinks = 0;
}

/* ---- segments ---- */

static int cmp_step(const void *a, const void *b)
{
    const agg_step *x = a, *y = b;
    if (x->end_ns != y->end_ns) return x->end_ns < y->end_ns ? -1 : 1;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    return (x->tid > y->tid) - (x->tid < y->tid);
}

/* Steps of one drain round go out in order of end time across threads. */
static void pend_flush(coll *c)
{
    if (c->npend == 0) return;
    qsort(c->pend, (size_t)c->npend, sizeof(agg_step), cmp_step);
    for (int k = 0; k < c->nsinks; k++) {
        const coll_sink *sk = &c->sinks[k];
        if (!sk->ops->on_step) continue;
        for (int i = 0; i < c->npend; i++) sk->ops->on_step(sk->state, &c->pend[i]);
    }
    c->npend = 0;
}

static void sink_step(void *ctx, const agg_step *s)
{
    coll *c = ctx;
    if (c->npend == COLL_PEND_MAX) pend_flush(c);
    c->pend[c->npend++] = *s;
}

static void sink_gpu_step(void *ctx, const gpu_step *g)
{
    coll *c = ctx;
    for (int k = 0; k < c->nsinks; k++)
        if (c->sinks[k].ops->on_gpu_step) c->sinks[k].ops->on_gpu_step(c->sinks[k].state, g);
}

static const char *cur_name(coll *c, tpf_name n)
{
    return c->cur && c->cur->r ? seg_reader_name(c->cur->r, n) : NULL;
}

static void sink_gpu_record(void *ctx, pid_t pid, const seg_event *ev)
{
    coll *c = ctx;
    sink_probe p = {.kind = SINK_GPU, .pid = pid, .tid = 0, .rank = -1, .gpu = ev, .ts_ns = ev->ts_ns,
                    .name = ev->kind == SEG_EV_GPU_KERNEL && ev->name ? cur_name(c, ev->name) : NULL};
    probe_out(c, &p);
}

static void sink_range(void *ctx, const agg_range *r)
{
    coll *c = ctx;
    sink_probe p = {.kind = SINK_RANGE, .pid = r->pid, .tid = r->tid, .rank = -1, .range = r,
                    .name = cur_name(c, r->name), .ts_ns = r->begin_ns};
    probe_out(c, &p);
}

static void sink_counter(void *ctx, pid_t pid, pid_t tid, tpf_name name, uint64_t ts, double v)
{
    coll *c = ctx;
    sink_probe p = {.kind = SINK_COUNTER, .pid = pid, .tid = tid, .rank = -1,
                    .name = cur_name(c, name), .ts_ns = ts, .value = v};
    probe_out(c, &p);
}

static void sink_mark(void *ctx, pid_t pid, pid_t tid, tpf_name name, uint64_t ts)
{
    coll *c = ctx;
    sink_probe p = {.kind = SINK_MARK, .pid = pid, .tid = tid, .rank = -1,
                    .name = cur_name(c, name), .ts_ns = ts};
    probe_out(c, &p);
}

/* A rank given in code (tpf_set_rank): the process's steps from here on
 * carry it, and the sinks learn it. */
static void seg_rank(coll *c, coll_seg *s)
{
    if (!seg_reader_rank_changed(s->r)) return;
    const seg_proc_info *pi = seg_reader_info(s->r);
    agg_proc_set_rank(s->p, pi->rank, pi->local_rank);
    sink_probe p = {.kind = SINK_PROCESS, .pid = pi->pid, .tid = pi->pid, .rank = pi->rank};
    probe_out(c, &p);
}

static void on_event(void *ctx, const seg_event *ev)
{
    coll *c = ctx;
    if (ev->kind == SEG_EV_MARK && ev->name == SEG_NAME_RANK_SET) {
        seg_rank(c, c->cur);
        return;
    }
    agg_event(c->agg, c->cur->p, ev);
}

static void seg_drain(coll *c, coll_seg *s)
{
    if (s->state != SEG_OPEN) return;
    c->cur = s;
    seg_reader_drain(s->r, on_event, c);
    c->cur = NULL;
    seg_rank(c, s); /* the mark lost to a full ring */
}

static void seg_close(coll *c, coll_seg *s)
{
    if (s->state != SEG_OPEN) return;
    seg_drain(c, s);
    uint64_t d = seg_reader_dropped(s->r);
    c->dropped_closed += d;
    if (seg_reader_noroom(s->r)) {
        c->noroom_procs++;
        c->noroom_events += d;
    }
    seg_reader_close(s->r);
    agg_proc_end(c->agg, s->p, mono_ns());
    agg_proc_free(s->p);
    s->r = NULL;
    s->p = NULL;
    s->state = SEG_CLOSED;
}

/* file is shorter than coll_seg.file (seg_scan checks). */
/* A slot made ready for the segment file `file` (inode ino), not yet open. */
static coll_seg *seg_fresh(coll_seg *s, const char *file, ino_t ino, int shm)
{
    memset(s, 0, sizeof(*s));
    s->state = SEG_WAIT;
    size_t n = strnlen(file, sizeof(s->file) - 1);
    memcpy(s->file, file, n);
    s->file[n] = 0;
    s->ino = ino;
    s->shm = shm;
    return s;
}

static coll_seg *seg_slot(coll *c, const char *file, ino_t ino, int shm)
{
    for (int i = 0; i < c->nsegs; i++) {
        coll_seg *s = &c->segs[i];
        if (s->shm != shm || strcmp(s->file, file) != 0) continue;
        if (s->ino == ino) return s;
        /* Same name, new file: the pid was reused by a new producer. */
        if (s->state == SEG_OPEN) seg_close(c, s);
        return seg_fresh(s, file, ino, shm);
    }
    if (c->nsegs == c->capsegs) {
        if (c->capsegs >= COLL_MAX_SEGS) return NULL;
        int nc = c->capsegs ? c->capsegs * 2 : 16;
        coll_seg *ns = realloc(c->segs, (size_t)nc * sizeof(*ns));
        if (!ns) return NULL;
        c->segs = ns;
        c->capsegs = nc;
    }
    return seg_fresh(&c->segs[c->nsegs++], file, ino, shm);
}

/* A segment we cannot read (corrupt header, another layout) is skipped,
 * but never without a word: counted and named in coll_summary. */
static void seg_path(const coll *c, const coll_seg *s, char *path, size_t cap)
{
    /* Both directories are shorter than PATH_MAX - 64 (coll_create). */
    int n = s->shm ? snprintf(path, cap, "%s/%s", c->seg_dir, s->file)
                   : snprintf(path, cap, "%s/live/%s", c->run_dir, s->file);
    if (n < 0 || (size_t)n >= cap) path[0] = 0;
}

static void seg_bad(coll *c, coll_seg *s)
{
    s->state = SEG_BAD;
    if (c->nbad_segs++ == 0) seg_path(c, s, c->bad_seg, sizeof(c->bad_seg));
}

static void seg_try_open(coll *c, coll_seg *s)
{
    char path[PATH_MAX + 80];
    seg_path(c, s, path, sizeof(path));
    seg_reader *r = NULL;
    int rc = seg_reader_open(&r, path);
    if (rc == TPF_EVERSION) {
        seg_bad(c, s); /* another layout: never readable by us */
        return;
    }
    if (rc < 0) {
        /* A producer still setting its segment up shows a short file or no
         * magic yet: try again at the next scans, then give up. */
        if (++s->retries > COLL_OPEN_RETRIES || c->finished) seg_bad(c, s);
        return;
    }
    const seg_proc_info *pi = seg_reader_info(r);
    if (agg_proc_create(&s->p, pi->pid, pi->rank, pi->local_rank) < 0) {
        seg_reader_close(r);
        return; /* out of memory: try again at the next scan */
    }
    seg_reader_hold(r); /* released once what it gives is on disk: drain_all */
    s->r = r;
    s->pid = pi->pid;
    s->state = SEG_OPEN;
    sink_probe p = {.kind = SINK_PROCESS, .pid = pi->pid, .tid = pi->pid, .rank = pi->rank};
    probe_out(c, &p);
}

static void seg_scan_dir(coll *c, const char *dir, int shm)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 9 || n >= 64 || strncmp(de->d_name, "seg-", 4) != 0 ||
            strcmp(de->d_name + n - 4, ".tpf") != 0)
            continue;
        coll_seg *s = seg_slot(c, de->d_name, de->d_ino, shm);
        if (s && s->state == SEG_WAIT) seg_try_open(c, s);
    }
    closedir(d);
}

/* The segment directory (off the run directory), then live/ (segments the
 * segment directory could not take, or probes started without it). */
static void seg_scan(coll *c)
{
    if (c->seg_dir[0]) seg_scan_dir(c, c->seg_dir, 1);
    char live[PATH_MAX + 8];
    snprintf(live, sizeof(live), "%s/live", c->run_dir);
    seg_scan_dir(c, live, 0);
}

/* dead: the producers that have exited get a last drain and are closed, so
 * a month of DataLoader workers does not pile up mappings. */
static void drain_all(coll *c, int check_dead)
{
    int gone = 0;
    for (int i = 0; i < c->nsegs; i++) {
        coll_seg *s = &c->segs[i];
        if (s->state != SEG_OPEN) continue;
        int dead = check_dead && s->pid > 0 && kill(s->pid, 0) != 0 && errno == ESRCH;
        if (dead) {
            seg_close(c, s);
            gone += s->shm;
        } else {
            seg_drain(c, s);
        }
    }
    pend_flush(c);
    agg_gpu_flush(c->agg, mono_ns(), 0);
    /* Drained is on disk within one drain period: a collector killed now
     * loses only what it had not drained (that stays in the rings). */
    for (int k = 0; k < c->nsinks; k++)
        if (c->sinks[k].ops->on_drain) c->sinks[k].ops->on_drain(c->sinks[k].state);
    /* Only now may the producers reuse the slots: a collector killed before
     * this line leaves the round's events in the rings, and the recovery
     * writes what is not on disk yet (record/recover.c skips what is). */
    for (int i = 0; i < c->nsegs; i++)
        if (c->segs[i].state == SEG_OPEN) seg_reader_release(c->segs[i].r);
    /* An exited producer's segment in the segment directory is memory
     * (tmpfs): once its last events are out, it goes. A month of DataLoader
     * workers must not pile up there. */
    for (int i = 0; gone && i < c->nsegs; i++) {
        coll_seg *s = &c->segs[i];
        if (s->state != SEG_CLOSED || !s->shm) continue;
        char path[PATH_MAX + 80];
        seg_path(c, s, path, sizeof(path));
        unlink(path);
        s->state = SEG_GONE;
        gone--;
    }
}

/* Processes that could not make their segment for want of space left
 * RUN/live/noroom-<pid>, the events they could not record as its size
 * (probe/segment.h). */
static void noroom_markers(coll *c)
{
    char live[PATH_MAX + 8];
    snprintf(live, sizeof(live), "%s/live", c->run_dir);
    int dfd = open(live, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
    if (!d) {
        if (dfd >= 0) close(dfd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (strncmp(de->d_name, "noroom-", 7) != 0 ||
            fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        c->noroom_procs++;
        c->noroom_events += (uint64_t)st.st_size;
    }
    closedir(d);
}

static uint64_t dropped_now(const coll *c)
{
    uint64_t d = c->dropped_closed;
    for (int i = 0; i < c->nsegs; i++)
        if (c->segs[i].state == SEG_OPEN) d += seg_reader_dropped(c->segs[i].r);
    return d;
}

/* ---- sampling ---- */

static void check_alerts(coll *c, const coll_frame *f)
{
    if (!c->o.alerts) return;
    int n = alerts_eval(c->o.alerts, f, c->aev, (int)(sizeof(c->aev) / sizeof(c->aev[0])));
    for (int i = 0; i < n; i++) {
        const alert_event *e = &c->aev[i];
        for (int k = 0; k < c->nsinks; k++)
            if (c->sinks[k].ops->on_alert) c->sinks[k].ops->on_alert(c->sinks[k].state, e);
        if (e->fired && c->nnotes < RUN_MAX_ALERTS) {
            run_alert *nt = &c->notes[c->nnotes++];
            snprintf(nt->rule, sizeof(nt->rule), "%s", e->rule ? e->rule : "");
            nt->t = e->t;
            size_t ml = strnlen(e->message, sizeof(e->message));
            if (ml >= sizeof(nt->message)) ml = sizeof(nt->message) - 1;
            memcpy(nt->message, e->message, ml); /* both in c: no snprintf (restrict) */
            nt->message[ml] = 0;
        }
    }
}

/* The tree's processes with their device memory, for the frame's sinks. */
static void gather_procs(coll *c, coll_frame *f)
{
    void *nvml = NULL, *sched = NULL;
    for (int i = 0; i < c->nsrc; i++) {
        if (c->src[i].on && c->src[i].ops == &nvml_source) nvml = c->src[i].state;
        if (c->src[i].on && c->src[i].ops == &sched_source) sched = c->src[i].state;
    }
    for (int i = 0; i < c->nsrc; i++) {
        if (!c->src[i].on || c->src[i].ops != &procfs_source) continue;
        const procfs_proc *pp = NULL;
        int n = procfs_procs(c->src[i].state, &pp);
        if (n > PROCFS_MAX_PROCS) n = PROCFS_MAX_PROCS;
        for (int k = 0; k < n; k++) {
            frame_proc *r = &c->procrows[k];
            *r = pp[k];
            r->gpu_mem_bytes = (fval){0, 0}; /* unknown without the GPU source */
            if (nvml) r->gpu_mem_bytes = nvml_proc_gpu_mem(nvml, pp[k].pid);
            r->runq_pct = (fval){0, 0}; /* unknown without the sched source */
            if (sched) r->runq_pct = sched_proc_runq(sched, pp[k].pid);
        }
        f->procs = c->procrows;
        f->nprocs = n;
    }
}

static void take_sample(coll *c, uint64_t now)
{
    coll_frame *f = &c->frame;
    memset(f, 0, sizeof(*f));
    f->mono_ns = now;
    f->t = ((double)now - (double)c->o.start_mono_ns) / 1e9;
    f->dt = c->nsamples ? (double)(now - c->last_sample_ns) / 1e9 : 0;
    for (int i = 0; i < c->nsrc; i++) {
        coll_src *s = &c->src[i];
        if (!s->on) continue;
        int rc = s->ops->sample(s->state, &c->ctx, f);
        if (rc < 0) {
            const char *why = s->ops->last_error ? s->ops->last_error(s->state) : NULL;
            snprintf(c->status[i].status, sizeof(c->status[i].status), "stopped: %s",
                     why && *why ? why : tpf_strerror(rc));
            s->ops->close(s->state);
            s->state = NULL;
            s->on = 0;
        }
    }
    agg_live(c->agg, f, f->dt, now);
    if (!c->header_done) {
        /* The first sample fixes the per-core and per-GPU columns. */
        c->ncpu_cols = f->ncpu < FRAME_MAX_CPUS ? f->ncpu : FRAME_MAX_CPUS;
        c->ngpu_cols = f->ngpu < FRAME_MAX_GPUS ? f->ngpu : FRAME_MAX_GPUS;
        memcpy(c->gpu0, f->gpu, sizeof(gpu_frame) * (size_t)c->ngpu_cols);
        for (int g = 0; g < c->ngpu_cols; g++) c->gpu_cols[g] = f->gpu[g].index;
        c->header_done = 1;
    }
    gather_procs(c, f);
    run_res_add(&c->res, f);
    c->last_sample_ns = now;
    c->nsamples++;
    sink_run run;
    run_view(c, &run);
    for (int k = 0; k < c->nsinks; k++)
        if (c->sinks[k].ops->on_sample) c->sinks[k].ops->on_sample(c->sinks[k].state, f, &run);
    check_alerts(c, f);

    run_view(c, &run); /* alerts may have fired */
    for (int k = 0; k < c->nsinks; k++)
        if (c->sinks[k].ops->flush) c->sinks[k].ops->flush(c->sinks[k].state, &run);
}

/* ---- run.json ---- */

static void read_cmdline(coll *c)
{
    /* No argv from the caller: the root's own (this process in embedded
     * mode, the process attached to by `trainperf attach`). */
    char path[64];
    if (c->o.root_pid > 0)
        snprintf(path, sizeof(path), "/proc/%ld/cmdline", (long)c->o.root_pid);
    else
        snprintf(path, sizeof(path), "/proc/self/cmdline");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char tmp[8192];
    ssize_t n = read(fd, tmp, sizeof(tmp) - 1);
    close(fd);
    if (n <= 0) return;
    tmp[n] = 0;
    int argc = 0;
    for (ssize_t i = 0; i < n; i++)
        if (tmp[i] == 0) argc++;
    if (tmp[n - 1] != 0) argc++;
    char **v = calloc((size_t)argc + 1, sizeof(char *));
    if (!v) return;
    int k = 0;
    for (ssize_t i = 0; i < n && k < argc; k++) {
        v[k] = strdup(tmp + i);
        if (!v[k]) break;
        i += (ssize_t)strlen(tmp + i) + 1;
    }
    c->own_argv = v;
}

/* ---- life cycle ---- */

static void init_sources(coll *c)
{
    for (int i = 0; i < COLL_NSOURCES && i < RUN_MAX_SOURCES; i++) {
        const src_ops *ops = coll_sources[i];
        coll_src *s = &c->src[c->nsrc];
        run_source *st = &c->status[c->nsrc];
        c->nsrc++;
        s->ops = ops;
        st->name = ops->name;
        int off = ((ops == &procfs_source || ops == &sched_source) && (c->o.flags & TPF_START_NO_PROCFS)) ||
                  (ops == &nvml_source && (c->o.flags & TPF_START_NO_GPU));
        if (off) {
            snprintf(st->status, sizeof(st->status), "disabled");
            continue;
        }
        void *state = NULL;
        int rc = ops->init(&state, &c->ctx);
        if (rc < 0) {
            const char *why = state && ops->last_error ? ops->last_error(state) : NULL;
            snprintf(st->status, sizeof(st->status), "%s", why && *why ? why : tpf_strerror(rc));
            if (state) ops->close(state);
            continue;
        }
        s->state = state;
        s->on = 1;
        snprintf(st->status, sizeof(st->status), "ok");
    }
    for (int i = 0; i < c->o.nextra && c->nsrc < RUN_MAX_SOURCES; i++) {
        c->src[c->nsrc].on = 0; /* driven by the caller, listed only */
        c->status[c->nsrc] = c->o.extra_sources[i];
        c->nsrc++;
    }
}

int coll_create(coll **out, const coll_opts *o)
{
    if (!out || !o || !o->run_dir || !*o->run_dir || strlen(o->run_dir) >= PATH_MAX - 64)
        return TPF_EINVAL;
    /* NaN and huge values would make undefined conversions to ns. */
    if (!(o->interval_s <= 3600) || !(o->drain_s <= 60)) return TPF_EINVAL;
    coll *c = calloc(1, sizeof(*c));
    if (!c) return TPF_ENOMEM;
    c->o = *o;
    if (c->o.interval_s <= 0) c->o.interval_s = 1.0;
    if (c->o.drain_s <= 0) c->o.drain_s = 0.025;
    if (!c->o.start_mono_ns) c->o.start_mono_ns = mono_ns();
    if (c->o.start_unix_s <= 0) c->o.start_unix_s = unix_now();
    snprintf(c->run_dir, sizeof(c->run_dir), "%s", o->run_dir);
    c->o.run_dir = c->run_dir;
    snprintf(c->seg_dir, sizeof(c->seg_dir), "%s", o->seg_dir ? o->seg_dir : "");
    c->o.seg_dir = c->seg_dir[0] ? c->seg_dir : NULL;
    c->ctx.root_pid = o->root_pid;
    c->ctx.run_dir = c->run_dir;
    c->ctx.interval_s = c->o.interval_s;
    c->ctx.flags = o->flags;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    run_res_init(&c->res);

    agg_sink sink = {c, sink_step, sink_range, sink_counter, sink_mark, sink_gpu_step, sink_gpu_record};
    int rc = agg_create(&c->agg, &sink);
    c->pend = calloc(COLL_PEND_MAX, sizeof(agg_step));
    if (rc == 0 && !c->pend) rc = TPF_ENOMEM;
    c->procrows = calloc(PROCFS_MAX_PROCS, sizeof(frame_proc));
    if (rc == 0 && !c->procrows) rc = TPF_ENOMEM;
    if (rc) {
        coll_free(c);
        return rc;
    }

    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(c->host, sizeof(c->host), "%s", u.nodename);
        snprintf(c->kernel, sizeof(c->kernel), "%s", u.release);
    }
    if (!getcwd(c->cwd, sizeof(c->cwd))) c->cwd[0] = 0;
    long np = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES),
         psz = sysconf(_SC_PAGESIZE);
    c->cpus = np > 0 ? (int)np : 0;
    c->mem_total = pages > 0 && psz > 0 ? (double)pages * (double)psz : NAN;
    if (!c->o.argv) read_cmdline(c);
    if (c->o.alerts) {
        int n = 0;
        while (alerts_rule_text(c->o.alerts, n)) n++;
        c->alert_rules = calloc((size_t)n + 1, sizeof(char *));
        if (c->alert_rules) {
            for (int i = 0; i < n; i++) c->alert_rules[i] = alerts_rule_text(c->o.alerts, i);
            c->nalert_rules = n;
        }
    }
    c->meta = (run_meta){
        .mode = c->o.mode ? c->o.mode : "run",
        .argv = c->o.argv ? c->o.argv : c->own_argv,
        .cwd = c->cwd,
        .host = c->host,
        .kernel = c->kernel,
        .cpus = c->cpus,
        .mem_total_bytes = c->mem_total,
        .root_pid = c->o.root_pid,
        .auto_hook = c->o.auto_hook,
        .nalert_rules = c->nalert_rules,
        .alert_rules = c->alert_rules,
        .segments_dir = c->o.seg_dir,
    };
    c->sctx = (sink_ctx){
        .run_dir = c->run_dir,
        .start_mono_ns = c->o.start_mono_ns,
        .start_unix_s = c->o.start_unix_s,
        .interval_s = c->o.interval_s,
        .flags = c->o.flags,
        .meta = &c->meta,
        .config = c->o.sink_config,
        .error = sink_error,
        .error_arg = c,
        .warn = sink_warn,
    };
    for (size_t i = 0; i < c->o.nsinks && c->nsinks < COLL_MAX_SINKS; i++) {
        const sink_ops *ops = c->o.sinks[i];
        void *state = NULL;
        rc = ops->init(&state, &c->sctx);
        if (rc < 0) {
            coll_free(c);
            return rc;
        }
        if (rc == 0) c->sinks[c->nsinks++] = (coll_sink){ops, state};
    }
    init_sources(c);
    *out = c;
    return 0;
}

/* Faster in the first seconds, so a short run (a tune trial) still has the
 * resource samples a diagnosis needs (docs/diagnosis.md, "Too little data"). */
#define COLL_EARLY_NS 3000000000ull
#define COLL_EARLY_IV_NS 250000000ull
static uint64_t coll_interval_ns(const coll *c, uint64_t now)
{
    uint64_t iv = (uint64_t)(c->o.interval_s * 1e9);
    if (now < c->o.start_mono_ns + COLL_EARLY_NS && iv > COLL_EARLY_IV_NS) iv = COLL_EARLY_IV_NS;
    return iv;
}

static void *coll_main(void *arg)
{
    coll *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        pthread_mutex_unlock(&c->mu);
        uint64_t now = mono_ns();
        int scan = now - c->last_scan_ns >= COLL_SCAN_NS;
        if (scan) {
            seg_scan(c);
            c->last_scan_ns = now;
        }
        drain_all(c, scan);
        if (now >= c->next_sample_ns) {
            take_sample(c, now);
            uint64_t iv = coll_interval_ns(c, now);
            c->next_sample_ns += iv;
            /* Late (suspended, overloaded): skip ahead, never burst. */
            if (c->next_sample_ns <= now) c->next_sample_ns = now + iv;
        }
        uint64_t wake = now + (uint64_t)(c->o.drain_s * 1e9);
        if (wake > c->next_sample_ns) wake = c->next_sample_ns;
        struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
        pthread_mutex_lock(&c->mu);
        while (!c->stop && pthread_cond_timedwait(&c->cv, &c->mu, &ts) == EINTR) {
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int coll_start(coll *c)
{
    if (!c || c->running || c->finished) return TPF_ESTATE;
    uint64_t now = mono_ns();
    seg_scan(c);
    c->last_scan_ns = now;
    drain_all(c, 0);
    take_sample(c, now); /* run.json goes out with the first sample */
    c->next_sample_ns = now + coll_interval_ns(c, now);
    sigset_t all, old;
    /* The thread takes no signals: the CLI handles them on its main thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->th, NULL, coll_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) return err_from_errno(rc);
    c->running = 1;
    return 0;
}

int coll_finish(coll *c, const run_exit *ex)
{
    if (!c || c->finished) return TPF_ESTATE;
    if (c->running) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->th, NULL);
        c->running = 0;
    }
    c->finished = 1;
    /* Everything published before the producers ended is drained now. */
    seg_scan(c);
    drain_all(c, 0);
    uint64_t dropped = dropped_now(c);
    for (int i = 0; i < c->nsegs; i++) seg_close(c, &c->segs[i]);
    uint64_t marked = c->noroom_events;
    noroom_markers(c);
    dropped += c->noroom_events - marked;
    pend_flush(c);
    agg_gpu_flush(c->agg, mono_ns(), 1);
    uint64_t now = mono_ns();
    take_sample(c, now);
    c->end_unix_s = unix_now();
    c->duration_s = ((double)now - (double)c->o.start_mono_ns) / 1e9;
    c->ended = 1;
    if (ex) c->exit = *ex;

    c->events_dropped = dropped;
    sinks_close(c, 1);
    return c->first_err;
}

void coll_get_summary(const coll *c, coll_summary *out)
{
    memset(out, 0, sizeof(*out));
    const figs *a = &c->agg->f;
    out->duration_s = c->duration_s;
    out->steps = figs_global_steps(a); /* the job's steps, not a sum over ranks */
    figs_view v;
    figs_headline(a, &v);
    out->steps_per_s = v.steps_per_s;
    out->samples_per_s = v.samples_per_s;
    out->tokens_per_s = v.tokens_per_s;
    out->step_p50_ms = v.step_p50_ms;
    out->step_p95_ms = v.step_p95_ms;
    out->data_share = v.data_wait_share;
    out->data_p95_ms = v.data_wait_p95_ms;
    const metric_def *m = metric_find("tree_cpu_pct");
    out->tree_cpu_mean_pct = m ? run_stat_mean(&c->res.m[m - metric_table]) : NAN;
    m = metric_find("tree_rss_bytes");
    const run_stat *rs = m ? &c->res.m[m - metric_table] : NULL;
    out->tree_rss_max_bytes = rs && rs->n ? rs->max : NAN;
    out->ngpu = c->res.ngpu;
    for (int g = 0; g < c->res.ngpu; g++) {
        const run_gpu_res *gr = &c->res.gpu[g];
        out->gpu_index[g] = gr->index;
        out->gpu_util_mean_pct[g] = run_stat_mean(&gr->util);
        out->gpu_mem_max_bytes[g] = gr->mem_used.n ? gr->mem_used.max : NAN;
        out->gpu_mem_total_bytes[g] = gr->mem_total;
    }
    out->events_dropped = c->events_dropped;
    out->noroom_procs = c->noroom_procs;
    out->noroom_events = c->noroom_events;
    out->trace_dropped = c->tally.trace_dropped;
    out->exporter_lost = c->tally.exporter_lost;
    out->nwarnings = c->nwarns;
    memcpy(out->warnings, c->warns, sizeof(out->warnings));
    memcpy(out->warning_err, c->warn_err, sizeof(out->warning_err));
    out->nalerts = c->nnotes;
    snprintf(out->io_error, sizeof(out->io_error), "%s", c->err_text);
    out->lost = c->tally.lost;
    out->bad_segments = c->nbad_segs;
    snprintf(out->bad_segment, sizeof(out->bad_segment), "%s", c->bad_seg);
    out->nsources = c->nsrc;
    memcpy(out->sources, c->status, sizeof(out->sources));
}

void coll_free(coll *c)
{
    if (!c) return;
    if (c->running) coll_finish(c, NULL);
    for (int i = 0; i < c->nsegs; i++) seg_close(c, &c->segs[i]);
    free(c->segs);
    for (int i = 0; i < c->nsrc; i++)
        if (c->src[i].on) c->src[i].ops->close(c->src[i].state);
    sinks_close(c, 0);
    agg_free(c->agg);
    free(c->pend);
    free(c->procrows);
    if (c->own_argv) {
        for (int i = 0; c->own_argv[i]; i++) free(c->own_argv[i]);
        free(c->own_argv);
    }
    free(c->alert_rules);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void coll_set_root(coll *c, pid_t root)
{
    if (c) __atomic_store_n(&c->ctx.root_pid, root, __ATOMIC_RELEASE);
}
