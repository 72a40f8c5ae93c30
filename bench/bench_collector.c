/* bench_collector — what the collector costs, end to end.
 *
 * (a) The bundled trainer at full speed (no data delay) under a collector in
 *     this process, exactly as `trainperf run` drives it (drain every 25 ms,
 *     sample procfs + alerts every second, all files written). Figure: the
 *     collector's CPU time per second of run, as % of one core, and as a
 *     ratio to the trainer's own CPU time measured in the same run.
 * (b) A synthetic producer publishing events as fast as one thread can:
 *     collector CPU per million events (the drain + aggregation + trace cost).
 * (c) One thread paced at 1M events/s (range push/pop pairs, a step per
 *     1000 pairs): dropped events (the rings must not fill) and collector CPU.
 * (d) The DESIGN budget through the whole collector: 4 threads of one
 *     process, each paced at 1M events/s; dropped events and collector CPU.
 *
 *   bench_collector [--seconds S] [--trainer PATH]
 *
 * Target (exit 1 when missed): in (a) the collector uses at most 10% of the
 * CPU time the trainer uses. (b) and (c) are reported, not judged: on a
 * shared machine a descheduled collector thread can let a ring fill. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collect/collector.h"
#include "probe/reader.h"
#include "record/rundir.h"
#include "record/sinks.h"
#include "trainperf.h"
#include "watch/alerts.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static double ru_cpu(const struct rusage *ru)
{
    return (double)ru->ru_utime.tv_sec + (double)ru->ru_utime.tv_usec / 1e6 +
           (double)ru->ru_stime.tv_sec + (double)ru->ru_stime.tv_usec / 1e6;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

typedef struct result {
    double wall, coll_cpu, child_cpu;
    uint64_t steps, dropped;
} result;

/* Watch child for seconds with a collector, then SIGKILL it and finish. */
static int watch(const char *dir, pid_t child, double seconds, result *r)
{
    alert_set *al = NULL;
    alerts_create(&al, 1);
    coll_opts o;
    memset(&o, 0, sizeof(o));
    o.run_dir = dir;
    o.mode = "run";
    o.root_pid = child;
    o.interval_s = 1.0;
    o.auto_hook = -1;
    o.alerts = al;
    o.sinks = rec_sinks;
    o.nsinks = rec_nsinks;
    coll *c = NULL;
    double cpu0 = self_cpu_s(), t0 = now_s();
    int rc = coll_create(&c, &o);
    if (rc == 0) rc = coll_start(c);
    if (rc) {
        fprintf(stderr, "bench_collector: collector: %s\n", tpf_strerror(rc));
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        coll_free(c);
        alerts_free(al);
        return -1;
    }
    sleep_s(seconds);
    kill(child, SIGKILL);
    int st;
    struct rusage ru;
    wait4(child, &st, 0, &ru);
    run_exit ex = {1, 137, 9};
    coll_finish(c, &ex);
    r->wall = now_s() - t0;
    r->coll_cpu = self_cpu_s() - cpu0;
    r->child_cpu = ru_cpu(&ru);
    coll_summary s;
    coll_get_summary(c, &s);
    r->steps = s.steps;
    r->dropped = s.events_dropped;
    coll_free(c);
    alerts_free(al);
    return 0;
}

static int fresh_dir(char *out, size_t n, const char *tag)
{
    snprintf(out, n, "/tmp/tpf-bench-collector-%s-%d", tag, (int)getpid());
    return rec_rundir_prepare(out);
}

static void rm_run(const char *dir)
{
    char cmd[PATH_MAX + 16];
    /* Our own temp dir, made above; the shell is the short way to remove it. */
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_collector: could not remove %s\n", dir);
}

/* Range push/pop pairs at 1M events/s, a step per 1000 pairs, forever: the
 * events due are published in a burst each millisecond and the thread sleeps
 * in between (a spinning pacer would steal the collector's core, which no
 * training thread does). */
static void *paced_producer(void *arg)
{
    (void)arg;
    tpf_name op = tpf_name_register("op");
    double t0 = now_s();
    uint64_t ev = 0;
    const struct timespec ms = {0, 1000000};
    for (;;) {
        uint64_t target = (uint64_t)((now_s() - t0) * 1e6);
        while (ev < target) {
            if (ev % 2000 == 0) tpf_step_begin();
            tpf_range_push(op);
            tpf_range_pop();
            ev += 2;
            if (ev % 2000 == 0) tpf_step_end(1, 0);
        }
        nanosleep(&ms, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    double seconds = 5;
    char trainer[PATH_MAX] = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = strtod(argv[++i], NULL);
        } else if (strcmp(argv[i], "--trainer") == 0 && i + 1 < argc) {
            snprintf(trainer, sizeof(trainer), "%s", argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_collector [--seconds S] [--trainer PATH]\n");
            return 2;
        }
    }
    if (!(seconds > 0.5)) seconds = 0.5;
    if (!trainer[0]) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        exe[n > 0 ? n : 0] = 0;
        char *sl = strrchr(exe, '/');
        if (sl) *sl = 0;
        snprintf(trainer, sizeof(trainer), "%.*s/../examples/trainer", PATH_MAX - 32, exe);
    }

    /* (a) the trainer at full speed */
    char dir[PATH_MAX];
    if (fresh_dir(dir, sizeof(dir), "a")) {
        fprintf(stderr, "bench_collector: cannot make %s\n", dir);
        return 2;
    }
    pid_t child = fork();
    if (child == 0) {
        setenv("TRAINPERF_RUN_DIR", dir, 1);
        execl(trainer, trainer, "--steps", "100000000", "--batch", "16", "--hidden", "32",
              "--data-delay-ms", "0", "--quiet", (char *)NULL);
        _exit(127);
    }
    result a;
    memset(&a, 0, sizeof(a));
    if (child < 0 || watch(dir, child, seconds, &a) != 0) return 2;
    rm_run(dir);
    if (a.steps == 0) {
        fprintf(stderr, "bench_collector: the trainer (%s) made no steps\n", trainer);
        return 2;
    }
    double coll_pct = 100 * a.coll_cpu / a.wall, ratio = a.coll_cpu / a.child_cpu;
    printf("(a) trainer at full speed, %.1f s: %.0f steps/s (%llu steps, %llu dropped)\n",
           a.wall, (double)a.steps / a.wall, (unsigned long long)a.steps,
           (unsigned long long)a.dropped);
    printf("    collector CPU %.3f s = %.2f%% of one core; trainer CPU %.2f s; "
           "collector/trainer %.4f (target <= 0.10)\n",
           a.coll_cpu, coll_pct, a.child_cpu, ratio);

    /* (b) a synthetic producer: 6 events per step, as fast as it goes */
    if (fresh_dir(dir, sizeof(dir), "b")) return 2;
    child = fork();
    if (child == 0) {
        if (probe_attach(dir) != 0) _exit(3);
        for (;;) {
            tpf_step_begin();
            tpf_range_push(TPF_PHASE_FORWARD);
            tpf_range_pop();
            tpf_range_push(TPF_PHASE_BACKWARD);
            tpf_range_pop();
            tpf_step_end(1, 0);
        }
    }
    result b;
    memset(&b, 0, sizeof(b));
    if (child < 0 || watch(dir, child, seconds, &b) != 0) return 2;
    rm_run(dir);
    double mev = (double)b.steps * 6 / 1e6;
    printf("(b) synthetic producer, %.1f s: %.2fM events/s received, %llu dropped\n", b.wall,
           mev / b.wall, (unsigned long long)b.dropped);
    printf("    collector CPU %.3f s = %.1f%% of one core = %.1f ms per million events\n",
           b.coll_cpu, 100 * b.coll_cpu / b.wall, mev > 0 ? 1e3 * b.coll_cpu / mev : 0.0);

    /* (c) paced at 1M events/s */
    if (fresh_dir(dir, sizeof(dir), "c")) return 2;
    child = fork();
    if (child == 0) {
        if (probe_attach(dir) != 0) _exit(3);
        paced_producer(NULL);
    }
    result c;
    memset(&c, 0, sizeof(c));
    if (child < 0 || watch(dir, child, seconds, &c) != 0) return 2;
    rm_run(dir);
    printf("(c) one thread paced at 1M events/s, %.1f s: %llu steps (%.2fM events), "
           "%llu dropped\n",
           c.wall, (unsigned long long)c.steps, (double)c.steps * 2000 / 1e6,
           (unsigned long long)c.dropped);
    printf("    collector CPU %.3f s = %.1f%% of one core\n", c.coll_cpu,
           100 * c.coll_cpu / c.wall);

    /* (d) 4 threads, each paced at 1M events/s */
    if (fresh_dir(dir, sizeof(dir), "d")) return 2;
    child = fork();
    if (child == 0) {
        if (probe_attach(dir) != 0) _exit(3);
        pthread_t th[4];
        for (int i = 0; i < 4; i++)
            if (pthread_create(&th[i], NULL, paced_producer, NULL) != 0) _exit(4);
        for (;;) pause();
    }
    result d;
    memset(&d, 0, sizeof(d));
    if (child < 0 || watch(dir, child, seconds, &d) != 0) return 2;
    rm_run(dir);
    printf("(d) 4 threads each paced at 1M events/s, %.1f s: %llu steps (%.2fM events), "
           "%llu dropped\n",
           d.wall, (unsigned long long)d.steps, (double)d.steps * 2000 / 1e6,
           (unsigned long long)d.dropped);
    printf("    collector CPU %.3f s = %.1f%% of one core\n", d.coll_cpu,
           100 * d.coll_cpu / d.wall);
    return ratio <= 0.10 ? 0 : 1;
}
