/* Alert rules driven with synthetic collector frames over time. */
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <stdlib.h>
#include <stdio.h>

#include "trainperf.h"
#include "tt.h"
#include "watch/alerts.h"

static coll_frame frame;

/* A frame at time t with nothing known. */
static coll_frame *at(double t)
{
    memset(&frame, 0, sizeof(frame));
    frame.t = t;
    frame.dt = 1;
    return &frame;
}

/* Feed `value` into one host field from t0 to t1 (1 s apart); return the
 * number of events, recording the time of the first fired/cleared. */
typedef struct seen {
    int fired, cleared;
    double fired_t, cleared_t;
    char msg[256];
    double value;
} seen;

static void note(seen *sn, const alert_event *ev, int n)
{
    for (int i = 0; i < n; i++) {
        if (ev[i].fired) {
            if (!sn->fired++) sn->fired_t = ev[i].t;
            memcpy(sn->msg, ev[i].message, sizeof(sn->msg));
            sn->value = ev[i].value;
        } else if (!sn->cleared++) {
            sn->cleared_t = ev[i].t;
        }
    }
}

static alert_set *one_rule(const char *rule)
{
    alert_set *s = NULL;
    char err[200];
    if (alerts_create(&s, 0) != 0) return NULL;
    if (alerts_add(s, rule, err, sizeof(err)) != 0) {
        fprintf(stderr, "rule '%s': %s\n", rule, err);
        alerts_free(s);
        return NULL;
    }
    return s;
}

TT_TEST(fires_once_after_duration_not_before)
{
    alert_set *s = one_rule("cpu.util > 90 for 10s");
    TT_ASSERT(s);
    seen sn = {0};
    alert_event ev[8];
    for (int t = 0; t <= 60; t++) {
        coll_frame *f = at(t);
        fv_set(&f->cpu_pct, t >= 20 ? 95 : 10);
        note(&sn, ev, alerts_eval(s, f, ev, 8));
    }
    TT_EQ_INT(sn.fired, 1);
    TT_NEAR(sn.fired_t, 30, 1e-9); /* held from t=20, 10 s later */
    TT_NEAR(sn.value, 95, 1e-9);
    TT_EQ_INT(sn.cleared, 0);
    TT_ASSERT(strstr(sn.msg, "95%") != NULL);
    alerts_free(s);
}

TT_TEST(interrupted_condition_restarts_the_clock)
{
    alert_set *s = one_rule("cpu.util > 90 for 10s");
    TT_ASSERT(s);
    seen sn = {0};
    alert_event ev[8];
    for (int t = 0; t <= 40; t++) {
        coll_frame *f = at(t);
        /* true for 9 s, one false sample, true again from 10 */
        fv_set(&f->cpu_pct, t == 9 ? 50 : 95);
        note(&sn, ev, alerts_eval(s, f, ev, 8));
    }
    TT_EQ_INT(sn.fired, 1);
    TT_NEAR(sn.fired_t, 20, 1e-9);
    alerts_free(s);
}

TT_TEST(clears_with_hysteresis)
{
    alert_set *s = one_rule("cpu.util > 90 for 5s");
    TT_ASSERT(s);
    seen sn = {0};
    alert_event ev[8];
    for (int t = 0; t <= 100; t++) {
        coll_frame *f = at(t);
        double v = 95;
        if (t >= 20 && t < 50) v = 88; /* below 90 but within the 5% margin (85.5) */
        if (t >= 50) v = 80;           /* past the margin */
        fv_set(&f->cpu_pct, v);
        note(&sn, ev, alerts_eval(s, f, ev, 8));
    }
    TT_EQ_INT(sn.fired, 1);
    TT_NEAR(sn.fired_t, 5, 1e-9);
    TT_EQ_INT(sn.cleared, 1);
    TT_NEAR(sn.cleared_t, 55, 1e-9); /* past the margin from 50, held 5 s */
    alerts_free(s);
}

TT_TEST(fires_again_after_clearing)
{
    alert_set *s = one_rule("cpu.util > 90");
    TT_ASSERT(s);
    seen sn = {0};
    alert_event ev[8];
    double vals[] = {95, 95, 10, 10, 95, 95};
    for (int t = 0; t < 6; t++) {
        coll_frame *f = at(t);
        fv_set(&f->cpu_pct, vals[t]);
        note(&sn, ev, alerts_eval(s, f, ev, 8));
    }
    TT_EQ_INT(sn.fired, 2);
    TT_EQ_INT(sn.cleared, 1);
    TT_NEAR(sn.cleared_t, 2, 1e-9);
    alerts_free(s);
}

TT_TEST(unknown_never_fires)
{
    /* "< 50" on a value that is never known: a zero-filled but invalid
     * field would read 0 < 50 if unknown were taken for zero */
    alert_set *s = one_rule("gpu.util < 50 for 2s");
    TT_ASSERT(s);
    alert_set *h = one_rule("cpu.iowait < 1");
    TT_ASSERT(h);
    alert_event ev[8];
    int n = 0;
    for (int t = 0; t < 30; t++) {
        coll_frame *f = at(t);
        f->ngpu = 1;
        f->gpu[0].index = 0;
        n += alerts_eval(s, f, ev, 8);
        n += alerts_eval(h, f, ev, 8);
    }
    TT_EQ_INT(n, 0);
    alerts_free(s);
    alerts_free(h);
}

TT_TEST(unknown_interrupts_hold)
{
    alert_set *s = one_rule("cpu.util > 90 for 5s");
    TT_ASSERT(s);
    seen sn = {0};
    alert_event ev[8];
    for (int t = 0; t <= 20; t++) {
        coll_frame *f = at(t);
        if (t % 4 != 3) fv_set(&f->cpu_pct, 99); /* unknown every 4th sample */
        note(&sn, ev, alerts_eval(s, f, ev, 8));
    }
    TT_EQ_INT(sn.fired, 0);
    alerts_free(s);
}

TT_TEST(gpu_rule_holds_for_worst_gpu)
{
    alert_set *s = one_rule("gpu.util < 50 for 3s");
    TT_ASSERT(s);
    seen sn = {0};
    alert_event ev[8];
    for (int t = 0; t <= 10; t++) {
        coll_frame *f = at(t);
        f->ngpu = 3;
        for (int g = 0; g < 3; g++)
            f->gpu[g].index = g;
        fv_set(&f->gpu[0].util_pct, 95);
        fv_set(&f->gpu[1].util_pct, 12); /* the worst */
        /* GPU 2 unknown */
        note(&sn, ev, alerts_eval(s, f, ev, 8));
    }
    TT_EQ_INT(sn.fired, 1);
    TT_NEAR(sn.fired_t, 3, 1e-9);
    TT_NEAR(sn.value, 12, 1e-9);
    TT_ASSERT(strstr(sn.msg, "GPU 1") != NULL);
    alerts_free(s);
}

TT_TEST(gpu_rule_ignores_gpus_the_run_does_not_use)
{
    alert_set *s = one_rule("gpu.util < 50");
    TT_ASSERT(s);
    alert_event ev[8];
    coll_frame *f = at(0);
    f->ngpu = 2;
    f->gpu[0].index = 0;
    f->gpu[0].in_use = 1;
    fv_set(&f->gpu[0].util_pct, 99);
    f->gpu[1].index = 1; /* idle, but nobody of the tree runs there */
    fv_set(&f->gpu[1].util_pct, 0);
    TT_EQ_INT(alerts_eval(s, f, ev, 8), 0);
    f->gpu[1].in_use = 1;
    f->t = 1;
    TT_EQ_INT(alerts_eval(s, f, ev, 8), 1);
    TT_ASSERT(strstr(ev[0].message, "GPU 1") != NULL);
    alerts_free(s);
}

TT_TEST(gpu_lost_fires_immediately)
{
    alert_set *s = NULL;
    TT_EQ_INT(alerts_create(&s, 1), 0);
    seen sn = {0};
    alert_event ev[16];
    for (int t = 0; t < 5; t++) {
        coll_frame *f = at(t);
        f->ngpu = 1;
        f->gpu[0].index = 0;
        f->gpu[0].lost = t >= 2;
        int n = alerts_eval(s, f, ev, 16);
        for (int i = 0; i < n; i++) {
            TT_EQ_STR(ev[i].rule, "gpu_lost");
            TT_EQ_INT(ev[i].severity, ALERT_CRITICAL);
        }
        note(&sn, ev, n);
    }
    TT_EQ_INT(sn.fired, 1);
    TT_NEAR(sn.fired_t, 2, 1e-9);
    alerts_free(s);
}

/* Host memory: 8 GiB available, the tree grows 64 MiB/s: 128 s to OOM. */
TT_TEST(trend_projects_oom)
{
    alert_set *s = NULL;
    TT_EQ_INT(alerts_create(&s, 1), 0);
    seen sn = {0};
    alert_event ev[16];
    const double gib = 1073741824.0, rate = 64.0 * 1048576.0;
    double total = 32 * gib, avail0 = 8 * gib;
    for (int t = 0; t <= 60; t++) {
        coll_frame *f = at(t);
        double grown = rate * t;
        fv_set(&f->mem_total_bytes, total);
        fv_set(&f->mem_available_bytes, avail0 - grown);
        fv_set(&f->mem_used_bytes, total - (avail0 - grown));
        fv_set(&f->tree_rss_bytes, 1 * gib + grown);
        fv_set(&f->steps, 1 + t); /* training: the trends have started */
        int n = alerts_eval(s, f, ev, 16);
        for (int i = 0; i < n; i++)
            if (strcmp(ev[i].rule, "host_mem_growth") == 0) note(&sn, &ev[i], 1);
    }
    TT_EQ_INT(sn.fired, 1);
    /* not before the minimum 20 s of history */
    TT_ASSERT(sn.fired_t >= 20);
    /* the projection: remaining / rate, derived from the synthetic data */
    double expect = (avail0 - rate * sn.fired_t) / rate;
    TT_NEAR(sn.value, expect, expect * 0.01);
    TT_ASSERT(strstr(sn.msg, "projected") != NULL);
    TT_ASSERT(strstr(sn.msg, "64.0 MiB/s") != NULL);
    alerts_free(s);
}

TT_TEST(steady_memory_no_trend_alert)
{
    alert_set *s = NULL;
    TT_EQ_INT(alerts_create(&s, 1), 0);
    alert_event ev[16];
    int n = 0;
    const double gib = 1073741824.0;
    for (int t = 0; t <= 300; t++) {
        coll_frame *f = at(t);
        /* noisy but flat: +-50 MiB around 4 GiB used of 16 */
        double noise = ((t * 7919) % 101 - 50) * 1048576.0;
        fv_set(&f->mem_total_bytes, 16 * gib);
        fv_set(&f->mem_used_bytes, 4 * gib + noise);
        fv_set(&f->mem_available_bytes, 12 * gib - noise);
        fv_set(&f->tree_rss_bytes, 2 * gib + noise);
        n += alerts_eval(s, f, ev, 16);
    }
    TT_EQ_INT(n, 0);
    alerts_free(s);
}

TT_TEST(gpu_memory_trend)
{
    alert_set *s = one_rule("gpu.oom_eta_s < 5min");
    TT_ASSERT(s);
    seen sn = {0};
    alert_event ev[8];
    const double gib = 1073741824.0;
    for (int t = 0; t <= 120; t++) {
        coll_frame *f = at(t);
        f->ngpu = 1;
        f->gpu[0].index = 0;
        fv_set(&f->gpu[0].mem_total_bytes, 80 * gib);
        /* 40 GiB + 100 MiB/s: 410 s left at t=0, below 300 s from t=110 */
        fv_set(&f->gpu[0].mem_used_bytes, 40 * gib + 100.0 * 1048576.0 * t);
        fv_set(&f->steps, 1 + t);
        note(&sn, ev, alerts_eval(s, f, ev, 8));
    }
    TT_EQ_INT(sn.fired, 1);
    double left_at = (40 * gib - 100.0 * 1048576.0 * sn.fired_t) / (100.0 * 1048576.0);
    TT_NEAR(sn.value, left_at, 1.0);
    TT_ASSERT(sn.value < 300 && sn.fired_t >= 20);
    alerts_free(s);
}

/* Start-up (importing torch, building the model) grows memory 100 MiB/s
 * for 40 s, then training runs flat: no growth alert (issue 32 item 3).
 * Growth that goes on once training runs still fires. */
TT_TEST(memory_trend_starts_with_training)
{
    const double gib = 1073741824.0, rate = 100.0 * 1048576.0;
    for (int leak = 0; leak < 2; leak++) {
        alert_set *s = NULL;
        TT_EQ_INT(alerts_create(&s, 1), 0);
        seen sn = {0};
        alert_event ev[16];
        for (int t = 0; t <= 200; t++) {
            coll_frame *f = at(t);
            double grown = rate * (t < 40 ? t : 40) + (leak && t >= 40 ? rate * (t - 40) : 0);
            fv_set(&f->mem_total_bytes, 16 * gib);
            fv_set(&f->mem_used_bytes, 2 * gib + grown);
            fv_set(&f->mem_available_bytes, 14 * gib - grown);
            fv_set(&f->tree_rss_bytes, 0.5 * gib + grown);
            fv_set(&f->steps, t < 40 ? 0 : t - 39);
            int n = alerts_eval(s, f, ev, 16);
            for (int i = 0; i < n; i++)
                if (strcmp(ev[i].rule, "host_mem_growth") == 0) note(&sn, &ev[i], 1);
        }
        TT_EQ_INT(sn.fired, leak);
        /* a leak is seen from the trend after the first step */
        if (leak) TT_ASSERT(sn.fired_t >= 60);
        alerts_free(s);
    }
}

/* A run that never makes a step: the trends start after the start-up
 * window, and a leak then is still seen. */
TT_TEST(memory_trend_without_steps_after_startup)
{
    const double gib = 1073741824.0, rate = 50.0 * 1048576.0;
    alert_set *s = NULL;
    TT_EQ_INT(alerts_create(&s, 1), 0);
    seen sn = {0};
    alert_event ev[16];
    for (int t = 0; t <= 300; t++) {
        coll_frame *f = at(t);
        fv_set(&f->mem_total_bytes, 16 * gib);
        fv_set(&f->mem_used_bytes, 2 * gib + rate * t);
        fv_set(&f->mem_available_bytes, 14 * gib - rate * t);
        int n = alerts_eval(s, f, ev, 16);
        for (int i = 0; i < n; i++)
            if (strcmp(ev[i].rule, "host_mem_growth") == 0) note(&sn, &ev[i], 1);
    }
    TT_EQ_INT(sn.fired, 1);
    TT_ASSERT(sn.fired_t >= 140);
    alerts_free(s);
}

/* The training loop ended (collect/agg.c: every loop said so or its process
 * went): the time after it is no stall, and no `hang` fires (issue 29 item
 * 1); a shutdown that lasts is its own alert. */
TT_TEST(no_hang_after_the_loop_ended)
{
    alert_set *s = NULL;
    TT_EQ_INT(alerts_create(&s, 1), 0);
    seen hang = {0}, shut = {0};
    alert_event ev[16];
    /* steps of 100 ms until t=20; the loop ends; from t=60 the interpreter
     * shuts down and does not end */
    for (int t = 0; t <= 300; t++) {
        coll_frame *f = at(t);
        double last = t < 20 ? t : 20;
        fv_set(&f->steps, 1 + last * 10);
        fv_set(&f->step_time_median_ms, 100);
        fv_set(&f->since_last_step_s, t - last);
        if (t >= 20) fv_set(&f->loop_ended_s, t - 20);
        if (t >= 60) fv_set(&f->shutdown_s, t - 60);
        int n = alerts_eval(s, f, ev, 16);
        for (int i = 0; i < n; i++) {
            if (strcmp(ev[i].rule, "hang") == 0) note(&hang, &ev[i], 1);
            if (strcmp(ev[i].rule, "shutdown_hang") == 0) note(&shut, &ev[i], 1);
        }
    }
    TT_EQ_INT(hang.fired, 0);
    TT_EQ_INT(shut.fired, 1);
    TT_ASSERT(shut.fired_t > 180 && shut.fired_t <= 182);
    TT_ASSERT(strstr(shut.msg, "shutting down") != NULL);
    alerts_free(s);
}

TT_TEST(hang_only_after_steps_started)
{
    alert_set *s = NULL;
    TT_EQ_INT(alerts_create(&s, 1), 0);
    seen sn = {0};
    alert_event ev[16];
    /* 60 s of start-up with no steps: nothing. Then steps of 100 ms for 20 s,
     * then no step at all from t=80. */
    for (int t = 0; t <= 120; t++) {
        coll_frame *f = at(t);
        if (t < 60) {
            fv_set(&f->steps, 0);
        } else {
            double last = t < 80 ? t : 80;
            fv_set(&f->steps, (last - 60) * 10);
            fv_set(&f->step_time_median_ms, 100);
            fv_set(&f->since_last_step_s, t - last);
            if (t < 80) fv_set(&f->step_time_ms, 100);
        }
        int n = alerts_eval(s, f, ev, 16);
        for (int i = 0; i < n; i++) {
            TT_EQ_STR(ev[i].rule, "hang");
            note(&sn, &ev[i], 1);
        }
    }
    TT_EQ_INT(sn.fired, 1);
    /* stall > 50 x 100 ms = 5 s from t=86, held 10 s */
    TT_NEAR(sn.fired_t, 96, 1e-9);
    TT_ASSERT(strstr(sn.msg, "possible hang") != NULL);
    alerts_free(s);
}

/* A loop whose steps come in bursts (two loader workers each finishing a
 * batch of slow samples at once: half the steps 2 ms, half 800 ms): the
 * gaps between bursts are its usual gaps, not a hang (CI, an input-bound
 * run read "Unstable: steps stopped"). Then a real stall is still caught. */
TT_TEST(no_hang_for_bursty_steps)
{
    for (int with_p90 = 0; with_p90 <= 1; with_p90++) {
        alert_set *s = NULL;
        TT_EQ_INT(alerts_create(&s, 1), 0);
        seen sn = {0};
        alert_event ev[16];
        /* frames each second; a burst of steps ends 0.3-0.9 s before each
         * frame until t=100, then none */
        for (int t = 0; t <= 200; t++) {
            coll_frame *f = at(t);
            double last = t < 100 ? t - 0.3 - 0.6 * ((t * 7) % 10) / 10.0 : 99.9;
            fv_set(&f->steps, 2 * (t < 100 ? t : 100));
            fv_set(&f->step_time_median_ms, 2);
            /* without the p90 the stall's reset alone keeps it quiet */
            if (with_p90) fv_set(&f->step_time_p90_ms, 800);
            fv_set(&f->since_last_step_s, t - last);
            int n = alerts_eval(s, f, ev, 16);
            for (int i = 0; i < n; i++)
                if (strcmp(ev[i].rule, "hang") == 0) note(&sn, &ev[i], 1);
        }
        TT_EQ_INT(sn.fired, 1);
        /* the stall from 99.9 s: 50 x the usual gap, then held 10 s */
        double usual = with_p90 ? 0.8 : 0.002;
        TT_ASSERT(sn.fired_t >= 99.9 + 50 * usual + 10 - 1);
        TT_ASSERT(sn.fired_t <= 99.9 + 50 * usual + 10 + 1);
        if (with_p90) TT_ASSERT(strstr(sn.msg, "usual step time 800 ms") != NULL);
        alerts_free(s);
    }
}

TT_TEST(malformed_rules_give_positions)
{
    alert_set *s = NULL;
    TT_EQ_INT(alerts_create(&s, 0), 0);
    static const struct {
        const char *rule, *want;
    } bad[] = {
        {"gpu.util < 50 for 30x", "position 21: unknown duration unit 'x'"},
        {"gpu.utl < 50", "position 1: unknown metric 'gpu.utl'"},
        {"gpu.util => 50", "position 10: expected an operator"},
        {"gpu.util < abc", "position 12: expected a number"},
        {"gpu.util < 50 during 30s", "position 15: expected 'for DURATION'"},
        {"gpu.util < 50 for", "position 18: expected a duration"},
        {"gpu.util < 50 for 30s please", "position 23: expected end of rule"},
        {"", "position 1: expected a metric name"},
        {"x: gpu.util < 5parsecs", "position 16: unknown unit 'parsecs'"},
        {"nosuch: off", "no rule named 'nosuch'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[200] = "";
        int rc = alerts_add(s, bad[i].rule, err, sizeof(err));
        if (rc != TPF_EFORMAT || !strstr(err, bad[i].want)) {
            fprintf(stderr, "rule '%s': rc %d err '%s', want '%s'\n", bad[i].rule, rc, err,
                    bad[i].want);
            TT_ASSERT(0);
        }
    }
    TT_ASSERT(alerts_rule_text(s, 0) == NULL); /* nothing was added */
    alerts_free(s);
}

/* Random rule texts from the grammar's alphabet: parse or a positioned
 * error, nothing else. */
TT_TEST(random_rules_never_crash)
{
    alert_set *s = NULL;
    TT_EQ_INT(alerts_create(&s, 0), 0);
    static const char *const bits[] = {
        "gpu.util", "cpu.util", " ",   "<",   "<=", ">",  "==",  "!=", "50", "1e3", "-2",
        "%",        "GiB",      "for", "30s", "5m", "x:", "off", ":",  ".",  "\t",  "mem.oom_eta_s",
        "10min",    "h"};
    unsigned long long x = 2463534242ULL;
    int good = 0;
    for (int it = 0; it < 5000; it++) {
        char rule[256] = "";
        int parts = 1 + it % 9;
        for (int k = 0; k < parts; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            strncat(rule, bits[x % (sizeof(bits) / sizeof(bits[0]))],
                    sizeof(rule) - strlen(rule) - 1);
        }
        char err[200] = "";
        int rc = alerts_add(s, rule, err, sizeof(err));
        if (rc == 0)
            good++;
        else if (rc == TPF_EFULL)
            break; /* the set is full of good rules */
        else {
            TT_EQ_INT(rc, TPF_EFORMAT);
            TT_ASSERT(strstr(err, "position ") != NULL);
        }
    }
    TT_ASSERT(good > 0);
    alerts_free(s);
}

TT_TEST(names_override_and_off)
{
    alert_set *s = NULL;
    char err[200];
    TT_EQ_INT(alerts_create(&s, 1), 0);
    int n0 = 0;
    while (alerts_rule_text(s, n0))
        n0++;
    TT_ASSERT(n0 >= 10);
    TT_EQ_INT(alerts_add(s, "gpu_underused: gpu.util < 10 for 5m", err, sizeof(err)), 0);
    TT_EQ_INT(alerts_add(s, "data_wait: off", err, sizeof(err)), 0);
    TT_EQ_INT(alerts_add(s, "tree.rss_bytes > 1GiB", err, sizeof(err)), 0);
    int n1 = 0, found = 0;
    const char *t;
    while ((t = alerts_rule_text(s, n1))) {
        if (strcmp(t, "gpu_underused: gpu.util < 10 for 5m") == 0) found |= 1;
        if (strcmp(t, "data_wait: off") == 0) found |= 2;
        if (strcmp(t, "user1: tree.rss_bytes > 1GiB") == 0) found |= 4;
        n1++;
    }
    TT_EQ_INT(n1, n0 + 1);
    TT_EQ_INT(found, 7);
    /* data_wait is off: a high data-wait share does not fire it */
    alert_event ev[16];
    int fired_dw = 0;
    for (int t2 = 0; t2 < 200; t2++) {
        coll_frame *f = at(t2);
        fv_set(&f->steps, t2 + 1);
        fv_set(&f->data_wait_share, 0.9);
        int n = alerts_eval(s, f, ev, 16);
        for (int i = 0; i < n; i++)
            fired_dw += strcmp(ev[i].rule, "data_wait") == 0;
    }
    TT_EQ_INT(fired_dw, 0);
    alerts_free(s);
}

TT_TEST(units_scale_thresholds)
{
    alert_set *s = one_rule("tree.rss_bytes > 1.5GiB");
    TT_ASSERT(s);
    alert_event ev[4];
    coll_frame *f = at(0);
    fv_set(&f->tree_rss_bytes, 1.4 * 1073741824.0);
    TT_EQ_INT(alerts_eval(s, f, ev, 4), 0);
    f = at(1);
    fv_set(&f->tree_rss_bytes, 1.6 * 1073741824.0);
    TT_EQ_INT(alerts_eval(s, f, ev, 4), 1);
    TT_ASSERT(strstr(ev[0].message, "1.6 GiB") != NULL);
    alerts_free(s);
    s = one_rule("step.stall_s > 2min for 500ms");
    TT_ASSERT(s);
    TT_ASSERT(strstr(alerts_rule_text(s, 0), "for 500ms") != NULL);
    alerts_free(s);
}

TT_TEST(rules_file_names_line)
{
    char path[] = "/tmp/tpf-alerts-XXXXXX";
    int fd = mkstemp(path);
    TT_ASSERT(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("# my rules\n\ncpu.util > 95 for 1m  # busy\nmem.used_pct >> 3\n", f);
    fclose(f);
    alert_set *s = NULL;
    TT_EQ_INT(alerts_create(&s, 0), 0);
    char err[200] = "";
    TT_EQ_INT(alerts_load_file(s, path, err, sizeof(err)), TPF_EFORMAT);
    TT_ASSERT(strstr(err, ":4: position 15") != NULL);
    TT_EQ_STR(alerts_rule_text(s, 0), "user1: cpu.util > 95 for 1m");
    unlink(path);
    alerts_free(s);
}

TT_TEST(default_set_quiet_on_healthy_frames)
{
    alert_set *s = NULL;
    TT_EQ_INT(alerts_create(&s, 1), 0);
    alert_event ev[16];
    int n = 0;
    const double gib = 1073741824.0;
    for (int t = 0; t <= 600; t++) {
        coll_frame *f = at(t);
        fv_set(&f->cpu_pct, 40);
        fv_set(&f->cpu_iowait_pct, 0.5);
        fv_set(&f->mem_total_bytes, 64 * gib);
        fv_set(&f->mem_used_bytes, 20 * gib);
        fv_set(&f->mem_available_bytes, 44 * gib);
        fv_set(&f->swap_used_bytes, 0);
        fv_set(&f->psi_mem_some_pct, 0);
        fv_set(&f->psi_io_some_pct, 1);
        fv_set(&f->tree_rss_bytes, 6 * gib);
        fv_set(&f->steps, t * 5);
        fv_set(&f->step_time_ms, 200 + (t % 7));
        fv_set(&f->step_time_median_ms, 203);
        fv_set(&f->since_last_step_s, 0.1);
        fv_set(&f->data_wait_share, 0.02);
        f->ngpu = 2;
        for (int g = 0; g < 2; g++) {
            f->gpu[g].index = g;
            fv_set(&f->gpu[g].util_pct, 97);
            fv_set(&f->gpu[g].mem_used_bytes, 60 * gib);
            fv_set(&f->gpu[g].mem_total_bytes, 80 * gib);
            fv_set(&f->gpu[g].temp_c, 70);
            fv_set(&f->gpu[g].throttle_mask, 0);
        }
        n += alerts_eval(s, f, ev, 16);
    }
    TT_EQ_INT(n, 0);
    alerts_free(s);
}

int main(int argc, char **argv)
{
    return tt_main(argc, argv);
}
