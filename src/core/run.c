/* Run-level aggregates (see run.h). */
#include <math.h>
#include <string.h>

#include "core/metrics.h"
#include "core/run.h"

/* ---- resource aggregates ---- */

static void stat_init(run_stat *s)
{
    s->n = 0;
    s->sum = 0;
    s->min = INFINITY;
    s->max = -INFINITY;
}

static void stat_add(run_stat *s, fval v)
{
    if (!v.ok || !isfinite(v.v)) return;
    s->n++;
    s->sum += v.v;
    if (v.v < s->min) s->min = v.v;
    if (v.v > s->max) s->max = v.v;
}

void run_res_init(run_res *r)
{
    memset(r, 0, sizeof(*r));
    for (size_t i = 0; i < sizeof(r->m) / sizeof(r->m[0]); i++) stat_init(&r->m[i]);
    for (int g = 0; g < FRAME_MAX_GPUS; g++) {
        run_gpu_res *gr = &r->gpu[g];
        stat_init(&gr->util);
        stat_init(&gr->mem_used);
        stat_init(&gr->power);
        stat_init(&gr->temp);
        gr->mem_total = NAN;
    }
}

static void reasons_add(run_gpu_res *gr, const char *words)
{
    char w[32];
    const char *p = words;
    while (*p) {
        const char *e = strchr(p, '+');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0 && n < sizeof(w)) {
            memcpy(w, p, n);
            w[n] = 0;
            int i;
            for (i = 0; i < gr->nreasons; i++)
                if (strcmp(gr->reason[i], w) == 0) break;
            if (i == gr->nreasons && gr->nreasons < RUN_MAX_REASONS) {
                memcpy(gr->reason[i], w, n + 1);
                gr->nreasons++;
            }
            if (i < gr->nreasons) gr->reason_n[i]++;
        }
        if (!e) break;
        p = e + 1;
    }
}

void run_res_add(run_res *r, const coll_frame *f)
{
    r->samples++;
    if (f->ncpu > r->cpus) r->cpus = f->ncpu;
    size_t nm = metric_table_len < RUN_MAX_METRICS ? metric_table_len : RUN_MAX_METRICS;
    for (size_t i = 0; i < nm; i++) stat_add(&r->m[i], *metric_val(&metric_table[i], f));
    int ng = f->ngpu < FRAME_MAX_GPUS ? f->ngpu : FRAME_MAX_GPUS;
    for (int g = 0; g < ng; g++) {
        const gpu_frame *gf = &f->gpu[g];
        /* One slot per NVML index, in order of first appearance. */
        int k;
        for (k = 0; k < r->ngpu; k++)
            if (r->gpu[k].index == gf->index) break;
        if (k == r->ngpu) {
            if (r->ngpu == FRAME_MAX_GPUS) continue;
            r->ngpu++;
        }
        run_gpu_res *gr = &r->gpu[k];
        gr->index = gf->index;
        memcpy(gr->name, gf->name, sizeof(gr->name));
        gr->name[sizeof(gr->name) - 1] = 0;
        if (gf->lost) continue;
        gr->samples++;
        stat_add(&gr->util, gf->util_pct);
        stat_add(&gr->mem_used, gf->mem_used_bytes);
        stat_add(&gr->power, gf->power_w);
        stat_add(&gr->temp, gf->temp_c);
        if (gf->mem_total_bytes.ok) gr->mem_total = gf->mem_total_bytes.v;
        if (gf->energy_j.ok) {
            gr->energy_j += gf->energy_j.v;
            gr->energy_ok = 1;
        }
        if (gf->throttle[0]) {
            gr->throttled++;
            reasons_add(gr, gf->throttle);
        }
    }
}

double run_stat_mean(const run_stat *s) { return s->n ? s->sum / (double)s->n : NAN; }
