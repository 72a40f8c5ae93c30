/* Live per-rank figures: which rank the others wait for.
 *
 * Synchronous data-parallel training evens out step times: every rank waits
 * at each collective for the slowest, so the ranks' step times match and the
 * straggler hides. What differs is where the time goes: the others spend it
 * waiting in collectives (the comm phase), the straggler in its own step
 * (compute or its data loader). So the straggler is the rank with the least
 * comm wait, and the gap is how much the others wait for it. */
#include <math.h>

#include "collect/agg.h"
#include "collect/ranks.h"

void ranks_live(agg *a, coll_frame *f)
{
    double cw[AGG_MAX_GROUPS], dw[AGG_MAX_GROUPS], iv[AGG_MAX_GROUPS];
    int rk[AGG_MAX_GROUPS], n = 0;
    for (int i = 0; i < a->f.ngroups; i++) {
        agg_group *g = a->f.groups[i];
        if (g->rank >= 0 && g->live_count > 0) {
            double c = (double)g->live_count;
            cw[n] = (double)g->live_comm_ns / c / 1e6;
            dw[n] = (double)g->live_data_ns / c / 1e6;
            iv[n] = (double)g->live_interval_ns / c / 1e6;
            rk[n++] = g->rank;
        }
        g->live_count = g->live_interval_ns = g->live_data_ns = g->live_comm_ns = 0;
    }
    if (n < 2) return;
    int s = 0;
    for (int i = 1; i < n; i++)
        if (cw[i] < cw[s]) s = i;
    double others = 0, others_data = 0, others_own = 0, step = 0;
    for (int i = 0; i < n; i++) {
        step += iv[i] / n;
        if (i == s) continue;
        others += cw[i] / (n - 1);
        others_data += dw[i] / (n - 1);
        others_own += (iv[i] - cw[i]) / (n - 1);
    }
    double gap = others - cw[s];
    if (!(step > 0) || !(gap >= 0)) return;
    /* the others' wait must show up as the straggler's own time (compute or
     * data): noise in the collectives alone is no straggler */
    if (iv[s] - cw[s] - others_own < 0.5 * gap) gap = 0;
    /* and it stands alone: a second rank waiting about as little is not held
     * back by it (ranks sharing too few cores take turns) */
    double next = INFINITY;
    for (int i = 0; i < n; i++)
        if (i != s && cw[i] < next) next = cw[i];
    if (next - cw[s] < 0.5 * gap) gap = 0;
    fv_set(&f->straggler_pct, 100.0 * gap / step);
    fv_set(&f->straggler_wait_ms, gap);
    fv_set(&f->straggler_data_ms, dw[s] - others_data);
    f->straggler_rank = rk[s];
}
