/* The window schedule of CUPTI's kernel detail (collect/gpuwin.c). */
#include <stdint.h>

#include "collect/gpuwin.h"
#include "tt.h"

#define MS 1000000ull
#define SEC 1000000000ull

/* n steps of step_ns from *t on; returns how many of them ended with the
 * kinds on, and counts the opens and closes */
static int run(gw *w, uint64_t *t, int n, uint64_t step_ns, double share, int *opens, int *closes)
{
    int in = 0;
    for (int i = 0; i < n; i++) {
        in += w->open;
        *t += step_ns;
        int a = gw_step(w, *t, step_ns, share);
        *opens += a == GW_OPEN;
        *closes += a == GW_CLOSE;
    }
    return in;
}

TT_TEST(first_window_from_the_start_until_warm)
{
    gw w;
    gw_init(&w, NULL);
    TT_ASSERT(w.open);
    TT_EQ_INT(w.why, GW_WHY_START);
    uint64_t t = 0;
    int o = 0, c = 0;
    /* 600 steps of 20 ms (12 s): only the start's window, 15 steps */
    int in = run(&w, &t, 600, 20 * MS, 0.9, &o, &c);
    TT_EQ_INT(in, 15);
    TT_EQ_INT(o, 0);
    TT_EQ_INT(c, 1);
    TT_ASSERT(!w.open);
}

TT_TEST(one_window_every_period)
{
    gw w;
    gw_init(&w, NULL);
    uint64_t t = 0;
    int o = 0, c = 0;
    /* 20 minutes of steady 100 ms steps: a window at least every 5 minutes */
    int in = run(&w, &t, 12000, 100 * MS, 0.5, &o, &c);
    TT_EQ_INT(o, 3); /* at 5, 10 and 15 minutes after the first closed */
    TT_EQ_INT(c, 4);
    TT_EQ_INT(in, 15 + 3 * 5);
    TT_EQ_INT(w.why, GW_WHY_PERIOD);
    TT_EQ_INT((int)w.windows, 4);
}

TT_TEST(step_time_change_opens_one_after_the_gap)
{
    gw w;
    gw_init(&w, NULL);
    uint64_t t = 0;
    int o = 0, c = 0;
    run(&w, &t, 100, 100 * MS, -1, &o, &c); /* 10 s */
    TT_EQ_INT(o, 0);
    /* twice as slow: nothing before 30 s after the last window */
    run(&w, &t, 50, 200 * MS, -1, &o, &c); /* to 20 s */
    TT_EQ_INT(o, 0);
    run(&w, &t, 100, 200 * MS, -1, &o, &c); /* to 40 s */
    TT_EQ_INT(o, 1);
    TT_EQ_INT(w.why, GW_WHY_STEP_TIME);
    /* steady at the new time: no other window until the period */
    int before = o;
    run(&w, &t, 1000, 200 * MS, -1, &o, &c); /* 200 s more */
    TT_EQ_INT(o, before);
}

TT_TEST(gpu_share_change_opens_one)
{
    gw w;
    gw_init(&w, NULL);
    uint64_t t = 0;
    int o = 0, c = 0;
    run(&w, &t, 400, 100 * MS, 0.95, &o, &c);
    TT_EQ_INT(o, 0);
    /* same step time, the GPU's share falls (the input became the limit) */
    run(&w, &t, 400, 100 * MS, 0.40, &o, &c);
    TT_EQ_INT(o, 1);
    TT_EQ_INT(w.why, GW_WHY_GPU_SHARE);
}

TT_TEST(slow_window_steps_do_not_trigger_a_change)
{
    /* steps in a window run slower (CUPTI's cost): the base a change is
     * measured from is taken after the window, so the speed-up after it is
     * not a change */
    gw_conf cf = gw_default_conf;
    cf.change_gap_ns = 1 * SEC;
    gw w;
    gw_init(&w, &cf);
    uint64_t t = 0;
    int o = 0, c = 0;
    run(&w, &t, 15, 300 * MS, 0.9, &o, &c); /* the start window: slow */
    TT_EQ_INT(c, 1);
    run(&w, &t, 2000, 100 * MS, 0.9, &o, &c); /* 200 s of fast steps */
    TT_EQ_INT(o, 0);
}

TT_TEST(config_zero_window_is_one_step)
{
    gw_conf cf = gw_default_conf;
    cf.warm_steps = 0;
    cf.window_steps = 0;
    gw w;
    gw_init(&w, &cf);
    TT_EQ_INT(gw_step(&w, 1, 1, -1), GW_CLOSE);
    TT_EQ_INT(gw_step(&w, 2, 1, -1), GW_NONE);
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
