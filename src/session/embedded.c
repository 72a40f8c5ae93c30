/* Embedded mode: the collector as a thread of the training process
 * (tpf_start / tpf_stop in include/trainperf.h).
 *
 * session/ is where the stages are put together for a run inside the
 * training process, as cli/cmd_run.c does for `trainperf run`: the collector
 * with the run directory's sinks, then the end-of-run report as an explicit
 * last step. collect/ itself knows neither sinks nor reports. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collect/collector.h"
#include "probe/probe.h"
#include "probe/reader.h"
#include "record/rundir.h"
#include "record/segdir.h"
#include "record/sinks.h"
#include "report/report.h"
#include "trainperf.h"
#include "util/buf.h"
#include "util/jsonw.h"
#include "watch/alerts.h"
#include "watch/hangdump.h"

static pthread_mutex_t emb_lock = PTHREAD_MUTEX_INITIALIZER;
static coll *emb_coll;
static alert_set *emb_alerts;
static char emb_dir[PATH_MAX];
static pid_t emb_pid; /* the process whose thread the collector is */
static int emb_lock_fd = -1; /* the run directory's lock (rundir.h) */
static rec_segdir emb_sd = {.fd = -1}; /* the probes' segments (segdir.h) */

/* ---- hang stacks (docs/failures.md, "Embedded mode") ----
 *
 * With no `trainperf run` supervisor, the built-in `hang` alert (no step for
 * 50 x the median step time, held 10 s) is the trigger: the collector thread
 * saves this process's stacks (hd_dump_self: Python threads through
 * faulthandler, /proc for every thread) to hangs/N.txt and a line to
 * hangs.jsonl, as the supervisor does. */

#define EMB_HANGS_MAX 20 /* dumps per run: a run that stalls again and again */

typedef struct emb_hang {
    char run_dir[PATH_MAX];
    double since_s;      /* since_last_step_s of the latest sample; NAN unknown */
    int n;
} emb_hang;

static int eh_init(void **state, const sink_ctx *ctx)
{
    emb_hang *h = calloc(1, sizeof(*h));
    if (!h) return 1; /* the run goes on without stacks */
    snprintf(h->run_dir, sizeof(h->run_dir), "%s", ctx->run_dir);
    h->since_s = NAN;
    *state = h;
    return 0;
}

static void eh_sample(void *state, const coll_frame *f, const sink_run *run)
{
    (void)run;
    emb_hang *h = state;
    h->since_s = f->since_last_step_s.ok ? f->since_last_step_s.v : NAN;
}

static void eh_alert(void *state, const alert_event *e)
{
    emb_hang *h = state;
    if (!e->fired || strcmp(e->rule, "hang") != 0 || h->n >= EMB_HANGS_MAX) return;
    h->n++;
    char headline[256];
    snprintf(headline, sizeof(headline),
             "trainperf hang %d (embedded mode): no step for %.1f s (alert: %s), t = %.1f s", h->n,
             h->since_s, e->expr ? e->expr : "hang", e->t);
    hd_result *res = calloc(1, sizeof(*res));
    if (!res) return;
    int rc = hd_dump_self(h->run_dir, h->n, headline, res);
    buf b;
    buf_init(&b, 1u << 20);
    jw w;
    jw_init(&w, &b, 0);
    jw_obj_begin(&w);
    jw_kint(&w, "hang", h->n);
    jw_key(&w, "t");
    jw_numf(&w, e->t, 3);
    jw_kint(&w, "attempt", 1);
    jw_key(&w, "since_last_step_s");
    jw_numf(&w, h->since_s, 3);
    jw_key(&w, "bound_s");
    jw_null(&w);
    jw_kstr(&w, "bound_kind", "alert");
    jw_kstr(&w, "rule", e->expr);
    jw_kbool(&w, "before_first_step", 0);
    jw_kstr(&w, "verdict", res->verdict);
    jw_kstr(&w, "stacks", rc ? NULL : res->stacks);
    jw_kstr(&w, "action", "dump");
    jw_key(&w, "processes");
    hd_procs_json(&w, res);
    jw_obj_end(&w);
    buf_putc(&b, '\n');
    free(res);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/hangs.jsonl", h->run_dir);
    if (!b.err) {
        /* one write with O_APPEND: a whole line or nothing */
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            ssize_t wr = write(fd, b.data, b.len);
            (void)wr;
            close(fd);
        }
    }
    buf_free(&b);
}

static void eh_close(void *state, const sink_run *run)
{
    (void)run;
    free(state);
}

static const sink_ops emb_hang_sink = {
    .name = "hang-stacks",
    .init = eh_init,
    .on_sample = eh_sample,
    .on_alert = eh_alert,
    .close = eh_close,
};

#define EMB_MAX_SINKS 32
static const sink_ops *emb_sinks[EMB_MAX_SINKS];

static void program_label(char *out, size_t n)
{
    out[0] = 0;
    FILE *f = fopen("/proc/self/comm", "re");
    if (!f) return;
    if (fgets(out, (int)n, f)) out[strcspn(out, "\n")] = 0;
    fclose(f);
}

int tpf_start(const tpf_options *opt)
{
    tpf_options o = TPF_OPTIONS_INIT;
    if (opt) {
        /* A newer struct than this library knows: refuse, never guess. */
        if (opt->version > TPF_OPTIONS_VERSION) return TPF_EVERSION;
        /* Older, smaller structs are fine: take the fields they have. */
        if (opt->version < 1 || opt->size < offsetof(tpf_options, flags) + sizeof(uint32_t) ||
            opt->size > sizeof(o))
            return TPF_EINVAL;
        memcpy(&o, opt, opt->size);
    }
    if (o.run_dir && (!*o.run_dir || strlen(o.run_dir) >= PATH_MAX - 64)) return TPF_EINVAL;
    /* Every field checked: 1e300 is no interval (its conversion to
     * nanoseconds is undefined and the thread would spin in the trainee). */
    if (o.interval_s != 0 && !(o.interval_s >= 0.01 && o.interval_s <= 3600)) return TPF_EINVAL;
    if (o.flags & ~(TPF_START_NO_PROCFS | TPF_START_NO_GPU)) return TPF_EINVAL;
    pthread_mutex_lock(&emb_lock);
    int rc = 0;
    const char *env = getenv("TRAINPERF_RUN_DIR");
    /* Under `trainperf run` that collector already watches this process. */
    if (emb_coll || tpf_attached() || (env && *env)) {
        rc = TPF_EBUSY;
        goto out;
    }
    if (o.run_dir) {
        snprintf(emb_dir, sizeof(emb_dir), "%s", o.run_dir);
    } else {
        char label[32];
        program_label(label, sizeof(label));
        rc = rec_rundir_create("trainperf-runs", label, emb_dir, sizeof(emb_dir));
    }
    if (rc) goto out;
    /* A directory another run holds is refused (TPF_EBUSY); an earlier,
     * finished run in it is replaced: a script started again with the same
     * run_dir is the common case in embedded mode (docs/python.md). */
    rc = rec_rundir_claim(emb_dir, REC_CLAIM_FORCE);
    if (rc < 0) goto out;
    emb_lock_fd = rc;
    rc = 0;
    /* Segments off the run directory, as under `trainperf run`; without a
     * usable /dev/shm they go to live/ (run.json segments_dir is null). */
    char abs[PATH_MAX];
    if (!realpath(emb_dir, abs) ||
        rec_segdir_make(&emb_sd, abs, probe_ring_events(), NULL, 0) != 0)
        emb_sd.fd = -1;
    rc = probe_attach_at(emb_dir, emb_sd.fd >= 0 ? emb_sd.path : NULL);
    if (rc) {
        rec_segdir_remove(&emb_sd);
        rec_rundir_release(emb_lock_fd);
        emb_lock_fd = -1;
        goto out;
    }
    if (alerts_create(&emb_alerts, 1) < 0) emb_alerts = NULL; /* the run goes on without */
    coll_opts co;
    memset(&co, 0, sizeof(co));
    co.run_dir = emb_dir;
    co.seg_dir = emb_sd.fd >= 0 ? emb_sd.path : NULL;
    co.mode = "embedded";
    co.root_pid = getpid();
    co.interval_s = o.interval_s > 0 ? o.interval_s : 1.0;
    co.flags = o.flags;
    co.auto_hook = -1;
    co.alerts = emb_alerts;
    /* the run directory's sinks, then the hang stacks */
    size_t ns = 0;
    for (size_t i = 0; i < rec_nsinks && ns < EMB_MAX_SINKS - 1; i++) emb_sinks[ns++] = rec_sinks[i];
    emb_sinks[ns++] = &emb_hang_sink;
    co.sinks = emb_sinks;
    co.nsinks = ns;
    rc = coll_create(&emb_coll, &co);
    if (rc == 0) {
        emb_pid = getpid();
        rc = coll_start(emb_coll);
        if (rc) {
            coll_free(emb_coll);
            emb_coll = NULL;
        }
    }
    if (rc) {
        probe_detach();
        rec_segdir_remove(&emb_sd);
        alerts_free(emb_alerts);
        emb_alerts = NULL;
        rec_rundir_release(emb_lock_fd);
        emb_lock_fd = -1;
    }
out:
    pthread_mutex_unlock(&emb_lock);
    return rc;
}

int tpf_stop(void)
{
    pthread_mutex_lock(&emb_lock);
    /* A forked child (a DataLoader worker) inherits the pointer but not the
     * thread: the collector is the parent's to stop. */
    if (!emb_coll || getpid() != emb_pid) {
        pthread_mutex_unlock(&emb_lock);
        return TPF_ESTATE;
    }
    /* The loop is over: the last sample's hang watch counts no stall. */
    tpf_loop_end(TPF_LOOP_DONE);
    /* Detach first: what the threads published so far is drained below. */
    probe_detach();
    int rc = coll_finish(emb_coll, NULL);
    coll_free(emb_coll);
    emb_coll = NULL;
    /* Drained: the segments' memory goes back. */
    rec_segdir_remove(&emb_sd);
    alerts_free(emb_alerts);
    emb_alerts = NULL;
    /* The report is extra: the run directory is complete without it. */
    char err[256];
    (void)report_finish_run(emb_dir, 0, NULL, err, sizeof(err));
    rec_rundir_release(emb_lock_fd);
    emb_lock_fd = -1;
    pthread_mutex_unlock(&emb_lock);
    return rc;
}
