/* Step figures (see figs.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/figs.h"
#include "util/jsonw.h"

const char *const agg_phase_names[AGG_NPHASES] = {
    "data", "forward", "backward", "optimizer", "comm", "eval", "checkpoint",
};

void figs_init(figs *f)
{
    memset(f, 0, sizeof(*f));
    f->max_groups = AGG_MAX_GROUPS;
    sketch_init(&f->step_ns);
    sketch_init(&f->data_ns);
    sketch_init(&f->gpu.kernel_dur_ns);
    sketch_init(&f->gpu.busy_share);
    sketch_init(&f->gpu_win.kernel_dur_ns);
    sketch_init(&f->gpu_win.busy_share);
}

void figs_add_gpu(figs *f, const gpu_step *g)
{
    figs_gpu *x = g->tid == 0 ? &f->gpu_win : &f->gpu;
    /* the GPU's time from CUDA events: every warm step that has it */
    if (g->span_ok && !g->drain && !(g->step == 0 && g->tid != 0)) {
        x->span_steps++;
        x->span_ns += g->span_ns;
        x->span_interval_ns += g->interval_ns;
    }
    /* kernel figures: only the steps with kernel records (the windows) */
    if (g->source == GPU_SRC_EVENTS) {
        x->event_steps++;
        return;
    }
    if (!g->drain) x->steps++;
    /* a step's warm-up (allocation, autotuning, the first launch of each
     * kernel) is left out; a window of a step-less process is all there is */
    if (g->step == 0 && g->tid != 0 && !g->drain) return;
    /* the drain: what the steps launched and the GPU ran after the last
     * one, in the per-step counts; not host time, so not in the busy share */
    if (!g->drain) {
        x->warm_steps++;
        x->interval_ns += g->interval_ns;
        x->busy_ns += g->busy_ns;
    }
    x->kernel_ns += g->kernel_ns;
    x->kernels += g->kernels;
    x->comm_kernel_ns += g->comm_kernel_ns;
    x->sync_idle_ns += g->sync_idle_ns;
    x->copy_ns += g->copy_ns;
    x->sync_ns += g->sync_ns;
    x->syncs += g->syncs;
    x->h2d_bytes += g->h2d_bytes;
    x->h2d_pageable_bytes += g->h2d_pageable_bytes;
    x->d2h_bytes += g->d2h_bytes;
    x->d2h_pageable_bytes += g->d2h_pageable_bytes;
    if (g->interval_ns && !g->drain) sketch_add(&x->busy_share, 1e6 * (double)g->busy_ns / (double)g->interval_ns);
}

static void gpu_merge(figs_gpu *d, const figs_gpu *s)
{
    uint64_t *dn[] = {&d->steps, &d->warm_steps, &d->interval_ns, &d->busy_ns, &d->kernel_ns,
                      &d->kernels, &d->copy_ns, &d->sync_ns, &d->syncs, &d->h2d_bytes,
                      &d->h2d_pageable_bytes, &d->d2h_bytes, &d->d2h_pageable_bytes,
                      &d->records, &d->records_late, &d->comm_kernel_ns, &d->sync_idle_ns,
                      &d->steps_paused, &d->event_steps, &d->span_steps, &d->span_ns,
                      &d->span_interval_ns, &d->steps_undetailed};
    const uint64_t sn[] = {s->steps, s->warm_steps, s->interval_ns, s->busy_ns, s->kernel_ns,
                           s->kernels, s->copy_ns, s->sync_ns, s->syncs, s->h2d_bytes,
                           s->h2d_pageable_bytes, s->d2h_bytes, s->d2h_pageable_bytes,
                           s->records, s->records_late, s->comm_kernel_ns, s->sync_idle_ns,
                           s->steps_paused, s->event_steps, s->span_steps, s->span_ns,
                           s->span_interval_ns, s->steps_undetailed};
    for (size_t i = 0; i < sizeof(sn) / sizeof(sn[0]); i++) *dn[i] += sn[i];
    sketch_merge(&d->kernel_dur_ns, &s->kernel_dur_ns);
    sketch_merge(&d->busy_share, &s->busy_share);
}

void figs_free(figs *f)
{
    for (int i = 0; i < f->ngroups; i++) free(f->groups[i]);
    free(f->groups);
    f->groups = NULL;
    f->ngroups = f->capgroups = f->last_group = 0;
}

static int group_is(const agg_group *g, int rank, pid_t pid)
{
    return rank >= 0 ? g->rank == rank : (g->rank < 0 && g->pid == pid);
}

static agg_group *group_of(figs *f, int rank, pid_t pid)
{
    if (f->last_group < f->ngroups && group_is(f->groups[f->last_group], rank, pid))
        return f->groups[f->last_group];
    for (int i = 0; i < f->ngroups; i++)
        if (group_is(f->groups[i], rank, pid)) return f->groups[f->last_group = i];
    if (f->max_groups > 0 && f->ngroups >= f->max_groups) return NULL;
    if (f->ngroups == f->capgroups) {
        int nc = f->capgroups ? f->capgroups * 2 : 16;
        agg_group **ng = realloc(f->groups, (size_t)nc * sizeof(*ng));
        if (!ng) return NULL;
        f->groups = ng;
        f->capgroups = nc;
    }
    agg_group *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->rank = rank;
    g->pid = pid;
    sketch_init(&g->step_ns);
    f->last_group = f->ngroups;
    f->groups[f->ngroups++] = g;
    return g;
}

void figs_add(figs *f, const agg_step *s)
{
    int warm = s->step > 0;
    /* evaluation and checkpointing are not training: the step-time
     * distribution leaves them out (docs/diagnosis.md, "Causes") */
    uint64_t evck = s->phase_ns[TPF_PHASE_EVAL - 1] + s->phase_ns[TPF_PHASE_CHECKPOINT - 1];
    uint64_t train = s->interval_ns > evck ? s->interval_ns - evck : 0;
    f->count++;
    f->interval_ns += s->interval_ns;
    if (warm) f->interval_sq_ms += ((double)train / 1e6) * ((double)train / 1e6);
    f->duration_ns += s->duration_ns;
    f->other_ns += s->other_ns;
    f->samples += s->samples;
    f->tokens += s->tokens;
    for (int i = 0; i < AGG_NPHASES; i++) f->phase_ns[i] += s->phase_ns[i];
    if (!f->first_end_ns || s->end_ns < f->first_end_ns) f->first_end_ns = s->end_ns;
    if (s->end_ns > f->last_end_ns) f->last_end_ns = s->end_ns;
    if (warm) {
        sketch_add(&f->step_ns, (double)train);
        sketch_add(&f->data_ns, (double)s->phase_ns[0]);
    }
    agg_group *g = group_of(f, s->rank, s->pid);
    if (!g) {
        f->untracked_groups++;
        return;
    }
    g->count++;
    g->interval_ns += s->interval_ns;
    g->samples += s->samples;
    g->tokens += s->tokens;
    g->data_ns += s->phase_ns[TPF_PHASE_DATA - 1];
    g->comm_ns += s->phase_ns[TPF_PHASE_COMM - 1];
    g->live_count++;
    g->live_interval_ns += s->interval_ns;
    g->live_data_ns += s->phase_ns[TPF_PHASE_DATA - 1];
    g->live_comm_ns += s->phase_ns[TPF_PHASE_COMM - 1];
    if (warm) {
        g->warm_count++;
        g->warm_interval_ns += s->interval_ns;
        g->warm_data_ns += s->phase_ns[TPF_PHASE_DATA - 1];
        g->warm_comm_ns += s->phase_ns[TPF_PHASE_COMM - 1];
        sketch_add(&g->step_ns, (double)train);
    }
}

void figs_merge(figs *dst, const figs *src)
{
    dst->count += src->count;
    dst->interval_ns += src->interval_ns;
    dst->duration_ns += src->duration_ns;
    dst->other_ns += src->other_ns;
    dst->samples += src->samples;
    dst->tokens += src->tokens;
    for (int i = 0; i < AGG_NPHASES; i++) dst->phase_ns[i] += src->phase_ns[i];
    dst->interval_sq_ms += src->interval_sq_ms;
    if (src->first_end_ns && (!dst->first_end_ns || src->first_end_ns < dst->first_end_ns))
        dst->first_end_ns = src->first_end_ns;
    if (src->last_end_ns > dst->last_end_ns) dst->last_end_ns = src->last_end_ns;
    dst->unmatched_pops += src->unmatched_pops;
    dst->untracked_threads += src->untracked_threads;
    dst->untracked_groups += src->untracked_groups;
    sketch_merge(&dst->step_ns, &src->step_ns);
    sketch_merge(&dst->data_ns, &src->data_ns);
    gpu_merge(&dst->gpu, &src->gpu);
    gpu_merge(&dst->gpu_win, &src->gpu_win);
    for (int i = 0; i < src->ngroups; i++) {
        const agg_group *sg = src->groups[i];
        agg_group *g = group_of(dst, sg->rank, sg->pid);
        if (!g) {
            dst->untracked_groups++;
            continue;
        }
        figs_group_merge(g, sg);
    }
}

void figs_group_merge(agg_group *dst, const agg_group *src)
{
    dst->count += src->count;
    dst->interval_ns += src->interval_ns;
    dst->samples += src->samples;
    dst->tokens += src->tokens;
    dst->data_ns += src->data_ns;
    dst->comm_ns += src->comm_ns;
    dst->warm_count += src->warm_count;
    dst->warm_interval_ns += src->warm_interval_ns;
    dst->warm_data_ns += src->warm_data_ns;
    dst->warm_comm_ns += src->warm_comm_ns;
    sketch_merge(&dst->step_ns, &src->step_ns);
}

uint64_t figs_global_steps(const figs *f)
{
    uint64_t most = 0;
    int ranked = 0;
    for (int i = 0; i < f->ngroups; i++) {
        if (f->groups[i]->rank < 0) continue;
        ranked++;
        if (f->groups[i]->count > most) most = f->groups[i]->count;
    }
    return ranked >= 2 ? most : f->count;
}

void figs_rates(const figs *f, double *steps_per_s, double *samples_per_s, double *tokens_per_s)
{
    double sps = 0, smp = 0, tok = 0;
    int ng = 0;
    for (int i = 0; i < f->ngroups; i++) {
        const agg_group *g = f->groups[i];
        if (!g->count || !g->interval_ns) continue;
        double secs = (double)g->interval_ns / 1e9;
        sps += (double)g->count / secs;
        smp += (double)g->samples / secs;
        tok += (double)g->tokens / secs;
        ng++;
    }
    *steps_per_s = ng ? sps / ng : NAN;
    *samples_per_s = ng && f->samples ? smp : NAN;
    *tokens_per_s = ng && f->tokens ? tok : NAN;
}

static double ms(double ns) { return ns / 1e6; }

void figs_headline(const figs *f, figs_view *v)
{
    figs_rates(f, &v->steps_per_s, &v->samples_per_s, &v->tokens_per_s);
    const sketch *st = &f->step_ns, *dt = &f->data_ns;
    double n = (double)st->count;
    v->step_mean_ms = ms(sketch_mean(st));
    v->step_p50_ms = ms(sketch_quantile(st, 0.5));
    v->step_p95_ms = ms(sketch_quantile(st, 0.95));
    v->step_p99_ms = ms(sketch_quantile(st, 0.99));
    v->step_min_ms = st->count ? ms(st->min) : NAN;
    v->step_max_ms = st->count ? ms(st->max) : NAN;
    double m = v->step_mean_ms;
    double var = n > 1 ? (f->interval_sq_ms - n * m * m) / (n - 1) : NAN;
    v->step_cv = m > 0 && isfinite(var) ? sqrt(var > 0 ? var : 0) / m : NAN;
    v->data_wait_mean_ms = ms(sketch_mean(dt));
    v->data_wait_p50_ms = ms(sketch_quantile(dt, 0.5));
    v->data_wait_p95_ms = ms(sketch_quantile(dt, 0.95));
    v->data_wait_p99_ms = ms(sketch_quantile(dt, 0.99));
    v->data_wait_max_ms = dt->count ? ms(dt->max) : NAN;
    double iv = f->interval_ns ? (double)f->interval_ns : NAN;
    for (int i = 0; i < AGG_NPHASES; i++) v->phase_share[i] = (double)f->phase_ns[i] / iv;
    v->data_wait_share = v->phase_share[0];
    v->other_share = (double)f->other_ns / iv;
}

typedef struct kv {
    const char *k;
    double v;
} kv;

static void put_obj(jw *w, const char *key, const kv *f, size_t n)
{
    jw_key(w, key);
    jw_obj_begin(w);
    for (size_t i = 0; i < n; i++) jw_knum(w, f[i].k, f[i].v);
    jw_obj_end(w);
}

void figs_view_json(jw *w, const figs_view *v)
{
    jw_knum(w, "steps_per_s", v->steps_per_s);
    jw_knum(w, "samples_per_s", v->samples_per_s);
    jw_knum(w, "tokens_per_s", v->tokens_per_s);
    const kv st[] = {{"mean", v->step_mean_ms}, {"p50", v->step_p50_ms}, {"p95", v->step_p95_ms},
                     {"p99", v->step_p99_ms}, {"min", v->step_min_ms}, {"max", v->step_max_ms},
                     {"cv", v->step_cv}};
    const kv dw[] = {{"mean", v->data_wait_mean_ms}, {"p50", v->data_wait_p50_ms},
                     {"p95", v->data_wait_p95_ms}, {"p99", v->data_wait_p99_ms},
                     {"max", v->data_wait_max_ms}};
    put_obj(w, "step_time_ms", st, sizeof(st) / sizeof(st[0]));
    put_obj(w, "data_wait_ms", dw, sizeof(dw) / sizeof(dw[0]));
    jw_knum(w, "data_wait_share", v->data_wait_share);
    jw_key(w, "phase_share");
    jw_obj_begin(w);
    for (int i = 0; i < AGG_NPHASES; i++) jw_knum(w, agg_phase_names[i], v->phase_share[i]);
    jw_knum(w, "other", v->other_share);
    jw_obj_end(w);
}
