/* Text writers of the run directory (see writers.h, docs/run-format.md). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "record/fmt.h"
#include "core/metrics.h"
#include "record/ranks_json.h"
#include "record/writers.h"
#include "util/afile.h"
#include "trainperf.h"
#include "util/err.h"
#include "util/jsonw.h"

/* ---- CSV ---- */

int rec_csv_num(buf *b, fval v, int decimals)
{
    if (!v.ok || !isfinite(v.v)) return b->err;
    double x = v.v;
    /* Integers print exactly; "-0" would read as a sign where there is none. */
    if (x == 0) x = 0;
    return buf_printf(b, "%.*f", decimals, x);
}

int rec_csv_str(buf *b, const char *s)
{
    if (!s) return b->err;
    if (!strpbrk(s, ",\"\r\n")) return buf_puts(b, s);
    buf_putc(b, '"');
    for (const char *p = s; *p; p++) {
        if (*p == '"') buf_putc(b, '"');
        buf_putc(b, *p);
    }
    return buf_putc(b, '"');
}

int rec_metrics_header(buf *b, int ncpu, int ngpu)
{
    buf_puts(b, "t");
    for (size_t i = 0; i < metric_table_len; i++) buf_printf(b, ",%s", metric_table[i].name);
    for (int c = 0; c < ncpu; c++) buf_printf(b, ",cpu%d_pct", c);
    for (int g = 0; g < ngpu; g++)
        for (size_t i = 0; i < metric_gpu_table_len; i++)
            buf_printf(b, ",gpu%d_%s", g, metric_gpu_table[i].name);
    return buf_putc(b, '\n');
}

const gpu_frame *rec_frame_gpu(const coll_frame *f, int idx)
{
    for (int g = 0; g < f->ngpu && g < FRAME_MAX_GPUS; g++)
        if (f->gpu[g].index == idx) return &f->gpu[g];
    return NULL;
}

int rec_metrics_row(buf *b, const coll_frame *f, int ncpu, int ngpu, const int *gpu_index)
{
    buf_printf(b, "%.6f", f->t);
    for (size_t i = 0; i < metric_table_len; i++) {
        buf_putc(b, ',');
        rec_csv_num(b, *metric_val(&metric_table[i], f), metric_table[i].decimals);
    }
    for (int c = 0; c < ncpu; c++) {
        buf_putc(b, ',');
        /* A core the frame does not have (hot-unplugged) stays unknown. */
        if (c < f->ncpu && c < FRAME_MAX_CPUS) rec_csv_num(b, f->cpu_core_pct[c], metric_core.decimals);
    }
    for (int g = 0; g < ngpu; g++) {
        /* By NVML index, not position: the set of the run's GPUs can narrow
         * (contexts appear) and shift positions in the frame. */
        const gpu_frame *gf = gpu_index ? rec_frame_gpu(f, gpu_index[g])
                                        : g < f->ngpu ? &f->gpu[g] : NULL;
        for (size_t i = 0; i < metric_gpu_table_len; i++) {
            const metric_def *m = &metric_gpu_table[i];
            buf_putc(b, ',');
            if (!gf || gf->lost) continue;
            if (m->kind == METRIC_TEXT)
                rec_csv_str(b, metric_text(m, gf));
            else
                rec_csv_num(b, *metric_val(m, gf), m->decimals);
        }
    }
    return buf_putc(b, '\n');
}

int rec_procs_header(buf *b)
{
    return buf_puts(b, "t,pid,ppid,name,cpu_pct,rss_bytes,threads,read_bytes,write_bytes,"
                       "gpu_mem_bytes,runq_pct\n");
}

int rec_procs_row(buf *b, double t, const frame_proc *p)
{
    char name[sizeof(p->comm) + 1];
    memcpy(name, p->comm, sizeof(p->comm));
    name[sizeof(p->comm)] = 0;
    buf_printf(b, "%.6f,%d,%d,", t, (int)p->pid, (int)p->ppid);
    rec_csv_str(b, name);
    buf_putc(b, ',');
    rec_csv_num(b, p->cpu_pct, 2);
    buf_putc(b, ',');
    rec_csv_num(b, p->rss_bytes, 0);
    buf_printf(b, ",%d,", p->threads);
    rec_csv_num(b, p->read_bytes, 0);
    buf_putc(b, ',');
    rec_csv_num(b, p->write_bytes, 0);
    buf_putc(b, ',');
    rec_csv_num(b, p->gpu_mem_bytes, 0);
    buf_putc(b, ',');
    rec_csv_num(b, p->runq_pct, 2);
    return buf_putc(b, '\n');
}

int rec_steps_header(buf *b)
{
    buf_puts(b, "rank,local_rank,pid,tid,step,start_s,duration_ns,interval_ns");
    for (int i = 0; i < AGG_NPHASES; i++) buf_printf(b, ",%s_ns", agg_phase_names[i]);
    return buf_puts(b, ",other_ns,samples,tokens\n");
}

int rec_steps_row(buf *b, const agg_step *s, uint64_t start_mono_ns)
{
    char line[512]; /* 18 columns of at most 20 digits */
    fmt_line l = {line};
    if (s->rank >= 0) fmt_i64(&l, s->rank);
    *l.p++ = ',';
    if (s->local_rank >= 0) fmt_i64(&l, s->local_rank);
    *l.p++ = ',';
    fmt_i64(&l, s->pid);
    *l.p++ = ',';
    fmt_i64(&l, s->tid);
    *l.p++ = ',';
    fmt_u64(&l, s->step);
    *l.p++ = ',';
    /* start_s: microseconds, rounded half away from zero */
    uint64_t t0 = start_mono_ns, ns = s->begin_ns;
    int64_t us = ns >= t0 ? (int64_t)((ns - t0 + 500) / 1000) : -(int64_t)((t0 - ns + 500) / 1000);
    fmt_fixed(&l, us, 6);
    const uint64_t rest[] = {s->duration_ns, s->interval_ns, s->phase_ns[0], s->phase_ns[1],
                             s->phase_ns[2], s->phase_ns[3], s->phase_ns[4], s->phase_ns[5],
                             s->phase_ns[6], s->other_ns, s->samples, s->tokens};
    _Static_assert(AGG_NPHASES == 7, "steps.csv lists seven phases");
    for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++) {
        *l.p++ = ',';
        fmt_u64(&l, rest[i]);
    }
    *l.p++ = '\n';
    return buf_append(b, line, (size_t)(l.p - line));
}

/* ---- gpu_steps.csv ---- */

int rec_gpu_steps_header(buf *b)
{
    return buf_puts(b, "rank,pid,tid,step,interval_ns,gpu_busy_ns,kernel_ns,kernels,"
                       "gpu_idle_max_ns,copy_ns,h2d_bytes,h2d_pageable_bytes,d2h_bytes,"
                       "d2h_pageable_bytes,memset_bytes,sync_ns,syncs,comm_kernel_ns,sync_idle_ns,"
                       "source,gpu_span_ns\n");
}

static const char *const gpu_source_names[] = {"cupti", "events", "nvml"};

int rec_gpu_steps_row(buf *b, const gpu_step *g)
{
    char line[512]; /* 21 columns of at most 20 digits */
    fmt_line l = {line};
    if (g->rank >= 0) fmt_i64(&l, g->rank);
    *l.p++ = ',';
    fmt_i64(&l, g->pid);
    *l.p++ = ',';
    fmt_i64(&l, g->tid);
    const uint64_t rest[] = {g->step,        g->interval_ns,        g->busy_ns,
                             g->kernel_ns,   g->kernels,            g->idle_max_ns,
                             g->copy_ns,     g->h2d_bytes,          g->h2d_pageable_bytes,
                             g->d2h_bytes,   g->d2h_pageable_bytes, g->memset_bytes,
                             g->sync_ns,     g->syncs,              g->comm_kernel_ns,
                             g->sync_idle_ns};
    /* a row from events has only its span: the kernel figures are unknown */
    int kernels = g->source == GPU_SRC_CUPTI;
    for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++) {
        *l.p++ = ',';
        if (i < 2 || kernels) fmt_u64(&l, rest[i]);
    }
    const char *src = g->source >= 0 && g->source < 3 ? gpu_source_names[g->source] : "";
    *l.p++ = ',';
    memcpy(l.p, src, strlen(src));
    l.p += strlen(src);
    *l.p++ = ',';
    if (g->span_ok) fmt_u64(&l, g->span_ns);
    *l.p++ = '\n';
    return buf_append(b, line, (size_t)(l.p - line));
}

/* ---- alerts.jsonl ---- */

static const char *severity_name(int s)
{
    return s == ALERT_CRITICAL ? "critical" : s == ALERT_WARNING ? "warning" : "info";
}

int rec_alert_line(buf *b, const alert_event *e)
{
    jw w;
    jw_init(&w, b, 0);
    jw_obj_begin(&w);
    jw_key(&w, "t");
    jw_numf(&w, e->t, 6);
    jw_kstr(&w, "rule", e->rule);
    jw_kstr(&w, "expr", e->expr);
    jw_kstr(&w, "state", e->fired ? "fired" : "cleared");
    jw_kstr(&w, "severity", severity_name(e->severity));
    jw_knum(&w, "value", e->value);
    jw_kstr(&w, "message", e->message);
    jw_obj_end(&w);
    buf_putc(b, '\n');
    return jw_error(&w) ? jw_error(&w) : b->err;
}

/* ---- run.json ---- */

static void put_exit(jw *w, const run_exit *e)
{
    jw_key(w, "exit");
    if (!e->known) {
        jw_null(w);
        return;
    }
    jw_obj_begin(w);
    jw_kint(w, "code", e->code);
    jw_key(w, "signal");
    if (e->signal > 0)
        jw_int(w, e->signal);
    else
        jw_null(w);
    jw_obj_end(w);
}

static void put_sources(jw *w, int n, const run_source *src)
{
    jw_key(w, "sources");
    jw_obj_begin(w);
    for (int i = 0; i < n; i++) jw_kstr(w, src[i].name, src[i].status);
    jw_obj_end(w);
}

static void put_fval(jw *w, const char *k, fval v)
{
    jw_key(w, k);
    if (v.ok)
        jw_num(w, v.v);
    else
        jw_null(w);
}

int rec_run_json(buf *b, const sink_ctx *ctx, const sink_run *ri)
{
    static const run_meta none = {.mode = "run", .mem_total_bytes = NAN, .auto_hook = -1};
    const run_meta *m = ctx->meta ? ctx->meta : &none;
    jw w;
    jw_doc_begin(&w, b, "format_version", 1);
    jw_kstr(&w, "trainperf_version", TPF_VERSION_STRING);
    jw_kstr(&w, "mode", m->mode ? m->mode : "run");
    jw_key(&w, "command");
    jw_arr_begin(&w);
    for (int i = 0; m->argv && m->argv[i]; i++) jw_str(&w, m->argv[i]);
    jw_arr_end(&w);
    jw_kstr(&w, "cwd", m->cwd);
    jw_kstr(&w, "host", m->host);
    jw_kstr(&w, "kernel", m->kernel);
    jw_key(&w, "cpus");
    if (m->cpus > 0)
        jw_int(&w, m->cpus);
    else
        jw_null(&w);
    jw_knum(&w, "mem_total_bytes", m->mem_total_bytes);
    jw_key(&w, "start_unix_s");
    jw_numf(&w, ctx->start_unix_s, 6);
    jw_kuint(&w, "start_mono_ns", ctx->start_mono_ns);
    jw_key(&w, "end_unix_s");
    if (ri->ended)
        jw_numf(&w, ri->end_unix_s, 6);
    else
        jw_null(&w);
    jw_key(&w, "duration_s");
    if (ri->ended)
        jw_numf(&w, ri->duration_s, 6);
    else
        jw_null(&w);
    jw_knum(&w, "interval_s", ctx->interval_s);
    jw_kint(&w, "root_pid", m->root_pid);
    /* where the probes' segments are while the run goes (null: live/) */
    jw_key(&w, "segments_dir");
    if (m->segments_dir && *m->segments_dir)
        jw_str(&w, m->segments_dir);
    else
        jw_null(&w);
    put_exit(&w, &ri->exit);
    jw_key(&w, "gpus");
    jw_arr_begin(&w);
    for (int i = 0; i < ri->ngpu_cols; i++) {
        const gpu_frame *g = &ri->gpus0[i];
        jw_obj_begin(&w);
        jw_kint(&w, "index", g->index);
        jw_kstr(&w, "uuid", g->uuid);
        jw_kstr(&w, "name", g->name);
        put_fval(&w, "mem_total_bytes", g->mem_total_bytes);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    put_sources(&w, ri->nsources, ri->sources);
    jw_key(&w, "options");
    jw_obj_begin(&w);
    jw_knum(&w, "interval_s", ctx->interval_s);
    jw_key(&w, "auto");
    if (m->auto_hook >= 0)
        jw_bool(&w, m->auto_hook);
    else
        jw_null(&w);
    jw_key(&w, "alerts");
    jw_arr_begin(&w);
    for (int i = 0; i < m->nalert_rules; i++) jw_str(&w, m->alert_rules[i]);
    jw_arr_end(&w);
    jw_obj_end(&w);
    jw_obj_end(&w);
    buf_putc(b, '\n');
    return jw_error(&w) ? jw_error(&w) : b->err;
}

/* ---- summary.json ---- */

enum { S_MEAN = 1, S_MIN = 2, S_MAX = 4 };

static void put_stat(jw *w, const char *k, const run_stat *s, int which)
{
    jw_key(w, k);
    jw_obj_begin(w);
    if (which & S_MEAN) jw_knum(w, "mean", s->n ? s->sum / (double)s->n : NAN);
    if (which & S_MIN) jw_knum(w, "min", s->n ? s->min : NAN);
    if (which & S_MAX) jw_knum(w, "max", s->n ? s->max : NAN);
    jw_obj_end(w);
}

static const run_stat *res_stat(const run_res *r, const char *name)
{
    const metric_def *m = metric_find(name);
    return m ? &r->m[m - metric_table] : NULL;
}

static void put_res_stat(jw *w, const char *k, const run_res *r, const char *name, int which)
{
    const run_stat *s = res_stat(r, name);
    if (s) put_stat(w, k, s, which);
}

static void put_resources(jw *w, const run_res *r)
{
    jw_key(w, "resources");
    jw_obj_begin(w);
    put_res_stat(w, "cpu_pct", r, "cpu_pct", S_MEAN | S_MAX);
    put_res_stat(w, "tree_cpu_pct", r, "tree_cpu_pct", S_MEAN | S_MAX);
    put_res_stat(w, "main_cpu_pct", r, "main_cpu_pct", S_MEAN | S_MAX);
    const run_stat *tp = res_stat(r, "tree_procs");
    jw_knum(w, "tree_procs_max", tp && tp->n ? tp->max : NAN);
    put_res_stat(w, "tree_rss_bytes", r, "tree_rss_bytes", S_MEAN | S_MAX);
    put_res_stat(w, "mem_available_bytes", r, "mem_available_bytes", S_MIN);
    const run_stat *mt = res_stat(r, "mem_total_bytes");
    jw_knum(w, "mem_total_bytes", mt && mt->n ? mt->max : NAN);
    put_res_stat(w, "swap_used_bytes", r, "swap_used_bytes", S_MAX);
    jw_key(w, "psi");
    jw_obj_begin(w);
    static const char *const psi[] = {"cpu_some_pct", "mem_some_pct", "mem_full_pct",
                                      "io_some_pct", "io_full_pct"};
    for (size_t i = 0; i < sizeof(psi) / sizeof(psi[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "psi_%s", psi[i]);
        put_res_stat(w, psi[i], r, name, S_MEAN | S_MAX);
    }
    jw_obj_end(w);
    /* metrics shown by mean and max under their own name */
    static const char *const plain[] = {"cpu_iowait_pct", "disk_read_bps", "disk_write_bps",
                                        "net_rx_bps", "net_tx_bps"};
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        put_res_stat(w, plain[i], r, plain[i], S_MEAN | S_MAX);
    jw_key(w, "cpus");
    if (r->cpus > 0)
        jw_int(w, r->cpus);
    else
        jw_null(w);
    jw_kuint(w, "samples", r->samples);
    jw_obj_end(w);
}

static void put_gpus(jw *w, const run_res *r)
{
    jw_key(w, "gpus");
    jw_arr_begin(w);
    for (int g = 0; g < r->ngpu; g++) {
        const run_gpu_res *gr = &r->gpu[g];
        jw_obj_begin(w);
        jw_kint(w, "index", gr->index);
        jw_kstr(w, "name", gr->name);
        put_stat(w, "util_pct", &gr->util, S_MEAN | S_MIN | S_MAX);
        put_stat(w, "mem_used_bytes", &gr->mem_used, S_MAX);
        jw_knum(w, "mem_total_bytes", gr->mem_total);
        jw_knum(w, "mem_headroom_bytes",
                gr->mem_used.n ? gr->mem_total - gr->mem_used.max : NAN);
        jw_knum(w, "energy_j", gr->energy_ok ? gr->energy_j : NAN);
        put_stat(w, "power_w", &gr->power, S_MEAN | S_MAX);
        put_stat(w, "temp_c", &gr->temp, S_MAX);
        double ns = gr->samples ? (double)gr->samples : NAN;
        jw_knum(w, "throttled_share", (double)gr->throttled / ns);
        jw_key(w, "throttle_reasons");
        jw_obj_begin(w);
        for (int i = 0; i < gr->nreasons; i++) jw_knum(w, gr->reason[i], (double)gr->reason_n[i] / ns);
        jw_obj_end(w);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

static double ms(double ns) { return ns / 1e6; }

/* steps.gpu: what the GPU did during the warm steps (collect/gpujoin.h);
 * absent on a run without GPU records (a CPU run's summary is as before). */
static void put_gpu_steps(jw *w, const char *key, const figs_gpu *g)
{
    if (!g->steps && !g->records && !g->event_steps) return;
    jw_key(w, key);
    double n = g->warm_steps ? (double)g->warm_steps : NAN;
    double iv = g->interval_ns ? (double)g->interval_ns : NAN;
    jw_obj_begin(w);
    jw_kuint(w, "steps", g->steps);
    jw_kuint(w, "warm_steps", g->warm_steps);
    jw_knum(w, "busy_share", (double)g->busy_ns / iv);
    jw_knum(w, "busy_share_p10", sketch_quantile(&g->busy_share, 0.1) / 1e6);
    jw_knum(w, "busy_share_p50", sketch_quantile(&g->busy_share, 0.5) / 1e6);
    jw_knum(w, "busy_ms_mean", ms((double)g->busy_ns) / n);
    jw_knum(w, "kernel_ms_mean", ms((double)g->kernel_ns) / n);
    jw_knum(w, "kernels_per_step", (double)g->kernels / n);
    jw_knum(w, "comm_kernel_ms_mean", ms((double)g->comm_kernel_ns) / n);
    jw_knum(w, "kernel_us_p50", sketch_quantile(&g->kernel_dur_ns, 0.5) / 1e3);
    jw_knum(w, "kernel_us_p90", sketch_quantile(&g->kernel_dur_ns, 0.9) / 1e3);
    jw_knum(w, "sync_share", (double)g->sync_ns / iv);
    jw_knum(w, "syncs_per_step", (double)g->syncs / n);
    jw_knum(w, "sync_idle_share", (double)g->sync_idle_ns / iv);
    jw_knum(w, "copy_ms_mean", ms((double)g->copy_ns) / n);
    jw_knum(w, "h2d_bytes_per_step", (double)g->h2d_bytes / n);
    jw_knum(w, "h2d_pageable_bytes_per_step", (double)g->h2d_pageable_bytes / n);
    jw_knum(w, "d2h_bytes_per_step", (double)g->d2h_bytes / n);
    jw_knum(w, "d2h_pageable_bytes_per_step", (double)g->d2h_pageable_bytes / n);
    jw_kuint(w, "records", g->records);
    jw_kuint(w, "records_late", g->records_late);
    jw_kuint(w, "steps_in_profiler", g->steps_paused);
    /* outside the kernel-detail windows: the GPU's time from CUDA events */
    jw_kuint(w, "event_steps", g->event_steps);
    jw_kuint(w, "undetailed_steps", g->steps_undetailed);
    double sn = g->span_steps ? (double)g->span_steps : NAN;
    jw_knum(w, "gpu_ms_mean", ms((double)g->span_ns) / sn);
    jw_knum(w, "gpu_share", g->span_interval_ns ? (double)g->span_ns / (double)g->span_interval_ns : NAN);
    jw_obj_end(w);
}

static void put_steps(jw *w, const sink_run *s, uint64_t start_mono_ns)
{
    const figs *a = s->steps;
    jw_key(w, "steps");
    jw_obj_begin(w);
    if (s->steps_unknown) {
        jw_key(w, "count");
        jw_null(w);
        jw_key(w, "global_steps");
        jw_null(w);
    } else {
        jw_kuint(w, "count", a->count);
        rec_global_steps(w, a);
    }
    jw_key(w, "ranks");
    jw_arr_begin(w);
    for (int i = 0; i < a->ngroups; i++)
        if (a->groups[i]->rank >= 0) jw_int(w, a->groups[i]->rank);
    jw_arr_end(w);
    jw_knum(w, "first_step_s",
            a->count ? ((double)a->first_end_ns - (double)start_mono_ns) / 1e9 : NAN);
    figs_view v;
    figs_headline(a, &v);
    figs_view_json(w, &v);
    jw_key(w, "per_rank");
    jw_arr_begin(w);
    for (int i = 0; i < a->ngroups; i++) {
        const agg_group *g = a->groups[i];
        jw_obj_begin(w);
        jw_key(w, "rank");
        if (g->rank >= 0)
            jw_int(w, g->rank);
        else
            jw_null(w);
        jw_kint(w, "pid", g->pid);
        jw_kuint(w, "count", g->count);
        jw_knum(w, "step_time_ms_p50", ms(sketch_quantile(&g->step_ns, 0.5)));
        jw_knum(w, "step_time_ms_p95", ms(sketch_quantile(&g->step_ns, 0.95)));
        jw_knum(w, "steps_per_s",
                g->interval_ns ? (double)g->count / ((double)g->interval_ns / 1e9) : NAN);
        rec_rank_extra(w, g);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_kuint(w, "events_dropped", s->events_dropped);
    /* a full disk under the probes' segments (probe/segment.h) */
    jw_key(w, "no_room");
    jw_obj_begin(w);
    jw_kuint(w, "processes", s->noroom_procs);
    jw_kuint(w, "events_dropped", s->noroom_events);
    jw_obj_end(w);
    put_gpu_steps(w, "gpu", &a->gpu);
    put_gpu_steps(w, "gpu_windows", &a->gpu_win);
    jw_obj_end(w);
}

int rec_summary_json(buf *b, const sink_run *s, uint64_t start_mono_ns)
{
    jw w;
    jw_doc_begin(&w, b, "format_version", 1);
    jw_key(&w, "duration_s");
    jw_numf(&w, s->duration_s, 6);
    put_exit(&w, &s->exit);
    put_steps(&w, s, start_mono_ns);
    put_resources(&w, s->res);
    put_gpus(&w, s->res);
    jw_key(&w, "alerts");
    jw_arr_begin(&w);
    for (int i = 0; i < s->nalerts; i++) {
        jw_obj_begin(&w);
        jw_kstr(&w, "rule", s->alerts[i].rule);
        jw_key(&w, "t");
        jw_numf(&w, s->alerts[i].t, 6);
        jw_kstr(&w, "message", s->alerts[i].message);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_key(&w, "trace");
    jw_obj_begin(&w);
    jw_kuint(&w, "events_written", s->tally ? s->tally->trace_written : 0);
    jw_kuint(&w, "events_dropped", s->tally ? s->tally->trace_dropped : 0);
    jw_obj_end(&w);
    rec_loss_json(&w, s->tally ? &s->tally->lost : NULL);
    put_sources(&w, s->nsources, s->sources);
    /* Filled by the diagnosis (report_finish_run). */
    jw_key(&w, "diagnosis");
    jw_null(&w);
    jw_obj_end(&w);
    buf_putc(b, '\n');
    return jw_error(&w) ? jw_error(&w) : b->err;
}

int rec_write_atomic(const char *path, const buf *b)
{
    /* One helper for every whole-file write (util/afile.h): no symlink is
     * followed, the temporary is made with O_EXCL, fsync'd and renamed. */
    if (b->err) return b->err;
    return afile_write(path, b->data ? b->data : "", b->len);
}
