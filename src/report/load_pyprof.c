/* Loading what the zero-code hook and the sched source recorded (load_pyprof.h). */
#include "report/load_pyprof.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/diag_base.h"
#include "trainperf.h"
#include "util/jsonr.h"
#include "util/jsonw.h"

#define MAX_COUNT 1e5 /* cores, threads, workers: a damaged file's larger figure is ignored */
#define LOADER_MAX_FILES 1024  /* pyprof/loader-*.json read (a worker each) */

static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* a source line number from JSON: 0 when missing or out of range */
#define line_no(v) diag_int((v), 1, 1e9, 0)

/* lv[i]: {count, lowest, second lowest}; x joins one */
static void low2_add(double *lv, double x)
{
    if (lv[0] == 0 || x < lv[1])
        lv[2] = lv[0] == 0 ? INFINITY : lv[1], lv[1] = x;
    else if (x < lv[2])
        lv[2] = x;
    lv[0] += 1;
}

void dc_low2_merge(double *dst, const double *src)
{
    double n = dst[0] + src[0];
    if (src[0] > 0) low2_add(dst, src[1]);
    if (src[0] > 1) low2_add(dst, src[2]);
    dst[0] = n;
}

static void level_add(dcause *c, double ms)
{
    if (c->lv_width == 0) {
        sketch_init(&c->lv_diff);
        c->lv_width = 1;
    } else {
        /* in ns for the sketch (values under 1 count as zero) */
        sketch_add(&c->lv_diff, fabs(ms - c->lv_prev) * 1e6);
    }
    c->lv_prev = ms;
    if (c->lv_nb == 0 || c->lv[c->lv_nb - 1][0] >= (double)c->lv_width) {
        if (c->lv_nb == DC_LEVELS) {
            for (int i = 0; i < DC_LEVELS / 2; i++) {
                double m[3] = {c->lv[2 * i][0], c->lv[2 * i][1], c->lv[2 * i][2]};
                dc_low2_merge(m, c->lv[2 * i + 1]);
                memcpy(c->lv[i], m, sizeof(m));
            }
            c->lv_nb = DC_LEVELS / 2;
            c->lv_width *= 2;
        }
        if (c->lv_nb == 0 || c->lv[c->lv_nb - 1][0] >= (double)c->lv_width) {
            c->lv[c->lv_nb][0] = 0;
            c->lv_nb++;
        }
    }
    low2_add(c->lv[c->lv_nb - 1], ms);
}

/* One step's data wait into the windows: a new window when the last is
 * full, and when all are, neighbours merged so the windows double. */
static void dwin_add(dcause *c, double dw, double train_ns)
{
    if (c->dwin_width < 1) c->dwin_width = 1;
    if (c->dwin_nb == 0 || c->dwin[c->dwin_nb - 1][2] >= (double)c->dwin_width) {
        if (c->dwin_nb == DC_DWIN) {
            for (int i = 0; i < DC_DWIN / 2; i++)
                for (int k = 0; k < 3; k++)
                    c->dwin[i][k] = c->dwin[2 * i][k] + c->dwin[2 * i + 1][k];
            c->dwin_nb = DC_DWIN / 2;
            c->dwin_width *= 2;
        }
        if (c->dwin_nb == 0 || c->dwin[c->dwin_nb - 1][2] >= (double)c->dwin_width)
            memset(c->dwin[c->dwin_nb++], 0, sizeof(c->dwin[0]));
    }
    double *w = c->dwin[c->dwin_nb - 1];
    w[0] += dw, w[1] += train_ns, w[2] += 1;
}

void dc_step(dcause *c, long long step, double start, double end, double train_ns,
             double eval_ns, double ckpt_ns, double data_ns)
{
    /* data wait against training time (waits inside evaluation are the
     * evaluation's); the DC_MAX_SLOW longest waits kept, longest first */
    double dw = data_ns > 0 ? (data_ns < train_ns ? data_ns : train_ns) : 0;
    c->dw_n++;
    c->dw_sum += dw;
    c->dw_iv_sum += train_ns;
    dwin_add(c, dw, train_ns);
    if (c->ndwtop < DC_MAX_SLOW || dw > c->dwtop[c->ndwtop - 1][0]) {
        int j = c->ndwtop < DC_MAX_SLOW ? c->ndwtop++ : c->ndwtop - 1;
        while (j > 0 && c->dwtop[j - 1][0] < dw) {
            c->dwtop[j][0] = c->dwtop[j - 1][0];
            c->dwtop[j][1] = c->dwtop[j - 1][1];
            j--;
        }
        c->dwtop[j][0] = dw;
        c->dwtop[j][1] = train_ns;
    }
    if (eval_ns > 0 || ckpt_ns > 0) c->eval_steps++;
    c->tr_n++;
    c->tr_s += train_ns / 1e6;
    c->tr_ss += (train_ns / 1e6) * (train_ns / 1e6);
    if (step >= DC_WARM_STEPS) {
        c->tw_n++;
        c->tw_s += train_ns / 1e6;
        c->tw_ss += (train_ns / 1e6) * (train_ns / 1e6);
    }
    c->eval_ns += eval_ns;
    c->ckpt_ns += ckpt_ns;
    double ms = train_ns / 1e6;
    level_add(c, ms);
    /* keep the DC_MAX_SLOW slowest, sorted descending */
    int n = c->nslow;
    if (n == DC_MAX_SLOW && ms <= c->slow[n - 1].ms) return;
    int i = n < DC_MAX_SLOW ? n++ : n - 1;
    while (i > 0 && c->slow[i - 1].ms < ms) {
        c->slow[i] = c->slow[i - 1];
        i--;
    }
    c->slow[i] = (dc_slow){start, end, ms, step};
    c->nslow = n;
}

void dc_work(dcause *c, double tokens, double samples, double train_ns)
{
    /* tokens when the steps count them (the first counted step decides) */
    if (c->wk_n == 0) c->wk_tokens = tokens > 0;
    double x = c->wk_tokens ? tokens : samples, y = train_ns / 1e6;
    if (!(x > 0) || !(y > 0)) return;
    if (c->wk_n == 0 || x < c->wk_min) c->wk_min = x;
    if (c->wk_n == 0 || x > c->wk_max) c->wk_max = x;
    c->wk_n++;
    c->wk_x += x, c->wk_y += y;
    c->wk_xx += x * x, c->wk_yy += y * y, c->wk_xy += x * y;
}

void dc_metric(dcause *c, double first_end_s, double last_end_s, double t, const double *v,
               const int *ok)
{
    /* v: runq, runnable, usable, throttled, tree_rss */
    if (ok[0]) c->runq_n++, c->runq_sum += v[0];
    if (ok[1]) {
        c->runnable_n++, c->runnable_sum += v[1];
        if (v[1] > c->runnable_max) c->runnable_max = v[1];
    }
    if (isfinite(first_end_s) && t >= first_end_s && t <= last_end_s) {
        if (ok[0]) c->tq_n++, c->tq_sum += v[0];
        if (ok[1]) c->tn_n++, c->tn_sum += v[1];
    }
    /* the usable CPUs as the run mostly saw them (a child's narrower
     * affinity or a failed read at exit does not define the run) */
    if (ok[2] && v[2] > 0 && v[2] <= MAX_COUNT) c->usable_n++, c->usable_sum += v[2];
    if (ok[3]) c->thr_n++, c->thr_sum += v[3];
    if (ok[4] && v[4] > 0) {
        /* the baseline is after warm-up: the first sample once a step ended
         * (imports, model and optimizer state are in place by then) */
        if (isnan(c->rss_warm) && isfinite(first_end_s) && t >= first_end_s)
            c->rss_warm = v[4], c->rss_warm_t = t;
        /* up to the last step: a process tearing down frees its memory */
        if (!isfinite(last_end_s) || t <= last_end_s + 0.5)
            c->rss_last = v[4], c->rss_last_t = t;
    }
}

static void add_event(dc_event *arr, int *n, double t, double dur, const char *what)
{
    if (*n >= DC_MAX_EVENTS) return;
    arr[*n].t = t;
    arr[*n].dur = dur;
    diag_fmt(arr[*n].what, sizeof(arr[0].what), "%s", what ? what : "");
    (*n)++;
}

/* An events file's rank: RANK as the environment had it, a string (a
 * number is taken too); -1 when none or not a rank. */
int dc_events_rank(const jr_node *root)
{
    const char *rk = jr_pstr(root, "rank");
    char *end = NULL;
    long v = rk ? strtol(rk, &end, 10) : -1;
    return rk ? (end != rk && *end == 0 && v >= 0 && v < 1 << 20 ? (int)v : -1)
              : diag_int(jr_pnum(root, "rank"), 0, 1 << 20, -1);
}

/* profile.lines_top of one process, with its pid and rank */
static void load_lines(dcause *c, const jr_node *root, const jr_node *p)
{
    const jr_node *lt = p ? jr_get(p, "lines_top") : NULL;
    double total = lt ? jr_pnum(lt, "samples") : NAN;
    const jr_node *ls = lt ? jr_get(lt, "lines") : NULL;
    if (!(total > 0) || !ls || ls->type != JR_ARR || c->nproc >= DC_MAX_PROCS) return;
    dc_proc *pr = &c->procs[c->nproc];
    memset(pr, 0, sizeof(*pr));
    pr->pid = diag_int(jr_pnum(root, "pid"), 0, 1 << 30, -1);
    pr->rank = dc_events_rank(root);
    pr->samples = total;
    for (const jr_node *e = ls->child; e && pr->nlines < DC_PROC_LINES; e = e->next) {
        const char *fn = jr_pstr(e, "func"), *file = jr_pstr(e, "file"), *ph = jr_pstr(e, "phase"),
                   *src = jr_pstr(e, "src");
        double n = jr_pnum(e, "samples");
        if (!fn || !file || !(n > 0) || n > total) continue;
        dc_func *f = &pr->lines[pr->nlines];
        diag_fmt(f->func, sizeof(f->func), "%s", fn);
        diag_fmt(f->file, sizeof(f->file), "%s", base(file));
        f->line = line_no(jr_pnum(e, "line"));
        diag_fmt(f->kind, sizeof(f->kind), "%s", ph ? ph : "");
        f->samples = n;
        diag_fmt(pr->src[pr->nlines], sizeof(pr->src[0]), "%s", src ? src : "");
        pr->nlines++;
    }
    c->nproc++;
}

/* settings "ddp": one process's (each rank has the same model) */
static const jw_field ddp_fields[] = {
    JW_FIELD(BOOL, "find_unused", dc_ddp, find_unused),
    JW_FIELD(BOOL, "static_graph", dc_ddp, static_graph),
    JW_FIELD(DBL, "params", dc_ddp, params),
    JW_FIELD(DBL, "never_grad", dc_ddp, never),
    JW_FIELD(DBL, "walks", dc_ddp, walks),
};

static void load_ddp(dcause *c, const jr_node *st)
{
    const jr_node *dp = jr_get(st, "ddp");
    if (!dp || dp->type != JR_OBJ || c->have_ddp) return;
    c->have_ddp = 1;
    jr_fields(dp, &c->ddp, ddp_fields, JW_NFIELDS(ddp_fields));
    const jr_node *nm = jr_get(dp, "never_grad_names");
    char *out = c->ddp.never_names;
    for (const jr_node *e = nm && nm->type == JR_ARR ? nm->child : NULL; e; e = e->next) {
        const char *t = jr_str(e);
        size_t l = strlen(out);
        if (t && l + strlen(t) + 3 < sizeof(c->ddp.never_names))
            diag_fmt(out + l, sizeof(c->ddp.never_names) - l, "%s%s", l ? ", " : "", t);
    }
}

/* settings "optimizers" (the class that updates the most parameters) and
 * "embeddings" (the dense tables an optimizer updates, untied, summed over
 * processes like params_optimized, so their ratio holds): the fields read
 * of each element, and what each element adds to the run */
static const jw_field opt_fields[] = {
    JW_FIELD(STR, "class", dc_opt, cls),
    JW_FIELD(DBL, "params", dc_opt, params),
    JW_FIELD(BOOL, "fused", dc_opt, fused),
    JW_FIELD(BOOL, "foreach", dc_opt, foreach),
    JW_FIELD(BOOL, "can_fuse", dc_opt, can_fuse),
    JW_FIELD(BOOL, "can_foreach", dc_opt, can_foreach),
};

static void take_optimizer(dcause *c, const void *e)
{
    const dc_opt *o = e;
    if (!(o->params > 0) || !o->cls[0]) return;
    c->nopt++;
    if (!(o->params <= c->opt.params)) c->opt = *o;
}

static void take_embedding(dcause *c, const void *e)
{
    const dc_emb *m = e;
    double size = m->rows * m->dim;
    if (!(size > 0) || !m->optimized || m->tied) return;
    c->emb_params += size;
    if (!(size <= c->emb.rows * c->emb.dim)) c->emb = *m;
}

static const jw_field emb_fields[] = {
    JW_FIELD(STR, "name", dc_emb, name),
    JW_FIELD(DBL, "rows", dc_emb, rows),
    JW_FIELD(DBL, "dim", dc_emb, dim),
    JW_FIELD(DBL, "lookups", dc_emb, lookups),
    JW_FIELD(BOOL, "optimized", dc_emb, optimized),
    JW_FIELD(BOOL, "tied", dc_emb, tied),
};

/* the settings that are arrays of objects: each element read through its
 * field table, then handed to its take step */
static const struct {
    const char *key;
    const jw_field *fields;
    size_t nfields, size;
    void (*take)(dcause *c, const void *elem);
} setting_arrays[] = {
    {"optimizers", opt_fields, JW_NFIELDS(opt_fields), sizeof(dc_opt), take_optimizer},
    {"embeddings", emb_fields, JW_NFIELDS(emb_fields), sizeof(dc_emb), take_embedding},
};

static void load_setting_arrays(dcause *c, const jr_node *st)
{
    union { dc_opt opt[64]; dc_emb emb[64]; } elems; /* room for 64 of any of them */
    for (size_t a = 0; a < sizeof(setting_arrays) / sizeof(setting_arrays[0]); a++) {
        size_t size = setting_arrays[a].size;
        int n = jr_array(jr_get(st, setting_arrays[a].key), &elems, size,
                         (int)(sizeof(elems) / size), setting_arrays[a].fields,
                         setting_arrays[a].nfields);
        for (int i = 0; i < n; i++)
            setting_arrays[a].take(c, (const char *)&elems + (size_t)i * size);
    }
}

/* events "exit" of a process with a rank (RANK as a string or a number) */
static void load_exit(dcause *c, const jr_node *root)
{
    const jr_node *ex = jr_get(root, "exit");
    int rank = dc_events_rank(root);
    if (!ex || ex->type != JR_OBJ) return;
    const jr_node *en = jr_get(ex, "ended");
    const char *err = jr_pstr(ex, "error");
    if (err && err[0] && (!c->fail_error[0] || (rank >= 0 && rank < c->fail_rank))) {
        const char *where = jr_pstr(ex, "where");
        c->fail_rank = rank >= 0 ? rank : INT_MAX;
        diag_fmt(c->fail_error, sizeof(c->fail_error), "%s", err);
        diag_fmt(c->fail_where, sizeof(c->fail_where), "%s", where ? where : "");
    }
    if (rank < 0 || c->nexit >= DC_MAX_PROCS) return;
    c->exits[c->nexit].rank = rank;
    c->exits[c->nexit].ended = en && en->type == JR_BOOL && en->num != 0;
    diag_fmt(c->exits[c->nexit].error, sizeof(c->exits[0].error), "%s", err ? err : "");
    c->nexit++;
}

static double series_at(const jr_node *ser, int i, int col)
{
    return jr_num(jr_at(jr_at(ser, i), col));
}

static void load_cuda(dgpu_alloc *g, const jr_node *root)
{
    const jr_node *c = jr_get(root, "cuda");
    if (!c || c->type != JR_OBJ) return;
    double peak = jr_pnum(c, "peak_allocated_bytes");
    /* several processes with CUDA (DDP on one host): the one that held most */
    if (g->have && !(peak > g->alloc_peak)) return;
    g->have = 1;
    g->total = jr_pnum(c, "total_bytes");
    g->alloc_peak = peak;
    g->reserved_peak = jr_pnum(c, "peak_reserved_bytes");
    g->retries = jr_pnum(c, "alloc_retries");
    g->ooms = jr_pnum(c, "ooms");
    g->oom_events = jr_pnum(c, "oom_events");
    g->oom_snapshots = jr_pnum(c, "oom_snapshots");
    const jr_node *ser = jr_get(c, "series");
    int n = 0;
    while (ser && jr_at(ser, n)) n++;
    g->alloc_first = g->alloc_last = g->alloc_mid = g->alloc_q1 = NAN;
    if (n >= 4) {
        /* columns: t_mono_s, allocated, reserved, ... (docs/run-format.md) */
        g->t_first = series_at(ser, 0, 0);
        g->alloc_first = series_at(ser, 0, 1);
        g->t_q1 = series_at(ser, n / 4, 0);
        g->alloc_q1 = series_at(ser, n / 4, 1);
        g->alloc_mid = series_at(ser, n / 2, 1);
        g->t_last = series_at(ser, n - 1, 0);
        g->alloc_last = series_at(ser, n - 1, 1);
        g->reserved_last = series_at(ser, n - 1, 2);
    }
}

static void load_one(dcause *c, const jr_node *root, double t0)
{
    load_cuda(&c->alloc, root);
    c->have_pyprof = 1;
    c->nprocs_py++;
    int pid = diag_int(jr_pnum(root, "pid"), 0, 1 << 30, -1);
    if (pid >= 0 && c->npypid < (int)(sizeof(c->pypid) / sizeof(c->pypid[0])))
        c->pypid[c->npypid++] = pid;
    double v;
    const jr_node *p = jr_get(root, "profile");
    if (p) {
        if (!isnan(v = jr_pnum(p, "hz"))) c->hz = v;
        if (!isnan(v = jr_pnum(p, "samples"))) c->samples += v;
        if (!isnan(v = jr_pnum(p, "sampler_cost_s"))) c->sampler_cost_s += v;
        const jr_node *bp = jr_get(p, "by_phase");
        for (const jr_node *k = bp && bp->type == JR_OBJ ? bp->child : NULL; k; k = k->next) {
            double n = jr_num(k);
            if (isnan(n) || !k->key) continue;
            if (strcmp(k->key, "other") == 0) c->ph_other += n;
            if (strcmp(k->key, "compute") == 0) c->ph_compute += n;
            if (strcmp(k->key, "startup") == 0)
                c->ph_startup += n;
            else if (strcmp(k->key, "eval") == 0 || strcmp(k->key, "checkpoint") == 0)
                c->ph_eval += n;
            else if (strcmp(k->key, "compile") == 0)
                c->ph_compile += n;
            else
                c->ph_train += n;
            if (strcmp(k->key, "data") == 0) c->ph_data += n;
            if (strcmp(k->key, "optimizer") == 0) c->ph_opt += n;
        }
        const jr_node *top = jr_get(p, "other_top");
        for (const jr_node *f = top && top->type == JR_ARR ? top->child : NULL; f; f = f->next) {
            const char *fn = jr_pstr(f, "func"), *file = jr_pstr(f, "file"),
                       *kind = jr_pstr(f, "kind");
            double s = jr_pnum(f, "samples"), line = jr_pnum(f, "line");
            if (!fn || !file || isnan(s)) continue;
            /* merge the same function from several processes */
            int k = 0;
            for (; k < c->nfunc; k++)
                if (strcmp(c->funcs[k].func, fn) == 0 && strcmp(c->funcs[k].file, base(file)) == 0)
                    break;
            if (k == c->nfunc) {
                if (c->nfunc >= DC_MAX_FUNCS) continue;
                c->nfunc++;
                dc_func *d = &c->funcs[k];
                memset(d, 0, sizeof(*d));
                diag_fmt(d->func, sizeof(d->func), "%s", fn);
                diag_fmt(d->file, sizeof(d->file), "%s", base(file));
            }
            /* its line and kind: those of the process that spent the most
             * there (rank 0 printing, not rank 1's one sample beside it) */
            dc_func *d = &c->funcs[k];
            if (s > d->lead) {
                d->line = line_no(line);
                diag_fmt(d->kind, sizeof(d->kind), "%s", kind ? kind : "python");
                d->lead = s;
            }
            d->samples += s;
        }
        /* the first is the busiest of the process */
        const jr_node *bt = jr_get(p, "threads_top");
        const jr_node *b = bt && bt->type == JR_ARR ? bt->child : NULL;
        const char *bfn = b ? jr_pstr(b, "func") : NULL, *bfile = b ? jr_pstr(b, "file") : NULL;
        double bs = b ? jr_pnum(b, "samples") : NAN, bl = b ? jr_pnum(b, "line") : NAN;
        if (bfn && bfile && bs > c->bg.samples) {
            diag_fmt(c->bg.func, sizeof(c->bg.func), "%s", bfn);
            diag_fmt(c->bg.file, sizeof(c->bg.file), "%s", base(bfile));
            c->bg.line = line_no(bl);
            c->bg.samples = bs;
        }
    }
    load_lines(c, root, p);
    const jr_node *tc = p ? jr_get(jr_get(p, "threads_cpu"), "threads") : NULL;
    for (const jr_node *e = tc && tc->type == JR_ARR ? tc->child : NULL; e; e = e->next) {
        double span = jr_pnum(e, "span_s"), cpu = jr_pnum(e, "cpu_s"), rq = jr_pnum(e, "runq_s");
        const jr_node *tr = jr_get(e, "training");
        if (!(span > 0) || isnan(cpu)) continue;
        if (tr && tr->type == JR_BOOL && tr->num) {
            c->tt_span_s += span;
            c->tt_cpu_s += cpu;
            c->tt_runq_s += isnan(rq) ? 0 : rq;
            if (c->ntt < (int)(sizeof(c->tt) / sizeof(c->tt[0])) && rq >= 0) {
                c->tt[c->ntt].rank = dc_events_rank(root);
                c->tt[c->ntt].span_s = span;
                c->tt[c->ntt].cpu_s = cpu;
                c->tt[c->ntt].runq_s = rq;
                c->ntt++;
            }
            continue;
        }
        const char *fn = jr_pstr(e, "func"), *file = jr_pstr(e, "file"), *nm = jr_pstr(e, "name");
        double s = jr_pnum(e, "samples"), line = jr_pnum(e, "line");
        if (!fn || !file || !(s > 0) || !(cpu / span > c->hog_cpu_share)) continue;
        c->hog_cpu_share = cpu / span;
        diag_fmt(c->hog.func, sizeof(c->hog.func), "%s", fn);
        diag_fmt(c->hog.file, sizeof(c->hog.file), "%s", base(file));
        c->hog.line = line_no(line);
        c->hog.samples = s;
        diag_fmt(c->hog_name, sizeof(c->hog_name), "%s", nm ? nm : "");
    }
    const jr_node *g = jr_get(root, "gc");
    if (g) {
        const jr_node *cn = jr_get(g, "collections");
        for (int i = 0; i < 3; i++)
            if (!isnan(v = jr_num(jr_at(cn, i)))) c->gc_n[i] += v;
        if (!isnan(v = jr_pnum(g, "pause_s"))) c->gc_pause_s += v;
        if (!isnan(v = jr_pnum(g, "max_s")) && v > c->gc_max_s) c->gc_max_s = v;
        const jr_node *ps = jr_get(g, "pauses");
        for (const jr_node *e = ps && ps->type == JR_ARR ? ps->child : NULL; e; e = e->next) {
            char w[32];
            diag_fmt(w, sizeof(w), "generation %.0f", jr_num(jr_at(e, 2)));
            add_event(c->gc, &c->ngc, jr_num(jr_at(e, 0)) - t0, jr_num(jr_at(e, 1)), w);
        }
    }
    const jr_node *cp = jr_get(root, "compile");
    if (cp) {
        if (!isnan(v = jr_pnum(cp, "compile_s"))) c->compile_s += v;
        if (!isnan(v = jr_pnum(cp, "frames"))) c->compile_frames += v;
        if (!isnan(v = jr_pnum(cp, "recompiles"))) c->recompiles += v;
        const jr_node *es = jr_get(cp, "events");
        for (const jr_node *e = es && es->type == JR_ARR ? es->child : NULL; e; e = e->next) {
            const char *why = jr_pstr(e, "reason");
            add_event(c->comp, &c->ncomp, jr_pnum(e, "t") - t0, jr_pnum(e, "dur_s"),
                      why && *why ? why : "");
            if (why && *why && !c->recompile_reason[0])
                diag_fmt(c->recompile_reason, sizeof(c->recompile_reason), "%s", why);
        }
    }
    const jr_node *l = jr_get(root, "loader");
    if (l) {
        if (!isnan(v = jr_pnum(l, "iterators"))) c->loader_iters += v;
        if (!isnan(v = jr_pnum(l, "train_iterators"))) c->loader_train_iters += v;
        if ((v = jr_pnum(l, "train_start_s")) > 0) c->loader_train_cycle_s += v;
        if ((v = jr_pnum(l, "train_stop_s")) > 0) c->loader_train_cycle_s += v;
        /* unknown in one process (or an older hook's file): unknown */
        v = jr_pnum(l, "train_batches");
        c->loader_train_batches += v >= 0 ? v : NAN;
        if (!isnan(v = jr_pnum(l, "workers")) && v > c->loader_workers && v <= MAX_COUNT)
            c->loader_workers = v;
        const jr_node *pe = jr_get(l, "persistent");
        if (pe && pe->type == JR_BOOL && pe->num) c->loader_persistent = 1;
        if ((v = jr_pnum(l, "prefetch_factor")) > c->loader_prefetch && v <= MAX_COUNT)
            c->loader_prefetch = v;
        const jr_node *es = jr_get(l, "epochs");
        for (const jr_node *e = es && es->type == JR_ARR ? es->child : NULL; e; e = e->next) {
            char w[64];
            diag_fmt(w, sizeof(w), "%.0f workers", jr_pnum(e, "workers"));
            add_event(c->epochs, &c->nepochs, jr_pnum(e, "t") - t0, jr_pnum(e, "start_s"), w);
        }
    }
    if (!isnan(v = jr_pnum(root, "eval.time_s"))) c->eval_s += v;
    if (!isnan(v = jr_pnum(root, "eval.entries"))) c->eval_entries += v;
    if (!isnan(v = jr_pnum(root, "eval.points"))) c->eval_points += v;
    const jr_node *gp = jr_get(jr_get(root, "graph"), "probes");
    for (const jr_node *e = gp && gp->type == JR_ARR ? gp->child : NULL; e; e = e->next) {
        double n = jr_num(jr_at(e, 0)), ns = jr_num(jr_at(e, 1)), fl = jr_num(jr_at(e, 2));
        if (!(n >= 1) || !(ns > 0) || c->ngraph >= 64) continue;
        c->graph[c->ngraph][0] = n;
        c->graph[c->ngraph][1] = ns;
        c->graph[c->ngraph][2] = fl > 0 && fl < 1e7 ? fl : 0;
        c->ngraph++;
    }
    const jr_node *ps = jr_get(jr_get(root, "profiler"), "spans");
    for (const jr_node *e = ps && ps->type == JR_ARR ? ps->child : NULL; e; e = e->next) {
        double t = jr_num(jr_at(e, 0)) - t0, dur = jr_num(jr_at(e, 1));
        if (jr_num(jr_at(e, 2)) == 0 && isfinite(t) && isfinite(dur) && dur >= 0)
            add_event(c->prof, &c->nprof, t, dur, "");
    }
    double ef = jr_pnum(root, "eval.forwards"), eg = jr_pnum(root, "eval.forwards_grad");
    if (ef >= 0 && eg >= 0 && eg <= ef) c->eval_fwd += ef, c->eval_fwd_grad += eg;
    double er = jr_pnum(root, "eval.forward_rows"), es = jr_pnum(root, "eval.forwards_sized");
    if (er >= 0 && es >= 0 && es <= ef) c->eval_rows += er, c->eval_sized += es;
    const jr_node *eg_ = jr_get(jr_get(root, "eval"), "forward_gaps");
    for (const jr_node *e = eg_ && eg_->type == JR_ARR ? eg_->child : NULL; e; e = e->next) {
        double k = jr_num(jr_at(e, 0)), n = jr_num(jr_at(e, 1));
        if (!(k >= 0 && k < EVAL_GAP_BUCKETS) || !(n > 0 && n < 1e15)) continue;
        c->eval_gap_n[(int)k] += n;
        c->eval_gaps += n;
    }
    if (!isnan(v = jr_pnum(root, "torch_threads")) && v <= MAX_COUNT) c->torch_threads = v;
    if (!isnan(v = jr_pnum(root, "cpus_allowed"))) c->cpus_allowed = v;
    const jr_node *dbg = jr_get(root, "debug");
    if (dbg && dbg->type == JR_OBJ) {
        const jr_node *dm = jr_get(dbg, "dev_mode");
        if (dm && dm->type == JR_BOOL && dm->num) c->dev_mode = 1;
        const jr_node *env = jr_get(dbg, "env");
        const char *pm = jr_pstr(env, "PYTHONMALLOC");
        if (pm && strstr(pm, "debug")) c->malloc_debug = 1;
        const char *lb = jr_pstr(env, "CUDA_LAUNCH_BLOCKING");
        if (lb && strcmp(lb, "1") == 0) c->cuda_blocking = 1;
        const char *nc = jr_pstr(env, "PYTORCH_NO_CUDA_MEMORY_CACHING");
        if (nc && strcmp(nc, "1") == 0) c->no_cuda_cache = 1;
    }
    load_exit(c, root);
    const jr_node *ns = jr_get(root, "ddp_no_sync");
    if (ns && ns->type == JR_BOOL && ns->num) c->ddp_no_sync = 1;
    const jr_node *st = jr_get(root, "settings");
    if (st && st->type == JR_OBJ) {
        double tk = jr_pnum(st, "ticks"), an = jr_pnum(st, "anomaly_ticks");
        if (tk >= 0) c->set_ticks += tk;
        if (tk >= 0 && an >= 0 && an <= tk) c->anomaly_ticks += an;
        double tm = jr_pnum(st, "tracemalloc_ticks");
        /* summed over processes, as the ticks are (every rank under it) */
        if (tk >= 0 && tm >= 0 && tm <= tk) c->tracemalloc_ticks += tm;
        double tt = jr_pnum(st, "tracer_ticks");
        const char *tn = jr_pstr(st, "tracer");
        if (tt > 0 && tk >= tt && tn && *tn) {
            const char *kind = jr_pstr(st, "tracer_kind"), *how = jr_pstr(st, "tracer_how");
            c->tracer_ticks += tt;
            if (!c->tracer[0]) { /* named by the first process that had one */
                diag_fmt(c->tracer, sizeof(c->tracer), "%s", tn);
                diag_fmt(c->tracer_kind, sizeof(c->tracer_kind), "%s", kind ? kind : "tracer");
                diag_fmt(c->tracer_how, sizeof(c->tracer_how), "%s", how ? how : "");
            }
        }
        const jr_node *pd = jr_get(st, "param_dtypes");
        for (const jr_node *k = pd && pd->type == JR_OBJ ? pd->child : NULL; k; k = k->next) {
            double n = jr_num(k);
            if (!(n >= 0) || !k->key) continue;
            c->params_all += n;
            if (strcmp(k->key, "float64") == 0) c->params_f64 += n;
            if (strcmp(k->key, "bfloat16") == 0) c->params_bf16 += n;
        }
        load_ddp(c, st);
        load_setting_arrays(c, st);
        const jr_node *ac = jr_get(st, "autocast");
        for (const jr_node *k = ac && ac->type == JR_OBJ ? ac->child : NULL; k; k = k->next) {
            const char *dt = jr_str(k);
            if (dt && strcmp(dt, "bfloat16") == 0) c->amp_bf16 = 1;
            if (dt && strcmp(dt, "float16") == 0) c->amp_f16 = 1;
        }
        if ((v = jr_pnum(jr_get(st, "optimizers_made"), "in_training")) > 0 && v <= MAX_COUNT)
            c->opt_made_train += v;
        double gu = jr_pnum(st, "params_grad_unused"), po = jr_pnum(st, "params_optimized"),
               pt = jr_pnum(st, "params_timed");
        if (gu >= 0 && po >= 0 && pt >= gu + po) {
            c->params_grad_unused += gu;
            c->params_optimized += po;
            c->params_timed += pt;
        }
    }
    if (p && !isnan(v = jr_pnum(p, "anomaly_samples")) && v >= 0) c->anomaly_samples += v;
    if (p && !isnan(v = jr_pnum(p, "profiler_samples")) && v >= 0) c->prof_samples += v;
    if (p && !isnan(v = jr_pnum(p, "eval_host_samples")) && v >= 0) c->eval_host += v;
    const char *fw = jr_pstr(root, "framework");
    if (fw && *fw) diag_fmt(c->framework, sizeof(c->framework), "%s", fw);
}

void dc_load_pyprof(dcause *c, const char *run_dir, double t0)
{
    char path[1400];
    diag_fmt(path, sizeof(path), "%s/pyprof", run_dir);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        int ldr = strncmp(de->d_name, "loader-", 7) == 0;
        if ((strncmp(de->d_name, "events-", 7) != 0 && !ldr) || len < 5 ||
            strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        if (ldr ? c->nldr_files >= LOADER_MAX_FILES : n >= 256) continue;
        char f[1700], e[200];
        diag_fmt(f, sizeof(f), "%s/%s", path, de->d_name);
        jr_doc doc;
        if (jr_load_file(&doc, f, ldr ? 4096 : 16u << 20, e, sizeof(e)) != 0) continue;
        if (doc.root->type == JR_OBJ && ldr) {
            double fs = jr_pnum(doc.root, "fetch_s"), sp = jr_pnum(doc.root, "span_s");
            if (fs >= 0 && sp >= fs) {
                c->ldr_fetch_s += fs;
                c->ldr_span_s += sp;
                c->nldr_files++;
            }
        } else if (doc.root->type == JR_OBJ) {
            load_one(c, doc.root, t0);
            n++;
        }
        jr_free(&doc);
    }
    closedir(d);
}
