/* Memory rules: the run runs out of memory (memory-capacity) or pauses to collect
 * garbage (gc-pauses).
 * Entries of diag_rules[] (diag.c); thresholds in rule_util.h and
 * docs/diagnosis.md. */
#include "report/rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"

int dr_cand_memory(const diag_run *r, const dctx *c, dfinding *d)
{
    char a[32], b[32], m[256];
    double t;
    int strong = 0, weak = 0;
    if (isfinite(c->swap_growth) && c->swap_growth > SWAP_GROWTH_BYTES) {
        human_bytes(a, sizeof(a), c->swap_growth);
        ev(d, "swap_growth_bytes", c->swap_growth, "swap use grew by %s during the run", a);
        strong = 1;
    }
    if (isfinite(c->avail_min_pct) && c->avail_min_pct < MEM_AVAIL_MIN_PCT) {
        human_bytes(a, sizeof(a), r->mem_avail.min);
        ev(d, "mem_available_min_pct", c->avail_min_pct,
           "host memory available fell to %s (%.1f%% of total)", a, c->avail_min_pct);
        strong = 1;
    }
    if (isfinite(c->psi_mem_full) && c->psi_mem_full >= PSI_MEM_FULL_PCT) {
        ev(d, "psi_mem_full_pct", c->psi_mem_full,
           "all tasks stalled on memory %.0f%% of the time (PSI memory full)", c->psi_mem_full);
        strong = 1;
    }
    if (r->exit_signal == 9 && isfinite(c->avail_min_pct) && c->avail_min_pct < 10) {
        ev(d, "exit_signal", 9,
           "the run was killed (SIGKILL) while memory was low: likely the OOM killer");
        strong = 1;
    }
    /* growth of the tree only, from after warm-up (the first sample once a
     * step ended: imports and model state are in place) to the end, and
     * only when it persists: growing in both halves of the run */
    double t0 = r->cause.rss_warm_t, v0 = r->cause.rss_warm, t1 = r->cause.rss_last_t,
           v1 = r->cause.rss_last, vm = NAN, tt, vv, best = INFINITY;
    for (int k = 0; k < r->s_tree_rss.n && isfinite(v0); k++)
        if (dseries_value(&r->s_tree_rss, k, &tt, &vv) && fabs(tt - (t0 + t1) / 2) < best)
            best = fabs(tt - (t0 + t1) / 2), vm = vv;
    int grew = isfinite(v0) && isfinite(v1) && isfinite(vm) && t1 > t0 && v1 > v0 * 1.2 &&
               v1 - v0 > 64.0 * 1048576.0 && vm > v0 + 0.2 * (v1 - v0) && v1 > vm + 0.2 * (v1 - v0);
    /* and the floor rises: a leak never gives memory back, while batches of
     * varying shapes make the allocator's footprint swing up and down (the
     * lowest RSS of each third of the window, each above the one before) */
    if (grew) {
        double fl[3] = {INFINITY, INFINITY, INFINITY}, top0 = 0;
        /* the series' buckets are timed at their middle: every bucket that
         * overlaps the window counts (those of its first and last samples) */
        double half = r->s_tree_rss.width / 2, eps = 1e-6 * (t1 - t0);
        for (int k = 0; k < r->s_tree_rss.n; k++)
            if (dseries_value(&r->s_tree_rss, k, &tt, &vv) && tt + half > t0 - eps &&
                tt - half <= t1 + eps && vv > 0) {
                int third = (int)(3 * (tt - t0) / (t1 - t0));
                third = third > 2 ? 2 : third < 0 ? 0 : third;
                if (vv < fl[third]) fl[third] = vv;
                if (third == 0 && vv > top0) top0 = vv;
            }
        double g = v1 - v0;
        /* and the last third never comes down to what the first reached: a
         * footprint that rose after warm-up and then swung about a level
         * (variable shapes) is not growing */
        grew = isfinite(fl[0]) && isfinite(fl[1]) && isfinite(fl[2]) && fl[1] > fl[0] + 0.15 * g &&
               fl[2] > fl[0] + 0.4 * g && fl[2] > top0;
    }
    if (dr_fired(r, "host_mem_growth", &t, m, sizeof(m)) && grew) {
        ev(d, "alert_host_mem_growth", t, "at %.0f s: %s", t, m);
        weak = 1;
    }
    if (dr_fired(r, "gpu_mem_growth", &t, m, sizeof(m))) {
        ev(d, "alert_gpu_mem_growth", t, "at %.0f s: %s", t, m);
        weak = 1;
    }
    if (grew) weak = 1;
    if (!strong && !weak) return 0;
    fmt(d->id, sizeof(d->id), "memory-capacity");
    fmt(d->title, sizeof(d->title), "Memory capacity");
    /* a leak that persists outgrows any memory: ahead of a bare alert */
    d->score = strong ? 0.9 : grew ? 0.6 : 0.5;
    if (grew) {
        human_bytes(a, sizeof(a), v0);
        human_bytes(b, sizeof(b), v1);
        fmt(d->summary, sizeof(d->summary),
            "the process tree grew from %s after warm-up to %s and kept growing%s", a, b,
            strong ? "; memory ran short" : "");
        ev(d, "tree_rss_growth_bps", (v1 - v0) / (t1 - t0), "process-tree RSS grew from %s to %s",
           a, b);
        dr_rec_lang(r, d,
                 "Find what grows every step: tensors kept across steps (e.g. summing `loss` "
                 "instead of `loss.item()`), lists of outputs, unbounded caches; "
                 "tracemalloc / torch.cuda.memory_snapshot() show the owners.",
                 "Find what grows every step: buffers allocated per step and never freed, "
                 "unbounded caches or queues; heaptrack or valgrind --tool=massif show the "
                 "owners.");
    } else {
        fmt(d->summary, sizeof(d->summary), "memory ran short during the run");
    }
    rec(d, "Reduce the memory per step: smaller batch with gradient accumulation to keep the "
           "effective batch, activation checkpointing, bf16/fp16 activations.");
    if (isfinite(c->swap_growth) && c->swap_growth > SWAP_GROWTH_BYTES)
        rec(d,
            "Swapping makes every step slower: keep the working set below physical memory "
            "(%s also cut host memory).",
            r->python ? "fewer DataLoader workers or a smaller prefetch_factor"
                      : "fewer loader processes or a shorter prefetch queue");
    return 1;
}

/* The busiest line of the training thread that calls gc.collect(), or NULL. */
static const dc_func *gc_collect_line(const dcause *c)
{
    const dc_func *best = NULL;
    for (int p = 0; p < c->nproc; p++)
        for (int i = 0; i < c->procs[p].nlines; i++)
            if (strstr(c->procs[p].src[i], "gc.collect(") &&
                (!best || c->procs[p].lines[i].samples > best->samples))
                best = &c->procs[p].lines[i];
    return best;
}

int dr_cand_gc(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    double train_s = r->sum_interval_ns / 1e9;
    if (!c->have_pyprof || !(train_s > 0) || !(c->gc_pause_s > 0)) return 0;
    /* a finding needs repeated pauses, not one full collection */
    int npause = 0;
    double pause = dc_gc_pause(r, &npause);
    double share = pause / train_s;
    if (!(share >= GC_SHARE) || npause < 3) return 0;
    diag_head(d, "gc-pauses", "Garbage-collection pauses", share,
              "Python's garbage collector paused the run %.2f s (%.0f%% of step time), up to "
              "%.0f ms at once",
              pause, 100 * share, 1000 * c->gc_max_s);
    ev(d, "gc_pause_share", share, "GC pauses %.0f%% of step time (gc.callbacks)", 100 * share);
    ev(d, "gc_collections", c->gc_n[0] + c->gc_n[1] + c->gc_n[2],
       "%.0f collections: %.0f young, %.0f middle, %.0f full", c->gc_n[0] + c->gc_n[1] + c->gc_n[2],
       c->gc_n[0], c->gc_n[1], c->gc_n[2]);
    ev(d, "gc_max_pause_ms", 1000 * c->gc_max_s, "longest pause %.0f ms", 1000 * c->gc_max_s);
    /* about one full collection a step: the script collects by hand (an
     * automatic full collection comes every ~100 young ones) */
    const dc_func *at = gc_collect_line(c);
    if (c->gc_n[2] >= 10 && r->steps > 0 && c->gc_n[2] >= 0.5 * r->steps) {
        char where[160] = "";
        if (at) fmt(where, sizeof(where), " at %s:%d", at->file, at->line);
        rec(d, "The script calls gc.collect()%s: %.0f full collections in %.0f steps. Remove "
               "the call from the loop (torch frees tensors when their last reference goes; "
               "a collection does not return memory faster), or call it every few hundred steps.",
            where, c->gc_n[2], r->steps);
    }
    rec(d, "gc.freeze() after the model and data are built moves them out of the collector's "
           "view, so full collections stop scanning them.");
    rec(d, "Create fewer short-lived container objects per step (lists/dicts of tensors, "
           "per-sample Python objects), or raise the threshold: gc.set_threshold(50000, 50, 100).");
    return 1;
}
