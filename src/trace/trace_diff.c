/* Trace diff (HTA's TraceDiff, by name): two sets of traces, a baseline and
 * a test (two runs, or before/after a change), each analysed as usual with
 * every name kept; CPU operators and GPU kernels are joined by name and
 * classified as added, removed, slower, faster or unchanged by total time.
 * The result is a table of rows plus a summary, rendered by small functions
 * so that another writer can take the rows as they are. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_diff.h"
#include "trace/trace_int.h"
#include "trainperf.h"
#include "util/jsonw.h"
#include "util/table.h"

/* A change smaller than this share of the row's baseline (or than 1 us in
 * all) is noise: "same". */
#define DIFF_REL 0.05
#define DIFF_ABS_NS 1000

static const char *const kind_names[] = {"op", "kernel"};
static const char *const status_names[] = {"added", "removed", "slower", "faster", "same"};

/* One side, summed over its ranks. */
typedef struct side {
    trace_result *r;
    int64_t kernel_time, busy, idle, steps_dur;
    uint64_t steps, gpu_events, launches;
} side;

static int row_cmp_name(const void *a, const void *b)
{
    const tr_diff_row *x = a, *y = b;
    if (x->kind != y->kind) return x->kind - y->kind;
    return strcmp(x->name, y->name);
}

static int64_t absd(int64_t v) { return v < 0 ? -v : v; }

static int row_cmp_delta(const void *a, const void *b)
{
    const tr_diff_row *x = a, *y = b;
    int64_t dx = absd(x->total_b - x->total_a), dy = absd(y->total_b - y->total_a);
    if (dx != dy) return dx > dy ? -1 : 1;
    if (x->kind != y->kind) return x->kind - y->kind;
    return strcmp(x->name, y->name);
}

/* Rows of one side (ops and kernels of every rank, same names summed), by
 * kind and name. Names point into s->r. */
static int side_rows(side *s, tr_diff_row **out, size_t *nout)
{
    size_t cap = 0;
    const trace_result *r = s->r;
    for (int i = 0; i < r->nranks; i++) cap += r->ranks[i].nops_total + r->ranks[i].nkernels;
    tr_diff_row *v = calloc(cap ? cap : 1, sizeof(*v));
    if (!v) return TPF_ENOMEM;
    size_t n = 0;
    for (int i = 0; i < r->nranks; i++) {
        const tr_rank *k = &r->ranks[i];
        s->kernel_time += k->kernel_time;
        s->busy += k->busy;
        s->idle += k->idle;
        s->gpu_events += k->gpu_events;
        s->launches += k->launch.count;
        for (size_t j = 0; j < k->nsteps; j++) {
            s->steps++;
            s->steps_dur += k->steps[j].dur;
        }
        for (size_t j = 0; j < k->nops_total; j++)
            v[n++] = (tr_diff_row){TD_OP, k->ops_total[j].name, k->ops_total[j].count, 0,
                                   k->ops_total[j].total, 0, k->ops_total[j].self, 0, 0};
        for (size_t j = 0; j < k->nkernels; j++)
            v[n++] = (tr_diff_row){TD_KERNEL, k->kernels[j].name, k->kernels[j].count, 0,
                                   k->kernels[j].sum, 0, 0, 0, 0};
    }
    qsort(v, n, sizeof(*v), row_cmp_name);
    size_t m = 0; /* fold ranks: one row per (kind, name) */
    for (size_t i = 0; i < n; i++) {
        if (m && v[m - 1].kind == v[i].kind && strcmp(v[m - 1].name, v[i].name) == 0) {
            v[m - 1].count_a += v[i].count_a;
            v[m - 1].total_a += v[i].total_a;
            v[m - 1].self_a += v[i].self_a;
        } else {
            v[m++] = v[i];
        }
    }
    *out = v;
    *nout = m;
    return 0;
}

static int classify(const tr_diff_row *w)
{
    if (!w->count_a) return TD_ADDED;
    if (!w->count_b) return TD_REMOVED;
    int64_t d = w->total_b - w->total_a;
    if (absd(d) < DIFF_ABS_NS || (double)absd(d) < DIFF_REL * (double)w->total_a) return TD_SAME;
    return d > 0 ? TD_SLOWER : TD_FASTER;
}

int trace_diff(const char *const *a, int na, const char *const *b, int nb, const trace_opts *opts,
               trace_diff_result **out, char *err, size_t errlen)
{
    *out = NULL;
    trace_opts o = *opts;
    o.top_k = INT_MAX; /* every name: a diff of the top 10 would miss what moved */
    trace_diff_result *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return TPF_ENOMEM;
    }
    side sa, sb;
    memset(&sa, 0, sizeof(sa));
    memset(&sb, 0, sizeof(sb));
    tr_diff_row *ra = NULL, *rb = NULL;
    size_t nra = 0, nrb = 0;
    int rc = trace_analyze(a, na, &o, &sa.r, err, errlen);
    if (!rc) rc = trace_analyze(b, nb, &o, &sb.r, err, errlen);
    if (!rc) rc = side_rows(&sa, &ra, &nra);
    if (!rc) rc = side_rows(&sb, &rb, &nrb);
    if (!rc) {
        d->rows = calloc(nra + nrb ? nra + nrb : 1, sizeof(*d->rows));
        if (!d->rows) rc = TPF_ENOMEM;
    }
    /* Merge the two name-sorted lists; names are copied (the analyses go). */
    size_t i = 0, j = 0;
    while (!rc && (i < nra || j < nrb)) {
        int c = i >= nra ? 1 : j >= nrb ? -1 : row_cmp_name(&ra[i], &rb[j]);
        tr_diff_row w;
        if (c < 0) {
            w = ra[i++];
        } else if (c > 0) {
            w = rb[j++];
            w.count_b = w.count_a, w.total_b = w.total_a, w.self_b = w.self_a;
            w.count_a = 0, w.total_a = 0, w.self_a = 0;
        } else {
            w = ra[i++];
            w.count_b = rb[j].count_a, w.total_b = rb[j].total_a, w.self_b = rb[j].self_a;
            j++;
        }
        w.status = classify(&w);
        size_t ln = strlen(w.name);
        char *nm = malloc(ln + 1);
        if (!nm) { rc = TPF_ENOMEM; break; }
        memcpy(nm, w.name, ln + 1);
        w.name = nm;
        d->rows[d->nrows++] = w;
        d->count[w.status]++;
        int64_t delta = w.total_b - w.total_a;
        if (w.kind == TD_KERNEL) d->kernel_delta[w.status] += delta;
        else d->op_self_delta[w.status] += w.self_b - w.self_a;
    }
    if (!rc) {
        qsort(d->rows, d->nrows, sizeof(*d->rows), row_cmp_delta);
        const side *s2[2] = {&sa, &sb};
        for (int k = 0; k < 2; k++) {
            d->ranks[k] = s2[k]->r->nranks;
            d->kernel_time[k] = s2[k]->kernel_time;
            d->busy[k] = s2[k]->busy;
            d->idle[k] = s2[k]->idle;
            d->steps[k] = s2[k]->steps;
            d->step_mean[k] = s2[k]->steps ? s2[k]->steps_dur / (int64_t)s2[k]->steps : 0;
            d->gpu_events[k] = s2[k]->gpu_events;
            d->launches[k] = s2[k]->launches;
        }
    }
    free(ra);
    free(rb);
    trace_result_free(sa.r);
    trace_result_free(sb.r);
    if (rc) {
        if (!err[0]) snprintf(err, errlen, "%s", tpf_strerror(rc));
        trace_diff_free(d);
        return rc;
    }
    d->top_k = opts->top_k > 0 ? opts->top_k : 10;
    *out = d;
    return 0;
}

void trace_diff_free(trace_diff_result *d)
{
    if (!d) return;
    for (size_t i = 0; i < d->nrows; i++) free((char *)d->rows[i].name);
    free(d->rows);
    free(d);
}

/* ---- rendering ------------------------------------------------------------ */

static double rel(int64_t a, int64_t b) { return a ? 100.0 * (double)(b - a) / (double)a : NAN; }

int trace_diff_json(const trace_diff_result *d, buf *out)
{
    jw w;
    jw_init(&w, out, 1);
    jw_obj_begin(&w);
    jw_kstr(&w, "time_unit", "ns");
    jw_key(&w, "summary");
    jw_obj_begin(&w);
    static const char *const sides[] = {"baseline", "test"};
    for (int k = 0; k < 2; k++) {
        jw_key(&w, sides[k]);
        jw_obj_begin(&w);
        jw_kint(&w, "ranks", d->ranks[k]);
        jw_kuint(&w, "steps", d->steps[k]);
        jw_kint(&w, "step_mean_ns", d->step_mean[k]);
        jw_kint(&w, "gpu_kernel_ns", d->kernel_time[k]);
        jw_kint(&w, "gpu_busy_ns", d->busy[k]);
        jw_kint(&w, "gpu_idle_ns", d->idle[k]);
        jw_kuint(&w, "gpu_events", d->gpu_events[k]);
        jw_kuint(&w, "launches", d->launches[k]);
        jw_obj_end(&w);
    }
    jw_key(&w, "counts");
    jw_obj_begin(&w);
    for (int s = 0; s < TD_NSTATUS; s++) jw_kuint(&w, status_names[s], d->count[s]);
    jw_obj_end(&w);
    jw_key(&w, "kernel_time_delta_ns");
    jw_obj_begin(&w);
    for (int s = 0; s < TD_NSTATUS; s++) jw_kint(&w, status_names[s], d->kernel_delta[s]);
    jw_obj_end(&w);
    jw_key(&w, "op_self_time_delta_ns");
    jw_obj_begin(&w);
    for (int s = 0; s < TD_NSTATUS; s++) jw_kint(&w, status_names[s], d->op_self_delta[s]);
    jw_obj_end(&w);
    jw_obj_end(&w);
    jw_key(&w, "rows");
    jw_arr_begin(&w);
    for (size_t i = 0; i < d->nrows; i++) {
        const tr_diff_row *r = &d->rows[i];
        jw_obj_begin(&w);
        jw_kstr(&w, "kind", kind_names[r->kind]);
        jw_kstr(&w, "name", r->name);
        jw_kstr(&w, "status", status_names[r->status]);
        jw_kuint(&w, "count_baseline", r->count_a);
        jw_kuint(&w, "count_test", r->count_b);
        jw_kint(&w, "total_baseline_ns", r->total_a);
        jw_kint(&w, "total_test_ns", r->total_b);
        jw_kint(&w, "delta_ns", r->total_b - r->total_a);
        if (r->kind == TD_OP) {
            jw_kint(&w, "self_baseline_ns", r->self_a);
            jw_kint(&w, "self_test_ns", r->self_b);
        }
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    buf_putc(out, '\n');
    return jw_error(&w) ? jw_error(&w) : out->err;
}

static const tbl_col diff_cols[] = {
    {"status", 7, 0}, {"kind", 6, 0}, {"count A", 8, TBL_RIGHT}, {"count B", 8, TBL_RIGHT},
    {"total A ms", 11, TBL_RIGHT}, {"total B ms", 11, TBL_RIGHT}, {"delta ms", 11, TBL_RIGHT}, {"change", 8, TBL_RIGHT},
    {"name", 0, TBL_GAP},
};

/* One row of the changes table. */
static void diff_row(tbl *t, const tr_diff_row *r)
{
    char nm[80], ca[32], cb[32], ta[32], tb[32], dl[32], pc[32];
    trace_short_name(nm, sizeof(nm), r->name);
    double p = rel(r->total_a, r->total_b);
    if (isnan(p)) snprintf(pc, sizeof(pc), "new");
    else snprintf(pc, sizeof(pc), "%+.1f%%", p);
    snprintf(ca, sizeof(ca), "%llu", (unsigned long long)r->count_a);
    snprintf(cb, sizeof(cb), "%llu", (unsigned long long)r->count_b);
    snprintf(ta, sizeof(ta), "%.3f", (double)r->total_a / 1e6);
    snprintf(tb, sizeof(tb), "%.3f", (double)r->total_b / 1e6);
    snprintf(dl, sizeof(dl), "%+.3f", (double)(r->total_b - r->total_a) / 1e6);
    const char *cells[] = {status_names[r->status], kind_names[r->kind], ca, cb, ta, tb, dl, pc, nm};
    tbl_row(t, cells, TBL_PLAIN);
}

int trace_diff_text(const trace_diff_result *d, buf *o, int color)
{
    const char *bo = color ? "\033[1m" : "", *rs = color ? "\033[0m" : "";
    buf_printf(o, "%sTrace diff: baseline (%d rank%s) -> test (%d rank%s)%s\n", bo, d->ranks[0],
               d->ranks[0] == 1 ? "" : "s", d->ranks[1], d->ranks[1] == 1 ? "" : "s", rs);
    if (d->steps[0] && d->steps[1])
        buf_printf(o, "  step time (mean): %.3f -> %.3f ms (%+.1f%%)\n", (double)d->step_mean[0] / 1e6,
                   (double)d->step_mean[1] / 1e6, rel(d->step_mean[0], d->step_mean[1]));
    if (d->kernel_time[0] || d->kernel_time[1]) {
        buf_printf(o, "  GPU busy: %.3f -> %.3f ms (%+.1f%%); GPU idle: %.3f -> %.3f ms\n",
                   (double)d->busy[0] / 1e6, (double)d->busy[1] / 1e6, rel(d->busy[0], d->busy[1]),
                   (double)d->idle[0] / 1e6, (double)d->idle[1] / 1e6);
        buf_printf(o, "  kernel time: %+.3f ms from slower kernels, %+.3f ms from faster, %+.3f ms added, "
                      "%+.3f ms removed\n",
                   (double)d->kernel_delta[TD_SLOWER] / 1e6, (double)d->kernel_delta[TD_FASTER] / 1e6,
                   (double)d->kernel_delta[TD_ADDED] / 1e6, (double)d->kernel_delta[TD_REMOVED] / 1e6);
    }
    buf_printf(o, "  CPU operator self time: %+.3f ms from slower ops, %+.3f ms from faster, %+.3f ms added, "
                  "%+.3f ms removed\n",
               (double)d->op_self_delta[TD_SLOWER] / 1e6, (double)d->op_self_delta[TD_FASTER] / 1e6,
               (double)d->op_self_delta[TD_ADDED] / 1e6, (double)d->op_self_delta[TD_REMOVED] / 1e6);
    buf_printf(o, "  %llu added, %llu removed, %llu slower, %llu faster, %llu unchanged (within 5%% or 1 us)\n",
               (unsigned long long)d->count[TD_ADDED], (unsigned long long)d->count[TD_REMOVED],
               (unsigned long long)d->count[TD_SLOWER], (unsigned long long)d->count[TD_FASTER],
               (unsigned long long)d->count[TD_SAME]);
    tbl t;
    tbl_begin_sub(&t, o, TBL_TEXT, color, "Largest changes by total time", diff_cols, 9);
    size_t shown = 0;
    for (size_t i = 0; i < d->nrows && shown < (size_t)d->top_k; i++) {
        if (d->rows[i].status == TD_SAME) continue;
        diff_row(&t, &d->rows[i]);
        shown++;
    }
    tbl_end(&t);
    if (!shown) buf_puts(o, "  nothing changed by more than 5% or 1 us\n");
    return o->err;
}
