/* bench_probe — what the probe costs and how much it carries.
 *
 *   bench_probe [--seconds S] [--dir DIR]
 *
 * (a) range push+pop vs two raw clock_gettime(CLOCK_MONOTONIC) reads, same
 *     run, interleaved rounds; target ratio <= 1.5. Also a disabled probe.
 * (b) 4 producer threads paced at 1M events/s each for S seconds (default
 *     10) with a drainer thread using seg_reader: events, drops (target 0),
 *     the drainer's CPU.
 * (c) overload: small rings, unpaced producers, a slow drainer: produced ==
 *     received + dropped must hold exactly.
 * Prints figures; exits 0 unless something is broken (1) or the arguments
 * are bad (2). No pass/fail on timing: the machine may be shared. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "probe/clock.h"
#include "probe/probe.h"
#include "probe/reader.h"
#include "probe/segment.h"
#include "trainperf.h"

static char g_seg[4096];
static int g_broken;

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void count_cb(void *ctx, const seg_event *ev)
{
    (void)ev;
    (*(long *)ctx)++;
}

static int attach(const char *dir)
{
    int rc = probe_attach(dir);
    if (rc != 0) {
        fprintf(stderr, "bench_probe: cannot attach to %s: %s\n", dir, tpf_strerror(rc));
        return -1;
    }
    if (!probe_segment_path(g_seg, sizeof(g_seg))) return -1;
    return 0;
}

/* ---- (a) per-call cost ---- */

enum { CHUNK = 50000, ROUNDS = 41 };

static double chunk_pushpop(tpf_name n)
{
    uint64_t t0 = clk_mono_ns();
    for (int i = 0; i < CHUNK; i++) {
        tpf_range_push(n);
        tpf_range_pop();
    }
    return (double)(clk_mono_ns() - t0) / CHUNK;
}

static double chunk_clock(void)
{
    volatile uint64_t sink = 0;
    uint64_t t0 = clk_mono_ns();
    for (int i = 0; i < CHUNK; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        clock_gettime(CLOCK_MONOTONIC, &b);
        sink += (uint64_t)a.tv_nsec + (uint64_t)b.tv_nsec;
    }
    (void)sink;
    return (double)(clk_mono_ns() - t0) / CHUNK;
}

static void bench_cost(const char *dir)
{
    tpf_name n = tpf_name_register("bench");
    /* Disabled first: the probe is not attached yet. */
    double off[ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        off[r] = chunk_pushpop(n) / 2;
    qsort(off, ROUNDS, sizeof(double), cmp_double);

    if (attach(dir) != 0) {
        g_broken = 1;
        return;
    }
    seg_reader *rd;
    if (seg_reader_open(&rd, g_seg) != 0) {
        g_broken = 1;
        return;
    }
    double pp[ROUNDS], ck[ROUNDS];
    long got = 0;
    chunk_pushpop(n); /* warm: the thread's ring, the pages */
    seg_reader_drain(rd, count_cb, &got);
    for (int r = 0; r < ROUNDS; r++) {
        /* Interleaved so both see the same machine load. Each chunk fits
         * the ring; draining between chunks is not timed. */
        pp[r] = chunk_pushpop(n);
        ck[r] = chunk_clock();
        seg_reader_drain(rd, count_cb, &got);
    }
    uint64_t drops = seg_reader_dropped(rd);
    seg_reader_close(rd);
    probe_detach();
    qsort(pp, ROUNDS, sizeof(double), cmp_double);
    qsort(ck, ROUNDS, sizeof(double), cmp_double);
    const clk_calib *c = clk_setup();
    printf("clock: %s (clock_gettime %.1f ns, rdtsc %.1f ns per read; -1: not measured)\n",
           c->kind == SEG_CLOCK_TSC ? "tsc" : "clock_gettime", c->mono_cost_ns, c->tsc_cost_ns);
    printf("(a) range push+pop: %.1f ns (median of %d chunks, min %.1f); two clock_gettime: "
           "%.1f ns (min %.1f)\n",
           pp[ROUNDS / 2], ROUNDS, pp[0], ck[ROUNDS / 2], ck[0]);
    printf("(a) ratio push+pop / two clock reads: %.2f (median), %.2f (min)  [target <= 1.5]\n",
           pp[ROUNDS / 2] / ck[ROUNDS / 2], pp[0] / ck[0]);
    printf("(a) disabled probe: %.2f ns per call (median)\n", off[ROUNDS / 2]);
    long want = (long)(ROUNDS + 1) * CHUNK * 2;
    if (got != want || drops != 0) {
        printf("(a) BROKEN: received %ld of %ld events, %llu drops\n", got, want,
               (unsigned long long)drops);
        g_broken = 1;
    }
}

/* ---- (b) and (c): producers and a drainer ---- */

typedef struct prod {
    pthread_t th;
    double rate; /* events/s; 0: as fast as possible */
    uint64_t duration_ns;
    long sent;
    tpf_name name;
} prod;

static _Atomic int g_stop_drain;
static tpf_name g_clock_name;
static _Atomic uint64_t g_clock_mark_ts;

/* Counts events; remembers the time of the clock-check mark. */
static void load_cb(void *ctx, const seg_event *ev)
{
    (*(long *)ctx)++;
    if (ev->kind == SEG_EV_MARK && ev->name == g_clock_name)
        atomic_store(&g_clock_mark_ts, ev->ts_ns);
}

static void *producer(void *arg)
{
    prod *p = arg;
    uint64_t t0 = clk_mono_ns(), end = t0 + p->duration_ns;
    long sent = 0;
    if (p->rate <= 0) {
        while (clk_mono_ns() < end)
            for (int i = 0; i < 1000; i++, sent++)
                tpf_counter(p->name, (double)sent);
    } else {
        /* Paced in 1 ms bursts: sleeping between them keeps the producers
         * from competing with the drainer for the CPU. */
        for (;;) {
            uint64_t now = clk_mono_ns();
            if (now >= end) now = end;
            long target = (long)((double)(now - t0) * p->rate / 1e9);
            while (sent < target)
                tpf_counter(p->name, (double)sent++);
            if (now >= end) break;
            sleep_ns(1000000);
        }
    }
    p->sent = sent;
    return NULL;
}

typedef struct drainer {
    pthread_t th;
    seg_reader *r;
    uint64_t period_ns;
    long received, drains;
    uint64_t cpu_ns, wall_ns;
} drainer;

static void *drain_main(void *arg)
{
    drainer *d = arg;
    uint64_t c0 = thread_cpu_ns(), w0 = clk_mono_ns();
    for (;;) {
        int stop = atomic_load(&g_stop_drain);
        long n = seg_reader_drain(d->r, load_cb, &d->received);
        if (n < 0) g_broken = 1;
        d->drains++;
        if (stop) break;
        sleep_ns(d->period_ns);
    }
    d->cpu_ns = thread_cpu_ns() - c0;
    d->wall_ns = clk_mono_ns() - w0;
    return NULL;
}

static int run_load(const char *dir, const char *label, int nprod, double rate, double seconds,
                    uint64_t drain_period_ns, const char *ring_events)
{
    if (ring_events)
        setenv("TRAINPERF_RING_EVENTS", ring_events, 1);
    else
        unsetenv("TRAINPERF_RING_EVENTS");
    if (attach(dir) != 0) return -1;
    drainer d;
    memset(&d, 0, sizeof(d));
    d.period_ns = drain_period_ns;
    if (seg_reader_open(&d.r, g_seg) != 0) return -1;
    atomic_store(&g_stop_drain, 0);
    pthread_create(&d.th, NULL, drain_main, &d);
    prod p[8];
    uint64_t t0 = clk_mono_ns();
    for (int i = 0; i < nprod; i++) {
        p[i] = (prod){.rate = rate,
                      .duration_ns = (uint64_t)(seconds * 1e9),
                      .name = tpf_name_register("bench")};
        pthread_create(&p[i].th, NULL, producer, &p[i]);
    }
    long sent = 0;
    for (int i = 0; i < nprod; i++) {
        pthread_join(p[i].th, NULL);
        sent += p[i].sent;
    }
    double wall = (double)(clk_mono_ns() - t0) / 1e9;
    /* Clock check, seconds after attach: one mark bracketed by two
     * clock_gettime reads, converted by the reader. */
    atomic_store(&g_clock_mark_ts, 0);
    tpf_mark(TPF_PHASE_EVAL); /* this thread's first event claims its ring */
    sent++;
    uint64_t before = clk_mono_ns();
    tpf_mark(g_clock_name);
    uint64_t after = clk_mono_ns();
    sent++;
    atomic_store(&g_stop_drain, 1);
    pthread_join(d.th, NULL);
    uint64_t mts = atomic_load(&g_clock_mark_ts);
    const clk_calib *ck = clk_setup();
    if (rate > 0 && mts) {
        double off = (double)mts - ((double)before + (double)after) / 2;
        printf("%s: clock check after %.1f s: event time - clock_gettime = %+.0f ns "
               "(bracket +-%.0f ns)",
               label, wall, off, (double)(after - before) / 2);
        if (ck->kind == SEG_CLOCK_TSC) {
            uint64_t t, m;
            clk_pair(&t, &m);
            double pred = (double)ck->mono0 + (double)(t - ck->tsc0) * ck->ns_per_tick;
            printf("; the producer's 2 ms calibration alone would be %+.0f ns off",
                   pred - (double)m);
        }
        printf("\n");
    } else if (rate > 0) {
        printf("%s: BROKEN: the clock-check mark was not received\n", label);
        g_broken = 1;
    }
    uint64_t drops = seg_reader_dropped(d.r);
    uint64_t pdrops = tpf_dropped();
    seg_reader_close(d.r);
    probe_detach();
    printf("%s: %d producers, %.2f s: produced %ld (%.2f M events/s), received %ld, dropped "
           "%llu; drainer %ld drains, CPU %.2f%% of one core\n",
           label, nprod, wall, sent, (double)sent / wall / 1e6, d.received,
           (unsigned long long)drops, d.drains,
           d.wall_ns ? 100.0 * (double)d.cpu_ns / (double)d.wall_ns : 0.0);
    int exact = (uint64_t)sent == (uint64_t)d.received + drops;
    printf("%s: produced == received + dropped: %s\n", label, exact ? "yes (exact)" : "NO");
    (void)pdrops;
    if (!exact) g_broken = 1;
    return (int)drops;
}

static void rm_run_dir(const char *dir)
{
    char live[4200], f[4300];
    snprintf(live, sizeof(live), "%s/live", dir);
    snprintf(f, sizeof(f), "%s/seg-%d.tpf", live, (int)getpid());
    unlink(f);
    rmdir(live);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    double seconds = 10;
    const char *dir_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            char *end;
            seconds = strtod(argv[++i], &end);
            if (*end || !(seconds > 0 && seconds <= 3600)) {
                fprintf(stderr, "bench_probe: error: --seconds needs a number in (0, 3600]\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            dir_arg = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_probe [--seconds S] [--dir DIR]\n");
            return 2;
        }
    }
    char dir[4096];
    if (dir_arg) {
        snprintf(dir, sizeof(dir), "%s", dir_arg);
    } else {
        snprintf(dir, sizeof(dir), "/tmp/tpf-bench-XXXXXX");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "bench_probe: error: cannot make a temporary folder\n");
            return 1;
        }
    }
    /* The figures are for the defaults, whatever this shell has set. */
    unsetenv("TRAINPERF_CLOCK");
    unsetenv("TRAINPERF_RING_EVENTS");
    g_clock_name = tpf_name_register("clock-check");
    bench_cost(dir);
    int drops = run_load(dir, "(b) 4 x 1M events/s", 4, 1e6, seconds, 1000000, NULL);
    printf("(b) drops: %d  [target 0]\n", drops);
    double oseconds = seconds < 1 ? seconds : 1;
    run_load(dir, "(c) overload", 4, 0, oseconds, 20000000, "4096");
    if (!dir_arg) rm_run_dir(dir);
    if (g_broken) printf("BROKEN: see above\n");
    return g_broken ? 1 : 0;
}
