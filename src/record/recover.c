/* Recovering an interrupted run (see recover.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "collect/agg.h"
#include "collect/gpujoin.h"
#include "probe/reader.h"
#include "record/recover.h"
#include "record/safeout.h"
#include "record/segdir.h"
#include "record/writers.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/csvr.h"
#include "util/err.h"
#include "util/jsonr.h"
#include "util/jsonw.h"

#define RECOVER_MAX_THREADS 4096
#define RECOVER_MAX_SEGS 65536
#define RECOVER_TAIL 65536 /* bytes read back to find the last whole line */

typedef struct rcv_thread {
    int pid, tid;
    uint64_t next;   /* first step number not yet on disk */
    double end_us;   /* the end of its last step on disk, us after the run's start (-1: none) */
    uint64_t dup;    /* steps from the rings that were on disk already */
} rcv_thread;

#define RECOVER_MAX_GPU_PROCS 256

typedef struct rcv {
    buf rows, gpu_rows;
    /* per process, the earliest GPU record left in its ring: the dead
     * collector drained those before (CUPTI's buffers come out of time
     * order, so up to GJ_SETTLE_NS after it too) */
    struct {
        pid_t pid;
        uint64_t first_ns;
    } gpu_first[RECOVER_MAX_GPU_PROCS];
    int ngpu;
    uint64_t start_mono_ns;
    rcv_thread th[RECOVER_MAX_THREADS];
    int nth;
    uint64_t steps, gpu_steps;
} rcv;

/* Cut a streamed file back to its last whole line (a collector killed in
 * the middle of a write). Returns the kept length, or -1. */
static long cut_to_line(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    long keep = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        off_t size = st.st_size, from = size > RECOVER_TAIL ? size - RECOVER_TAIL : 0;
        static char tail[RECOVER_TAIL];
        ssize_t n = pread(fd, tail, (size_t)(size - from), from);
        if (n >= 0) {
            ssize_t i = n;
            while (i > 0 && tail[i - 1] != '\n') i--;
            keep = (long)(from + i);
            if (i == 0 && from > 0) keep = (long)size; /* a 64 KiB line: leave it */
            if (keep != (long)size && ftruncate(fd, (off_t)keep) != 0) keep = -1;
        }
    }
    close(fd);
    return keep;
}

/* trace.json: whole events, then the closing bracket. Each event is on its
 * own line after "[" and separated by ",\n". */
static int close_trace(int dfd)
{
    long keep = cut_to_line(dfd, "trace.json");
    if (keep < 0) return 0;
    int fd = openat(dfd, "trace.json", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    char t[4] = {0};
    off_t at = keep;
    /* Back over the separator that ended the last whole line. */
    while (at > 0) {
        if (pread(fd, t, 1, at - 1) != 1) break;
        if (t[0] == '\n' || t[0] == ',' || t[0] == ' ') {
            at--;
            continue;
        }
        break;
    }
    int ok = 0;
    if (at > 0 && (t[0] == ']')) {
        ok = 1; /* already closed */
    } else if (ftruncate(fd, at) == 0) {
        const char *end = at > 0 ? "\n]\n" : "[]\n";
        ok = pwrite(fd, end, strlen(end), at) == (ssize_t)strlen(end);
    }
    close(fd);
    return ok;
}

/* The next step number of each thread from steps.csv, so recovered rows
 * carry on the numbering. */
static uint64_t read_steps(rcv *v, const char *dir)
{
    char path[4200], e[128];
    snprintf(path, sizeof(path), "%s/steps.csv", dir);
    csvr r;
    if (csvr_open(&r, path, e, sizeof(e)) != 0) return 0;
    int cp = csvr_col(&r, "pid"), ct = csvr_col(&r, "tid"), cs = csvr_col(&r, "step"),
        c0 = csvr_col(&r, "start_s"), cd = csvr_col(&r, "duration_ns");
    uint64_t rows = 0;
    while (csvr_next(&r) == 1) {
        rows++;
        double pid, tid, step, t0, dur;
        if (!csvr_num(&r, cp, &pid) || !csvr_num(&r, ct, &tid) || !csvr_num(&r, cs, &step) ||
            !(step >= 0 && step < 1e18))
            continue;
        int k;
        for (k = 0; k < v->nth; k++)
            if (v->th[k].pid == (int)pid && v->th[k].tid == (int)tid) break;
        if (k == v->nth) {
            if (v->nth == RECOVER_MAX_THREADS) continue;
            v->th[v->nth++] = (rcv_thread){(int)pid, (int)tid, 0, -1.0, 0};
        }
        if ((uint64_t)step + 1 > v->th[k].next) v->th[k].next = (uint64_t)step + 1;
        if (csvr_num(&r, c0, &t0) && csvr_num(&r, cd, &dur) && t0 * 1e6 + dur / 1e3 > v->th[k].end_us)
            v->th[k].end_us = t0 * 1e6 + dur / 1e3;
    }
    csvr_close(&r);
    return rows;
}

/* The index of pid in gpu_first, or v->ngpu when it has none. */
static int gpu_first_of(const rcv *v, pid_t pid)
{
    int k = 0;
    while (k < v->ngpu && v->gpu_first[k].pid != pid) k++;
    return k;
}

static rcv_thread *thread_of(rcv *v, pid_t pid, pid_t tid)
{
    for (int k = 0; k < v->nth; k++)
        if (v->th[k].pid == (int)pid && v->th[k].tid == (int)tid) return &v->th[k];
    return NULL;
}

/* The row number of a thread's step as the recovery's aggregate counted it
 * (from 0 at the first step in the rings): numbered on from steps.csv, less
 * the steps of the rings that were on disk already. */
static uint64_t number_of(rcv *v, pid_t pid, pid_t tid, uint64_t step)
{
    const rcv_thread *t = thread_of(v, pid, tid);
    return t ? t->next + step - t->dup : step;
}

static void on_step(void *ctx, const agg_step *s)
{
    rcv *v = ctx;
    rcv_thread *th = thread_of(v, s->pid, s->tid);
    /* The collector releases the ring slots of a drain round only once its rows
     * are on disk (collect/collector.c): killed in between, it leaves steps
     * that steps.csv has. Those end no later than the thread's last row (its
     * start is rounded to the microsecond: 1 us of slack; steps are longer). */
    if (th && th->end_us >= 0 && s->step == th->dup &&
        (double)(int64_t)(s->end_ns - v->start_mono_ns) / 1e3 <= th->end_us + 1.0) {
        th->dup++;
        return;
    }
    agg_step t = *s;
    t.step = number_of(v, s->pid, s->tid, s->step);
    rec_steps_row(&v->rows, &t, v->start_mono_ns);
    v->steps++;
}

/* A recovered step's GPU figures (its records were still in the GPU
 * segment's ring), numbered as its steps.csv row; a window of a process
 * with no steps (tid 0) as it came. */
static void on_gpu_step(void *ctx, const gpu_step *g)
{
    rcv *v = ctx;
    /* a step whose records the dead collector may have drained in part:
     * no row rather than one that misses them */
    int k = gpu_first_of(v, g->pid);
    if (k == v->ngpu || g->end_ns - g->interval_ns < v->gpu_first[k].first_ns + GJ_SETTLE_NS)
        return;
    gpu_step t = *g;
    if (t.tid != 0) {
        const rcv_thread *th = thread_of(v, t.pid, t.tid);
        if (th && g->step < th->dup) return; /* its step was on disk: so is its row */
        t.step = number_of(v, t.pid, t.tid, g->step);
    }
    rec_gpu_steps_row(&v->gpu_rows, &t);
    v->gpu_steps++;
}

static const agg_sink rcv_sink_proto = {NULL, on_step, NULL, NULL, NULL, on_gpu_step, NULL};

typedef struct rcv_ev {
    rcv *v;
    agg *a;
    agg_proc *p;
    pid_t pid;
} rcv_ev;

static void on_event(void *ctx, const seg_event *ev)
{
    rcv_ev *x = ctx;
    if (ev->kind >= SEG_EV_GPU_KERNEL && ev->kind <= SEG_EV_GPU_SYNC) {
        rcv *v = x->v;
        int k = gpu_first_of(v, x->pid);
        if (k == v->ngpu && k < RECOVER_MAX_GPU_PROCS) {
            v->gpu_first[k].pid = x->pid;
            v->gpu_first[k].first_ns = ev->ts_ns;
            v->ngpu++;
        } else if (k < v->ngpu && ev->ts_ns < v->gpu_first[k].first_ns) {
            v->gpu_first[k].first_ns = ev->ts_ns;
        }
    }
    agg_event(x->a, x->p, ev);
}

/* Drain the segments in live (RUN/live, or the run's segment directory). */
static int drain_dir(rcv *v, const char *live, rec_recovery *info)
{
    DIR *d = opendir(live);
    if (!d) return 0;
    agg_sink sink = rcv_sink_proto;
    sink.ctx = v;
    agg *a = NULL;
    if (agg_create(&a, &sink) != 0) {
        closedir(d);
        return TPF_ENOMEM;
    }
    /* The GPU segments first: a step joins the records that came before
     * it, and the last steps' rows go at the final flush below. */
    int nseg = 0;
    for (int gpu_pass = 1; gpu_pass >= 0; gpu_pass--) {
        rewinddir(d);
        struct dirent *de;
        while ((de = readdir(d)) != NULL && nseg < RECOVER_MAX_SEGS) {
            size_t n = strlen(de->d_name);
            if (n < 9 || strncmp(de->d_name, "seg-", 4) != 0 ||
                strcmp(de->d_name + n - 4, ".tpf") != 0)
                continue;
            int is_gpu = n >= 8 && strcmp(de->d_name + n - 8, ".gpu.tpf") == 0;
            if (is_gpu != gpu_pass) continue;
            char path[4500];
            snprintf(path, sizeof(path), "%s/%s", live, de->d_name);
            seg_reader *r = NULL;
            if (seg_reader_open(&r, path) != 0) continue;
            const seg_proc_info *pi = seg_reader_info(r);
            agg_proc *p = NULL;
            if (agg_proc_create(&p, pi->pid, pi->rank, pi->local_rank) == 0) {
                rcv_ev x = {v, a, p, (pid_t)pi->pid};
                seg_reader_drain(r, on_event, &x);
                agg_proc_free(p);
                info->segments++;
                info->dropped += seg_reader_dropped(r);
            }
            seg_reader_close(r);
            nseg++;
        }
    }
    closedir(d);
    agg_gpu_flush(a, UINT64_MAX, 1);
    agg_free(a);
    return 0;
}

static int write_marker(int dfd, const rec_recovery *info)
{
    buf b;
    buf_init(&b, 1u << 16);
    jw w;
    jw_init(&w, &b, 1);
    jw_obj_begin(&w);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    jw_key(&w, "recovered_unix_s");
    jw_numf(&w, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9, 3);
    jw_kint(&w, "segments", info->segments);
    jw_kuint(&w, "steps_on_disk", info->steps_before);
    jw_kuint(&w, "steps_from_rings", info->steps);
    jw_kuint(&w, "gpu_steps_from_rings", info->gpu_steps);
    jw_kuint(&w, "events_dropped", info->dropped);
    jw_kbool(&w, "trace_repaired", info->trace_repaired);
    jw_obj_end(&w);
    buf_putc(&b, '\n');
    int rc = b.err ? b.err : afile_write_at(dfd, "recovered.json", b.data, b.len);
    buf_free(&b);
    return rc;
}

/* The recovered rows after those on disk; the header first when the
 * collector died before its first write of the file. */
static int append_rows(int dfd, const char *dir, const char *name, const buf *rows,
                       int (*header)(buf *), char *err, size_t errlen)
{
    if (!rows->len) return 0;
    int rc = 0;
    int fd = afile_append_at(dfd, name);
    if (fd == TPF_ENOENT) {
        fd = afile_create_at(dfd, name, O_WRONLY | O_APPEND);
        if (fd >= 0) {
            buf h;
            buf_init(&h, 4096);
            header(&h);
            rc = h.err ? h.err : afile_write_all(fd, h.data, h.len, NULL);
            buf_free(&h);
        }
    }
    if (fd < 0) rc = fd;
    if (rc == 0) rc = rows->err ? rows->err : afile_write_all(fd, rows->data, rows->len, NULL);
    if (fd >= 0) close(fd);
    if (rc && err && errlen) snprintf(err, errlen, "%s/%s: %s", dir, name, tpf_strerror(rc));
    return rc;
}

int rec_recover(const char *dir, rec_recovery *info, char *err, size_t errlen)
{
    memset(info, 0, sizeof(*info));
    if (err && errlen) err[0] = 0;
    int dfd = afile_dir_open(dir);
    if (dfd < 0) return 0; /* the report says what is wrong with dir */
    struct stat st;
    if (fstatat(dfd, "run.json", &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        fstatat(dfd, "summary.json", &st, AT_SYMLINK_NOFOLLOW) == 0) {
        close(dfd);
        return 0;
    }
    /* A live collector holds the lock: the run is not over, leave it be. The
     * lock is ours while we work, so two reports never recover twice. */
    if (flock(dfd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        close(dfd);
        return 0;
    }
    /* Drained once already (the next run's sweep does not write reports):
     * never drained twice, but still owed its summary and reports. */
    if (fstatat(dfd, "recovered.json", &st, AT_SYMLINK_NOFOLLOW) == 0) {
        info->earlier = 1;
        close(dfd);
        return 1;
    }
    /* Only a run.json the collector wrote at its start (no end, no exit):
     * a damaged one is the report's to explain, and nothing is touched. */
    char path[4200], e[200], segdir[PATH_MAX] = "";
    snprintf(path, sizeof(path), "%s/run.json", dir);
    jr_doc run;
    uint64_t start_ns = 0;
    int ok = 0;
    if (jr_load_file(&run, path, 0, e, sizeof(e)) == 0) {
        double s0 = jr_pnum(run.root, "start_mono_ns");
        const jr_node *ex = jr_get(run.root, "exit");
        ok = run.root->type == JR_OBJ && s0 > 0 && s0 < 1.8e19 && (!ex || ex->type == JR_NULL);
        if (ok) start_ns = (uint64_t)s0;
        /* Where the segments were, when not in live/: used only when that
         * directory is ours and says it belongs to this run (segdir.h), so
         * a run.json from elsewhere cannot point us at other files. */
        const jr_node *sd = jr_get(run.root, "segments_dir");
        if (ok && sd && sd->type == JR_STR && rec_segdir_of_run(jr_str(sd), dir))
            snprintf(segdir, sizeof(segdir), "%s", jr_str(sd));
        jr_free(&run);
    }
    if (!ok) {
        close(dfd);
        return 0;
    }
    rcv *v = calloc(1, sizeof(*v));
    if (!v) {
        close(dfd);
        return TPF_ENOMEM;
    }
    buf_init(&v->rows, 256u << 20);
    buf_init(&v->gpu_rows, 64u << 20);
    v->start_mono_ns = start_ns;
    /* The space kept for the last words goes to them now. */
    unlinkat(dfd, REC_RESERVE_NAME, 0);
    for (const char *const *n = (const char *const[]){"steps.csv", "metrics.csv", "procs.csv",
                                                       "alerts.jsonl", "gpu_steps.csv", NULL};
         *n; n++)
        cut_to_line(dfd, *n);
    info->trace_repaired = close_trace(dfd);
    info->steps_before = read_steps(v, dir);
    char live[4200];
    snprintf(live, sizeof(live), "%s/live", dir);
    int rc = drain_dir(v, live, info);
    if (rc == 0 && segdir[0]) rc = drain_dir(v, segdir, info);
    info->steps = v->steps;
    info->gpu_steps = v->gpu_steps;
    if (rc == 0) rc = append_rows(dfd, dir, "steps.csv", &v->rows, rec_steps_header, err, errlen);
    if (rc == 0)
        rc = append_rows(dfd, dir, "gpu_steps.csv", &v->gpu_rows, rec_gpu_steps_header, err, errlen);
    if (rc == 0 && (rc = write_marker(dfd, info)) != 0 && err && errlen)
        snprintf(err, errlen, "%s/recovered.json: %s", dir, tpf_strerror(rc));
    buf_free(&v->rows);
    buf_free(&v->gpu_rows);
    free(v);
    /* Drained and on disk: the segments' memory goes back, unless a process
     * of the run still writes to them. */
    if (rc == 0 && segdir[0]) {
        int sfd = rec_segdir_open(segdir);
        int busy = sfd < 0 || rec_segdir_busy(sfd);
        if (sfd >= 0) close(sfd);
        if (!busy) rec_segdir_remove_path(segdir);
    }
    close(dfd); /* drops the lock */
    return rc ? rc : 1;
}

typedef struct sweep_ctx {
    rec_recovered_fn recovered;
    void *ctx;
} sweep_ctx;

/* A dead run's segments: finish its run as `trainperf report` would, so
 * nothing published is lost; keep them when that fails. */
static int sweep_visit(const char *run_dir, void *ud)
{
    sweep_ctx *x = ud;
    rec_recovery info;
    int rc = rec_recover(run_dir, &info, NULL, 0);
    if (rc == 1 && x->recovered) x->recovered(run_dir, &info, x->ctx);
    return rc < 0;
}

int rec_sweep_dead_runs(rec_recovered_fn recovered, void *ctx)
{
    sweep_ctx x = {recovered, ctx};
    return rec_segdir_sweep(sweep_visit, &x);
}
