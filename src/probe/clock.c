/* Clock choice and TSC calibration. Measured on the development machine
 * (Xeon 2.5 GHz VM, clocksource tsc): clock_gettime ~40 ns, rdtsc ~12-24 ns,
 * so the TSC wins there; the choice is re-measured in every process. */
#include "probe/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe/segment.h"

static clk_calib g_calib;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_want_mono; /* clk_prefer_mono: before the first clk_setup */

void clk_prefer_mono(void) { g_want_mono = 1; }

/* Reads a small text file into buf; 0 or -1. */
static int read_small(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return 0;
}

int clk_tsc_invariant(void)
{
#if CLK_HAVE_TSC
    /* The flags say the rate is constant and runs in deep C-states; the
     * kernel choosing tsc as its clocksource says the TSCs are in sync. */
    char cs[64];
    if (read_small("/sys/devices/system/clocksource/clocksource0/current_clocksource", cs,
                   sizeof(cs)) != 0 ||
        strncmp(cs, "tsc", 3) != 0)
        return 0;
    FILE *f = fopen("/proc/cpuinfo", "re");
    if (!f) return 0;
    char line[4096];
    int ok = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        ok = strstr(line, " constant_tsc") && strstr(line, " nonstop_tsc");
        break;
    }
    fclose(f);
    return ok;
#else
    return 0;
#endif
}

void clk_pair(uint64_t *tsc, uint64_t *mono)
{
    /* Keep the tightest of a few tries: the TSC read between two clock
     * reads, matched with their midpoint. */
    uint64_t best_w = UINT64_MAX;
    for (int i = 0; i < 8; i++) {
        uint64_t m0 = clk_mono_ns();
        uint64_t t = clk_tsc();
        uint64_t m1 = clk_mono_ns();
        if (m1 - m0 < best_w) {
            best_w = m1 - m0;
            *tsc = t;
            *mono = m0 + (m1 - m0) / 2;
        }
    }
}

/* Nanoseconds per call of each clock, best of a few rounds. */
static void measure(double *mono_ns, double *tsc_ns)
{
    enum { N = 4000 };
    double bm = 1e9, bt = 1e9;
    volatile uint64_t sink = 0;
    for (int round = 0; round < 5; round++) {
        uint64_t a = clk_mono_ns();
        for (int i = 0; i < N; i++)
            sink += clk_mono_ns();
        uint64_t b = clk_mono_ns();
        for (int i = 0; i < N; i++)
            sink += clk_tsc();
        uint64_t c = clk_mono_ns();
        double m = (double)(b - a) / N, t = (double)(c - b) / N;
        if (m < bm) bm = m;
        if (t < bt) bt = t;
    }
    (void)sink;
    *mono_ns = bm;
    *tsc_ns = bt;
}

static void setup_once(void)
{
    clk_calib *c = &g_calib;
    c->kind = SEG_CLOCK_MONO;
    c->ns_per_tick = 0;
    c->mono0 = clk_mono_ns();
    c->tsc0 = 0;
    c->mono_cost_ns = c->tsc_cost_ns = -1;
    const char *want = getenv("TRAINPERF_CLOCK");
    if (g_want_mono || (want && strcmp(want, "mono") == 0)) return;
    if (!CLK_HAVE_TSC || !clk_tsc_invariant()) return;
    measure(&c->mono_cost_ns, &c->tsc_cost_ns);
    int forced = want && strcmp(want, "tsc") == 0;
    /* Only worth a second code path when clearly cheaper. */
    if (!forced && !(c->tsc_cost_ns < 0.8 * c->mono_cost_ns)) return;
    /* A short calibration is enough: the reader refines the rate with its
     * own pairs on the same machine, so error does not grow with run time. */
    uint64_t t0, m0, t1, m1;
    clk_pair(&t0, &m0);
    do {
        clk_pair(&t1, &m1);
    } while (m1 - m0 < 2000000);
    if (t1 <= t0) return;
    c->ns_per_tick = (double)(m1 - m0) / (double)(t1 - t0);
    c->tsc0 = t1;
    c->mono0 = m1;
    c->kind = SEG_CLOCK_TSC;
}

const clk_calib *clk_setup(void)
{
    pthread_once(&g_once, setup_once);
    return &g_calib;
}
