/* Ranks and nodes in the reports: the per-rank table, the html heatmap of
 * step time (rank x time), the communication log (comm/), the straggler that
 * synchronous training hides, and many-node jobs (several run directories
 * reported as one, their clocks aligned on the completion of the same
 * collectives). The writers call in here with one line each. */
#include <dirent.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "report/report_fmt.h"
#include "report/load_ranks.h"
#include "report/report_ranks.h"
#include "util/table.h"
#include "trainperf.h"
#include "util/csvr.h"
#include "util/human.h"
#include "util/jsonr.h"

#define RR_MAX_ALIGN_OPS 50000 /* collectives kept per node for clock alignment */

/* Ranks that had a rank number (torchrun, srun, mpirun). */
static int nranked(const diag_run *r)
{
    int n = 0;
    for (int i = 0; i < r->nranks; i++)
        if (r->ranks[i].rank >= 0) n++;
    return n;
}

static int by_rank(const void *a, const void *b)
{
    const drank *x = *(const drank *const *)a, *y = *(const drank *const *)b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The ranked entries in rank order (malloc'd, freed by the caller; NULL
 * only when out of memory, *n 0 then). */
static const drank **sorted_ranks(const diag_run *r, int *n)
{
    *n = 0;
    const drank **out = malloc((size_t)(r->nranks > 0 ? r->nranks : 1) * sizeof(*out));
    if (!out) return NULL;
    for (int i = 0; i < r->nranks; i++)
        if (r->ranks[i].rank >= 0) out[(*n)++] = &r->ranks[i];
    qsort(out, (size_t)*n, sizeof(*out), by_rank);
    return out;
}

typedef struct rrow {
    double steps, warm, p50, p95, data, compute, comm, sps, busbw;
    double flops_per_s, mfu; /* model FLOP/s over the warm steps, its share of the peak */
} rrow;

/* A rank's figures in compare, described once: the column of the table
 * ("A → B"; NULL: JSON only) and the key of a rank's side in the JSON. */
typedef struct cmp_col {
    const char *head;
    jw_field f;
    int share; /* shown as a percentage (MFU); others with one decimal */
} cmp_col;
static const cmp_col cmp_cols[] = {
    {NULL, JW_FIELD(DBL, "steps", rrow, steps), 0},
    {"step p50 ms", JW_FIELD(DBL, "step_time_ms_p50", rrow, p50), 0},
    {"compute ms", JW_FIELD(DBL, "compute_ms_mean", rrow, compute), 0},
    {"data wait ms", JW_FIELD(DBL, "data_wait_ms_mean", rrow, data), 0},
    {"comm wait ms", JW_FIELD(DBL, "comm_wait_ms_mean", rrow, comm), 0},
    {"MFU", JW_FIELD(DBL, "mfu", rrow, mfu), 1},
};
#define CMP_NCOLS ((int)(sizeof(cmp_cols) / sizeof(cmp_cols[0])))

/* The step figures of a rank (core/figs.h groups: the owner of the figure),
 * NULL when the run has none. */
static const agg_group *group_of_rank(const diag_run *r, int rank)
{
    return diag_rank_group(r, rank);
}

static const drank *find_rank(const diag_run *x, int rank)
{
    return diag_find_rank(x, rank);
}

/* The step figures of a group (a rank's, or a node's ranks merged): per
 * step means over warm steps (each thread's first left out, as the
 * quantiles); steps and samples/s over every step. */
static void group_row(const agg_group *g, rrow *o)
{
    o->flops_per_s = o->mfu = NAN;
    if (!g) {
        o->steps = o->warm = o->p50 = o->p95 = o->data = o->compute = o->comm = o->sps = NAN;
        return;
    }
    double n = g->warm_count > 0 ? (double)g->warm_count : NAN;
    o->steps = (double)g->count;
    o->warm = (double)g->warm_count;
    o->p50 = g->warm_count ? sketch_quantile(&g->step_ns, 0.5) / 1e6 : NAN;
    o->p95 = g->warm_count ? sketch_quantile(&g->step_ns, 0.95) / 1e6 : NAN;
    if (g->warm_count && o->p95 > g->step_ns.max / 1e6) o->p95 = g->step_ns.max / 1e6;
    if (g->warm_count && o->p50 > g->step_ns.max / 1e6) o->p50 = g->step_ns.max / 1e6;
    o->data = (double)g->warm_data_ns / n / 1e6;
    o->comm = (double)g->warm_comm_ns / n / 1e6;
    double w = (double)(g->warm_data_ns + g->warm_comm_ns), iv = (double)g->warm_interval_ns;
    o->compute = (iv > w ? iv - w : 0) / n / 1e6;
    o->sps = g->samples > 0 && g->interval_ns > 0
                 ? (double)g->samples / ((double)g->interval_ns / 1e9)
                 : NAN;
}

/* A rank's figures: its group's, its bus bandwidth and its model FLOP/s. */
static void rank_row(const diag_run *r, int rank, rrow *o)
{
    const agg_group *g = group_of_rank(r, rank);
    const drank *k = find_rank(r, rank);
    group_row(g, o);
    o->busbw = k && k->comm_busbw_n > 0 ? k->comm_busbw_sum / k->comm_busbw_n : NAN;
    /* the step rate of the warm steps, less the counted one (counting slows
     * it several times over), times the FLOPs of one step */
    if (g && k && k->flops_step > 0 && g->warm_count && g->warm_interval_ns) {
        double cnt = (double)g->warm_count, span = (double)g->warm_interval_ns;
        if (k->flops_at > 0 && k->flops_at_ns > 0 && cnt > 1 && span > k->flops_at_ns) {
            cnt -= 1;
            span -= k->flops_at_ns;
        }
        o->flops_per_s = k->flops_step * cnt / (span / 1e9);
        if (k->peak_flops > 0) o->mfu = o->flops_per_s / k->peak_flops;
    }
}

void rr_job_figures(const diag_run *r, rr_job *j)
{
    dfig f;
    diag_figures(r, &f);
    memset(j, 0, sizeof(*j));
    j->steps = f.steps;
    j->samples_per_s = f.samples_per_s;
    j->tokens_per_s = f.tokens_per_s;
    double fps = 0, used = 0, peak = 0;
    for (int i = 0; i < r->nranks; i++) {
        const drank *k = &r->ranks[i];
        if (k->rank < 0 && r->nranks > 1) continue;
        j->ranks++;
        rrow w;
        rank_row(r, k->rank, &w);
        if (!isfinite(w.flops_per_s)) continue;
        if (!j->flops_ranks++) snprintf(j->peak_src, sizeof(j->peak_src), "%s", k->peak_src);
        fps += w.flops_per_s;
        if (k->peak_flops > 0) {
            j->mfu_ranks++;
            used += w.flops_per_s;
            peak += k->peak_flops;
        }
    }
    j->nodes = r->nnodes > 1 ? r->nnodes : 1;
    j->flops_per_s = j->flops_ranks ? fps : NAN;
    j->mfu = peak > 0 ? used / peak : NAN;
}

/* The job's figures in JSON, described once: `report --format json` writes
 * them all as "job"; summary.json's "model_flops" the FLOPs ones (JOB_FLOPS
 * and JOB_FLOPS_COUNTS), under the same names. The order is the golden's. */
static const jw_field job_fields[] = {
    JW_FIELD(DBL, "optimizer_steps", rr_job, steps),
    JW_FIELD(DBL, "samples_per_s", rr_job, samples_per_s),
    JW_FIELD(DBL, "tokens_per_s", rr_job, tokens_per_s),
    JW_FIELD(DBL, "flops_per_s", rr_job, flops_per_s), /* JOB_FLOPS */
    JW_FIELD(DBL, "mfu", rr_job, mfu),
    JW_FIELD(INT, "ranks", rr_job, ranks),
    JW_FIELD(INT, "flops_ranks", rr_job, flops_ranks), /* JOB_FLOPS_COUNTS */
    JW_FIELD(INT, "mfu_ranks", rr_job, mfu_ranks),
    JW_FIELD(STRZ, "peak_source", rr_job, peak_src),
    JW_FIELD(INT, "nodes", rr_job, nodes),
};
#define JOB_FLOPS (job_fields + 3), 2
#define JOB_FLOPS_COUNTS (job_fields + 6), 3

/* The RANKS and NODES tables, each described once for text, md, html and the
 * JSON report: a column's heading (NULL: JSON only) and text width, how its
 * cell reads, and its JSON key and member (key NULL: not in the JSON). */
enum {
    FC_TEXT, /* a string ("—" when NULL) */
    FC_INT,
    FC_NUM,  /* fmt of the member x scale, "?" when unknown */
    FC_OPT,  /* the same, "—" when unknown (a figure a run may not have: MFU) */
    FC_BYTES,
};
typedef struct fig_col {
    tbl_col c;
    int kind;
    const char *fmt;
    double scale;
    jw_field f;
} fig_col;
#define FIG_COL(head, width, flags, kind, fmt, scale, type, key, T, member)                        \
    {{head, width, flags}, FC_##kind, fmt, scale, JW_FIELD(type, key, T, member)}
#define FIG_NCOLS(c) ((int)(sizeof(c) / sizeof((c)[0])))
#define FIG_MAX_COLS 24

/* The columns that have a heading; returns how many. */
static int fig_heads(const fig_col *c, int n, tbl_col *out)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (c[i].c.head) out[k++] = c[i].c;
    return k;
}

/* One row of the table: the cells of the columns with a heading. */
static void fig_row(tbl *t, const fig_col *c, int n, const void *row)
{
    char a[FIG_MAX_COLS][32];
    const char *cells[FIG_MAX_COLS];
    int k = 0;
    for (int i = 0; i < n && k < FIG_MAX_COLS; i++) {
        const fig_col *d = &c[i];
        const void *v = (const char *)row + d->f.off;
        if (!d->c.head) continue;
        const char *cell = a[k];
        double x = d->kind == FC_INT || d->kind == FC_TEXT ? 0 : *(const double *)v;
        if (d->kind == FC_TEXT)
            cell = d->f.type == JWF_STR ? (const char *)v : *(const char *const *)v;
        else if (d->kind == FC_INT)
            snprintf(a[k], 32, "%d", *(const int *)v);
        else if (d->kind == FC_BYTES)
            human_bytes(a[k], 32, x);
        else if (d->kind == FC_OPT && !isfinite(x))
            cell = "—";
        else
            diag_fmt_num(a[k], 32, d->fmt, x * d->scale);
        cells[k++] = cell ? cell : "—";
    }
    tbl_row(t, cells, TBL_PLAIN);
}

/* The columns with a key, as members of the current JSON object. */
static void fig_json(jw *w, const fig_col *c, int n, const void *row)
{
    for (int i = 0; i < n; i++)
        if (c[i].f.key) jw_fields(w, row, &c[i].f, 1);
}

/* Under the section's own heading: text wants the head row (a sub table's),
 * md and html a plain table. */
static void fig_begin(tbl *t, buf *b, int fmt, const tbl_col *cols, int n)
{
    if (fmt == TBL_TEXT)
        tbl_begin_sub(t, b, fmt, 0, NULL, cols, n);
    else
        tbl_begin(t, b, fmt, 0, NULL, cols, n);
}

/* A rank's line: its figures (rank_row), where it ran, what it sent and its
 * model FLOPs. */
typedef struct rline {
    const char *label; /* the distribution table's row name; the worst table's why */
    int rank, node;
    rrow x;
    double comm_bytes;
    const char *top_op;
    double flops_step, peak; /* NAN: unknown */
    const char *flops_src, *peak_src;
} rline;

/* The RANKS table, the report's "ranks" (every column with a key) and
 * summary.json's model_flops.per_rank (RANK_FLOPS and RANK_MFU: no peak
 * source per rank there), under the same names. */
static const fig_col rank_cols[] = {
    FIG_COL("rank", 4, TBL_RIGHT, INT, NULL, 1, INT, "rank", rline, rank),
    FIG_COL("node", 5, TBL_RIGHT, INT, NULL, 1, INT, "node", rline, node),
    FIG_COL("steps", 6, TBL_RIGHT, NUM, "%.0f", 1, DBL, "steps", rline, x.steps),
    FIG_COL("p50 ms", 8, TBL_RIGHT, NUM, "%.1f", 1, DBL, "step_time_ms_p50", rline, x.p50),
    FIG_COL("p95 ms", 8, TBL_RIGHT, NUM, "%.1f", 1, DBL, "step_time_ms_p95", rline, x.p95),
    /* per warm step: summary.json per_rank's names for the same figures */
    FIG_COL("data ms", 8, TBL_RIGHT, NUM, "%.1f", 1, DBL, "data_wait_ms_mean", rline, x.data),
    FIG_COL("compute ms", 8, TBL_RIGHT, NUM, "%.1f", 1, DBL, "compute_ms_mean", rline, x.compute),
    FIG_COL("comm ms", 8, TBL_RIGHT, NUM, "%.1f", 1, DBL, "comm_wait_ms_mean", rline, x.comm),
    FIG_COL("samples/s", 10, TBL_RIGHT, NUM, "%.1f", 1, DBL, "samples_per_s", rline, x.sps),
    FIG_COL(NULL, 0, 0, NUM, NULL, 1, DBL, "comm_bytes", rline, comm_bytes),
    FIG_COL(NULL, 0, 0, NUM, NULL, 1, DBL, "comm_busbw_bps", rline, x.busbw),
    FIG_COL(NULL, 0, 0, TEXT, NULL, 1, PSTR, "top_collective", rline, top_op),
    FIG_COL(NULL, 0, 0, NUM, NULL, 1, DBL, "flops_per_step", rline, flops_step), /* RANK_FLOPS */
    FIG_COL(NULL, 0, 0, TEXT, NULL, 1, PSTR, "flops_source", rline, flops_src),
    FIG_COL("TFLOP/s", 8, TBL_RIGHT, OPT, "%.3g", 1e-12, DBL, "flops_per_s", rline,
            x.flops_per_s),
    FIG_COL(NULL, 0, 0, NUM, NULL, 1, DBL, "peak_flops_per_s", rline, peak),
    FIG_COL(NULL, 0, 0, TEXT, NULL, 1, PSTR, "peak_source", rline, peak_src),
    FIG_COL("MFU", 6, TBL_RIGHT, OPT, "%.1f%%", 100, DBL, "mfu", rline, x.mfu), /* RANK_MFU */
};
#define RANK_COMPUTE 6 /* its heading, narrow in text: the line below says ms */
#define RANK_FLOPS (rank_cols + 12), 4
#define RANK_MFU (rank_cols + 17), 1

static void rank_line(const diag_run *r, const drank *k, rline *o)
{
    o->rank = k->rank;
    o->node = k->node;
    rank_row(r, k->rank, &o->x);
    o->comm_bytes = r->have_comm ? k->comm_bytes : NAN;
    o->top_op = k->top_op[0] ? k->top_op : NULL;
    o->flops_step = k->flops_step > 0 ? k->flops_step : NAN;
    o->flops_src = k->flops_step > 0 ? k->flops_src : NULL;
    o->peak = k->peak_flops > 0 ? k->peak_flops : NAN;
    o->peak_src = k->peak_src[0] ? k->peak_src : NULL;
}

int rr_summary_flops(const diag_run *r, buf *b)
{
    rr_job j;
    rr_job_figures(r, &j);
    if (!j.flops_ranks) return 0;
    jw w;
    buf_puts(b, "  \"model_flops\": ");
    jw_init(&w, b, 0);
    jw_obj_begin(&w);
    jw_fields(&w, &j, JOB_FLOPS);
    jw_fields(&w, &j, JOB_FLOPS_COUNTS);
    jw_key(&w, "per_rank");
    jw_arr_begin(&w);
    for (int i = 0; i < r->nranks; i++) {
        const drank *k = &r->ranks[i];
        if (!(k->flops_step > 0)) continue;
        rline x;
        rank_line(r, k, &x);
        jw_obj_begin(&w);
        jw_key(&w, "rank");
        if (k->rank >= 0)
            jw_int(&w, k->rank);
        else
            jw_null(&w);
        fig_json(&w, RANK_FLOPS, &x);
        fig_json(&w, RANK_MFU, &x);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    return 1;
}

/* "12.3%", or "—" when unknown (MFU needs FLOPs and a peak). */
static const char *pct_or_dash(char *o, size_t n, double v)
{
    if (!isfinite(v)) return "—";
    snprintf(o, n, "%.1f%%", 100 * v);
    return o;
}

/* TFLOP/s with three significant digits, or "—". */
static const char *tflops_or_dash(char *o, size_t n, double v)
{
    if (!isfinite(v)) return "—";
    snprintf(o, n, "%.3g", v / 1e12);
    return o;
}

/* ---- the straggler ----------------------------------------------------------- */

static int straggler_of(const diag_run *r, const drank *const *k, int n, rrow *row, rr_strag *s);

int rr_straggler(const diag_run *r, rr_strag *s)
{
    memset(s, 0, sizeof(*s));
    s->rank = -1;
    int n;
    const drank **k = sorted_ranks(r, &n);
    rrow *row = n >= 2 ? malloc((size_t)n * sizeof(*row)) : NULL;
    int rc = row ? straggler_of(r, k, n, row, s) : 0;
    free(row);
    free(k);
    return rc;
}

static int straggler_of(const diag_run *r, const drank *const *k, int n, rrow *row, rr_strag *s)
{
    int least = -1;
    double any_comm = 0;
    for (int i = 0; i < n; i++) {
        rank_row(r, k[i]->rank, &row[i]);
        if (!(row[i].warm >= 3)) return 0;
        any_comm += row[i].comm;
        if (least < 0 || row[i].comm < row[least].comm) least = i;
    }
    if (!(any_comm > 0)) return 0; /* no collective waits measured */
    double ow = 0, od = 0, oc = 0, step = 0;
    int most = -1;
    for (int i = 0; i < n; i++) {
        step += (row[i].compute + row[i].data + row[i].comm) / n;
        if (i == least) continue;
        ow += row[i].comm / (n - 1);
        od += row[i].data / (n - 1);
        oc += row[i].compute / (n - 1);
        if (most < 0 || row[i].comm > row[most].comm) most = i;
    }
    s->rank = k[least]->rank;
    s->waiter = k[most]->rank;
    s->gap_ms = ow - row[least].comm;
    s->others_wait_ms = ow;
    s->own_wait_ms = row[least].comm;
    s->step_ms = step;
    s->share = step > 0 ? s->gap_ms / step : NAN;
    s->extra_data_ms = row[least].data - od;
    s->extra_compute_ms = row[least].compute - oc;
    s->loader = s->extra_data_ms >= 0.5 * s->gap_ms;
    s->where = s->loader ? "data loader" : "step";
    snprintf(s->op, sizeof(s->op), "%s", k[most]->top_op[0] ? k[most]->top_op : "collectives");
    /* the others' wait must be the straggler's own time: noise in the
     * collectives alone (a loaded host) is not a straggler */
    int own = s->extra_data_ms + s->extra_compute_ms >= 0.5 * s->gap_ms;
    /* and it stands alone: a second rank waiting about as little is not
     * held back by it (ranks sharing too few cores take turns) */
    double next = INFINITY;
    for (int i = 0; i < n; i++)
        if (i != least && row[i].comm < next) next = row[i].comm;
    int alone = next - row[least].comm >= 0.5 * s->gap_ms;
    return s->share >= RR_STRAGGLER_SHARE && own && alone;
}

/* ---- overlap and FSDP ------------------------------------------------------- */

int rr_overlap(const diag_run *r, rr_overlap_t *o)
{
    memset(o, 0, sizeof(*o));
    double busy = 0, waited = 0, steps = 0;
    int n = 0;
    for (int i = 0; i < r->nranks; i++) {
        const drank *k = &r->ranks[i];
        const agg_group *g = k->rank >= 0 ? group_of_rank(r, k->rank) : NULL;
        if (!(k->comm_ops > 0) || !g || !g->warm_count) continue;
        double c = (double)g->warm_count;
        busy += k->comm_busy_ns / c;
        waited += (double)g->warm_comm_ns / c;
        steps += ((double)g->warm_interval_ns - (double)g->warm_comm_ns -
                  (double)g->warm_data_ns) / c;
        n++;
    }
    if (!n) return 0;
    o->busy_ms = busy / n / 1e6;
    o->exposed_ms = waited / n / 1e6;
    o->overlapped_ms = o->busy_ms > o->exposed_ms ? o->busy_ms - o->exposed_ms : 0;
    o->compute_ms = steps / n / 1e6;
    double ag = 0, agw = 0, rs = 0, rsw = 0;
    for (int i = 0; i < r->ncommops; i++) {
        const dcommop *c = &r->commops[i];
        if (strstr(c->op, "all_gather")) ag += c->dur_ns, agw += c->wait_ns;
        if (strstr(c->op, "reduce_scatter")) rs += c->dur_ns, rsw += c->wait_ns;
    }
    double gsteps = rr_global_steps(r) * n;
    o->fsdp = ag > 0 && rs > 0 && gsteps > 0;
    if (o->fsdp) {
        o->ag_ms = ag / gsteps / 1e6;
        o->ag_exposed_ms = agw / gsteps / 1e6;
        o->rs_ms = rs / gsteps / 1e6;
        o->rs_exposed_ms = rsw / gsteps / 1e6;
        /* prefetching the next all-gather hides it under the current
         * layer's compute: at most the exposed all-gather time, at most
         * the compute there is to hide it under */
        o->prefetch_gain_ms = o->ag_exposed_ms < o->compute_ms ? o->ag_exposed_ms : o->compute_ms;
    }
    return 1;
}

void rr_fsdp_advice(const diag_run *r, char *out, size_t n)
{
    rr_overlap_t o;
    out[0] = 0;
    if (!rr_overlap(r, &o) || !o.fsdp) return;
    snprintf(out, n,
             "FSDP: all-gathers take %.1f ms a step, %.1f ms exposed; forward/backward "
             "prefetch (set_modules_to_forward_prefetch / set_modules_to_backward_prefetch) "
             "could hide up to %.1f ms a step (bounded by %.1f ms of compute); reduce-scatters "
             "%.1f ms, %.1f ms exposed.",
             o.ag_ms, o.ag_exposed_ms, o.prefetch_gain_ms, o.compute_ms, o.rs_ms, o.rs_exposed_ms);
}

/* ---- comm/ ------------------------------------------------------------------ */

/* ---- many nodes ------------------------------------------------------------- */

typedef struct aend {
    unsigned long long key; /* group hash << 32 | seq */
    double end_s;
} aend;

static unsigned long long key_of(const char *group, const char *op, double seq)
{
    unsigned long long h = 1469598103934665603ull;
    for (const char *p = group; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (const char *p = op; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return (h << 32) ^ (unsigned long long)(long long)seq;
}

static int cmp_aend(const void *a, const void *b)
{
    const aend *x = a, *y = b;
    return (x->key > y->key) - (x->key < y->key);
}

/* Completion times of the collectives of one rank of run_dir (the first
 * ops file found): *out malloc'd, freed by the caller. */
static int node_ends(const char *run_dir, aend **out)
{
    *out = NULL;
    char path[1200];
    snprintf(path, sizeof(path), "%s/comm", run_dir);
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *de;
    path[0] = 0;
    while ((de = readdir(d)) != NULL)
        if (rr_is_ops_name(de->d_name)) {
            snprintf(path, sizeof(path), "%s/comm/%s", run_dir, de->d_name);
            break;
        }
    closedir(d);
    if (!path[0]) return 0;
    csvr c;
    char e[200];
    if (csvr_open(&c, path, e, sizeof(e)) != 0) return 0;
    int c_op = csvr_col(&c, "op"), c_group = csvr_col(&c, "group"), c_seq = csvr_col(&c, "seq");
    int c_end = csvr_col(&c, "end_s");
    aend *a = NULL;
    int n = 0, cap = 0;
    while (csvr_next(&c) == 1 && n < RR_MAX_ALIGN_OPS) {
        const char *op = csvr_str(&c, c_op);
        double seq, end;
        /* point-to-point ops do not complete at once on both sides */
        if (!strcmp(op, "send") || !strcmp(op, "recv") || !strcmp(op, "isend") ||
            !strcmp(op, "irecv"))
            continue;
        if (!csvr_num(&c, c_seq, &seq) || !csvr_num(&c, c_end, &end)) continue;
        if (n == cap) {
            int nc = cap ? cap * 2 : 1024;
            aend *na = realloc(a, (size_t)nc * sizeof(*na));
            if (!na) break;
            a = na;
            cap = nc;
        }
        a[n].key = key_of(csvr_str(&c, c_group), op, seq);
        a[n++].end_s = end;
    }
    csvr_close(&c);
    if (n > 1) qsort(a, (size_t)n, sizeof(*a), cmp_aend);
    *out = a;
    return n;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Align node k on node 0: the completion of one collective is the same
 * instant on every rank, so the median difference of completion times is
 * the clock offset beyond the wall-clock anchors, and the spread of the
 * differences is the alignment error. */
static void align(dnode *nd, const aend *a0, int n0, const char *dir)
{
    aend *a;
    int n = node_ends(dir, &a);
    nd->offset_s = nd->wall_offset_s;
    nd->align_err_s = NAN;
    nd->align_n = 0;
    if (!n || !n0) {
        free(a);
        return;
    }
    double *d = malloc((size_t)(n < n0 ? n : n0) * sizeof(*d));
    int m = 0;
    for (int i = 0, j = 0; d && i < n0 && j < n;) {
        if (a0[i].key < a[j].key)
            i++;
        else if (a0[i].key > a[j].key)
            j++;
        else {
            d[m++] = a0[i].end_s - (a[j].end_s + nd->wall_offset_s);
            i++;
            j++;
        }
    }
    if (m > 0) {
        qsort(d, (size_t)m, sizeof(*d), cmp_dbl);
        double med = m % 2 ? d[m / 2] : (d[m / 2 - 1] + d[m / 2]) / 2;
        for (int i = 0; i < m; i++) d[i] = fabs(d[i] - med);
        qsort(d, (size_t)m, sizeof(*d), cmp_dbl);
        nd->offset_s = nd->wall_offset_s + med;
        nd->align_err_s = d[(int)(0.95 * (m - 1))]; /* 95% of collectives within this */
        nd->align_n = m;
    }
    free(d);
    free(a);
}

static int has_file(const char *dir, const char *name)
{
    char p[1200];
    struct stat st;
    snprintf(p, sizeof(p), "%.1000s/%.150s", dir, name);
    return stat(p, &st) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* 1 with why in err when one run directory is among dirs twice (its ranks
 * would count twice); 0 otherwise, or when that cannot be told. */
static int same_dir_twice(char *const *dirs, int n, char *err, size_t errlen)
{
    char **real = calloc((size_t)(n > 0 ? n : 1), sizeof(*real));
    int twice = 0;
    for (int i = 0; real && i < n; i++) real[i] = realpath(dirs[i], NULL);
    if (real) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (real[i]) real[m++] = real[i];
        qsort(real, (size_t)m, sizeof(*real), cmp_str);
        for (int i = 1; i < m && !twice; i++)
            if (strcmp(real[i - 1], real[i]) == 0) {
                twice = 1;
                if (err && errlen)
                    snprintf(err, errlen, "%s is given twice: each node's run directory once",
                             real[i]);
            }
        for (int i = 0; i < m; i++) free(real[i]);
    }
    free(real);
    return twice;
}

int rr_expand_dirs(const char *const *in, int nin, char ***out, int *nout, char *err,
                   size_t errlen)
{
    *out = NULL;
    *nout = 0;
    char **v = NULL;
    int n = 0, cap = 0;
    for (int i = 0; i < nin; i++) {
        int run = has_file(in[i], "run.json") || has_file(in[i], "steps.csv");
        DIR *d = run ? NULL : opendir(in[i]);
        if (!d) {
            if (diag_grow((void **)&v, &cap, n + 1, sizeof(*v))) goto nomem;
            v[n] = strdup(in[i]);
            if (!v[n++]) goto nomem;
            continue;
        }
        /* a parent: its run directories, in name order */
        int first = n;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.') continue;
            char p[1200];
            snprintf(p, sizeof(p), "%.900s/%.255s", in[i], de->d_name);
            if (!has_file(p, "run.json") && !has_file(p, "steps.csv")) continue;
            if (diag_grow((void **)&v, &cap, n + 1, sizeof(*v))) {
                closedir(d);
                goto nomem;
            }
            v[n] = strdup(p);
            if (!v[n++]) {
                closedir(d);
                goto nomem;
            }
        }
        closedir(d);
        if (n == first) { /* neither: let the loader say what is wrong */
            if (diag_grow((void **)&v, &cap, n + 1, sizeof(*v))) goto nomem;
            v[n] = strdup(in[i]);
            if (!v[n++]) goto nomem;
        }
        qsort(v + first, (size_t)(n - first), sizeof(*v), cmp_str);
    }
    if (same_dir_twice(v, n, err, errlen)) {
        for (int i = 0; i < n; i++) free(v[i]);
        free(v);
        return TPF_EINVAL;
    }
    *out = v;
    *nout = n;
    return 0;
nomem:
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
    return TPF_ENOMEM;
}

/* The rendezvous a launcher's command names (torchrun's --rdzv-id and
 * --rdzv-endpoint, or --master-addr and --master-port, "--k v" or "--k=v", with
 * - or _), as "k=v ..." in one order; "" when it names none. */
static void rendezvous_of(const char *cmd, char *o, size_t n)
{
    static const char *const keys[] = {"rdzv-id", "rdzv-endpoint", "master-addr", "master-port"};
    char val[4][128] = {{0}};
    const char *p = cmd;
    while (*p) {
        while (*p == ' ') p++;
        const char *tok = p;
        while (*p && *p != ' ') p++;
        size_t len = (size_t)(p - tok);
        if (len < 3 || tok[0] != '-' || tok[1] != '-') continue;
        for (int k = 0; k < 4; k++) {
            size_t kl = strlen(keys[k]), i;
            if (len < 2 + kl) continue;
            for (i = 0; i < kl; i++) {
                char c = tok[2 + i] == '_' ? '-' : tok[2 + i];
                if (c != keys[k][i]) break;
            }
            if (i < kl) continue;
            const char *v = NULL, *ve = NULL;
            if (len == 2 + kl) { /* the value is the next word */
                const char *q = p;
                while (*q == ' ') q++;
                v = q;
                while (*q && *q != ' ') q++;
                ve = q;
            } else if (tok[2 + kl] == '=') {
                v = tok + 3 + kl;
                ve = p;
            }
            if (v && ve > v) snprintf(val[k], sizeof(val[k]), "%.*s", (int)(ve - v), v);
        }
    }
    size_t off = 0;
    o[0] = 0;
    for (int k = 0; k < 4 && off < n; k++) {
        if (!val[k][0]) continue;
        int w = snprintf(o + off, n - off, "%s%s=%s", off ? " " : "", keys[k], val[k]);
        if (w < 0) break;
        off += (size_t)w;
    }
}

/* Runs closer than this in time may still be one job (clocks of different
 * machines, a node that started late). */
#define RR_JOB_SLACK_S 60.0

static const char *minutes(char *o, size_t n, double s)
{
    if (s < 120)
        snprintf(o, n, "%.0f s", s);
    else if (s < 2 * 3600)
        snprintf(o, n, "%.0f min", s / 60);
    else
        snprintf(o, n, "%.1f h", s / 3600);
    return o;
}

/* Whether run x (in dir) belongs to the job of run a (in dir0, whose own
 * start and duration are a_start, a_dur): 1, or 0 with why in why. The same
 * rendezvous says yes, a different one no; without one on both sides, the
 * times must overlap. */
static int same_job(const diag_run *a, double a_start, double a_dur, const char *dir0,
                    const diag_run *x, const char *dir, char *why, size_t n)
{
    char ka[300], kx[300], t[32];
    rendezvous_of(a->command, ka, sizeof(ka));
    rendezvous_of(x->command, kx, sizeof(kx));
    if (ka[0] && kx[0]) {
        if (strcmp(ka, kx) == 0) return 1;
        snprintf(why, n, "their commands name different rendezvous (%s; %s)", ka, kx);
        return 0;
    }
    if (!isfinite(a_start) || !isfinite(x->start_unix_s)) {
        snprintf(why, n, "%s has no start time and neither names a rendezvous",
                 isfinite(a_start) ? dir : dir0);
        return 0;
    }
    double a_end = a_start + (isfinite(a_dur) ? a_dur : 0);
    double x_end = x->start_unix_s + (isfinite(x->duration_s) ? x->duration_s : 0);
    /* One host has one clock: the slack for other nodes' clocks does not apply, and
     * two runs there one after the other are two runs, not two nodes of a job. */
    if (a->host[0] && strcmp(a->host, x->host) == 0 &&
        (x->start_unix_s >= a_end || a_start >= x_end)) {
        int x_later = x->start_unix_s >= a_end;
        snprintf(why, n, "both ran on host %s, one after the other (%s started %s after %s "
                 "ended): `trainperf compare` sets two runs side by side", a->host,
                 x_later ? dir : dir0,
                 minutes(t, sizeof(t), x_later ? x->start_unix_s - a_end : a_start - x_end),
                 x_later ? dir0 : dir);
        return 0;
    }
    if (x->start_unix_s > a_end + RR_JOB_SLACK_S) {
        snprintf(why, n, "%s started %s after %s ended", dir,
                 minutes(t, sizeof(t), x->start_unix_s - a_end), dir0);
        return 0;
    }
    if (a_start > x_end + RR_JOB_SLACK_S) {
        snprintf(why, n, "%s started %s after %s ended", dir0,
                 minutes(t, sizeof(t), a_start - x_end), dir);
        return 0;
    }
    return 1;
}

static void node_from(dnode *nd, const diag_run *x, const char *dir)
{
    dfig f;
    diag_figures(x, &f);
    snprintf(nd->dir, sizeof(nd->dir), "%s", dir);
    snprintf(nd->host, sizeof(nd->host), "%s", x->host);
    nd->cpus = x->cpus;
    nd->nranks = nranked(x);
    nd->cpu_mean = f.cpu_mean;
    nd->tree_cpu_mean = f.tree_cpu_mean;
    nd->rss_max = f.rss_max;
    nd->gpu_util_mean = f.gpu_util_mean;
    nd->align_err_s = NAN;
}

/* Node x's alerts into the job's r, on node 0's clock (at most
 * DIAG_MAX_ALERTS in all; the rest counted, said in ALERTS). */
static void add_alerts(diag_run *r, const diag_run *x, double offset_s)
{
    for (int a = 0; a < x->nalerts; a++) {
        if (r->nalerts == DIAG_MAX_ALERTS) {
            r->nalerts_dropped++;
            continue;
        }
        r->alerts[r->nalerts] = x->alerts[a];
        r->alerts[r->nalerts].t += offset_s;
        r->alerts[r->nalerts++].node = r->nnodes;
    }
    r->nalerts_dropped += x->nalerts_dropped;
    r->nalerts_fired += x->nalerts_fired;
}

static int by_time(const void *a, const void *b)
{
    const dalert *x = a, *y = b;
    return (x->t > y->t) - (x->t < y->t);
}

/* A job's alerts in time order, each saying its node. */
static void job_alerts(diag_run *r)
{
    qsort(r->alerts, (size_t)r->nalerts, sizeof(*r->alerts), by_time);
    for (int i = 0; i < r->nalerts; i++) {
        dalert *a = &r->alerts[i];
        char m[sizeof(a->message)];
        const dnode *nd = &r->nodes[a->node];
        snprintf(m, sizeof(m), "node %d (%s): %s", a->node, nd->host[0] ? nd->host : "?",
                 a->message);
        memcpy(a->message, m, sizeof(m));
    }
}

int rr_load_job(const char *const *dirs, int n, int as_job, diag_run **out, char *err,
                size_t errlen)
{
    *out = NULL;
    diag_run *r;
    int rc = diag_load(dirs[0], &r, err, errlen);
    if (rc) return rc;
    if (n < 2) {
        *out = r;
        return 0;
    }
    if (diag_grow((void **)&r->nodes, &r->capnodes, n, sizeof(*r->nodes))) {
        diag_free(r);
        return TPF_ENOMEM;
    }
    r->nnodes = 1;
    node_from(&r->nodes[0], r, dirs[0]);
    r->nodes[0].align_err_s = 0;
    aend *a0;
    int n0 = node_ends(dirs[0], &a0);
    double start0 = r->start_unix_s, dur0 = r->duration_s;
    for (int i = 1; i < n; i++) {
        diag_run *x;
        rc = diag_load_node(dirs[i], &x, err, errlen);
        char why[700];
        if (!rc && !as_job && !same_job(r, start0, dur0, dirs[0], x, dirs[i], why, sizeof(why))) {
            if (err && errlen)
                snprintf(err, errlen,
                         "%s and %s are not one job: %s; report each on its own, or add --job "
                         "to report them as one",
                         dirs[0], dirs[i], why);
            diag_free(x);
            rc = TPF_EINVAL;
        }
        if (rc) {
            free(a0);
            diag_free(r);
            return rc;
        }
        dnode *nd = &r->nodes[r->nnodes];
        node_from(nd, x, dirs[i]);
        nd->wall_offset_s = isfinite(x->start_unix_s) && isfinite(r->start_unix_s)
                                ? x->start_unix_s - r->start_unix_s
                                : 0;
        align(nd, a0, n0, dirs[i]);
        if (isfinite(x->duration_s) && x->duration_s + nd->offset_s > r->duration_s)
            r->duration_s = x->duration_s + nd->offset_s;
        add_alerts(r, x, nd->offset_s);
        if (x->ngpu && !diag_grow((void **)&r->gpus, &r->capgpu, r->ngpu + x->ngpu, sizeof(*r->gpus)))
            for (int g = 0; g < x->ngpu; g++) {
                r->gpus[r->ngpu] = x->gpus[g];
                r->gpus[r->ngpu++].node = r->nnodes;
            }
        diag_free(x);
        r->cur_node = r->nnodes++;
        r->cur_offset_s = nd->offset_s;
        char e[400];
        rc = diag_load_node_steps(r, dirs[i], nd->offset_s, e, sizeof(e));
        if (rc) {
            if (err && errlen) snprintf(err, errlen, "%s", e);
            free(a0);
            diag_free(r);
            return rc;
        }
        rr_load_comm(r, dirs[i]);
        rr_load_flops(r, dirs[i]);
        nd->nranks = 0; /* its ranks, as read into the job */
        for (int k = 0; k < r->nranks; k++)
            nd->nranks += r->ranks[k].node == r->cur_node && r->ranks[k].rank >= 0;
    }
    free(a0);
    r->cur_node = 0;
    r->cur_offset_s = 0;
    diag_index_ranks(r);
    job_alerts(r);
    snprintf(r->name, sizeof(r->name), "job of %d nodes (%s, ...)", r->nnodes, r->nodes[0].host);
    *out = r;
    return 0;
}

/* ---- slow nodes and links ---------------------------------------------------- */

/* Per node: the mean over its ranks (with warm steps) of their comm wait,
 * data wait and compute a step, the least and most comm wait of a rank on
 * it, and how many ranks; malloc'd, r->nnodes of them. */
typedef struct nodeagg {
    int ranks;
    double comm, data, compute, comm_min, comm_max, busbw_sum, busbw_n;
} nodeagg;

static nodeagg *node_aggs(const diag_run *r)
{
    if (r->nnodes < 2) return NULL;
    nodeagg *a = calloc((size_t)r->nnodes, sizeof(*a));
    for (int i = 0; a && i < r->nranks; i++) {
        const drank *k = &r->ranks[i];
        if (k->rank < 0 || k->node < 0 || k->node >= r->nnodes) continue;
        nodeagg *x = &a[k->node];
        if (k->comm_busbw_n > 0) x->busbw_sum += k->comm_busbw_sum / k->comm_busbw_n, x->busbw_n++;
        rrow w;
        rank_row(r, k->rank, &w);
        if (!(w.warm >= 3) || !isfinite(w.comm)) continue;
        if (!x->ranks || w.comm < x->comm_min) x->comm_min = w.comm;
        if (!x->ranks || w.comm > x->comm_max) x->comm_max = w.comm;
        x->ranks++;
        x->comm += w.comm;
        x->data += w.data;
        x->compute += w.compute;
    }
    for (int i = 0; a && i < r->nnodes; i++)
        if (a[i].ranks) a[i].comm /= a[i].ranks, a[i].data /= a[i].ranks, a[i].compute /= a[i].ranks;
    return a;
}

int rr_slow_node(const diag_run *r, rr_slow_node_t *s)
{
    memset(s, 0, sizeof(*s));
    s->node = -1;
    nodeagg *a = node_aggs(r);
    if (!a) return 0;
    int least = -1, n = 0;
    double ow = 0, od = 0, oc = 0, step = 0;
    for (int i = 0; i < r->nnodes; i++) {
        if (!a[i].ranks) continue;
        n++;
        if (least < 0 || a[i].comm < a[least].comm) least = i;
    }
    for (int i = 0; n >= 2 && i < r->nnodes; i++) {
        if (!a[i].ranks) continue;
        step += (a[i].comm + a[i].data + a[i].compute) / n;
        if (i == least) continue;
        ow += a[i].comm / (n - 1), od += a[i].data / (n - 1), oc += a[i].compute / (n - 1);
    }
    int found = 0;
    if (n >= 2 && a[least].ranks >= 2) {
        const nodeagg *l = &a[least];
        s->node = least;
        s->ranks = l->ranks;
        s->host = r->nodes[least].host[0] ? r->nodes[least].host : NULL;
        s->gap_ms = ow - l->comm;
        s->others_wait_ms = ow;
        s->own_wait_ms = l->comm;
        s->step_ms = step;
        s->share = step > 0 ? s->gap_ms / step : NAN;
        s->extra_data_ms = l->data - od;
        s->extra_compute_ms = l->compute - oc;
        s->where = s->extra_data_ms >= 0.5 * s->gap_ms ? "data loader" : "step";
        /* as for a rank: the gap is the node's own time, it stands alone
         * among the nodes, and every rank of it waits little (one slow rank
         * on a node is that rank's straggling, not the node's) */
        double next = INFINITY;
        for (int i = 0; i < r->nnodes; i++)
            if (i != least && a[i].ranks && a[i].comm < next) next = a[i].comm;
        found = s->share >= RR_STRAGGLER_SHARE &&
                s->extra_data_ms + s->extra_compute_ms >= 0.5 * s->gap_ms &&
                next - l->comm >= 0.5 * s->gap_ms && l->comm_max <= ow - 0.5 * s->gap_ms;
    }
    free(a);
    return found;
}

int rr_slow_link(const diag_run *r, rr_slow_link_t *s)
{
    memset(s, 0, sizeof(*s));
    s->node = -1;
    nodeagg *a = node_aggs(r);
    if (!a) return 0;
    double *bw = malloc((size_t)r->nnodes * sizeof(*bw));
    int n = 0, low = -1;
    for (int i = 0; bw && i < r->nnodes; i++) {
        if (!(a[i].busbw_n > 0)) continue;
        double v = a[i].busbw_sum / a[i].busbw_n;
        bw[n++] = v;
        if (low < 0 || v < a[low].busbw_sum / a[low].busbw_n) low = i;
    }
    int found = 0;
    if (n >= 3) {
        double lv = a[low].busbw_sum / a[low].busbw_n;
        double med = diag_median(bw, n); /* sorted: bw[1] is the next lowest */
        s->node = low;
        s->host = r->nodes[low].host[0] ? r->nodes[low].host : NULL;
        s->busbw_bps = lv;
        s->median_busbw_bps = med;
        s->ratio = lv > 0 ? med / lv : NAN;
        /* far below the median, and alone there (the next node is not as slow) */
        found = s->ratio >= RR_SLOW_LINK_RATIO && bw[1] >= lv * (1 + (s->ratio - 1) / 2);
    }
    free(bw);
    free(a);
    return found;
}

static void slow_node_words(const rr_slow_node_t *s, buf *b)
{
    buf_printf(b, "node %d (%s) holds the others back: the other nodes' ranks wait %.1f ms a step "
                  "in collectives, its %d ranks %.1f ms; they spend it in their own %s (%s +%.1f "
                  "ms a step)",
               s->node, s->host ? s->host : "?", s->others_wait_ms, s->ranks, s->own_wait_ms,
               s->where, s->extra_data_ms >= 0.5 * s->gap_ms ? "data wait" : "compute",
               s->extra_data_ms >= 0.5 * s->gap_ms ? s->extra_data_ms : s->extra_compute_ms);
}

static void slow_link_words(const rr_slow_link_t *s, buf *b)
{
    char x[32], y[32];
    human_bytes(x, sizeof(x), s->busbw_bps);
    human_bytes(y, sizeof(y), s->median_busbw_bps);
    buf_printf(b, "node %d (%s): its ranks' collectives move %s/s bus bandwidth, the nodes' median "
                  "%s/s (%.1fx slower): look at its network link",
               s->node, s->host ? s->host : "?", x, y, s->ratio);
}

/* The slow node and slow link lines of text, md or html (nothing when none). */
static void slow_lines(const diag_run *r, buf *b, int fmt)
{
    rr_slow_node_t sn;
    rr_slow_link_t sl;
    buf w;
    buf_init(&w, 1024);
    for (int which = 0; which < 2; which++) {
        buf_reset(&w);
        if (which == 0 && rr_slow_node(r, &sn))
            slow_node_words(&sn, &w);
        else if (which == 1 && rr_slow_link(r, &sl))
            slow_link_words(&sl, &w);
        else
            continue;
        const char *what = which ? "slow link" : "slow node";
        if (fmt == TBL_HTML) {
            buf_printf(b, "<p><b>%c%s</b>: ", what[0] - 32, what + 1);
            report_html_esc(b, w.data ? w.data : "");
            buf_puts(b, ".</p>\n");
        } else if (fmt == TBL_MD) {
            buf_printf(b, "\n**%c%s**: ", what[0] - 32, what + 1);
            const char *cell[] = {w.data ? w.data : ""};
            tbl_cells(b, TBL_MD, cell, 1);
            buf_puts(b, ".\n");
        } else {
            buf_printf(b, "  %s: %s\n", what, w.data ? w.data : "");
        }
    }
    buf_free(&w);
}

/* ---- text ------------------------------------------------------------------- */

static const char *num(char *o, size_t n, const char *f, double v)
{
    return diag_fmt_num(o, n, f, v);
}

static void strag_words(const rr_strag *s, buf *b)
{
    buf_printf(b, "rank %d waits %.1f ms a step in %s for rank %d; rank %d spends it in its own %s",
               s->waiter, s->gap_ms, s->op, s->rank, s->rank, s->where);
    if (s->loader)
        buf_printf(b, " (data wait +%.1f ms a step)", s->extra_data_ms);
    else
        buf_printf(b, " (compute +%.1f ms a step)", s->extra_compute_ms);
}

void rr_evidence(const diag_run *r, char *o, size_t n)
{
    rr_strag s;
    o[0] = 0;
    if (!rr_straggler(r, &s)) return;
    buf b;
    buf_init(&b, n);
    strag_words(&s, &b);
    snprintf(o, n, "%s", b.data ? b.data : "");
    buf_free(&b);
}

/* The collectives of comm/, one row per op, then how much of their time
 * was exposed and the FSDP advice: the same section in text and md. */
static void comm_section(const diag_run *r, buf *b, int fmt, int color)
{
    int md = fmt == TBL_MD;
    static const tbl_col cols[] = {
        {"op", 24, 0}, {"count", 8, TBL_RIGHT}, {"bytes", 10, TBL_RIGHT}, {"time ms", 10, TBL_RIGHT},
        {"waited ms", 10, TBL_RIGHT}, {"busbw", 12, TBL_RIGHT},
    };
    tbl t;
    tbl_begin_sub(&t, b, fmt, color, NULL, cols, 6);
    for (int i = 0; i < r->ncommops; i++) {
        const dcommop *o = &r->commops[i];
        char n[32], by[32], tm[32], wt[32], bw[32], bws[40];
        human_bytes(by, sizeof(by), o->bytes);
        human_bytes(bw, sizeof(bw), o->busbw_n ? o->busbw_sum / o->busbw_n : NAN);
        snprintf(bws, sizeof(bws), "%s/s", bw);
        const char *cells[] = {o->op, num(n, sizeof(n), "%.0f", o->n), by,
                               num(tm, sizeof(tm), "%.1f", o->dur_ns / 1e6),
                               num(wt, sizeof(wt), "%.1f", o->wait_ns / 1e6), bws};
        tbl_row(&t, cells, TBL_PLAIN);
    }
    tbl_end(&t);
    int html = fmt == TBL_HTML;
    if (r->commops_dropped > 0)
        buf_printf(b, html ? "<p>%.0f collectives of kinds past the first %d not in this table.</p>\n"
                   : md ? "\n%.0f collectives of kinds past the first %d not in this table.\n"
                        : "  (%.0f collectives of kinds past the first %d not in this table)\n",
                   r->commops_dropped, DIAG_MAX_COMM_OPS);
    rr_overlap_t ov;
    if (rr_overlap(r, &ov))
        buf_printf(b, html ? "<p>Per rank and step: collectives in flight %.1f ms, exposed (waited "
                             "on) %.1f ms, overlapped with compute %.1f ms.</p>\n"
                   : md ? "\nPer rank and step: collectives in flight %.1f ms, exposed (waited on) "
                          "%.1f ms, overlapped with compute %.1f ms.\n"
                        : "  per rank and step: collectives in flight %.1f ms, exposed (waited on) "
                          "%.1f ms, overlapped with compute %.1f ms\n",
                   ov.busy_ms, ov.exposed_ms, ov.overlapped_ms);
    char adv[600];
    rr_fsdp_advice(r, adv, sizeof(adv));
    if (adv[0] && html) {
        buf_puts(b, "<p>");
        report_html_esc(b, adv);
        buf_puts(b, "</p>\n");
    } else if (adv[0]) {
        buf_printf(b, md ? "\n%s\n" : "  %s\n", adv);
    }
}

/* The job's figures as one sentence (text and md; html escapes it):
 * optimizer steps, samples/s, tokens/s, model FLOP/s and MFU, or why not. */
static void job_words(const diag_run *r, buf *b)
{
    rr_job j;
    rr_job_figures(r, &j);
    char a[3][32];
    buf_printf(b, "%s optimizer steps%s, %s samples/s", num(a[0], 32, "%.0f", j.steps),
               j.ranks > 1 ? " (not a sum over ranks)" : "", num(a[1], 32, "%.1f", j.samples_per_s));
    if (isfinite(j.tokens_per_s) && j.tokens_per_s > 0)
        buf_printf(b, ", %s tokens/s", num(a[2], 32, "%.0f", j.tokens_per_s));
    if (!j.flops_ranks) {
        buf_puts(b, "; MFU — (model FLOPs unknown: `trainperf run --flops-step N` counts them, "
                    "trainperf.declare_flops() declares them)");
        return;
    }
    buf_printf(b, "; model %s TFLOP/s", tflops_or_dash(a[0], 32, j.flops_per_s));
    if (j.flops_ranks < j.ranks) buf_printf(b, " (%d of %d ranks)", j.flops_ranks, j.ranks);
    if (j.mfu_ranks) {
        buf_printf(b, ", MFU %s%s (peak: %s)", pct_or_dash(a[1], 32, j.mfu),
                   j.mfu_ranks < j.flops_ranks ? " of the ranks with a peak" : "", j.peak_src);
        /* GPU runs: the same FLOPs over the time a kernel ran (kernel
         * records): how well the kernels use the GPU, apart from its idle */
        if (r->gs.have && r->gs.busy_share > 0 && isfinite(j.mfu))
            buf_printf(b, ", %s of the GPU's busy time", pct_or_dash(a[2], 32, j.mfu / r->gs.busy_share));
    }
    else
        buf_printf(b, ", MFU — (%s)", j.peak_src[0] ? j.peak_src : "no peak FLOP/s");
}

/* job_words escaped for Markdown or HTML (a peak source comes from a file). */
static void job_words_esc(const diag_run *r, buf *b, int fmt)
{
    buf w;
    buf_init(&w, 1024);
    job_words(r, &w);
    const char *cell[] = {w.data ? w.data : ""};
    tbl_cells(b, fmt, cell, 1);
    buf_free(&w);
}

/* The distribution of the rows' figures over ranks or nodes: p50, p90 and
 * max of every numeric column with a heading, as rows of the same table
 * (n rows of sz bytes; label_off: the row's label member). */
static void dist_table(buf *b, int fmt, const fig_col *cols, int nc, const void *rows, size_t sz,
                       int n, const char *what)
{
    fig_col dc[FIG_MAX_COLS];
    int ndc = 0;
    dc[ndc++] = (fig_col)FIG_COL(what, 6, 0, TEXT, NULL, 1, PSTR, NULL, rline, label);
    for (int i = 0; i < nc && ndc < FIG_MAX_COLS; i++)
        if (cols[i].c.head && cols[i].f.type == JWF_DBL && cols[i].kind != FC_TEXT)
            dc[ndc++] = cols[i];
    tbl_col tc[FIG_MAX_COLS];
    int ntc = fig_heads(dc, ndc, tc);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(*v));
    char *row = calloc(1, sz);
    if (!v || !row) goto out;
    tbl t;
    fig_begin(&t, b, fmt, tc, ntc);
    static const struct {
        const char *name;
        double q;
    } qs[] = {{"p50", 0.5}, {"p90", 0.9}, {"max", 1.0}};
    for (size_t q = 0; q < sizeof(qs) / sizeof(qs[0]); q++) {
        *(const char **)row = qs[q].name; /* label: the first member of rline and nrow */
        for (int c = 1; c < ndc; c++) {
            int m = 0;
            for (int i = 0; i < n; i++) {
                double x = *(const double *)((const char *)rows + (size_t)i * sz + dc[c].f.off);
                if (isfinite(x)) v[m++] = x;
            }
            double *dst = (double *)(row + dc[c].f.off);
            diag_median(v, m); /* sorts */
            int at = m ? (int)ceil(qs[q].q * m) - 1 : 0;
            *dst = m ? v[at < 0 ? 0 : at] : NAN;
        }
        fig_row(&t, dc, ndc, row);
    }
    tbl_end(&t);
out:
    free(v);
    free(row);
}

/* The worst ranks, each once with every reason it is among them. */
#define RR_WORST 6
static void worst_add(int *pick, const char **why, char (*wb)[96], int *n, int i, const char *w)
{
    for (int j = 0; j < *n; j++)
        if (pick[j] == i) {
            size_t l = strlen(wb[j]);
            snprintf(wb[j] + l, sizeof(wb[j]) - l, "; %s", w);
            return;
        }
    if (*n >= RR_WORST || i < 0) return;
    pick[*n] = i;
    snprintf(wb[*n], sizeof(wb[*n]), "%s", w);
    why[*n] = wb[*n];
    (*n)++;
}

/* The index in rows (n of them) of the highest (sign 1) or lowest (-1)
 * double at off; -1 when none is known. */
static int extreme(const void *rows, size_t sz, int n, size_t off, int sign)
{
    int best = -1;
    double bv = 0;
    for (int i = 0; i < n; i++) {
        double x = *(const double *)((const char *)rows + (size_t)i * sz + off);
        if (isfinite(x) && (best < 0 || sign * x > sign * bv)) best = i, bv = x;
    }
    return best;
}

static const fig_col why_col[] = {
    FIG_COL("why among the worst", 0, TBL_GAP, TEXT, NULL, 1, PSTR, NULL, rline, label),
};

static void worst_ranks(const diag_run *r, const drank *const *k, int n, const rline *x, buf *b,
                        int fmt)
{
    int pick[RR_WORST], np = 0;
    const char *why[RR_WORST];
    char wb[RR_WORST][96];
    rr_strag st;
    if (rr_straggler(r, &st))
        for (int i = 0; i < n; i++)
            if (k[i]->rank == st.rank) worst_add(pick, why, wb, &np, i, "straggler");
    size_t sz = sizeof(*x);
    worst_add(pick, why, wb, &np, extreme(x, sz, n, offsetof(rline, x.comm), -1), "least comm wait");
    worst_add(pick, why, wb, &np, extreme(x, sz, n, offsetof(rline, x.compute), 1), "most compute");
    worst_add(pick, why, wb, &np, extreme(x, sz, n, offsetof(rline, x.data), 1), "slowest data");
    worst_add(pick, why, wb, &np, extreme(x, sz, n, offsetof(rline, x.comm), 1), "most exposed comm");
    worst_add(pick, why, wb, &np, extreme(x, sz, n, offsetof(rline, x.p95), 1), "slowest steps (p95)");
    fig_col c[FIG_MAX_COLS];
    int nc = 0;
    for (int i = 0; i < FIG_NCOLS(rank_cols) && nc < FIG_MAX_COLS - 1; i++) c[nc++] = rank_cols[i];
    c[nc++] = why_col[0];
    tbl_col tc[FIG_MAX_COLS];
    int ntc = fig_heads(c, nc, tc);
    tbl t;
    fig_begin(&t, b, fmt, tc, ntc);
    for (int j = 0; j < np; j++) {
        rline y = x[pick[j]];
        y.label = why[j];
        fig_row(&t, c, nc, &y);
    }
    tbl_end(&t);
}

/* More ranks than RR_TABLE_ROWS: their distribution, then the worst. */
static void ranks_summary(const diag_run *r, const drank *const *k, int n, buf *b, int fmt)
{
    rline *x = calloc((size_t)(n > 0 ? n : 1), sizeof(*x));
    if (!x) return;
    for (int i = 0; i < n; i++) rank_line(r, k[i], &x[i]);
    dist_table(b, fmt, rank_cols, FIG_NCOLS(rank_cols), x, sizeof(*x), n, "ranks");
    buf_puts(b, fmt == TBL_HTML ? "<p>The worst ranks:</p>\n"
                : fmt == TBL_MD ? "\nThe worst ranks:\n"
                                : "  the worst ranks:\n");
    worst_ranks(r, k, n, x, b, fmt);
    buf_printf(b, fmt == TBL_HTML ? "<p>Every rank: <code>trainperf report --all-ranks</code>, or "
                                    "the JSON report.</p>\n"
                  : fmt == TBL_MD ? "\nEvery rank: `trainperf report --all-ranks`, or the JSON "
                                    "report.\n"
                                  : "  (p50/p90/max over the %d ranks; every rank: --all-ranks, or "
                                    "--format json)\n",
               n);
    free(x);
}

static void ranks_table(const diag_run *r, const drank *const *k, int n, buf *b, int fmt)
{
    if (n > RR_TABLE_ROWS && !r->all_ranks) {
        ranks_summary(r, k, n, b, fmt);
        return;
    }
    tbl_col cols[FIG_MAX_COLS];
    int nc = fig_heads(rank_cols, FIG_NCOLS(rank_cols), cols);
    if (fmt == TBL_TEXT) cols[RANK_COMPUTE].head = "compute";
    tbl t;
    fig_begin(&t, b, fmt, cols, nc);
    for (int i = 0; i < n; i++) {
        rline x;
        rank_line(r, k[i], &x);
        fig_row(&t, rank_cols, FIG_NCOLS(rank_cols), &x);
    }
    tbl_end(&t);
}

/* A node's figures: its ranks' step figures merged (figs groups, as the job's
 * are), its run's resources and where its clock sits on node 0's. */
typedef struct nrow {
    const char *label; /* the distribution table's row name */
    int node, ranks, cpus;
    const char *host, *dir; /* NULL: unknown */
    double steps_per_s, p50, p95, data, comm;
    double cpu_mean, tree_cpu_mean, rss_max;
    double offset_s, wall_offset_s, align_err_s, align_n;
    char note[160]; /* the reference clock, the straggler's node, no alignment, why among the worst */
} nrow;

static const fig_col node_cols[] = {
    FIG_COL("node", 4, TBL_RIGHT, INT, NULL, 1, INT, "node", nrow, node),
    FIG_COL("host", 0, 0, TEXT, NULL, 1, PSTR, "host", nrow, host),
    FIG_COL("ranks", 5, TBL_RIGHT, INT, NULL, 1, INT, "ranks", nrow, ranks),
    FIG_COL("steps/s", 8, TBL_RIGHT, NUM, "%.1f", 1, DBL, "steps_per_s", nrow, steps_per_s),
    FIG_COL("p50 ms", 8, TBL_RIGHT, NUM, "%.1f", 1, DBL, "step_time_ms_p50", nrow, p50),
    FIG_COL("p95 ms", 8, TBL_RIGHT, NUM, "%.1f", 1, DBL, "step_time_ms_p95", nrow, p95),
    FIG_COL("data ms", 8, TBL_RIGHT, NUM, "%.1f", 1, DBL, "data_wait_ms_mean", nrow, data),
    FIG_COL("comm ms", 8, TBL_RIGHT, NUM, "%.1f", 1, DBL, "comm_wait_ms_mean", nrow, comm),
    FIG_COL("CPUs", 5, TBL_RIGHT, INT, NULL, 1, INT, "cpus", nrow, cpus),
    FIG_COL("CPU %", 6, TBL_RIGHT, NUM, "%.0f", 1, DBL, "cpu_pct_mean", nrow, cpu_mean),
    FIG_COL("tree CPU %", 11, TBL_RIGHT, NUM, "%.0f", 1, DBL, "tree_cpu_pct_mean", nrow,
            tree_cpu_mean),
    FIG_COL("RSS max", 10, TBL_RIGHT, BYTES, NULL, 1, DBL, "tree_rss_bytes_max", nrow, rss_max),
    FIG_COL("clock s", 8, TBL_RIGHT, NUM, "%+.3f", 1, DBL, "clock_offset_s", nrow, offset_s),
    FIG_COL("wall clocks s", 14, TBL_RIGHT, NUM, "%+.3f", 1, DBL, "wall_clock_offset_s", nrow,
            wall_offset_s),
    FIG_COL("align error ms", 15, TBL_RIGHT, NUM, "%.2f", 1e3, DBL, "alignment_error_s", nrow,
            align_err_s),
    FIG_COL("collectives", 12, TBL_RIGHT, NUM, "%.0f", 1, DBL, "collectives_matched", nrow,
            align_n),
    FIG_COL("note", 0, TBL_GAP, TEXT, NULL, 1, STR, NULL, nrow, note),
    FIG_COL(NULL, 0, 0, TEXT, NULL, 1, PSTR, "dir", nrow, dir),
};

static void node_row(const diag_run *r, int i, const rr_strag *strag, nrow *o)
{
    const dnode *nd = &r->nodes[i];
    memset(o, 0, sizeof(*o));
    o->node = i;
    o->ranks = nd->nranks;
    o->cpus = nd->cpus;
    o->host = nd->host[0] ? nd->host : NULL;
    o->dir = nd->dir;
    o->cpu_mean = nd->cpu_mean;
    o->tree_cpu_mean = nd->tree_cpu_mean;
    o->rss_max = nd->rss_max;
    o->offset_s = nd->offset_s;
    o->wall_offset_s = nd->wall_offset_s;
    o->align_err_s = nd->align_err_s;
    o->align_n = nd->align_n;
    /* the node's ranks as one group: counts and sums add, sketches merge */
    agg_group *g = calloc(1, sizeof(*g)); /* a sketch is 16 kB: not on the stack */
    if (g) sketch_init(&g->step_ns);
    int any = 0;
    for (int k = 0; g && k < r->nranks; k++) {
        const agg_group *x = r->ranks[k].node == i && r->ranks[k].rank >= 0
                                 ? group_of_rank(r, r->ranks[k].rank)
                                 : NULL;
        if (!x) continue;
        any = 1;
        figs_group_merge(g, x);
    }
    rrow w;
    group_row(any ? g : NULL, &w);
    o->steps_per_s = any && g->interval_ns > 0
                         ? (double)g->count / ((double)g->interval_ns / 1e9)
                         : NAN;
    free(g);
    o->p50 = w.p50;
    o->p95 = w.p95;
    o->data = w.data;
    o->comm = w.comm;
    if (i == 0)
        snprintf(o->note, sizeof(o->note), "reference clock");
    else if (!isfinite(nd->align_err_s))
        snprintf(o->note, sizeof(o->note), "wall clocks (no collectives to align on)");
    for (int k = 0; strag && k < r->nranks; k++)
        if (r->ranks[k].rank == strag->rank && r->ranks[k].node == i)
            snprintf(o->note + strlen(o->note), sizeof(o->note) - strlen(o->note),
                     "%sstraggler: rank %d", o->note[0] ? "; " : "", strag->rank);
}

/* More nodes than RR_TABLE_ROWS: their distribution, then the worst nodes
 * (the slow node, the slow link, the most and least comm wait, the slowest
 * data, the worst clock alignment), each once with its reasons. */
static void nodes_summary(const diag_run *r, buf *b, int fmt, const rr_strag *strag)
{
    nrow *x = calloc((size_t)r->nnodes, sizeof(*x));
    if (!x) return;
    for (int i = 0; i < r->nnodes; i++) node_row(r, i, strag, &x[i]);
    dist_table(b, fmt, node_cols, FIG_NCOLS(node_cols), x, sizeof(*x), r->nnodes, "nodes");
    int pick[RR_WORST], np = 0;
    const char *why[RR_WORST];
    char wb[RR_WORST][96];
    rr_slow_node_t sn;
    rr_slow_link_t sl;
    if (rr_slow_node(r, &sn)) worst_add(pick, why, wb, &np, sn.node, "slow node");
    if (rr_slow_link(r, &sl)) worst_add(pick, why, wb, &np, sl.node, "slow link");
    for (int i = 0; strag && i < r->nnodes; i++)
        if (strstr(x[i].note, "straggler")) worst_add(pick, why, wb, &np, i, "its rank");
    size_t sz = sizeof(*x);
    worst_add(pick, why, wb, &np, extreme(x, sz, r->nnodes, offsetof(nrow, comm), -1), "least comm wait");
    worst_add(pick, why, wb, &np, extreme(x, sz, r->nnodes, offsetof(nrow, comm), 1), "most comm wait");
    worst_add(pick, why, wb, &np, extreme(x, sz, r->nnodes, offsetof(nrow, data), 1), "slowest data");
    worst_add(pick, why, wb, &np, extreme(x, sz, r->nnodes, offsetof(nrow, align_err_s), 1),
              "worst clock alignment");
    buf_puts(b, fmt == TBL_HTML ? "<p>The worst nodes:</p>\n"
                : fmt == TBL_MD ? "\nThe worst nodes:\n"
                                : "  the worst nodes:\n");
    tbl_col cols[FIG_MAX_COLS];
    int nc = fig_heads(node_cols, FIG_NCOLS(node_cols), cols);
    tbl t;
    fig_begin(&t, b, fmt, cols, nc);
    for (int j = 0; j < np; j++) {
        nrow *y = &x[pick[j]];
        size_t l = strlen(y->note);
        snprintf(y->note + l, sizeof(y->note) - l, "%s%s", l ? "; " : "", why[j]);
        fig_row(&t, node_cols, FIG_NCOLS(node_cols), y);
    }
    tbl_end(&t);
    free(x);
}

/* The nodes of a job, one row each, in text, md and html. */
static void nodes_table(const diag_run *r, buf *b, int fmt)
{
    tbl_col cols[FIG_MAX_COLS];
    int nc = fig_heads(node_cols, FIG_NCOLS(node_cols), cols);
    rr_strag st;
    int strag = rr_straggler(r, &st);
    if (r->nnodes > RR_TABLE_ROWS && !r->all_ranks) {
        nodes_summary(r, b, fmt, strag ? &st : NULL);
        return;
    }
    tbl t;
    fig_begin(&t, b, fmt, cols, nc);
    for (int i = 0; i < r->nnodes; i++) {
        nrow x;
        node_row(r, i, strag ? &st : NULL, &x);
        fig_row(&t, node_cols, FIG_NCOLS(node_cols), &x);
    }
    tbl_end(&t);
}

static void nodes_json(const diag_run *r, jw *w)
{
    rr_strag st;
    int strag = rr_straggler(r, &st);
    jw_arr_begin(w);
    for (int i = 0; i < r->nnodes; i++) {
        nrow x;
        node_row(r, i, strag ? &st : NULL, &x);
        jw_obj_begin(w);
        fig_json(w, node_cols, FIG_NCOLS(node_cols), &x);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

static void ranks_text(const diag_run *r, const drank *const *k, int n, buf *b, const char *bold, const char *reset);

void rr_text(const diag_run *r, buf *b, const char *bold, const char *reset)
{
    int n;
    const drank **k = sorted_ranks(r, &n);
    ranks_text(r, k, n, b, bold, reset);
    free(k);
}

static void ranks_text(const diag_run *r, const drank *const *k, int n, buf *b, const char *bold, const char *reset)
{
    if (n < 2 && r->nnodes < 2) {
        rr_job j;
        rr_job_figures(r, &j);
        if (j.flops_ranks) { /* one process: its model FLOPs, where known */
            buf_printf(b, "\n%sMODEL FLOPS%s\n  ", bold, reset);
            job_words(r, b);
            buf_puts(b, "\n");
        }
        return;
    }
    buf_printf(b, "\n%sRANKS%s  %d ranks", bold, reset, n);
    if (r->nnodes > 1) buf_printf(b, " on %d nodes", r->nnodes);
    buf_puts(b, "\n");
    ranks_table(r, k, n, b, TBL_TEXT);
    buf_puts(b, "  (per step: data = data-loader wait, comm = waiting in collectives, compute = "
                "the rest)\n  job: ");
    job_words(r, b);
    buf_puts(b, "\n");
    rr_strag s;
    if (rr_straggler(r, &s)) {
        buf_puts(b, "  straggler: ");
        strag_words(&s, b);
        buf_puts(b, "\n");
    }
    slow_lines(r, b, TBL_TEXT);
    if (r->ncommops) {
        buf_printf(b, "\n%sCOMMUNICATION%s (comm/: every collective, all ranks)\n", bold, reset);
        comm_section(r, b, TBL_TEXT, bold[0] != 0);
    }
    if (r->nnodes > 1) {
        buf_printf(b, "\n%sNODES%s\n", bold, reset);
        nodes_table(r, b, TBL_TEXT);
        buf_puts(b, "  (steps/s and step figures per rank, over the node's ranks; clocks on "
                    "node 0's, aligned on the collectives both completed)\n");
    }
}

/* ---- markdown and html --------------------------------------------------------- */

static void rr_html_heatmap(const diag_run *r, const drank *const *k, int n, buf *b);

/* A heading of the report's section (## in markdown, h2 in html). */
static void doc_heading(buf *b, int fmt, const char *title)
{
    if (fmt == TBL_HTML) buf_printf(b, "<h2>%s</h2>\n", title);
    else buf_printf(b, "\n## %s\n\n", title);
}

/* A paragraph that starts with a bold label ("Job", "Straggler"): the words
 * escaped for the format, then its end. */
static void doc_label(buf *b, int fmt, const char *label)
{
    if (fmt == TBL_HTML) buf_printf(b, "<p><b>%s</b>: ", label);
    else buf_printf(b, "\n**%s**: ", label);
}

static void doc_end(buf *b, int fmt) { buf_puts(b, fmt == TBL_HTML ? ".</p>\n" : ".\n"); }

/* The ranks' section of report.md and report.html: one writer, two markups
 * (the html has the heatmap; a one-rank run only its model FLOPs). */
static void ranks_doc(const diag_run *r, const drank *const *k, int n, buf *b, int fmt)
{
    int html = fmt == TBL_HTML;
    if (n < 2 && (html || r->nnodes < 2)) {
        rr_job j;
        rr_job_figures(r, &j);
        if (j.flops_ranks && r->nnodes < 2) {
            doc_heading(b, fmt, "Model FLOPs");
            if (html) buf_puts(b, "<p>");
            job_words_esc(r, b, fmt);
            doc_end(b, fmt);
        }
        return;
    }
    doc_heading(b, fmt, "Ranks");
    if (!html) {
        buf_printf(b, "%d ranks", n);
        if (r->nnodes > 1) buf_printf(b, " on %d nodes", r->nnodes);
        buf_puts(b, ". Per step: data = data-loader wait, comm = waiting in collectives, compute = "
                    "the rest.\n");
    }
    ranks_table(r, k, n, b, fmt);
    doc_label(b, fmt, "Job");
    job_words_esc(r, b, fmt);
    doc_end(b, fmt);
    rr_strag s;
    if (rr_straggler(r, &s)) {
        buf w;
        buf_init(&w, 1024);
        strag_words(&s, &w);
        doc_label(b, fmt, "Straggler");
        if (html) report_html_esc(b, w.data ? w.data : "");
        else buf_puts(b, w.data ? w.data : "");
        doc_end(b, fmt);
        buf_free(&w);
    }
    slow_lines(r, b, fmt);
    if (html) rr_html_heatmap(r, k, n, b);
    if (r->ncommops) {
        if (html) doc_heading(b, fmt, "Communication");
        else tbl_heading(b, TBL_MD, 0, "Communication");
        comm_section(r, b, fmt, 0);
    }
    if (r->nnodes > 1) {
        if (html) doc_heading(b, fmt, "Nodes");
        else buf_puts(b, "\n### Nodes\n");
        nodes_table(r, b, fmt);
    }
}

static void rr_doc(const diag_run *r, buf *b, int fmt)
{
    int n;
    const drank **k = sorted_ranks(r, &n);
    ranks_doc(r, k, n, b, fmt);
    free(k);
}

void rr_md(const diag_run *r, buf *b) { rr_doc(r, b, TBL_MD); }

void rr_html(const diag_run *r, buf *b) { rr_doc(r, b, TBL_HTML); }

/* The heatmap of step time, rows x time: one row per rank, or with more
 * than RR_HEATMAP_RANKS ranks one per node (its ranks' mean), so that a slow
 * node, or the node of a slow rank, stands out among 128 of them. */
#define RR_HEATMAP_RANKS 64
#define RR_HEATMAP_COLS 120

/* The time the buckets with data cover, over the ranks, and how many
 * columns (at most RR_HEATMAP_COLS, none narrower than a rank's bucket). */
static int heatmap_span(const drank *const *k, int n, double *t0, double *t1)
{
    double w = 0;
    *t0 = INFINITY;
    *t1 = -INFINITY;
    for (int i = 0; i < n; i++) {
        const dseries *sr = &k[i]->s_step;
        for (int j = 0; j < sr->n; j++) {
            if (!(sr->cnt[j] > 0)) continue;
            if (sr->t0 + sr->width * j < *t0) *t0 = sr->t0 + sr->width * j;
            if (sr->t0 + sr->width * (j + 1) > *t1) *t1 = sr->t0 + sr->width * (j + 1);
        }
        if (sr->width > w) w = sr->width;
    }
    if (!(*t1 > *t0) || !(w > 0)) return 0;
    double c = (*t1 - *t0) / w;
    return c >= RR_HEATMAP_COLS ? RR_HEATMAP_COLS : c < 1 ? 1 : (int)c;
}

static void heatmap_cells(const drank *const *k, int n, int by_node, int rows, int ncol,
                          double *sum, double *cnt, double t0, double t1)
{
    for (int i = 0; i < n; i++) {
        const dseries *sr = &k[i]->s_step;
        int row = by_node ? k[i]->node : i;
        if (row < 0 || row >= rows) continue;
        for (int j = 0; j < sr->n; j++) {
            if (!(sr->cnt[j] > 0)) continue;
            double t = sr->t0 + (j + 0.5) * sr->width;
            int c = (int)((t - t0) / (t1 - t0) * ncol);
            if (c < 0 || c >= ncol) continue;
            sum[row * ncol + c] += sr->sum[j] / sr->cnt[j];
            cnt[row * ncol + c] += 1;
        }
    }
}

static void rr_html_heatmap(const diag_run *r, const drank *const *k, int n, buf *b)
{
    int by_node = n > RR_HEATMAP_RANKS && r->nnodes > 1;
    int rows = by_node ? r->nnodes : n;
    double *sum = calloc((size_t)rows * RR_HEATMAP_COLS, sizeof(*sum));
    double *cnt = calloc((size_t)rows * RR_HEATMAP_COLS, sizeof(*cnt));
    double t0 = 0, t1 = 0, mx = 0;
    int ncol = heatmap_span(k, n, &t0, &t1);
    if (sum && cnt && ncol) heatmap_cells(k, n, by_node, rows, ncol, sum, cnt, t0, t1);
    for (int i = 0; sum && cnt && i < rows * ncol; i++)
        if (cnt[i] > 0 && sum[i] / cnt[i] > mx) mx = sum[i] / cnt[i];
    if (mx > 0) {
        const char *what = by_node ? "node" : "rank";
        double cw = 760.0 / ncol, rh = rows > 32 ? (rows > 64 ? 4 : 8) : 18;
        double W = 60 + 760 + 10, H = 20 + rh * rows + 24;
        buf_printf(b, "<figure class=\"chart\"><figcaption>Own time a step by %s over time (the step "
                      "less its data and comm waits; darker = slower; slowest %.1f ms%s)</figcaption>\n<svg viewBox=\"0 0 %.0f %.0f\" "
                      "role=\"img\" aria-label=\"heatmap of step time, %s by time\">\n",
                   what, mx, by_node ? "; a node's row is its ranks' mean" : "", W, H, what);
        for (int i = 0; i < rows; i++) {
            double y = 20 + rh * i;
            int id = by_node ? i : k[i]->rank;
            if (rh >= 8 || i % 8 == 0)
                buf_printf(b, "<text class=\"yl\" x=\"54\" y=\"%.1f\">%s %d</text>\n",
                           y + (rh >= 8 ? rh * 0.7 : rh), what, id);
            for (int c = 0; c < ncol; c++) {
                double q = cnt[i * ncol + c];
                if (!(q > 0)) continue;
                double ms = sum[i * ncol + c] / q, v = ms / mx;
                int shade = (int)(235 - 200 * (v > 1 ? 1 : v > 0 ? v : 0));
                buf_printf(b,
                           "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                           "fill=\"rgb(%d,%d,255)\"><title>%s %d, %.1f s: %.1f ms</title></rect>\n",
                           60 + cw * c, y, cw + 0.3, rh > 1 ? rh - (rh >= 8) : rh, shade, shade,
                           what, id, t0 + (t1 - t0) * c / ncol, ms);
            }
        }
        buf_printf(b, "<text class=\"xl\" x=\"60\" y=\"%.1f\">%.0f s</text>"
                      "<text class=\"xl\" x=\"%.0f\" y=\"%.1f\">%.0f s</text>\n",
                   H - 6, t0 > 0 ? t0 : 0, W - 30, H - 6, t1);
        buf_puts(b, "</svg></figure>\n");
    }
    free(sum);
    free(cnt);
}

/* ---- json ------------------------------------------------------------------- */

void rr_json(const diag_run *r, jw *w)
{
    int n;
    const drank **k = sorted_ranks(r, &n);
    jw_key(w, "ranks");
    jw_arr_begin(w);
    for (int i = 0; i < n; i++) {
        rline x;
        rank_line(r, k[i], &x);
        jw_obj_begin(w);
        fig_json(w, rank_cols, FIG_NCOLS(rank_cols), &x);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    free(k);
    rr_job j;
    rr_job_figures(r, &j);
    jw_key(w, "job");
    jw_fields_obj(w, &j, job_fields, JW_NFIELDS(job_fields));
    static const jw_field strag_fields[] = {
        JW_FIELD(INT, "rank", rr_strag, rank),
        JW_FIELD(INT, "waiting_rank", rr_strag, waiter),
        JW_FIELD(DBL, "others_wait_ms", rr_strag, others_wait_ms),
        JW_FIELD(DBL, "gap_ms", rr_strag, gap_ms),
        JW_FIELD(DBL, "share", rr_strag, share),
        JW_FIELD(PSTR, "where", rr_strag, where),
        JW_FIELD(STR, "collective", rr_strag, op),
    };
    jw_key(w, "straggler");
    rr_strag s;
    if (!rr_straggler(r, &s))
        jw_null(w);
    else
        jw_fields_obj(w, &s, strag_fields, JW_NFIELDS(strag_fields));
    static const jw_field slow_node_fields[] = {
        JW_FIELD(INT, "node", rr_slow_node_t, node),
        JW_FIELD(PSTR, "host", rr_slow_node_t, host),
        JW_FIELD(INT, "ranks", rr_slow_node_t, ranks),
        JW_FIELD(DBL, "others_wait_ms", rr_slow_node_t, others_wait_ms),
        JW_FIELD(DBL, "own_wait_ms", rr_slow_node_t, own_wait_ms),
        JW_FIELD(DBL, "gap_ms", rr_slow_node_t, gap_ms),
        JW_FIELD(DBL, "share", rr_slow_node_t, share),
        JW_FIELD(PSTR, "where", rr_slow_node_t, where),
    };
    static const jw_field slow_link_fields[] = {
        JW_FIELD(INT, "node", rr_slow_link_t, node),
        JW_FIELD(PSTR, "host", rr_slow_link_t, host),
        JW_FIELD(DBL, "busbw_bps", rr_slow_link_t, busbw_bps),
        JW_FIELD(DBL, "median_busbw_bps", rr_slow_link_t, median_busbw_bps),
        JW_FIELD(DBL, "ratio", rr_slow_link_t, ratio),
    };
    rr_slow_node_t sn;
    rr_slow_link_t sl;
    jw_key(w, "slow_node");
    if (!rr_slow_node(r, &sn))
        jw_null(w);
    else
        jw_fields_obj(w, &sn, slow_node_fields, JW_NFIELDS(slow_node_fields));
    jw_key(w, "slow_link");
    if (!rr_slow_link(r, &sl))
        jw_null(w);
    else
        jw_fields_obj(w, &sl, slow_link_fields, JW_NFIELDS(slow_link_fields));
    jw_key(w, "collectives");
    jw_arr_begin(w);
    for (int i = 0; i < r->ncommops; i++) {
        const dcommop *o = &r->commops[i];
        jw_obj_begin(w);
        jw_kstr(w, "op", o->op);
        jw_knum(w, "count", o->n);
        jw_knum(w, "bytes", o->bytes);
        jw_knum(w, "time_ms", o->dur_ns / 1e6);
        jw_knum(w, "wait_ms", o->wait_ns / 1e6);
        jw_knum(w, "busbw_bps", o->busbw_n ? o->busbw_sum / o->busbw_n : NAN);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    /* the FSDP figures (after the first three) only for an FSDP run */
    static const jw_field overlap_fields[] = {
        JW_FIELD(DBL, "in_flight_ms_per_step", rr_overlap_t, busy_ms),
        JW_FIELD(DBL, "exposed_ms_per_step", rr_overlap_t, exposed_ms),
        JW_FIELD(DBL, "overlapped_ms_per_step", rr_overlap_t, overlapped_ms),
        JW_FIELD(DBL, "fsdp_all_gather_ms_per_step", rr_overlap_t, ag_ms),
        JW_FIELD(DBL, "fsdp_all_gather_exposed_ms_per_step", rr_overlap_t, ag_exposed_ms),
        JW_FIELD(DBL, "fsdp_reduce_scatter_ms_per_step", rr_overlap_t, rs_ms),
        JW_FIELD(DBL, "fsdp_reduce_scatter_exposed_ms_per_step", rr_overlap_t, rs_exposed_ms),
        JW_FIELD(DBL, "fsdp_prefetch_gain_ms_per_step", rr_overlap_t, prefetch_gain_ms),
    };
    jw_key(w, "comm_overlap");
    rr_overlap_t ov;
    if (!rr_overlap(r, &ov))
        jw_null(w);
    else
        jw_fields_obj(w, &ov, overlap_fields, ov.fsdp ? JW_NFIELDS(overlap_fields) : 3);
    jw_key(w, "nodes");
    nodes_json(r, w);
}

/* ---- compare ---------------------------------------------------------------- */

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The ranks of a and b, merged in rank order (malloc'd, freed by the
 * caller; NULL with *n 0 when out of memory). */
static int *union_ranks(const diag_run *a, const diag_run *b, int *n)
{
    *n = 0;
    int *out = malloc((size_t)(a->nranks + b->nranks + 1) * sizeof(*out));
    if (!out) return NULL;
    const diag_run *xs[2] = {a, b};
    for (int x = 0; x < 2; x++)
        for (int i = 0; i < xs[x]->nranks; i++)
            if (xs[x]->ranks[i].rank >= 0) out[(*n)++] = xs[x]->ranks[i].rank;
    qsort(out, (size_t)*n, sizeof(*out), cmp_int);
    int m = 0;
    for (int i = 0; i < *n; i++)
        if (!m || out[m - 1] != out[i]) out[m++] = out[i];
    *n = m;
    return out;
}

static void cmp_row(const diag_run *x, int rank, rrow *w)
{
    rank_row(x, rank, w);
}

static void compare_table(const diag_run *a, const diag_run *b, const int *ranks, int n,
                          int total, report_format fmt, int color, buf *o);

/* How much rank's figures changed from a to b: the largest |log(B/A)| over
 * the compare columns with a heading (a rank only one run has: the most). */
static double rank_change(const diag_run *a, const diag_run *b, int rank)
{
    rrow x[2];
    cmp_row(a, rank, &x[0]);
    cmp_row(b, rank, &x[1]);
    if (!(x[0].steps > 0) || !(x[1].steps > 0)) return INFINITY;
    double most = 0;
    for (int k = 0; k < CMP_NCOLS; k++) {
        if (!cmp_cols[k].head) continue;
        double va = *(const double *)((const char *)&x[0] + cmp_cols[k].f.off);
        double vb = *(const double *)((const char *)&x[1] + cmp_cols[k].f.off);
        if (va > 0 && vb > 0 && fabs(log(vb / va)) > most) most = fabs(log(vb / va));
    }
    return most;
}

typedef struct rchange {
    int rank;
    double change;
} rchange;

static int by_change(const void *p, const void *q)
{
    const rchange *x = p, *y = q;
    return (x->change < y->change) - (x->change > y->change);
}

/* More than RR_TABLE_ROWS ranks: the RR_TABLE_ROWS that changed most, in
 * rank order, into ranks (returns how many). */
static int most_changed(const diag_run *a, const diag_run *b, int *ranks, int n)
{
    rchange *c = malloc((size_t)n * sizeof(*c));
    if (!c) return n;
    for (int i = 0; i < n; i++) c[i] = (rchange){ranks[i], rank_change(a, b, ranks[i])};
    qsort(c, (size_t)n, sizeof(*c), by_change);
    for (int i = 0; i < RR_TABLE_ROWS; i++) ranks[i] = c[i].rank;
    free(c);
    qsort(ranks, RR_TABLE_ROWS, sizeof(*ranks), cmp_int);
    return RR_TABLE_ROWS;
}

void rr_compare(const diag_run *a, const diag_run *b, report_format fmt, int color, buf *o)
{
    int n;
    int *ranks = union_ranks(a, b, &n);
    int shown = n > RR_TABLE_ROWS ? most_changed(a, b, ranks, n) : n;
    if (n >= 2) compare_table(a, b, ranks, shown, n, fmt, color, o);
    free(ranks);
}

static void compare_table(const diag_run *a, const diag_run *b, const int *ranks, int n,
                          int total, report_format fmt, int color, buf *o)
{
    tbl_col cols[CMP_NCOLS + 1] = {{"rank", 6, 0}};
    int nc = 1;
    for (int k = 0; k < CMP_NCOLS; k++)
        if (cmp_cols[k].head) cols[nc++] = (tbl_col){cmp_cols[k].head, 16, 1};
    tbl t;
    tbl_begin(&t, o, fmt, color, "Ranks (A → B, per step)", cols, nc);
    for (int i = 0; i < n; i++) {
        rrow x[2];
        cmp_row(a, ranks[i], &x[0]);
        cmp_row(b, ranks[i], &x[1]);
        char c[CMP_NCOLS + 1][80], u[2][32];
        const char *cells[CMP_NCOLS + 1] = {c[0]};
        snprintf(c[0], sizeof(c[0]), "%d", ranks[i]);
        for (int k = 0, j = 1; k < CMP_NCOLS; k++) {
            if (!cmp_cols[k].head) continue;
            const char *s[2];
            for (int side = 0; side < 2; side++) {
                double v = *(const double *)((const char *)&x[side] + cmp_cols[k].f.off);
                s[side] = cmp_cols[k].share ? pct_or_dash(u[side], 32, v) : num(u[side], 32, "%.1f", v);
            }
            snprintf(c[j], sizeof(c[j]), "%s → %s", s[0], s[1]);
            cells[j] = c[j];
            j++;
        }
        tbl_row(&t, cells, TBL_PLAIN);
    }
    tbl_end(&t);
    if (n < total)
        buf_printf(o, fmt == REPORT_HTML ? "<p>%d ranks: the %d whose figures changed most shown; "
                                           "the JSON has every rank.</p>\n"
                      : fmt == REPORT_MD ? "\n%d ranks: the %d whose figures changed most shown; "
                                           "the JSON has every rank.\n"
                                         : "  (%d ranks: the %d whose figures changed most shown; "
                                           "--format json has every rank)\n",
                   total, n);
    const diag_run *xs[2] = {a, b};
    buf line;
    buf_init(&line, 2048);
    for (int x = 0; x < 2; x++) {
        rr_strag s;
        buf_reset(&line);
        buf_printf(&line, "%s: ", x ? "B" : "A");
        if (rr_straggler(xs[x], &s))
            strag_words(&s, &line);
        else
            buf_puts(&line, "no straggler");
        const char *cell[] = {line.data ? line.data : ""};
        buf_puts(o, fmt == REPORT_HTML ? "<p>" : fmt == REPORT_MD ? "\n- " : "  ");
        tbl_cells(o, fmt, cell, 1);
        buf_puts(o, fmt == REPORT_HTML ? "</p>\n" : "\n");
    }
    buf_free(&line);
}

void rr_compare_json(const diag_run *a, const diag_run *b, jw *w)
{
    int n;
    int *ranks = union_ranks(a, b, &n);
    jw_key(w, "ranks");
    jw_arr_begin(w);
    for (int i = 0; i < n; i++) {
        rrow x[2];
        cmp_row(a, ranks[i], &x[0]);
        cmp_row(b, ranks[i], &x[1]);
        jw_obj_begin(w);
        jw_kint(w, "rank", ranks[i]);
        for (int k = 0; k < 2; k++) {
            jw_key(w, k ? "b" : "a");
            jw_obj_begin(w);
            for (int c = 0; c < CMP_NCOLS; c++) jw_fields(w, &x[k], &cmp_cols[c].f, 1);
            jw_obj_end(w);
        }
        jw_obj_end(w);
    }
    jw_arr_end(w);
    free(ranks);
    rr_strag s;
    jw_key(w, "straggler_a");
    if (rr_straggler(a, &s))
        jw_int(w, s.rank);
    else
        jw_null(w);
    jw_key(w, "straggler_b");
    if (rr_straggler(b, &s))
        jw_int(w, s.rank);
    else
        jw_null(w);
}

int rr_job_offsets(const char *const *dirs, int n, double *offsets_s, double *errs_s, char *err,
                   size_t errlen)
{
    diag_run *r;
    int rc = rr_load_job(dirs, n, 1, &r, err, errlen);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        offsets_s[i] = i < r->nnodes ? r->nodes[i].offset_s : 0;
        errs_s[i] = i < r->nnodes ? r->nodes[i].align_err_s : NAN;
    }
    diag_free(r);
    return 0;
}
