/* Step figures (core/figs.c): the one aggregation behind summary.json, the
 * report and job figures over ranks. */
#include <math.h>
#include <string.h>

#include "core/figs.h"
#include "tt.h"

static agg_step mk(int rank, pid_t pid, uint64_t step, uint64_t iv_ms, uint64_t data_ms)
{
    agg_step s;
    memset(&s, 0, sizeof(s));
    s.rank = rank;
    s.pid = pid;
    s.tid = pid;
    s.step = step;
    s.interval_ns = iv_ms * 1000000ull;
    s.duration_ns = s.interval_ns;
    s.phase_ns[0] = data_ms * 1000000ull;
    s.other_ns = s.interval_ns - s.phase_ns[0];
    s.end_ns = (step + 1) * s.interval_ns;
    s.samples = 8;
    return s;
}

/* Each thread's first step counts in totals, not in the distributions. */
TT_TEST(warm_up_step_left_out_of_distributions)
{
    static figs f;
    figs_init(&f);
    agg_step s = mk(-1, 7, 0, 500, 400); /* warm-up: slow */
    figs_add(&f, &s);
    for (uint64_t i = 1; i <= 9; i++) {
        s = mk(-1, 7, i, 10, 2);
        figs_add(&f, &s);
    }
    figs_view v;
    figs_headline(&f, &v);
    TT_EQ_INT(f.count, 10);
    TT_EQ_INT(f.step_ns.count, 9);
    TT_ASSERT(v.step_max_ms == 10.0);
    TT_ASSERT(fabs(v.step_p95_ms - 10.0) <= 0.1);
    TT_ASSERT(fabs(v.step_cv) < 1e-9);
    /* shares and rates: every step */
    TT_ASSERT(fabs(v.data_wait_share - (400.0 + 18.0) / (500.0 + 90.0)) < 1e-12);
    TT_ASSERT(fabs(v.steps_per_s - 10 / 0.59) < 1e-9);
    figs_free(&f);
}

/* Job figures: merging per-rank (or per-node) figures gives what one
 * aggregation over every step gives. */
TT_TEST(merge_equals_figures_of_all_steps)
{
    static figs all, a, b, job;
    figs_init(&all);
    figs_init(&a);
    figs_init(&b);
    figs_init(&job);
    for (uint64_t i = 0; i < 50; i++) {
        agg_step s0 = mk(0, 100, i, 10 + i % 7, 3), s1 = mk(1, 200, i, 12 + i % 5, 1);
        figs_add(&all, &s0);
        figs_add(&all, &s1);
        figs_add(&a, &s0);
        figs_add(&b, &s1);
    }
    figs_merge(&job, &a);
    figs_merge(&job, &b);
    figs_view vj, va;
    figs_headline(&job, &vj);
    figs_headline(&all, &va);
    TT_EQ_INT(job.count, all.count);
    TT_EQ_INT(job.ngroups, 2);
    TT_ASSERT(vj.step_p50_ms == va.step_p50_ms && vj.step_p95_ms == va.step_p95_ms);
    TT_ASSERT(vj.data_wait_p95_ms == va.data_wait_p95_ms);
    TT_ASSERT(vj.steps_per_s == va.steps_per_s && vj.samples_per_s == va.samples_per_s);
    TT_ASSERT(fabs(vj.step_cv - va.step_cv) < 1e-12);
    TT_EQ_INT(job.first_end_ns, all.first_end_ns);
    TT_EQ_INT(job.last_end_ns, all.last_end_ns);
    figs_free(&all);
    figs_free(&a);
    figs_free(&b);
    figs_free(&job);
}

/* A node's figures: two ranks' groups folded into one give the figures of
 * one group fed every step of both (the reports' NODES table). */
TT_TEST(group_merge_equals_one_group_of_all_steps)
{
    static figs one, two;
    figs_init(&one);
    figs_init(&two);
    for (uint64_t i = 0; i < 40; i++) {
        agg_step s0 = mk(0, 100, i, 10 + i % 7, 3), s1 = mk(1, 200, i, 30 + i % 3, 1);
        figs_add(&two, &s0);
        figs_add(&two, &s1);
        s1.rank = 0; /* the same steps as one rank's */
        s1.pid = s1.tid = 100;
        figs_add(&one, &s0);
        figs_add(&one, &s1);
    }
    TT_EQ_INT(two.ngroups, 2);
    TT_EQ_INT(one.ngroups, 1);
    static agg_group g;
    memset(&g, 0, sizeof(g));
    sketch_init(&g.step_ns);
    figs_group_merge(&g, two.groups[0]);
    figs_group_merge(&g, two.groups[1]);
    const agg_group *u = one.groups[0];
    TT_EQ_INT(g.count, u->count);
    TT_EQ_INT(g.interval_ns, u->interval_ns);
    TT_EQ_INT(g.warm_data_ns, u->warm_data_ns);
    TT_EQ_INT(g.warm_comm_ns, u->warm_comm_ns);
    TT_EQ_INT(g.samples, u->samples);
    /* the steps of rank 1 are slower: the merged p95 is theirs, not rank 0's */
    TT_ASSERT(sketch_quantile(&g.step_ns, 0.95) == sketch_quantile(&u->step_ns, 0.95));
    TT_ASSERT(sketch_quantile(&g.step_ns, 0.95) > sketch_quantile(&two.groups[0]->step_ns, 0.95));
    figs_free(&one);
    figs_free(&two);
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
