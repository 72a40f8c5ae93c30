/* Per-rank and job-wide step figures in summary.json (the distributed view). */
#include <math.h>

#include "record/ranks_json.h"

static double per_step_ms(uint64_t ns, uint64_t n) { return n ? (double)ns / (double)n / 1e6 : NAN; }

void rec_rank_extra(jw *w, const agg_group *g)
{
    /* means over warm steps (each thread's first left out), as the quantiles
     * and the reports' rank tables */
    jw_knum(w, "data_wait_ms_mean", per_step_ms(g->warm_data_ns, g->warm_count));
    jw_knum(w, "comm_wait_ms_mean", per_step_ms(g->warm_comm_ns, g->warm_count));
    /* compute: the step less what it waited for (data, collectives) */
    uint64_t waits = g->warm_data_ns + g->warm_comm_ns;
    jw_knum(w, "compute_ms_mean",
            per_step_ms(g->warm_interval_ns > waits ? g->warm_interval_ns - waits : 0,
                        g->warm_count));
    double secs = (double)g->interval_ns / 1e9;
    jw_knum(w, "samples_per_s", g->samples && secs > 0 ? (double)g->samples / secs : NAN);
    jw_knum(w, "tokens_per_s", g->tokens && secs > 0 ? (double)g->tokens / secs : NAN);
}

void rec_global_steps(jw *w, const figs *a)
{
    jw_kuint(w, "global_steps", figs_global_steps(a));
}
