/* The sched source (see sched.h). Reads /proc/PID/task/TID/schedstat and
 * /proc/PID/task/TID/stat of every thread of the tree at each sample: the
 * second schedstat field is the time the thread was runnable but waited for
 * a CPU, summed over the tree it is the run's own contention. */
#include "collect/sched.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainperf.h"

#define SCHED_MAX_TASKS 65536 /* threads followed across samples */
#define SCHED_MAX_PROCS 1024  /* processes whose own wait a sample keeps */

typedef struct sched_task {
    int tid;
    unsigned long long wait_ns, run_ns;
    unsigned gen;
} sched_task;

typedef struct sched_state {
    sched_task *tasks; /* open-addressed by tid, SCHED_MAX_TASKS slots */
    unsigned gen;
    int first;
    char err[160];
    char cg[512]; /* cgroup v2 directory of the root process, "" when none */
    unsigned long long thr_usec;
    int thr_known;
    double quota_cpus; /* cpu.max quota / period, 0 when unlimited */
    /* each process's own wait in the last sample (procs.csv runq_pct) */
    pid_t proc_pid[SCHED_MAX_PROCS];
    double proc_wait_pct[SCHED_MAX_PROCS];
    int nproc, proc_known;
} sched_state;

static int read_small(const char *path, char *buf, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t k = read(fd, buf, n - 1);
    close(fd);
    if (k < 0) return -1;
    buf[k] = 0;
    return (int)k;
}

static sched_task *slot(sched_state *s, int tid)
{
    unsigned h = (unsigned)tid * 2654435761u;
    for (unsigned i = 0; i < 64; i++) {
        sched_task *t = &s->tasks[(h + i) % SCHED_MAX_TASKS];
        if (t->tid == tid) return t;
        /* a slot not seen for two samples is free again */
        if (t->tid == 0 || t->gen + 1 < s->gen) {
            memset(t, 0, sizeof(*t));
            t->tid = tid;
            t->gen = s->gen - 1; /* new: no delta this time */
            return t;
        }
    }
    return NULL;
}

static void find_cgroup(sched_state *s, pid_t pid)
{
    char p[64], b[1024];
    snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)pid);
    s->cg[0] = 0;
    if (read_small(p, b, sizeof(b)) <= 0) return;
    /* cgroup v2: the "0::/path" line */
    char *l = strstr(b, "0::");
    if (!l) return;
    l += 3;
    char *e = strchr(l, '\n');
    if (e) *e = 0;
    snprintf(s->cg, sizeof(s->cg), "/sys/fs/cgroup%s", l);
    char q[600], v[128];
    snprintf(q, sizeof(q), "%s/cpu.max", s->cg);
    if (read_small(q, v, sizeof(v)) > 0 && strncmp(v, "max", 3) != 0) {
        double quota = strtod(v, &e), period = strtod(e, NULL);
        if (quota > 0 && period > 0) s->quota_cpus = quota / period;
    }
}

static int sched_init(void **state, const src_ctx *ctx)
{
    sched_state *s = calloc(1, sizeof(*s));
    if (!s) return TPF_ENOMEM;
    *state = s;
    s->tasks = calloc(SCHED_MAX_TASKS, sizeof(sched_task));
    if (!s->tasks) return TPF_ENOMEM;
    char b[64];
    if (read_small("/proc/self/schedstat", b, sizeof(b)) <= 0) {
        snprintf(s->err, sizeof(s->err), "/proc/PID/schedstat not readable (kernel without "
                                         "schedstats): no run-queue figures");
        return TPF_EUNSUPPORTED;
    }
    s->first = 1;
    s->gen = 2;
    find_cgroup(s, ctx->root_pid);
    return 0;
}

/* Adds pid's threads' wait and run since the last sample; returns how many
 * threads had a last sample (0: the process is new, its wait unknown). */
static int task_dir(sched_state *s, pid_t pid, double *wait, double *run, int *runnable)
{
    char p[64];
    int known = 0;
    snprintf(p, sizeof(p), "/proc/%d/task", (int)pid);
    DIR *d = opendir(p);
    if (!d) return 0;
    struct dirent *de;
    char path[128], b[512];
    while ((de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
        int tid = (int)strtol(de->d_name, NULL, 10);
        snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid, tid);
        if (read_small(path, b, sizeof(b)) <= 0) continue;
        char *e;
        unsigned long long run_ns = strtoull(b, &e, 10);
        unsigned long long wait_ns = strtoull(e, NULL, 10);
        sched_task *t = slot(s, tid);
        if (t) {
            if (t->gen + 1 == s->gen && wait_ns >= t->wait_ns) {
                *wait += (double)(wait_ns - t->wait_ns);
                *run += (double)(run_ns - t->run_ns);
                known++;
            }
            t->wait_ns = wait_ns;
            t->run_ns = run_ns;
            t->gen = s->gen;
        }
        snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, tid);
        if (read_small(path, b, sizeof(b)) > 0) {
            char *rp = strrchr(b, ')');
            if (rp && rp[1] == ' ' && rp[2] == 'R') (*runnable)++;
        }
    }
    closedir(d);
    return known;
}

static int sched_sample(void *state, const src_ctx *ctx, coll_frame *f)
{
    sched_state *s = state;
    double wait = 0, run = 0;
    int runnable = 0;
    f->tree_runq_pct.ok = f->tree_runnable.ok = f->cpus_usable.ok = f->cg_throttled_pct.ok = 0;
    s->nproc = 0;
    s->proc_known = !s->first && f->dt > 0;
    if (f->tree_pids && f->ntree > 0) {
        for (int i = 0; i < f->ntree; i++) {
            double w = 0;
            int known = task_dir(s, f->tree_pids[i], &w, &run, &runnable);
            wait += w;
            if (s->nproc < SCHED_MAX_PROCS && s->proc_known && known > 0) {
                s->proc_pid[s->nproc] = f->tree_pids[i];
                s->proc_wait_pct[s->nproc++] = 100.0 * w / 1e9 / f->dt;
            }
        }
        if (!s->first && f->dt > 0) fv_set(&f->tree_runq_pct, 100.0 * wait / 1e9 / f->dt);
        fv_set(&f->tree_runnable, runnable);
    }
    s->gen++;
    cpu_set_t set;
    CPU_ZERO(&set);
    double usable = NAN;
    if (sched_getaffinity(ctx->root_pid, sizeof(set), &set) == 0) usable = CPU_COUNT(&set);
    if (s->quota_cpus > 0 && (isnan(usable) || s->quota_cpus < usable)) usable = s->quota_cpus;
    if (!isnan(usable)) fv_set(&f->cpus_usable, usable);
    if (s->cg[0]) {
        char p[600], b[512];
        snprintf(p, sizeof(p), "%s/cpu.stat", s->cg);
        if (read_small(p, b, sizeof(b)) > 0) {
            char *t = strstr(b, "throttled_usec ");
            if (t) {
                unsigned long long u = strtoull(t + 15, NULL, 10);
                if (s->thr_known && f->dt > 0 && u >= s->thr_usec)
                    fv_set(&f->cg_throttled_pct, 100.0 * (double)(u - s->thr_usec) / 1e6 / f->dt);
                s->thr_usec = u;
                s->thr_known = 1;
            }
        }
    }
    s->first = 0;
    return 0;
}

fval sched_proc_runq(void *state, pid_t pid)
{
    sched_state *s = state;
    fval v = {0, 0};
    if (!s || !s->proc_known) return v;
    for (int i = 0; i < s->nproc; i++)
        if (s->proc_pid[i] == pid) {
            fv_set(&v, s->proc_wait_pct[i]);
            break;
        }
    return v;
}

static const char *sched_last_error(void *state)
{
    sched_state *s = state;
    return s->err;
}

static void sched_close(void *state)
{
    sched_state *s = state;
    if (!s) return;
    free(s->tasks);
    free(s);
}

const src_ops sched_source = {"sched", sched_init, sched_sample, sched_last_error, sched_close};
