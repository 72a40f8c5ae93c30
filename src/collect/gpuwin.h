/* When CUPTI's kernel detail is on: the window schedule of `--gpu-trace
 * windows` (docs/gpu.md "Kernel detail in windows").
 *
 * CUPTI's activity kinds cost the GPU run time on every launch while they
 * are enabled (1.3-1.7x on an H200's launch-bound loop), so by default they
 * are on only in windows of a few steps: from CUDA's start until the loop is
 * warm (the first window), then one every few minutes, and one when the step
 * time or the GPU's share of it moved since the last window. Between windows
 * each step still gets its GPU time from CUDA events (gpu/cupti_inject.c).
 *
 * Pure code, no clock of its own: the injection library calls gw_step at
 * each step end with the time and the step's figures, and enables or
 * disables the kinds when it answers GW_OPEN or GW_CLOSE. */
#ifndef TPF_COLLECT_GPUWIN_H
#define TPF_COLLECT_GPUWIN_H

#include <stdint.h>

typedef struct gw_conf {
    uint32_t warm_steps;    /* the first window lasts until this many steps ended... */
    uint32_t window_steps;  /* ...plus this many; every later window this many steps */
    uint64_t period_ns;     /* a window at least this often */
    uint64_t change_gap_ns; /* a change opens one no sooner than this after the last */
    double change_rel;      /* step time moved by this share of the last window's */
    double change_share;    /* GPU share of the step moved by this much (absolute) */
} gw_conf;

/* Defaults: 10 + 5 steps, every 5 minutes, a change of 20% in step time or
 * of 0.15 in the GPU's share, at least 30 s after the last window. */
extern const gw_conf gw_default_conf;

enum { GW_NONE = 0, GW_OPEN = 1, GW_CLOSE = 2 };
/* why a window opened (gw.why) */
enum { GW_WHY_START = 1, GW_WHY_PERIOD, GW_WHY_STEP_TIME, GW_WHY_GPU_SHARE };

typedef struct gw {
    gw_conf c;
    int open;          /* the kinds are on now */
    int why;           /* the reason the current or last window opened */
    uint32_t left;     /* steps left in the open window */
    uint64_t steps;    /* step ends seen */
    uint64_t windows;  /* windows opened, the start's included */
    uint64_t closed_ns;           /* when the last window closed */
    double ew_step, ew_share;     /* moving averages of the steps since */
    double base_step, base_share; /* ... as they were window_steps steps after it */
    uint32_t base_in;             /* steps until the base is taken (0: taken) */
    int have_share;
} gw;

/* conf NULL: gw_default_conf. The first window is open from the start. */
void gw_init(gw *w, const gw_conf *conf);
/* A step ended at now_ns after step_ns; gpu_share is its GPU time over its
 * host time (negative: unknown). Returns GW_OPEN (enable the kinds: the next
 * step is in a window), GW_CLOSE (disable them), or GW_NONE. */
int gw_step(gw *w, uint64_t now_ns, uint64_t step_ns, double gpu_share);

#endif
