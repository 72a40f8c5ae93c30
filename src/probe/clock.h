/* The probe's time base: CLOCK_MONOTONIC, or the invariant TSC calibrated
 * against it where reading the TSC is measurably cheaper (see clock.c). */
#ifndef TPF_PROBE_CLOCK_H
#define TPF_PROBE_CLOCK_H

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#define CLK_HAVE_TSC 1
#else
#define CLK_HAVE_TSC 0
#endif

static inline uint64_t clk_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clk_tsc(void)
{
#if CLK_HAVE_TSC
    return __rdtsc();
#else
    return 0;
#endif
}

/* The choice made for this process; fixed once made. */
typedef struct clk_calib {
    uint32_t kind;      /* SEG_CLOCK_MONO or SEG_CLOCK_TSC */
    double ns_per_tick; /* TSC only */
    uint64_t tsc0, mono0;
    double mono_cost_ns, tsc_cost_ns; /* what the choice was based on */
} clk_calib;

/* Take CLOCK_MONOTONIC whatever the TSC costs: for a producer that writes
 * timestamps it did not read itself (GPU records, gpu/cupti_inject.c). Only
 * effective before the first clk_setup of this copy of the library. */
void clk_prefer_mono(void);

/* Decide and calibrate (slow: a few milliseconds the first time; later
 * calls return the cached result). TRAINPERF_CLOCK=mono|tsc|auto overrides
 * (tsc still requires an invariant TSC). Thread-safe. */
const clk_calib *clk_setup(void);

/* 1 when this CPU has an invariant TSC the kernel also trusts. */
int clk_tsc_invariant(void);

/* A (tsc, mono) pair read as close together as this machine allows. */
void clk_pair(uint64_t *tsc, uint64_t *mono);

#endif
