/* GPU records: CUPTI record decoding (layouts of docs/gpu.md), the join of
 * GPU records to host steps (collect/gpujoin.c), and a round trip through a
 * real segment (probe_emit_record -> reader). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collect/agg.h"
#include "collect/cupti_rec.h"
#include "collect/gpujoin.h"
#include "core/figs.h"
#include "probe/clock.h"
#include "probe/probe.h"
#include "probe/reader.h"
#include "tt.h"
#include "trainperf.h"

static void put64(uint8_t *p, size_t off, uint64_t v) { memcpy(p + off, &v, 8); }
static void put32(uint8_t *p, size_t off, uint32_t v) { memcpy(p + off, &v, 4); }

TT_TEST(decode_kernel10)
{
    uint8_t r[216] = {0};
    const char *name = "_Z3fooPf";
    put32(r, 0, CUPTI_KIND_CONCURRENT_KERNEL);
    put64(r, 16, 1000);
    put64(r, 24, 1500);
    put32(r, 40, 3);  /* device */
    put32(r, 48, 13); /* stream */
    memcpy(r + 104, &name, sizeof(name));
    cupti_rec o;
    TT_ASSERT(cupti_rec_decode(r, sizeof(r), &o) == 1);
    TT_EQ_INT(o.ev, SEG_EV_GPU_KERNEL);
    TT_EQ_INT((int)o.start, 1000);
    TT_EQ_INT((int)o.end, 1500);
    TT_EQ_INT(GPU_KB_DEVICE(o.b), 3);
    TT_EQ_INT((int)GPU_KB_STREAM(o.b), 13);
    TT_ASSERT(o.name == name);
    /* a record shorter than the prefix is not read past its end */
    TT_ASSERT(cupti_rec_decode(r, CUPTI_KERNEL_PREFIX - 1, &o) == 0);
    /* no timing collected */
    put64(r, 16, 0);
    put64(r, 24, 0);
    TT_ASSERT(cupti_rec_decode(r, sizeof(r), &o) == 0);
}

TT_TEST(decode_memcpy_memset_sync)
{
    uint8_t r[88] = {0};
    put32(r, 0, CUPTI_KIND_MEMCPY);
    r[4] = GPU_COPY_DTOH;
    r[5] = GPU_MEM_DEVICE;
    r[6] = GPU_MEM_PAGEABLE;
    put64(r, 8, 4096);
    put64(r, 16, 10);
    put64(r, 24, 30);
    put32(r, 32, 1);
    cupti_rec o;
    TT_ASSERT(cupti_rec_decode(r, sizeof(r), &o) == 1);
    TT_EQ_INT(o.ev, SEG_EV_GPU_COPY);
    TT_EQ_INT((int)o.b, 4096);
    TT_EQ_INT(GPU_CN_COPY(o.aux), GPU_COPY_DTOH);
    TT_EQ_INT(GPU_CN_SRC(o.aux), GPU_MEM_DEVICE);
    TT_EQ_INT(GPU_CN_DST(o.aux), GPU_MEM_PAGEABLE);
    TT_EQ_INT(GPU_CN_DEVICE(o.aux), 1);

    memset(r, 0, sizeof(r));
    put32(r, 0, CUPTI_KIND_MEMSET);
    put64(r, 8, 512);
    put64(r, 16, 40);
    put64(r, 24, 41);
    TT_ASSERT(cupti_rec_decode(r, sizeof(r), &o) == 1);
    TT_EQ_INT(o.ev, SEG_EV_GPU_MEMSET);
    TT_EQ_INT((int)o.b, 512);

    uint8_t s[40] = {0};
    put32(s, 0, CUPTI_KIND_SYNCHRONIZATION);
    put32(s, 4, 3); /* stream synchronize */
    put64(s, 8, 100);
    put64(s, 16, 250);
    put32(s, 32, 7);
    TT_ASSERT(cupti_rec_decode(s, sizeof(s), &o) == 1);
    TT_EQ_INT(o.ev, SEG_EV_GPU_SYNC);
    TT_EQ_INT((int)o.aux, 3);
    TT_EQ_INT((int)(o.end - o.start), 150);
    TT_EQ_INT((int)o.b, 7);

    /* kinds not kept (a runtime API record) and damaged timing */
    put32(s, 0, 5);
    TT_ASSERT(cupti_rec_decode(s, sizeof(s), &o) == 0);
    put32(s, 0, CUPTI_KIND_SYNCHRONIZATION);
    put64(s, 16, 50); /* end before start */
    TT_ASSERT(cupti_rec_decode(s, sizeof(s), &o) == 0);
    TT_ASSERT(cupti_rec_decode(NULL, 40, &o) == 0);
}

static gj_rec K(uint64_t b, uint64_t e) { return (gj_rec){b, e, 0, SEG_EV_GPU_KERNEL, 0}; }

TT_TEST(figures_union_gaps_copies_syncs)
{
    /* step interval [100, 200]: kernels [90,120] (starts before: clipped,
     * not counted as launched here), [110,130], [150,160], [195,230]
     * (clipped at the end); busy = [100,130] + [150,160] + [195,200] = 45;
     * gaps: 130..150 = 20, 160..195 = 35 -> 35 */
    gj_rec r[] = {K(90, 120), K(110, 130),
                  {112, 113, 1000, SEG_EV_GPU_COPY, GPU_CN(GPU_COPY_HTOD, GPU_MEM_PAGEABLE, GPU_MEM_DEVICE, 0)},
                  {114, 116, 50, SEG_EV_GPU_COPY, GPU_CN(GPU_COPY_HTOD, GPU_MEM_PINNED, GPU_MEM_DEVICE, 0)},
                  {140, 150, 3, SEG_EV_GPU_SYNC, 3},
                  K(150, 160), K(195, 230)};
    gpu_step g;
    memset(&g, 0, sizeof(g));
    g.end_ns = 200;
    g.interval_ns = 100;
    gj_figures(r, sizeof(r) / sizeof(r[0]), 35, &g);
    TT_EQ_INT((int)g.busy_ns, 45);
    TT_EQ_INT((int)g.kernels, 3);
    TT_EQ_INT((int)g.kernel_ns, 20 + 10 + 35);
    TT_EQ_INT((int)g.idle_max_ns, 35);
    TT_EQ_INT((int)g.h2d_bytes, 1050);
    TT_EQ_INT((int)g.h2d_pageable_bytes, 1000);
    TT_EQ_INT((int)g.copy_ns, 3);
    TT_EQ_INT((int)g.sync_ns, 10);
    TT_EQ_INT((int)g.syncs, 1);

    /* no kernel at all: the whole interval is one gap */
    memset(&g, 0, sizeof(g));
    g.end_ns = 1000;
    g.interval_ns = 100;
    gj_figures(r, sizeof(r) / sizeof(r[0]), 35, &g);
    TT_EQ_INT((int)g.busy_ns, 0);
    TT_EQ_INT((int)g.idle_max_ns, 100);
}

typedef struct got {
    gpu_step g[64];
    int n;
} got;

static void take(void *ctx, const gpu_step *g)
{
    got *x = ctx;
    if (x->n < 64) x->g[x->n++] = *g;
}

static agg_step S(pid_t pid, uint64_t step, uint64_t end, uint64_t interval)
{
    agg_step s;
    memset(&s, 0, sizeof(s));
    s.pid = pid;
    s.tid = pid;
    s.rank = -1;
    s.step = step;
    s.end_ns = end;
    s.interval_ns = interval;
    return s;
}

static seg_event E(uint32_t kind, uint64_t b, uint64_t e)
{
    seg_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.kind = kind;
    ev.ts_ns = b;
    ev.end_ns = e;
    return ev;
}

/* Flushes GJ_SETTLE_NS apart until a record seen before *now has settled. */
static void settle(gj *j, uint64_t *now)
{
    for (int i = 0; i < 2; i++) {
        *now += GJ_SETTLE_NS;
        gj_flush(j, *now, 0);
    }
}

TT_TEST(join_waits_for_records_then_lets_go)
{
    got x = {.n = 0};
    gj *j = NULL;
    TT_ASSERT(gj_create(&j, take, &x) == 0);
    /* two steps of pid 10 end before their records arrive (the GPU runs behind) */
    agg_step s0 = S(10, 0, 1000, 1000), s1 = S(10, 1, 2000, 1000);
    gj_step(j, &s0);
    gj_step(j, &s1);
    /* a CPU process's step: no GPU record ever comes for it */
    agg_step c0 = S(20, 0, 1500, 1500);
    gj_step(j, &c0);
    uint64_t now = 2100;
    gj_flush(j, now, 0);
    TT_EQ_INT(x.n, 0);
    /* records arrive out of start order, up to 1800: step 0 can go once they
     * settled (another buffer may still hold earlier ones), step 1 waits */
    seg_event e1 = E(SEG_EV_GPU_KERNEL, 1200, 1800), e0 = E(SEG_EV_GPU_KERNEL, 200, 900);
    gj_record(j, 10, &e1);
    gj_flush(j, now + 100, 0);
    TT_EQ_INT(x.n, 0);
    /* the earlier record comes in a later buffer, before the step went */
    gj_record(j, 10, &e0);
    settle(j, &now);
    TT_EQ_INT(x.n, 1);
    TT_EQ_INT((int)x.g[0].step, 0);
    TT_EQ_INT((int)x.g[0].busy_ns, 700);
    /* a record that ends past step 1: it goes too */
    seg_event e2 = E(SEG_EV_GPU_KERNEL, 1900, 2500);
    gj_record(j, 10, &e2);
    settle(j, &now);
    TT_EQ_INT(x.n, 2);
    TT_EQ_INT((int)x.g[1].step, 1);
    TT_EQ_INT((int)x.g[1].busy_ns, 600 + 100);
    /* a late record (before every step still to come) is counted, not kept */
    seg_event late = E(SEG_EV_GPU_KERNEL, 100, 150);
    gj_record(j, 10, &late);
    uint64_t recs, nlate, paused;
    gj_counts(j, &recs, &nlate, &paused);
    TT_EQ_INT((int)paused, 0);
    TT_EQ_INT((int)recs, 4);
    TT_EQ_INT((int)nlate, 1);
    /* the CPU process's step is let go after GJ_LAG_NS, with no row */
    gj_flush(j, 1500 + GJ_LAG_NS, 0);
    TT_EQ_INT(x.n, 2);
    /* at the end every step of a GPU process gets its row; then the drain:
     * the GPU still busy after the last step (the queue the host left,
     * gaps under GJ_DRAIN_GAP_NS), not what it ran after an idle gap */
    agg_step s2 = S(10, 2, 3000, 1000);
    gj_step(j, &s2);
    seg_event q1 = E(SEG_EV_GPU_KERNEL, 3000, 4000), q2 = E(SEG_EV_GPU_KERNEL, 4100, 5000),
              idle = E(SEG_EV_GPU_KERNEL, 5000 + 2 * GJ_DRAIN_GAP_NS, 6000 + 2 * GJ_DRAIN_GAP_NS);
    gj_record(j, 10, &q1);
    gj_record(j, 10, &q2);
    gj_record(j, 10, &idle);
    gj_flush(j, now + 1, 1);
    TT_EQ_INT(x.n, 4);
    TT_EQ_INT((int)x.g[2].busy_ns, 500); /* [2000, 2500] of e2 */
    TT_EQ_INT(x.g[3].drain, 1);
    TT_EQ_INT((int)x.g[3].kernels, 2);
    TT_EQ_INT((int)x.g[3].kernel_ns, 1000 + 900);
    TT_EQ_INT((int)x.g[3].interval_ns, 2000);
    gj_flush(j, now + 2, 1); /* once */
    TT_EQ_INT(x.n, 4);
    gj_free(j);
}

/* `--gpu-trace windows`: kernel records only in [0, 2.5) and [6.5, ...) steps.
 * Steps wholly inside a window get rows from their records (and their event
 * span), steps outside get rows from their CUDA events alone (no kernel
 * figures), or none when they have no events either; the figures fold the
 * two apart. */
TT_TEST(windows_rows_from_records_inside_events_outside)
{
    const uint64_t U = 10000000; /* a step: 10 ms */
    got x = {.n = 0};
    gj *j = NULL;
    TT_ASSERT(gj_create(&j, take, &x) == 0);
    gj_detail(j, 10, 0, 1);
    gj_detail(j, 10, 0, 1); /* an open window is not opened twice */
    for (int i = 0; i < 8; i++) {
        agg_step s = S(10, (uint64_t)i, U * (uint64_t)(i + 1), U);
        gj_step(j, &s);
        if (i < 2) { /* the records of the window's steps */
            seg_event k = E(SEG_EV_GPU_KERNEL, U * (uint64_t)i + U / 10, U * (uint64_t)i + 9 * U / 10);
            gj_record(j, 10, &k);
        }
        /* every step's events but step 4's (in flight when the next came) */
        if (i == 4) continue;
        seg_event sp = E(SEG_EV_GPU_STEP, U * (uint64_t)i + 5000, U * (uint64_t)(i + 1) + 5000);
        sp.arg = 950 - (uint64_t)i;
        gj_record(j, 10, &sp);
    }
    gj_detail(j, 10, 25 * U / 10, 0); /* closed during step 2: step 2 is outside */
    gj_detail(j, 10, 65 * U / 10, 1); /* opened during step 6: step 7 is inside */
    uint64_t now = 9 * U;
    settle(j, &now);
    gj_flush(j, now, 1);
    TT_EQ_INT(x.n, 7);
    int src[8] = {0}, have[8] = {0};
    for (int i = 0; i < x.n; i++) {
        int st = (int)x.g[i].step;
        have[st] = 1;
        src[st] = x.g[i].source;
        TT_ASSERT(x.g[i].span_ok);
        TT_EQ_INT((int)x.g[i].span_ns, 950 - st);
        if (st < 2) TT_EQ_INT(x.g[i].busy_ns, 8 * U / 10);
    }
    TT_EQ_INT(src[0], GPU_SRC_CUPTI);
    TT_EQ_INT(src[1], GPU_SRC_CUPTI);
    TT_EQ_INT(src[2], GPU_SRC_EVENTS);
    TT_EQ_INT(src[6], GPU_SRC_EVENTS);
    TT_EQ_INT(src[7], GPU_SRC_CUPTI); /* inside, no kernel: an idle GPU, known as such */
    TT_EQ_INT(have[4], 0);
    TT_EQ_INT((int)gj_undetailed(j), 1);
    /* the figures: kernel totals over the window steps, spans over all */
    figs f;
    figs_init(&f);
    for (int i = 0; i < x.n; i++) figs_add_gpu(&f, &x.g[i]);
    TT_EQ_INT((int)f.gpu.steps, 3);      /* 0, 1, 7 */
    TT_EQ_INT((int)f.gpu.warm_steps, 2); /* step 0 is warm-up */
    TT_EQ_INT(f.gpu.busy_ns, 8 * U / 10);
    TT_EQ_INT((int)f.gpu.event_steps, 4); /* 2, 3, 5, 6 */
    TT_EQ_INT((int)f.gpu.span_steps, 6);  /* all but step 0 and 4 */
    figs_free(&f);
    gj_free(j);
}

/* The drain counts in the run's per-step totals, not in its steps or its
 * busy share. */
/* A script's torch.profiler held CUPTI over [2500, 4500): the steps that
 * overlap it get no row (their records are the profiler's), the ones around
 * it theirs; they do not wait for records that cannot come. */
TT_TEST(steps_in_a_profilers_window_get_no_row)
{
    got x = {.n = 0};
    gj *j = NULL;
    TT_ASSERT(gj_create(&j, take, &x) == 0);
    seg_event k0 = E(SEG_EV_GPU_KERNEL, 100, 900), k1 = E(SEG_EV_GPU_KERNEL, 1100, 1900);
    gj_record(j, 10, &k0);
    gj_record(j, 10, &k1);
    gj_pause(j, 10, 2500);
    for (int i = 0; i < 5; i++) {
        agg_step s = S(10, (uint64_t)i, 1000 * (uint64_t)(i + 1), 1000);
        gj_step(j, &s);
    }
    uint64_t now = 5000;
    gj_flush(j, now, 0);
    /* CUPTI's buffers were flushed before the pause was marked: steps 0
     * and 1 have all their records and go; steps 2-4 lie in the window
     * (still open) and go at once, with no row */
    TT_EQ_INT(x.n, 2);
    TT_EQ_INT((int)x.g[1].step, 1);
    TT_EQ_INT((int)x.g[1].kernels, 1);
    gj_resume(j, 10, 4500);
    seg_event k5 = E(SEG_EV_GPU_KERNEL, 5100, 5900);
    gj_record(j, 10, &k5);
    agg_step s5 = S(10, 5, 6000, 1000);
    gj_step(j, &s5);
    gj_flush(j, now, 1);
    TT_EQ_INT(x.n, 3);
    TT_EQ_INT((int)x.g[2].step, 5);
    TT_EQ_INT((int)x.g[2].kernels, 1);
    uint64_t recs, late, paused;
    gj_counts(j, &recs, &late, &paused);
    TT_EQ_INT((int)paused, 3);
    TT_EQ_INT((int)late, 0);
    gj_free(j);
}

TT_TEST(drain_counts_in_totals_not_steps)
{
    figs f;
    figs_init(&f);
    gpu_step a = {.tid = 7, .step = 1, .interval_ns = 1000, .busy_ns = 500, .kernels = 3, .h2d_bytes = 64};
    gpu_step b = {.tid = 7, .step = 0, .drain = 1, .interval_ns = 4000, .busy_ns = 4000, .kernels = 5,
                  .h2d_bytes = 128};
    figs_add_gpu(&f, &a);
    figs_add_gpu(&f, &b);
    TT_EQ_INT((int)f.gpu.steps, 1);
    TT_EQ_INT((int)f.gpu.warm_steps, 1);
    TT_EQ_INT((int)f.gpu.interval_ns, 1000);
    TT_EQ_INT((int)f.gpu.busy_ns, 500);
    TT_EQ_INT((int)f.gpu.kernels, 8);
    TT_EQ_INT((int)f.gpu.h2d_bytes, 192);
}

TT_TEST(agg_folds_gpu_steps_into_figures)
{
    got x = {.n = 0};
    agg_sink sink = {&x, NULL, NULL, NULL, NULL, take, NULL};
    agg *a = NULL;
    TT_ASSERT(agg_create(&a, &sink) == 0);
    agg_proc *p = NULL;
    TT_ASSERT(agg_proc_create(&p, 42, -1, -1) == 0);
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = 1000000ull * (uint64_t)(i + 1);
        seg_event b = E(SEG_EV_STEP_BEGIN, 0, 0), e = E(SEG_EV_STEP_END, 0, 0);
        b.ts_ns = t0;
        b.tid = e.tid = 42;
        e.ts_ns = t0 + 1000000;
        e.samples = 8;
        agg_event(a, p, &b);
        seg_event k = E(SEG_EV_GPU_KERNEL, t0 + 100000, t0 + 900000); /* 80% of the step */
        k.tid = 99;                                                     /* CUPTI's thread */
        agg_event(a, p, &k);
        agg_event(a, p, &e);
    }
    agg_gpu_flush(a, 100000000ull, 1);
    TT_EQ_INT(x.n, 5);
    TT_EQ_INT((int)a->f.gpu.steps, 5);
    TT_EQ_INT((int)a->f.gpu.warm_steps, 4);
    TT_EQ_INT((int)a->f.gpu.kernels, 4);
    TT_ASSERT(fabs((double)a->f.gpu.busy_ns / (double)a->f.gpu.interval_ns - 0.8) < 1e-9);
    TT_EQ_INT((int)a->f.gpu.records, 5);
    /* GPU records made no thread of their own (CUPTI's thread is not a training thread) */
    TT_EQ_INT((int)a->f.count, 5);
    agg_proc_free(p);
    agg_free(a);
}

typedef struct cap {
    seg_event e[8];
    int n;
} cap;

static void cap_ev(void *ctx, const seg_event *ev)
{
    cap *c = ctx;
    if (c->n < 8) c->e[c->n++] = *ev;
}

TT_TEST(segment_round_trip_of_gpu_records)
{
    char dir[] = "/tmp/tpf-gpu-XXXXXX";
    TT_ASSERT(mkdtemp(dir) != NULL);
    clk_prefer_mono();
    probe_set_seg_tag("gpu");
    TT_EQ_INT(probe_attach(dir), 0);
    uint64_t t = clk_mono_ns();
    TT_EQ_INT(probe_emit_record(t, SEG_EV_GPU_COPY,
                                GPU_CN(GPU_COPY_HTOD, GPU_MEM_PAGEABLE, GPU_MEM_DEVICE, 0), t + 5000, 1234),
              1);
    char path[512];
    TT_ASSERT(probe_segment_path(path, sizeof(path)) != NULL);
    TT_ASSERT(strstr(path, ".gpu.tpf") != NULL);
    seg_reader *r = NULL;
    TT_EQ_INT(seg_reader_open(&r, path), 0);
    cap c = {.n = 0};
    TT_EQ_INT((int)seg_reader_drain(r, cap_ev, &c), 1);
    TT_EQ_INT((int)c.e[0].kind, SEG_EV_GPU_COPY);
    TT_EQ_INT((int)(c.e[0].end_ns - c.e[0].ts_ns), 5000);
    TT_EQ_INT((int)c.e[0].arg, 1234);
    TT_EQ_INT(GPU_CN_SRC(c.e[0].name), GPU_MEM_PAGEABLE);
    seg_reader_close(r);
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
