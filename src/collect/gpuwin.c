/* The window schedule of CUPTI's kernel detail (see gpuwin.h). */
#include <math.h>
#include <string.h>

#include "collect/gpuwin.h"

const gw_conf gw_default_conf = {
    .warm_steps = 10,
    .window_steps = 5,
    .period_ns = 300000000000ull,
    .change_gap_ns = 30000000000ull,
    .change_rel = 0.2,
    .change_share = 0.15,
};

/* weight of the newest step in the moving averages: about the last 10 */
#define GW_EW 0.1

void gw_init(gw *w, const gw_conf *conf)
{
    memset(w, 0, sizeof(*w));
    w->c = conf ? *conf : gw_default_conf;
    if (w->c.window_steps == 0) w->c.window_steps = 1;
    w->open = 1;
    w->why = GW_WHY_START;
    w->left = w->c.warm_steps + w->c.window_steps;
    w->windows = 1;
}

static void track(gw *w, double step, double share)
{
    w->ew_step = w->ew_step > 0 ? w->ew_step + GW_EW * (step - w->ew_step) : step;
    if (share < 0) return;
    w->ew_share = w->have_share ? w->ew_share + GW_EW * (share - w->ew_share) : share;
    w->have_share = 1;
}

/* What should open a window now, if anything (0: nothing). */
static int reason(const gw *w, uint64_t now)
{
    uint64_t since = now > w->closed_ns ? now - w->closed_ns : 0;
    if (since >= w->c.period_ns) return GW_WHY_PERIOD;
    if (since < w->c.change_gap_ns) return 0;
    if (w->base_step > 0 && fabs(w->ew_step / w->base_step - 1) > w->c.change_rel)
        return GW_WHY_STEP_TIME;
    if (!w->base_in && w->have_share && w->base_share >= 0 && fabs(w->ew_share - w->base_share) > w->c.change_share)
        return GW_WHY_GPU_SHARE;
    return 0;
}

int gw_step(gw *w, uint64_t now_ns, uint64_t step_ns, double gpu_share)
{
    w->steps++;
    track(w, (double)step_ns, gpu_share);
    if (w->open) {
        if (w->left > 1) {
            w->left--;
            return GW_NONE;
        }
        /* closed. The window's own steps are slower (CUPTI's cost): the
         * base a change is measured from is the steps after it */
        w->open = 0;
        w->left = 0;
        w->closed_ns = now_ns;
        w->ew_step = 0;
        w->have_share = 0;
        w->base_step = 0;
        w->base_in = w->c.window_steps;
        return GW_CLOSE;
    }
    if (w->base_in && --w->base_in == 0) {
        w->base_step = w->ew_step;
        w->base_share = w->have_share ? w->ew_share : -1;
    }
    int why = reason(w, now_ns);
    if (!why) return GW_NONE;
    w->open = 1;
    w->why = why;
    w->left = w->c.window_steps;
    w->windows++;
    return GW_OPEN;
}
