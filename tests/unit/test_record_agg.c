/* The step state machine: phases, nesting, data between steps, odd input. */
#include <string.h>

#include "collect/agg.h"
#include "trainperf.h"
#include "tt.h"

static agg_step got[16];
static int ngot;
static int nranges;

static void cap_step(void *ctx, const agg_step *s)
{
    (void)ctx;
    if (ngot < 16) got[ngot] = *s;
    ngot++;
}

static void cap_range(void *ctx, const agg_range *r)
{
    (void)ctx;
    (void)r;
    nranges++;
}

static agg *a;
static agg_proc *p;

static void setup(void)
{
    ngot = nranges = 0;
    agg_sink sink = {NULL, cap_step, cap_range, NULL, NULL, NULL, NULL};
    agg_create(&a, &sink);
    agg_proc_create(&p, 100, -1, -1);
}

static void teardown(void)
{
    agg_proc_free(p);
    agg_free(a);
}

static void feed(uint64_t ms, uint32_t kind, tpf_name name, pid_t tid)
{
    seg_event e;
    memset(&e, 0, sizeof(e));
    e.ts_ns = ms * 1000000ull;
    e.kind = kind;
    e.name = name;
    e.tid = tid;
    if (kind == SEG_EV_STEP_END) {
        e.samples = 4;
        e.tokens = 16;
    }
    agg_event(a, p, &e);
}

#define MS 1000000ull

TT_TEST(data_between_steps_goes_to_the_next_step)
{
    setup();
    feed(0, SEG_EV_STEP_BEGIN, 0, 1);
    feed(10, SEG_EV_STEP_END, 0, 1);
    feed(10, SEG_EV_PUSH, TPF_PHASE_DATA, 1); /* loading the next batch */
    feed(15, SEG_EV_POP, 0, 1);
    feed(15, SEG_EV_STEP_BEGIN, 0, 1);
    feed(22, SEG_EV_STEP_END, 0, 1);
    TT_EQ_INT(ngot, 2);
    TT_EQ_INT(got[0].phase_ns[0], 0);
    TT_EQ_INT(got[0].interval_ns, 10 * MS);
    TT_EQ_INT(got[1].phase_ns[0], 5 * MS);
    TT_EQ_INT(got[1].duration_ns, 7 * MS);
    TT_EQ_INT(got[1].interval_ns, 12 * MS);
    TT_EQ_INT(got[1].other_ns, 7 * MS);
    TT_EQ_INT(got[1].step, 1);
    TT_EQ_INT(got[1].samples, 4);
    TT_EQ_INT(a->f.count, 2);
    TT_EQ_INT(a->f.phase_ns[0], 5 * MS);
    teardown();
}

TT_TEST(first_step_interval_includes_data_before_it)
{
    setup();
    feed(100, SEG_EV_PUSH, TPF_PHASE_DATA, 1);
    feed(103, SEG_EV_POP, 0, 1);
    feed(104, SEG_EV_STEP_BEGIN, 0, 1);
    feed(110, SEG_EV_STEP_END, 0, 1);
    TT_EQ_INT(ngot, 1);
    TT_EQ_INT(got[0].duration_ns, 6 * MS);
    TT_EQ_INT(got[0].interval_ns, 9 * MS);
    TT_EQ_INT(got[0].phase_ns[0], 3 * MS);
    teardown();
}

TT_TEST(nested_same_phase_counts_once_and_open_ranges_split)
{
    setup();
    feed(0, SEG_EV_STEP_BEGIN, 0, 1);
    feed(0, SEG_EV_PUSH, TPF_PHASE_FORWARD, 1);
    feed(1, SEG_EV_PUSH, TPF_PHASE_FORWARD, 1); /* nested: not twice */
    feed(3, SEG_EV_POP, 0, 1);
    feed(4, SEG_EV_POP, 0, 1);
    feed(4, SEG_EV_PUSH, TPF_PHASE_BACKWARD, 1);
    feed(6, SEG_EV_STEP_END, 0, 1); /* backward still open: 2 ms to step 0 */
    feed(6, SEG_EV_STEP_BEGIN, 0, 1);
    feed(9, SEG_EV_POP, 0, 1);      /* 3 ms more to step 1 */
    feed(10, SEG_EV_STEP_END, 0, 1);
    TT_EQ_INT(ngot, 2);
    TT_EQ_INT(got[0].phase_ns[1], 4 * MS);
    TT_EQ_INT(got[0].phase_ns[2], 2 * MS);
    TT_EQ_INT(got[0].other_ns, 0);
    TT_EQ_INT(got[1].phase_ns[2], 3 * MS);
    TT_EQ_INT(got[1].other_ns, 1 * MS);
    TT_EQ_INT(nranges, 3);
    teardown();
}

TT_TEST(threads_are_separate_and_odd_input_is_survived)
{
    setup();
    feed(0, SEG_EV_POP, 0, 1);           /* pop without push: ignored */
    feed(0, SEG_EV_STEP_BEGIN, 0, 1);
    feed(1, SEG_EV_STEP_BEGIN, 0, 2);
    feed(5, SEG_EV_STEP_END, 0, 2);
    feed(8, SEG_EV_STEP_END, 0, 1);
    feed(12, SEG_EV_STEP_END, 0, 1);     /* end without begin: since the last end */
    for (int i = 0; i < AGG_MAX_DEPTH + 10; i++) feed(13, SEG_EV_PUSH, 50, 3);
    for (int i = 0; i < AGG_MAX_DEPTH + 11; i++) feed(14, SEG_EV_POP, 0, 3);
    TT_EQ_INT(a->f.unmatched_pops, 2);
    TT_EQ_INT(ngot, 3);
    TT_EQ_INT(got[0].tid, 2);
    TT_EQ_INT(got[0].step, 0);
    TT_EQ_INT(got[1].tid, 1);
    TT_EQ_INT(got[1].duration_ns, 8 * MS);
    TT_EQ_INT(got[2].step, 1);
    TT_EQ_INT(got[2].duration_ns, 4 * MS);
    TT_EQ_INT(got[2].interval_ns, 4 * MS);
    TT_EQ_INT(nranges, AGG_MAX_DEPTH);
    teardown();
}

TT_TEST(live_figures_per_interval)
{
    setup();
    static coll_frame f;
    memset(&f, 0, sizeof(f));
    agg_live(a, &f, 0, 0);
    TT_ASSERT(f.steps.ok && f.steps.v == 0);
    TT_ASSERT(!f.step_rate.ok);       /* no interval yet: unknown */
    TT_ASSERT(!f.step_time_ms.ok);
    for (int i = 0; i < 4; i++) {
        feed(10 * i, SEG_EV_PUSH, TPF_PHASE_DATA, 1);
        feed(10 * i + 5, SEG_EV_POP, 0, 1);
        feed(10 * i + 5, SEG_EV_STEP_BEGIN, 0, 1);
        feed(10 * i + 10, SEG_EV_STEP_END, 0, 1);
    }
    memset(&f, 0, sizeof(f));
    agg_live(a, &f, 2.0, 45 * MS);
    TT_EQ_INT(f.steps.v, 4);
    TT_NEAR(f.step_rate.v, 2.0, 1e-9);
    TT_NEAR(f.sample_rate.v, 8.0, 1e-9);
    TT_NEAR(f.token_rate.v, 32.0, 1e-9);
    TT_NEAR(f.data_wait_share.v, 0.5, 1e-9);
    TT_NEAR(f.step_time_ms.v, 10.0, 1e-9);
    TT_NEAR(f.since_last_step_s.v, 0.005, 1e-9);
    memset(&f, 0, sizeof(f));
    agg_live(a, &f, 1.0, 50 * MS);   /* an interval without steps */
    TT_NEAR(f.step_rate.v, 0.0, 0);
    TT_ASSERT(!f.data_wait_share.ok && !f.step_time_ms.ok);
    teardown();
}

TT_TEST(comm_inside_backward_is_comm_not_backward)
{
    setup();
    feed(0, SEG_EV_STEP_BEGIN, 0, 1);
    feed(0, SEG_EV_PUSH, TPF_PHASE_BACKWARD, 1);
    feed(4, SEG_EV_PUSH, TPF_PHASE_COMM, 1);    /* an all-reduce waited on in backward */
    feed(5, SEG_EV_PUSH, TPF_PHASE_COMM, 1);    /* nested comm: once */
    feed(6, SEG_EV_POP, 0, 1);
    feed(7, SEG_EV_STEP_END, 0, 1);             /* comm still open: split at the step end */
    feed(7, SEG_EV_STEP_BEGIN, 0, 1);
    feed(9, SEG_EV_POP, 0, 1);                  /* comm ends: backward counts again */
    feed(10, SEG_EV_POP, 0, 1);
    feed(12, SEG_EV_STEP_END, 0, 1);
    TT_EQ_INT(ngot, 2);
    TT_EQ_INT(got[0].phase_ns[TPF_PHASE_BACKWARD - 1], 4 * MS);
    TT_EQ_INT(got[0].phase_ns[TPF_PHASE_COMM - 1], 3 * MS);
    TT_EQ_INT(got[0].other_ns, 0);
    TT_EQ_INT(got[1].phase_ns[TPF_PHASE_COMM - 1], 2 * MS);
    TT_EQ_INT(got[1].phase_ns[TPF_PHASE_BACKWARD - 1], 1 * MS);
    TT_EQ_INT(got[1].other_ns, 2 * MS);
    teardown();
}

/* Issue 12: phases nested across names (optimizer.step(closure) runs forward
 * and backward inside the optimizer range; two recorders pushing on one
 * thread) summed to more than the step. Phases are exclusive: the innermost
 * counts, except eval/checkpoint which take what runs inside them. */
TT_TEST(phases_nested_across_names_never_exceed_the_interval)
{
    setup();
    feed(0, SEG_EV_PUSH, TPF_PHASE_EVAL, 1);      /* a sanity evaluation before step 0 */
    feed(1, SEG_EV_PUSH, TPF_PHASE_DATA, 1);      /* its loader: eval time */
    feed(2, SEG_EV_POP, 0, 1);
    feed(3, SEG_EV_POP, 0, 1);
    feed(3, SEG_EV_PUSH, TPF_PHASE_DATA, 1);
    feed(4, SEG_EV_POP, 0, 1);
    feed(4, SEG_EV_STEP_BEGIN, 0, 1);
    feed(4, SEG_EV_PUSH, TPF_PHASE_FORWARD, 1);   /* a callback's forward */
    feed(5, SEG_EV_PUSH, TPF_PHASE_OPTIMIZER, 1); /* optimizer.step(closure) */
    feed(6, SEG_EV_PUSH, TPF_PHASE_FORWARD, 1);   /* the model, inside the closure */
    feed(8, SEG_EV_POP, 0, 1);
    feed(9, SEG_EV_PUSH, TPF_PHASE_BACKWARD, 1);
    feed(12, SEG_EV_POP, 0, 1);
    feed(14, SEG_EV_POP, 0, 1);                   /* optimizer.step ends */
    feed(15, SEG_EV_POP, 0, 1);
    feed(15, SEG_EV_STEP_END, 0, 1);
    /* step 1: pops out of order (two recorders), eval inside a step */
    feed(15, SEG_EV_STEP_BEGIN, 0, 1);
    feed(15, SEG_EV_PUSH, TPF_PHASE_FORWARD, 1);
    feed(16, SEG_EV_PUSH, TPF_PHASE_OPTIMIZER, 1);
    feed(17, SEG_EV_POP, 0, 1);                   /* pops the optimizer: forward again */
    feed(18, SEG_EV_PUSH, TPF_PHASE_CHECKPOINT, 1);
    feed(19, SEG_EV_PUSH, TPF_PHASE_COMM, 1);     /* a save's collective: checkpoint */
    feed(20, SEG_EV_POP, 0, 1);
    feed(21, SEG_EV_POP, 0, 1);
    feed(22, SEG_EV_POP, 0, 1);
    feed(23, SEG_EV_STEP_END, 0, 1);
    TT_EQ_INT(ngot, 2);
    /* step 0: interval = duration 11 + 4 ms of phases before it */
    TT_EQ_INT(got[0].duration_ns, 11 * MS);
    TT_EQ_INT(got[0].interval_ns, 15 * MS);
    TT_EQ_INT(got[0].phase_ns[TPF_PHASE_EVAL - 1], 3 * MS);
    TT_EQ_INT(got[0].phase_ns[TPF_PHASE_DATA - 1], 1 * MS);
    TT_EQ_INT(got[0].phase_ns[TPF_PHASE_FORWARD - 1], 1 * MS + 2 * MS + 1 * MS); /* 4-5, 6-8, 14-15 */
    TT_EQ_INT(got[0].phase_ns[TPF_PHASE_BACKWARD - 1], 3 * MS);
    TT_EQ_INT(got[0].phase_ns[TPF_PHASE_OPTIMIZER - 1], 1 * MS + 1 * MS + 2 * MS); /* 5-6, 8-9, 12-14 */
    TT_EQ_INT(got[0].other_ns, 0);
    TT_EQ_INT(got[1].phase_ns[TPF_PHASE_OPTIMIZER - 1], 1 * MS);
    TT_EQ_INT(got[1].phase_ns[TPF_PHASE_FORWARD - 1], 1 * MS + 1 * MS + 1 * MS); /* 15-16, 17-18, 21-22 */
    TT_EQ_INT(got[1].phase_ns[TPF_PHASE_CHECKPOINT - 1], 3 * MS);
    TT_EQ_INT(got[1].phase_ns[TPF_PHASE_COMM - 1], 0);
    TT_EQ_INT(got[1].other_ns, 1 * MS);
    for (int i = 0; i < 2; i++) {
        uint64_t sum = got[i].other_ns;
        for (int k = 0; k < AGG_NPHASES; k++) sum += got[i].phase_ns[k];
        TT_EQ_INT(sum, got[i].interval_ns);
    }
    teardown();
}

TT_TEST(the_rank_the_others_wait_for_is_named_live)
{
    setup();
    agg_proc *q[3];
    for (int r = 0; r < 3; r++) agg_proc_create(&q[r], 200 + r, r, r);
    /* ranks 0 and 2 wait 30 ms a step in comm for rank 1, which computes */
    for (int i = 0; i < 4; i++) {
        for (int r = 0; r < 3; r++) {
            seg_event e;
            memset(&e, 0, sizeof(e));
            e.tid = 1;
            uint64_t t0 = (uint64_t)i * 50 * MS;
            e.kind = SEG_EV_STEP_BEGIN;
            e.ts_ns = t0;
            agg_event(a, q[r], &e);
            if (r != 1) {
                e.kind = SEG_EV_PUSH;
                e.name = TPF_PHASE_COMM;
                e.ts_ns = t0 + 15 * MS;
                agg_event(a, q[r], &e);
                e.kind = SEG_EV_POP;
                e.ts_ns = t0 + 45 * MS;
                agg_event(a, q[r], &e);
            }
            e.kind = SEG_EV_STEP_END;
            e.ts_ns = t0 + 50 * MS;
            agg_event(a, q[r], &e);
        }
    }
    static coll_frame f;
    memset(&f, 0, sizeof(f));
    agg_live(a, &f, 1.0, 200 * MS);
    TT_EQ_INT(f.steps.v, 4); /* the job's steps: 4, not 3 ranks x 4 */
    TT_EQ_INT(f.straggler_rank, 1);
    TT_NEAR(f.straggler_wait_ms.v, 30.0, 1e-6);
    TT_NEAR(f.straggler_pct.v, 60.0, 1e-6);
    memset(&f, 0, sizeof(f));
    agg_live(a, &f, 1.0, 300 * MS); /* no steps since: unknown, no straggler */
    TT_EQ_INT(f.straggler_rank, -1);
    TT_ASSERT(!f.straggler_pct.ok);
    for (int r = 0; r < 3; r++) agg_proc_free(q[r]);
    teardown();
}

TT_TEST(two_ranks_that_wait_as_little_are_no_straggler)
{
    setup();
    agg_proc *q[4];
    for (int r = 0; r < 4; r++) agg_proc_create(&q[r], 300 + r, r, r);
    /* ranks 2 and 3 wait 30 ms a step for ranks 0 and 1 (two ranks taking
     * turns on too few cores): no one rank holds the others back */
    for (int i = 0; i < 4; i++) {
        for (int r = 0; r < 4; r++) {
            seg_event e;
            memset(&e, 0, sizeof(e));
            e.tid = 1;
            uint64_t t0 = (uint64_t)i * 50 * MS;
            e.kind = SEG_EV_STEP_BEGIN;
            e.ts_ns = t0;
            agg_event(a, q[r], &e);
            if (r >= 2) {
                e.kind = SEG_EV_PUSH;
                e.name = TPF_PHASE_COMM;
                e.ts_ns = t0 + 15 * MS;
                agg_event(a, q[r], &e);
                e.kind = SEG_EV_POP;
                e.ts_ns = t0 + 45 * MS;
                agg_event(a, q[r], &e);
            }
            e.kind = SEG_EV_STEP_END;
            e.ts_ns = t0 + 50 * MS;
            agg_event(a, q[r], &e);
        }
    }
    static coll_frame f;
    memset(&f, 0, sizeof(f));
    agg_live(a, &f, 1.0, 200 * MS);
    TT_ASSERT(f.straggler_pct.ok);
    TT_NEAR(f.straggler_pct.v, 0.0, 1e-9);
    for (int r = 0; r < 4; r++) agg_proc_free(q[r]);
    teardown();
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
