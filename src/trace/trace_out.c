/* Rendering of a trace analysis: JSON for machines, aligned tables for the
 * terminal, markdown for reports. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_int.h"
#include "trainperf.h"
#include "util/jsonw.h"
#include "util/table.h"

static const char *trace_type_name(int mask)
{
    static const char *const names[] = {
        "IDLE", "COMPUTATION", "COMMUNICATION", "COMPUTATION overlapping COMMUNICATION",
        "MEMORY", "COMPUTATION overlapping MEMORY", "COMMUNICATION overlapping MEMORY",
        "COMPUTATION overlapping COMMUNICATION overlapping MEMORY",
    };
    if (mask == KT_OTHER) return "OTHER";
    return names[mask & 7];
}

static double pct(int64_t part, int64_t whole)
{
    if (whole <= 0) return NAN;
    return round(10000.0 * (double)part / (double)whole) / 100.0;
}

/* The tables whose text and JSON show the same columns (tr_col). */
static const tr_col stream_cols[] = {
    TR_COL("stream", 8, TBL_RIGHT, COUNT, I64, "stream", tr_stream, stream),
    TR_COL("kernels", 9, TBL_RIGHT, COUNT, U64, "kernels", tr_stream, kernels),
    TR_COL("host wait ms", 14, TBL_RIGHT, MS, I64, "host_wait_ns", tr_stream, host_wait),
    TR_COL("kernel wait ms", 14, TBL_RIGHT, MS, I64, "kernel_wait_ns", tr_stream, kernel_wait),
    TR_COL("other ms", 14, TBL_RIGHT, MS, I64, "other_ns", tr_stream, other),
};
static const tr_col op_cols[] = {
    TR_COL("operator", 0, 0, NAME, PSTR, "name", tr_op, name),
    TR_COL("count", 8, TBL_RIGHT, COUNT, U64, "count", tr_op, count),
    TR_COL("self ms", 12, TBL_RIGHT, MS, I64, "self_ns", tr_op, self),
    TR_COL("total ms", 12, TBL_RIGHT, MS, I64, "total_ns", tr_op, total),
};

static void j_launch(jw *w, const char *key, const tr_launch *l)
{
    jw_key(w, key);
    static const jw_field sums[] = {
        JW_FIELD(U64, "count", tr_launch, count),
        JW_FIELD(I64, "cpu_sum_ns", tr_launch, cpu_sum),
        JW_FIELD(I64, "gpu_sum_ns", tr_launch, gpu_sum),
        JW_FIELD(I64, "delay_sum_ns", tr_launch, delay_sum),
        JW_FIELD(I64, "cpu_max_ns", tr_launch, cpu_max),
        JW_FIELD(I64, "delay_max_ns", tr_launch, delay_max),
    };
    static const jw_field outliers[] = {
        JW_FIELD(U64, "cpu_outliers", tr_launch, cpu_outliers),
        JW_FIELD(U64, "delay_outliers", tr_launch, delay_outliers),
        JW_FIELD(U64, "short_kernels", tr_launch, short_kernels),
    };
    jw_obj_begin(w);
    jw_fields(w, l, sums, JW_NFIELDS(sums));
    /* NAN (no launches) is written as null */
    jw_knum(w, "delay_mean_ns", l->count ? (double)l->delay_sum / (double)l->count : NAN);
    jw_fields(w, l, outliers, JW_NFIELDS(outliers));
    jw_obj_end(w);
}

int trace_result_json(const trace_result *r, buf *out)
{
    jw w;
    jw_init(&w, out, 1);
    jw_obj_begin(&w);
    jw_kstr(&w, "compat", r->opts.compat_hta == 2 ? "hta-0.6" : r->opts.compat_hta ? "hta-0.5" : NULL);
    jw_kstr(&w, "time_unit", "ns");
    int64_t labels[8] = {0};
    jw_key(&w, "ranks");
    jw_arr_begin(&w);
    for (int i = 0; i < r->nranks; i++) {
        const tr_rank *k = &r->ranks[i];
        jw_obj_begin(&w);
        jw_kint(&w, "rank", k->rank);
        jw_kstr(&w, "rank_from", k->rank_from);
        jw_kstr(&w, "file", k->path);
        jw_kuint(&w, "bytes", k->bytes);
        jw_kuint(&w, "events", k->events);
        jw_kuint(&w, "complete_events", k->records);
        jw_kbool(&w, "array_form", k->array_form);
        jw_kbool(&w, "unterminated", k->unterminated);
        jw_kbool(&w, "ts_rounded_to_us", k->ts_rounded);
        jw_kbool(&w, "last_step_trimmed", k->trimmed);
        jw_kuint(&w, "gpu_events", k->gpu_events);
        jw_kuint(&w, "gpu_events_without_launch", k->unmatched);
        jw_kuint(&w, "events_out_of_range", k->bad_numbers);
        jw_key(&w, "temporal");
        if (k->kernel_time > 0 || k->gpu_events) {
            jw_obj_begin(&w);
            jw_kint(&w, "idle_ns", k->idle);
            jw_kint(&w, "compute_ns", k->compute);
            jw_kint(&w, "non_compute_ns", k->non_compute);
            jw_kint(&w, "kernel_ns", k->kernel_time);
            jw_knum(&w, "idle_pctg", pct(k->idle, k->kernel_time));
            jw_knum(&w, "compute_pctg", pct(k->compute, k->kernel_time));
            jw_knum(&w, "non_compute_pctg", pct(k->non_compute, k->kernel_time));
            jw_obj_end(&w);
        } else {
            jw_null(&w);
        }
        jw_key(&w, "kernel_types");
        jw_obj_begin(&w);
        for (int m = 1; m < 8; m++) {
            labels[m] += k->label_time[m];
            if (k->label_time[m]) jw_kint(&w, trace_type_name(m), k->label_time[m]);
        }
        jw_obj_end(&w);
        jw_key(&w, "overlap");
        jw_obj_begin(&w);
        jw_kint(&w, "comm_ns", k->comm_total);
        jw_kint(&w, "overlap_ns", k->overlap);
        jw_knum(&w, "comp_comm_overlap_pctg", pct(k->overlap, k->comm_total));
        jw_obj_end(&w);
        j_launch(&w, "launch", &k->launch);
        tr_table_json(&w, "idle_streams", stream_cols, TR_NCOLS(stream_cols), k->streams,
                      k->nstreams, sizeof(tr_stream));
        jw_key(&w, "top_kernels");
        jw_arr_begin(&w);
        for (size_t j = 0; j < k->nkernels; j++) {
            const tr_kernel *kk = &k->kernels[j];
            jw_obj_begin(&w);
            jw_kstr(&w, "name", kk->name);
            jw_kstr(&w, "type", trace_type_name(kk->type));
            jw_kuint(&w, "count", kk->count);
            jw_kint(&w, "total_ns", kk->sum);
            jw_knum(&w, "mean_ns", (double)kk->sum / (double)kk->count);
            jw_kint(&w, "min_ns", kk->min);
            jw_kint(&w, "max_ns", kk->max);
            jw_knum(&w, "std_ns", kk->std);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        tr_table_json(&w, "top_ops_self", op_cols, TR_NCOLS(op_cols), k->ops_self, k->nops_self,
                      sizeof(tr_op));
        tr_table_json(&w, "top_ops_total", op_cols, TR_NCOLS(op_cols), k->ops_total,
                      k->nops_total, sizeof(tr_op));
        trace_extra_json(&w, k);
        jw_key(&w, "steps");
        jw_arr_begin(&w);
        for (size_t j = 0; j < k->nsteps; j++) {
            const tr_step *s = &k->steps[j];
            jw_obj_begin(&w);
            jw_kint(&w, "step", s->num);
            jw_kint(&w, "dur_ns", s->dur);
            jw_kuint(&w, "kernels", s->kernels);
            jw_kint(&w, "gpu_span_ns", s->span);
            jw_kint(&w, "gpu_busy_ns", s->busy);
            jw_kint(&w, "compute_ns", s->compute);
            jw_kint(&w, "comm_ns", s->comm);
            jw_kint(&w, "overlap_ns", s->overlap);
            j_launch(&w, "launch", &s->launch);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    /* Across ranks, as HTA's kernel type table. */
    int64_t total = 0;
    for (int m = 1; m < 8; m++) total += labels[m];
    jw_key(&w, "kernel_type_breakdown");
    jw_arr_begin(&w);
    for (int m = 1; m < 8; m++) {
        if (!labels[m]) continue;
        jw_obj_begin(&w);
        jw_kstr(&w, "kernel_type", trace_type_name(m));
        jw_kint(&w, "ns", labels[m]);
        jw_knum(&w, "percentage", total ? round(1000.0 * (double)labels[m] / (double)total) / 10.0 : NAN);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_key(&w, "warnings");
    jw_arr_begin(&w);
    for (size_t j = 0; j < r->nwarnings; j++) jw_str(&w, r->warnings[j]);
    jw_arr_end(&w);
    jw_key(&w, "stragglers");
    jw_arr_begin(&w);
    for (size_t j = 0; j < r->nstragglers; j++) {
        const tr_straggler *s = &r->stragglers[j];
        jw_obj_begin(&w);
        jw_kint(&w, "rank", s->rank);
        jw_kint(&w, "step", s->step);
        jw_kint(&w, "dur_ns", s->dur);
        jw_kint(&w, "median_ns", s->median);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    buf_putc(out, '\n');
    return jw_error(&w) ? jw_error(&w) : out->err;
}

/* ---- text and markdown --------------------------------------------------- */
/* Every table below is a column description (util/table.h) plus the loop
 * that turns one computed row into cells; the table writer lays it out in
 * text or Markdown. */

typedef struct fmt {
    buf *out;
    int md;
    int color;
} fmt;

static const char *c_(const fmt *f, const char *code) { return f->color ? code : ""; }

static int tfmt(const fmt *f) { return f->md ? TBL_MD : TBL_TEXT; }

/* Milliseconds with 3 decimals keep ns-level detail readable. */
static void ms(char *b, size_t n, int64_t ns)
{
    snprintf(b, n, "%.3f", (double)ns / 1e6);
}

static void heading(fmt *f, const char *text) { tbl_heading(f->out, tfmt(f), f->color, text); }

static void begin(fmt *f, tbl *t, const char *title, const tbl_col *cols, int n)
{
    tbl_begin_sub(t, f->out, tfmt(f), f->color, title, cols, n);
}

static const tbl_col gpu_time_cols[] = {{"", 14, TBL_RIGHT}, {"ms", 12, TBL_RIGHT}, {"%", 8, TBL_RIGHT}};
static const tbl_col type_cols[] = {{"ms", 12, TBL_RIGHT}, {"%", 8, TBL_RIGHT}, {"type", 0, 0}};
static const tbl_col kernel_cols[] = {
    {"count", 8, TBL_RIGHT}, {"total ms", 11, TBL_RIGHT}, {"mean us", 10, TBL_RIGHT}, {"min us", 10, TBL_RIGHT},
    {"max us", 10, TBL_RIGHT}, {"type", 6, TBL_RIGHT}, {"kernel", 0, 0},
};
static const tbl_col step_cols[] = {
    {"step", 8, TBL_RIGHT}, {"ms", 10, TBL_RIGHT}, {"kernels", 9, TBL_RIGHT}, {"GPU busy ms", 12, TBL_RIGHT},
    {"compute ms", 11, TBL_RIGHT}, {"comm ms", 11, TBL_RIGHT}, {"launch delay us", 16, TBL_RIGHT},
};

static void gpu_tables(fmt *f, const tr_rank *k)
{
    char a[64], b[64], c[64], d[64], e[64], g[64], nm[96];
    tbl t;
    begin(f, &t, "GPU time (union of streams)", gpu_time_cols, 3);
    struct { const char *n; int64_t v; } rows[] = {
        {"compute", k->compute}, {"non-compute", k->non_compute}, {"idle", k->idle},
        {"total", k->kernel_time},
    };
    for (size_t i = 0; i < 4; i++) {
        ms(a, sizeof(a), rows[i].v);
        snprintf(b, sizeof(b), "%.2f", pct(rows[i].v, k->kernel_time));
        const char *cells[] = {rows[i].n, a, b};
        tbl_row(&t, cells, TBL_PLAIN);
    }
    tbl_end(&t);
    begin(f, &t, "Kernel types and overlaps", type_cols, 3);
    int64_t tot = 0;
    for (int m = 1; m < 8; m++) tot += k->label_time[m];
    for (int m = 1; m < 8; m++) {
        if (!k->label_time[m]) continue;
        ms(a, sizeof(a), k->label_time[m]);
        snprintf(b, sizeof(b), "%.1f", tot ? 100.0 * (double)k->label_time[m] / (double)tot : 0.0);
        const char *cells[] = {a, b, trace_type_name(m)};
        tbl_row(&t, cells, TBL_PLAIN);
    }
    tbl_end(&t);
    if (k->comm_total) {
        ms(a, sizeof(a), k->overlap);
        ms(b, sizeof(b), k->comm_total);
        buf_printf(f->out, "%scommunication overlapped by computation: %s of %s ms (%.2f%%)\n",
                   f->md ? "\n" : "  ", a, b, pct(k->overlap, k->comm_total));
    }
    begin(f, &t, "Top kernels by total time", kernel_cols, 7);
    for (size_t i = 0; i < k->nkernels; i++) {
        const tr_kernel *kk = &k->kernels[i];
        snprintf(a, sizeof(a), "%llu", (unsigned long long)kk->count);
        ms(b, sizeof(b), kk->sum);
        snprintf(c, sizeof(c), "%.3f", (double)kk->sum / (double)kk->count / 1e3);
        snprintf(d, sizeof(d), "%.3f", (double)kk->min / 1e3);
        snprintf(e, sizeof(e), "%.3f", (double)kk->max / 1e3);
        snprintf(g, sizeof(g), "%.4s", trace_type_name(kk->type));
        trace_short_name(nm, sizeof(nm), kk->name);
        const char *cells[] = {a, b, c, d, e, g, nm};
        tbl_row(&t, cells, TBL_PLAIN);
    }
    tbl_end(&t);
    tr_table(f->out, tfmt(f), f->color, "GPU idle time per stream", stream_cols,
             TR_NCOLS(stream_cols), k->streams, k->nstreams, sizeof(tr_stream));
    const tr_launch *l = &k->launch;
    if (l->count) {
        heading(f, "Kernel launches");
        buf_printf(f->out,
                   "%s%llu launches: CPU %.3f us mean (max %.3f), GPU %.3f us mean, "
                   "launch delay %.3f us mean (max %.3f)\n%s%llu launches over 50 us on the CPU, "
                   "%llu delayed over 100 us, %llu kernels shorter than their launch\n",
                   f->md ? "" : "  ", (unsigned long long)l->count,
                   (double)l->cpu_sum / (double)l->count / 1e3, (double)l->cpu_max / 1e3,
                   (double)l->gpu_sum / (double)l->count / 1e3,
                   (double)l->delay_sum / (double)l->count / 1e3, (double)l->delay_max / 1e3,
                   f->md ? "\n" : "  ", (unsigned long long)l->cpu_outliers,
                   (unsigned long long)l->delay_outliers, (unsigned long long)l->short_kernels);
    }
}

static void step_table(fmt *f, const tr_rank *k)
{
    char a[64], b[64], c[64], d[64], e[64], g[64], h[64];
    tbl t;
    begin(f, &t, "Steps", step_cols, 7);
    for (size_t i = 0; i < k->nsteps; i++) {
        const tr_step *s = &k->steps[i];
        snprintf(a, sizeof(a), "%ld", s->num);
        ms(b, sizeof(b), s->dur);
        snprintf(c, sizeof(c), "%llu", (unsigned long long)s->kernels);
        ms(d, sizeof(d), s->busy);
        ms(e, sizeof(e), s->compute);
        ms(g, sizeof(g), s->comm);
        if (s->launch.count)
            snprintf(h, sizeof(h), "%.3f", (double)s->launch.delay_sum / (double)s->launch.count / 1e3);
        else
            snprintf(h, sizeof(h), "-");
        const char *cells[] = {a, b, c, d, e, g, h};
        tbl_row(&t, cells, TBL_PLAIN);
    }
    tbl_end(&t);
}

static void render_rank(fmt *f, const tr_rank *k)
{
    if (f->md) buf_printf(f->out, "\n## Rank %ld — `%s`\n", k->rank, k->path);
    else buf_printf(f->out, "\n%s== rank %ld: %s ==%s\n", c_(f, "\033[1m"), k->rank, k->path, c_(f, "\033[0m"));
    buf_printf(f->out, "%s%llu events, %llu complete, %llu on the GPU%s%s\n", f->md ? "\n" : "",
               (unsigned long long)k->events, (unsigned long long)k->records,
               (unsigned long long)k->gpu_events,
               k->trimmed ? "; last step trimmed (HTA)" : "",
               k->unterminated ? "; array without closing bracket" : "");
    if (k->gpu_events)
        gpu_tables(f, k);
    else
        buf_printf(f->out, "%sno GPU activity in this trace: CPU analyses only\n", f->md ? "\n" : "  ");
    for (int pass = 0; pass < 2; pass++) {
        const tr_op *ops = pass ? k->ops_total : k->ops_self;
        size_t n = pass ? k->nops_total : k->nops_self;
        if (!n) continue;
        tr_table(f->out, tfmt(f), f->color,
                 pass ? "Top CPU operators by total time" : "Top CPU operators by self time", op_cols,
                 TR_NCOLS(op_cols), ops, n, sizeof(tr_op));
    }
    trace_extra_text(f->out, k, f->md, f->color);
    if (k->nsteps) step_table(f, k);
}

/* Step time per rank: a column per rank (ranks capped, as the steps). */
#define RANK_COLS_MAX 256

static void rank_step_table(fmt *f, const trace_result *r)
{
    int nr = r->nranks < RANK_COLS_MAX ? r->nranks : RANK_COLS_MAX;
    tbl_col *cols = calloc((size_t)nr + 1, sizeof(*cols));
    char (*heads)[32] = calloc((size_t)nr + 1, sizeof(*heads));
    const char **cells = calloc((size_t)nr + 1, sizeof(*cells));
    char (*vals)[64] = calloc((size_t)nr + 1, sizeof(*vals));
    if (!cols || !heads || !cells || !vals) {
        f->out->err = TPF_ENOMEM;
        goto out;
    }
    cols[0] = (tbl_col){"step", 8, TBL_RIGHT};
    for (int i = 0; i < nr; i++) {
        snprintf(heads[i + 1], sizeof(heads[i + 1]), "rank %ld", r->ranks[i].rank);
        cols[i + 1] = (tbl_col){heads[i + 1], 12, TBL_RIGHT};
    }
    tbl t;
    begin(f, &t, "Step time per rank (ms)", cols, nr + 1);
    const tr_rank *r0 = &r->ranks[0];
    for (size_t s = 0; s < r0->nsteps && s < 200; s++) {
        long num = r0->steps[s].num;
        snprintf(vals[0], sizeof(vals[0]), "%ld", num);
        cells[0] = vals[0];
        for (int i = 0; i < nr; i++) {
            const tr_rank *k = &r->ranks[i];
            int64_t v = -1;
            for (size_t j = 0; j < k->nsteps; j++)
                if (k->steps[j].num == num) { v = k->steps[j].dur; break; }
            if (v < 0) snprintf(vals[i + 1], sizeof(vals[i + 1]), "-");
            else ms(vals[i + 1], sizeof(vals[i + 1]), v);
            cells[i + 1] = vals[i + 1];
        }
        tbl_row(&t, cells, TBL_PLAIN);
    }
    tbl_end(&t);
out:
    free(cols);
    free(heads);
    free(cells);
    free(vals);
}

static int render(const trace_result *r, buf *out, int md, int color)
{
    fmt f = {out, md, color};
    if (md) buf_puts(out, "## Profiler traces\n");
    for (int i = 0; i < r->nranks; i++) render_rank(&f, &r->ranks[i]);
    if (r->nranks > 1) {
        rank_step_table(&f, r);
        heading(&f, "Stragglers");
        if (!r->nstragglers)
            buf_printf(out, "%sno rank took 10%% longer than the median in any step\n", md ? "" : "  ");
        for (size_t i = 0; i < r->nstragglers; i++) {
            const tr_straggler *s = &r->stragglers[i];
            buf_printf(out, "%s%srank %ld%s is a straggler in step %ld: %.3f ms vs median %.3f ms (+%.1f%%)\n",
                       md ? "- " : "  ", c_(&f, "\033[33m"), s->rank, c_(&f, "\033[0m"), s->step,
                       (double)s->dur / 1e6, (double)s->median / 1e6,
                       s->median ? 100.0 * (double)(s->dur - s->median) / (double)s->median : 0.0);
        }
    }
    if (md)
        for (size_t i = 0; i < r->nwarnings; i++) buf_printf(out, "\n- warning: %s\n", r->warnings[i]);
    return out->err;
}

int trace_result_text(const trace_result *r, buf *out, int color) { return render(r, out, 0, color); }

int trace_result_markdown(const trace_result *r, buf *out) { return render(r, out, 1, 0); }
