/* Embedded mode: the collector as a thread of the training process
 * (tpf_start / tpf_stop in include/trainperf.h).
 *
 * session/ is where the stages are put together for a run inside the
 * training process, as cli/cmd_run.c does for `trainperf run`: the collector
 * with the run directory's sinks, then the end-of-run report as an explicit
 * last step. collect/ itself knows neither sinks nor reports. */
#include <errno.h>
#include <limits.h>
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
#include "watch/alerts.h"

static pthread_mutex_t emb_lock = PTHREAD_MUTEX_INITIALIZER;
static coll *emb_coll;
static alert_set *emb_alerts;
static char emb_dir[PATH_MAX];
static pid_t emb_pid; /* the process whose thread the collector is */
static int emb_lock_fd = -1; /* the run directory's lock (rundir.h) */
static rec_segdir emb_sd = {.fd = -1}; /* the probes' segments (segdir.h) */

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
    co.sinks = rec_sinks;
    co.nsinks = rec_nsinks;
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
