/* Causes the zero-code hook and the sched source measure (diag_cause.h).
 * Rules and thresholds: docs/diagnosis.md, "Causes" (keep the two in step). */
#include "report/diag_cause.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/diag.h"
#include "report/diag_rule.h"
#include "trainperf.h"
#include "util/human.h"

#define MAX_COUNT 1e5 /* cores, threads, workers: a damaged file's larger figure is ignored */
#define HOSTCODE_SHARE 0.20   /* unlabelled time that is the user's code */
#define HOSTCODE_MIN_SAMPLES 20
#define HOSTCODE_WARM_STEPS 10  /* steps before the warm ones' shares are used */
#define LEVEL_MIN_STEPS 20
#define LEVEL_LOCAL_CV 0.15 /* step-to-step variation of steady steps */
#define LEVEL_RATIO 1.5     /* highest over lowest level */
#define LEVEL_SEGMENTS 8    /* of the run, for the levels */
#define GIL_MIN_SPAN_S 2.0  /* of the training thread's schedstat readings */
#define GIL_HOG_CPU 0.5     /* the other thread's CPU, share of one core */
#define GIL_HOG_SAMPLES 0.3 /* and seen in Python code in this share of the samples */
#define GIL_SHARE 0.15      /* training-thread sleep that is the GIL's */
#define UNUSED_MIN_SHARE 0.2      /* parameters with a gradient no optimizer uses */
#define EVAL_GRAD_MIN_FWD 3       /* evaluation forwards with grad on, at least */
#define EVAL_GRAD_MIN_SHARE 0.05  /* evaluation's share of the run, at least */
#define EVAL_OFTEN_SHARE 0.4      /* evaluation's share of the loop that is too much */
#define EVAL_OFTEN_MIN 3          /* evaluations, at least */
#define EVAL_HOST_SHARE 0.3       /* of the eval samples in the script's Python: a simulator */
#define EVAL_SEQ_FORWARDS 20      /* forwards a pass, at least, for inference one row at a time */
#define PROF_MIN_SHARE 0.5   /* of the training the profiler recorded, at least */
#define PROF_COST 0.5        /* score per unit recorded: its cost on small ops (1.8x measured) */
#define TRACER_MIN_TICKS 2   /* 1 s of training checked: a hook is there or not */
/* score: a line tracer (sys.settrace: debuggers, coverage) made an MLP
 * loop with its DataLoader ~1.6x slower (the script 5.4 s against 4.1 s,
 * ~2 s of both importing torch; 1.15-1.3x its steps alone), a call profiler
 * (sys.setprofile: cProfile) ~1.5x (5.2 s); it inflates every Python-side
 * finding (input, host code), so a line tracer leads them */
#define TRACER_COST_LINE 0.5
#define TRACER_COST_CALL 0.3
#define DEBUG_TRACEMALLOC 0.5 /* score per unit of training traced: 2.1x measured */
#define DEBUG_CUDA 0.3        /* a CUDA debugging variable on a GPU run */
#define DEBUG_MINOR 0.05      /* Python's debug allocator: 1.1x, minor */
/* a step at the per-op floor: its backward at <= 3x the cost of a node of
 * a few numbers, and the whole step <= 40 µs a node (an MLP of 16 nodes:
 * 26 µs at batch 1, 31 at batch 64, both bound by overhead; 58-730 µs for
 * models with real work per op, measured here) */
#define SMALL_NODE_US (4 * TINY_NODE_US)
#define SMALL_STEP_US_NODE 45.0
#define INPUT_LINE_SHARE 0.25     /* of the samples waiting for data, in one line */
#define INPUT_LINE_MIN_SAMPLES 5
#define OPT_HEAVY_SHARE 0.3       /* of the step in the optimizer, for its advice */
#define EMB_MIN_SHARE 0.5         /* of the updated parameters in dense embeddings */
#define EMB_FEW_ROWS 0.1          /* rows one forward looks up, of the table, at most */
#define TINY_MIN_NODES 300        /* autograd nodes of one backward, at least */
#define TINY_NODE_US 3.3          /* backward µs a node of tiny tensors, on this machine's CPU */
#define TINY_FACTOR 2             /* at most this many times that: half of it overhead */
#define CONTEND_WAIT_SHARE 0.20 /* run-queue wait / (wait + CPU used) */
#define CONTEND_MIN_WAIT 15.0   /* % of one core */
/* DataLoader workers starved of CPU: their run-queue wait is at least half
 * of the time they wanted a CPU, and 2% of a core each (an idle worker's
 * rare wake-up is not starvation) */
#define LOADER_STARVED_SHARE 0.5
#define LOADER_STARVED_WAIT 2.0
#define LOADER_IDLE_BUSY 0.5   /* fetching share of the workers' span */
#define LOADER_MAX_FILES 1024  /* pyprof/loader-*.json read (a worker each) */
#define GC_SHARE 0.05           /* GC pauses / training time */
#define ONEOFF_FACTOR 3.0       /* a slow step: over 3x the median */
#define STEADY_TRIM 0.05        /* share of steps with the longest data waits left out */
#define STEADY_TRIM_MIN 3

static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* ---- loading ------------------------------------------------------------- */

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

static void low2_merge(double *dst, const double *src)
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
                low2_merge(m, c->lv[2 * i + 1]);
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

int dc_level_shift(const diag_run *r, double *local, double *lo, double *hi, double *from,
                   double *to)
{
    const dcause *c = &r->cause;
    if (c->tr_n < LEVEL_MIN_STEPS || c->lv_nb < LEVEL_SEGMENTS / 2 || !(c->tr_s > 0)) return 0;
    /* the step-to-step spread: for steady noise the median |difference|
     * is 0.95 standard deviations; spikes move it little */
    double sd = sketch_quantile(&c->lv_diff, 0.5) / 1e6 / 0.954;
    double mean = c->tr_s / c->tr_n;
    *local = sd / mean;
    /* the floor (second-lowest step) of at most LEVEL_SEGMENTS segments of
     * the run: slow steps, however many, leave it; whole segments only
     * (the last counts when at least half full) */
    double seg[LEVEL_SEGMENTS][3] = {{0}};
    int per = (c->lv_nb + LEVEL_SEGMENTS - 1) / LEVEL_SEGMENTS, ns = 0;
    for (int i = 0; i < c->lv_nb; i++) {
        low2_merge(seg[i / per], c->lv[i]);
        ns = i / per + 1;
    }
    *lo = INFINITY, *hi = 0, *from = NAN, *to = NAN;
    for (int i = 0; i < ns; i++) {
        if (seg[i][0] < 0.5 * (double)(c->lv_width * per) || seg[i][0] < 2) continue;
        double m = seg[i][2];
        if (m < *lo) *lo = m;
        if (m > *hi) *hi = m;
        if (isnan(*from)) *from = m;
        *to = m;
    }
    return *local < LEVEL_LOCAL_CV && isfinite(*lo) && *lo > 0 && *hi / *lo >= LEVEL_RATIO;
}

void dc_step(diag_run *r, long long step, double start, double end, double train_ns,
             double eval_ns, double ckpt_ns, double data_ns)
{
    dcause *c = &r->cause;
    /* data wait against training time (waits inside evaluation are the
     * evaluation's); the DC_MAX_SLOW longest waits kept, longest first */
    double dw = data_ns > 0 ? (data_ns < train_ns ? data_ns : train_ns) : 0;
    c->dw_n++;
    c->dw_sum += dw;
    c->dw_iv_sum += train_ns;
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

void dc_work(diag_run *r, double tokens, double samples, double train_ns)
{
    dcause *c = &r->cause;
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

double dc_work_corr(const diag_run *r, double *work_cv)
{
    const dcause *c = &r->cause;
    if (work_cv) *work_cv = NAN;
    if (c->wk_n < 10) return NAN;
    double n = c->wk_n, mx = c->wk_x / n, my = c->wk_y / n;
    double vx = c->wk_xx / n - mx * mx, vy = c->wk_yy / n - my * my;
    double cxy = c->wk_xy / n - mx * my;
    if (!(vx > 0) || !(vy > 0)) return NAN;
    if (work_cv) *work_cv = sqrt(vx) / mx;
    return cxy / sqrt(vx * vy);
}

void dc_metric(diag_run *r, double t, const double *v, const int *ok)
{
    dcause *c = &r->cause;
    /* v: runq, runnable, usable, throttled, tree_rss */
    if (ok[0]) c->runq_n++, c->runq_sum += v[0];
    if (ok[1]) {
        c->runnable_n++, c->runnable_sum += v[1];
        if (v[1] > c->runnable_max) c->runnable_max = v[1];
    }
    if (isfinite(r->first_end_s) && t >= r->first_end_s && t <= r->last_end_s) {
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
        if (isnan(c->rss_warm) && isfinite(r->first_end_s) && t >= r->first_end_s)
            c->rss_warm = v[4], c->rss_warm_t = t;
        /* up to the last step: a process tearing down frees its memory */
        if (!isfinite(r->last_end_s) || t <= r->last_end_s + 0.5)
            c->rss_last = v[4], c->rss_last_t = t;
    }
}

static void add_event(dc_event *arr, int *n, double t, double dur, const char *what)
{
    if (*n >= DC_MAX_EVENTS) return;
    arr[*n].t = t;
    arr[*n].dur = dur;
    fmt(arr[*n].what, sizeof(arr[0].what), "%s", what ? what : "");
    (*n)++;
}

/* An events file's rank: RANK as the environment had it, a string (a
 * number is taken too); -1 when none or not a rank. */
static int events_rank(const jr_node *root)
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
    pr->rank = events_rank(root);
    pr->samples = total;
    for (const jr_node *e = ls->child; e && pr->nlines < DC_PROC_LINES; e = e->next) {
        const char *fn = jr_pstr(e, "func"), *file = jr_pstr(e, "file"), *ph = jr_pstr(e, "phase"),
                   *src = jr_pstr(e, "src");
        double n = jr_pnum(e, "samples");
        if (!fn || !file || !(n > 0) || n > total) continue;
        dc_func *f = &pr->lines[pr->nlines];
        fmt(f->func, sizeof(f->func), "%s", fn);
        fmt(f->file, sizeof(f->file), "%s", base(file));
        f->line = line_no(jr_pnum(e, "line"));
        fmt(f->kind, sizeof(f->kind), "%s", ph ? ph : "");
        f->samples = n;
        fmt(pr->src[pr->nlines], sizeof(pr->src[0]), "%s", src ? src : "");
        pr->nlines++;
    }
    c->nproc++;
}

int dc_input_line(const dcause *c, const dc_func **f, const char **src, double *share)
{
    const dc_func *best = NULL;
    const char *bsrc = NULL;
    for (int p = 0; p < c->nproc; p++)
        for (int i = 0; i < c->procs[p].nlines; i++) {
            const dc_func *l = &c->procs[p].lines[i];
            const char *t = c->procs[p].src[i];
            /* the loop's own line (`for x, y in loader:`, next(it)) is
             * where the DataLoader's code is entered, not the work */
            if (strcmp(l->kind, "data") != 0 || (strncmp(t, "for ", 4) == 0 && strstr(t, " in ")) ||
                strstr(t, "next("))
                continue;
            if (!best || l->samples > best->samples) best = l, bsrc = t;
        }
    if (!best || !(c->ph_data > 0) || !(best->samples >= INPUT_LINE_MIN_SAMPLES)) return 0;
    *share = best->samples / c->ph_data;
    if (*share > 1) *share = 1;
    if (!(*share >= INPUT_LINE_SHARE)) return 0;
    *f = best;
    *src = bsrc;
    return 1;
}

int dc_rank_only_line(const dcause *c, int rank, const dc_func **f, const char **src,
                      double *share, double *others)
{
    const dc_proc *me = NULL;
    int nother = 0;
    for (int i = 0; i < c->nproc; i++) {
        if (c->procs[i].rank == rank && !me)
            me = &c->procs[i];
        else if (c->procs[i].rank >= 0 && c->procs[i].rank != rank)
            nother++;
    }
    if (!me || nother == 0) return 0;
    double best = 0;
    int bi = -1;
    double bo = 0;
    for (int l = 0; l < me->nlines; l++) {
        const dc_func *x = &me->lines[l];
        double o = 0;
        for (int i = 0; i < c->nproc; i++) {
            const dc_proc *p = &c->procs[i];
            if (p == me || p->rank < 0 || p->rank == rank) continue;
            for (int k = 0; k < p->nlines; k++)
                if (p->lines[k].line == x->line && strcmp(p->lines[k].func, x->func) == 0 &&
                    strcmp(p->lines[k].file, x->file) == 0)
                    o += p->lines[k].samples / p->samples / nother;
        }
        double lead = x->samples / me->samples - o;
        if (lead > best) best = lead, bi = l, bo = o;
    }
    if (bi < 0 || best < 0.2 || me->lines[bi].samples / me->samples < 0.25) return 0;
    *f = &me->lines[bi];
    *src = me->src[bi];
    *share = me->lines[bi].samples / me->samples;
    *others = bo;
    return 1;
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
            fmt(out + l, sizeof(c->ddp.never_names) - l, "%s%s", l ? ", " : "", t);
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
    int rank = events_rank(root);
    if (!ex || ex->type != JR_OBJ || rank < 0 || c->nexit >= DC_MAX_PROCS) return;
    const jr_node *en = jr_get(ex, "ended");
    const char *err = jr_pstr(ex, "error");
    c->exits[c->nexit].rank = rank;
    c->exits[c->nexit].ended = en && en->type == JR_BOOL && en->num != 0;
    fmt(c->exits[c->nexit].error, sizeof(c->exits[0].error), "%s", err ? err : "");
    c->nexit++;
}

static void load_one(diag_run *r, const jr_node *root, double t0)
{
    dcause *c = &r->cause;
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
                fmt(d->func, sizeof(d->func), "%s", fn);
                fmt(d->file, sizeof(d->file), "%s", base(file));
            }
            /* its line and kind: those of the process that spent the most
             * there (rank 0 printing, not rank 1's one sample beside it) */
            dc_func *d = &c->funcs[k];
            if (s > d->lead) {
                d->line = line_no(line);
                fmt(d->kind, sizeof(d->kind), "%s", kind ? kind : "python");
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
            fmt(c->bg.func, sizeof(c->bg.func), "%s", bfn);
            fmt(c->bg.file, sizeof(c->bg.file), "%s", base(bfile));
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
            continue;
        }
        const char *fn = jr_pstr(e, "func"), *file = jr_pstr(e, "file"), *nm = jr_pstr(e, "name");
        double s = jr_pnum(e, "samples"), line = jr_pnum(e, "line");
        if (!fn || !file || !(s > 0) || !(cpu / span > c->hog_cpu_share)) continue;
        c->hog_cpu_share = cpu / span;
        fmt(c->hog.func, sizeof(c->hog.func), "%s", fn);
        fmt(c->hog.file, sizeof(c->hog.file), "%s", base(file));
        c->hog.line = line_no(line);
        c->hog.samples = s;
        fmt(c->hog_name, sizeof(c->hog_name), "%s", nm ? nm : "");
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
            fmt(w, sizeof(w), "generation %.0f", jr_num(jr_at(e, 2)));
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
                fmt(c->recompile_reason, sizeof(c->recompile_reason), "%s", why);
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
            fmt(w, sizeof(w), "%.0f workers", jr_pnum(e, "workers"));
            add_event(c->epochs, &c->nepochs, jr_pnum(e, "t") - t0, jr_pnum(e, "start_s"), w);
        }
    }
    if (!isnan(v = jr_pnum(root, "eval.time_s"))) c->eval_s += v;
    if (!isnan(v = jr_pnum(root, "eval.entries"))) c->eval_entries += v;
    const jr_node *gp = jr_get(jr_get(root, "graph"), "probes");
    for (const jr_node *e = gp && gp->type == JR_ARR ? gp->child : NULL; e; e = e->next) {
        double n = jr_num(jr_at(e, 0)), ns = jr_num(jr_at(e, 1));
        if (!(n >= 1) || !(ns > 0) || c->ngraph >= 64) continue;
        c->graph[c->ngraph][0] = n;
        c->graph[c->ngraph][1] = ns;
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
                fmt(c->tracer, sizeof(c->tracer), "%s", tn);
                fmt(c->tracer_kind, sizeof(c->tracer_kind), "%s", kind ? kind : "tracer");
                fmt(c->tracer_how, sizeof(c->tracer_how), "%s", how ? how : "");
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
    if (fw && *fw) fmt(c->framework, sizeof(c->framework), "%s", fw);
}

void dc_load_pyprof(diag_run *r)
{
    char path[1400];
    fmt(path, sizeof(path), "%s/pyprof", r->dir);
    DIR *d = opendir(path);
    if (!d) return;
    double t0 = r->have_run ? jr_pnum(r->run.root, "start_mono_ns") / 1e9 : NAN;
    if (isnan(t0)) t0 = 0;
    struct dirent *de;
    int n = 0;
    dcause *c = &r->cause;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        int ldr = strncmp(de->d_name, "loader-", 7) == 0;
        if ((strncmp(de->d_name, "events-", 7) != 0 && !ldr) || len < 5 ||
            strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        if (ldr ? c->nldr_files >= LOADER_MAX_FILES : n >= 256) continue;
        char f[1700], e[200];
        fmt(f, sizeof(f), "%s/%s", path, de->d_name);
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
            load_one(r, doc.root, t0);
            dg_take_events(r, doc.root);
            n++;
        }
        jr_free(&doc);
    }
    closedir(d);
}

/* ---- findings ------------------------------------------------------------ */

#define PERIOD_MIN_MATCH 3
#define PERIOD_SHARE 0.7 /* of the slow steps on the turns */
/* on a busy machine random slow steps fall between the turns: a period
 * seen on many turns holds with fewer of the slow steps on it (a multiple
 * of the period has half) */
#define PERIOD_NOISY_TURNS 8
#define PERIOD_NOISY_SHARE 0.6
#define PERIOD_Z 3.0 /* standard deviations over chance, either way */
/* or: the turns hold most of the slow steps' excess time (a rank that
 * evaluates alone every 40 steps makes 200 ms steps there, among many
 * steps of a few ms of jitter that outnumber them) */
#define PERIOD_TIME_SHARE 0.8

static int by_step(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* How far step s lies past the turns res, res + p, ... (0..p-1). */
static long long past_turn(long long s, long long res, long long p)
{
    return ((s - res) % p + p) % p;
}

/* Of the step numbers s[0..n) (sorted, distinct), the most that fall on
 * one residue modulo p or up to w steps after it (the periodic step's
 * echo: a writer thread flushing what it logged slows the next step or
 * two); *res gets that residue, *turns the distinct turns hit, *span the
 * turns from the first hit to the last. */
static int best_residue(const long long *s, int n, long long p, long long w, long long *res,
                        int *turns, long long *span)
{
    int best = 0;
    for (int i = 0; i < n; i++) {
        long long r = s[i] % p, lo = -1, hi = -1, last = -1;
        int k = 0, t = 0;
        for (int j = 0; j < n; j++) {
            if (past_turn(s[j], r, p) > w) continue;
            long long turn = (s[j] - past_turn(s[j], r, p)) / p;
            k++;
            if (turn != last) t++, last = turn;
            if (lo < 0) lo = turn;
            hi = turn;
        }
        if (k > best) best = k, *res = r, *turns = t, *span = hi - lo + 1;
    }
    return best;
}

int dc_periodic(const diag_run *r, double p50_ms, long long *period, int *nmatch,
                double *mean_ms, long long *first)
{
    const dcause *c = &r->cause;
    long long s[DC_MAX_SLOW];
    int n = 0;
    for (int i = 0; i < c->nslow; i++)
        if (c->slow[i].ms > ONEOFF_FACTOR * p50_ms && c->slow[i].step > 0) s[n++] = c->slow[i].step;
    if (n < PERIOD_MIN_MATCH) return 0;
    /* the list keeps the DC_MAX_SLOW slowest steps: when some of them are
     * under the threshold, every step over it is in the list */
    int all = n < c->nslow || c->nslow < DC_MAX_SLOW;
    qsort(s, (size_t)n, sizeof(s[0]), by_step);
    /* ranks share step numbers: one slow step number once */
    int u = 1;
    for (int i = 1; i < n; i++)
        if (s[i] != s[u - 1]) s[u++] = s[i];
    n = u;
    /* each step number's excess over the median (its slowest rank) */
    double ex[DC_MAX_SLOW], all_ex = 0;
    for (int i = 0; i < n; i++) {
        ex[i] = 0;
        for (int k = 0; k < c->nslow; k++)
            if (c->slow[k].step == s[i] && c->slow[k].ms - p50_ms > ex[i])
                ex[i] = c->slow[k].ms - p50_ms;
        all_ex += ex[i];
    }
    /* candidate periods: the gaps between slow steps. A period's divisors
     * match as well as it does, its multiples about as 1/k: the longest
     * period that holds is the one the loop has. A slow step up to a tenth
     * of the period after a turn is that turn's echo (chance puts a random
     * slow step there one time in ten). */
    long long bestp = 0, bestres = 0;
    int bestk = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            long long p = s[j] - s[i], res = 0, span = 0;
            if (p < 2 || p <= bestp) continue;
            int turns = 0;
            int k = best_residue(s, n, p, p / 10, &res, &turns, &span);
            /* at least 3 turns, most of the slow steps on them; with all of
             * them known, most of the turns in the span slow too (random
             * slow steps share a residue of a short period by chance, never
             * fill its every turn) */
            /* (and well above chance: a random slow step lands on a turn
             * or its echo (w + 1) / p of the time; half of them on one
             * parity says nothing) */
            double q = (double)(p / 10 + 1) / (double)p, chance = 2.0 * q;
            double z = (k - n * q) / sqrt(n * q * (1 - q) > 0 ? n * q * (1 - q) : 1e-9);
            double on_ex = 0;
            for (int m = 0; m < n; m++)
                if (past_turn(s[m], res, p) <= p / 10) on_ex += ex[m];
            int timed = turns > PERIOD_MIN_MATCH && on_ex >= PERIOD_TIME_SHARE * all_ex &&
                        turns >= 0.6 * span;
            int held = (turns >= PERIOD_MIN_MATCH && k >= PERIOD_SHARE * n) ||
                       (turns >= PERIOD_NOISY_TURNS && k >= PERIOD_NOISY_SHARE * n);
            if (!timed && (!held || k < chance * n || z < PERIOD_Z)) continue;
            if (all && turns < 0.6 * span) continue;
            bestp = p, bestres = res, bestk = k;
        }
    if (!bestp) return 0;
    double sum = 0;
    int ns = 0;
    long long f = -1;
    for (int i = 0; i < c->nslow; i++) {
        const dc_slow *w = &c->slow[i];
        if (w->ms > ONEOFF_FACTOR * p50_ms && w->step > 0 && past_turn(w->step, bestres, bestp) == 0) {
            sum += w->ms, ns++;
            if (f < 0 || w->step < f) f = w->step;
        }
    }
    if (ns == 0) return 0;
    *period = bestp;
    *nmatch = bestk;
    *mean_ms = sum / ns;
    *first = f;
    return 1;
}

double dc_steady_data_share(const diag_run *r, int *ntrim)
{
    const dcause *c = &r->cause;
    if (ntrim) *ntrim = 0;
    if (c->dw_n < 5 || !(c->dw_iv_sum > 0)) return NAN;
    /* one step in twenty, at least 3: more than a few batches must wait */
    int k = (int)ceil(STEADY_TRIM * c->dw_n);
    if (k < STEADY_TRIM_MIN) k = STEADY_TRIM_MIN;
    if (k > c->ndwtop) k = c->ndwtop;
    if (k > c->dw_n - 3) k = (int)c->dw_n - 3;
    double d = c->dw_sum, iv = c->dw_iv_sum;
    for (int i = 0; i < k; i++)
        d -= c->dwtop[i][0], iv -= c->dwtop[i][1];
    if (ntrim) *ntrim = k;
    return iv > 0 ? (d > 0 ? d / iv : 0) : NAN;
}

double dc_trimmed_cv(const diag_run *r)
{
    const dcause *c = &r->cause;
    /* past the warm-up, less its slowest 1% (at least 3) */
    if (c->tw_n < 10) return NAN;
    int k = (int)ceil(0.01 * c->tw_n);
    if (k < 3) k = 3;
    double n = c->tw_n, s = c->tw_s, ss = c->tw_ss;
    for (int i = 0; i < c->nslow && k > 0; i++) {
        if (c->slow[i].step < DC_WARM_STEPS) continue;
        s -= c->slow[i].ms, ss -= c->slow[i].ms * c->slow[i].ms;
        n--, k--;
    }
    if (!(n >= 2) || !(s > 0)) return NAN;
    double m = s / n, var = ss / n - m * m;
    return sqrt(var > 0 ? var : 0) / m;
}

int dc_step_level(const char *id)
{
    static const char *const ids[] = {"input-bound", "host-code", "gc-pauses", "recompile",
                                      "communication", "storage-io", "unstable", "straggler",
                                      "step-spikes", "variable-work", "step-level"};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        if (strcmp(id, ids[i]) == 0) return 1;
    return 0;
}

static const char *kind_words(const char *k)
{
    if (strcmp(k, "input") == 0) return "input preparation on the host";
    if (strcmp(k, "io") == 0) return "file or network I/O";
    if (strcmp(k, "sync") == 0) return "synchronisation (reading results back)";
    if (strcmp(k, "wait") == 0) return "waiting (sleep, locks, queues)";
    if (strcmp(k, "input-wait") == 0) return "waiting for batches from a producer (a queue or thread)";
    if (strcmp(k, "input-pool") == 0) return "waiting for a worker pool to prepare the batch";
    if (strcmp(k, "format") == 0) return "tensors formatted as text (print or an f-string)";
    if (strcmp(k, "pool-start") == 0) return "starting and stopping a pool of processes";
    return "Python code on the host";
}

static double gc_pause(const diag_run *r, int *npause);
static double closure_extra_share(const diag_run *r);

/* Whether f's line (its source text, from the profile's lines) holds one
 * of the n words w. */
static int line_has(const dcause *c, const dc_func *f, const char *const *w, size_t n)
{
    for (int p = 0; p < c->nproc; p++)
        for (int i = 0; i < c->procs[p].nlines; i++) {
            const dc_func *l = &c->procs[p].lines[i];
            if (l->line != f->line || strcmp(l->file, f->file) != 0) continue;
            for (size_t k = 0; k < n; k++)
                if (strstr(c->procs[p].src[i], w[k])) return 1;
        }
    return 0;
}

/* Whether f's line hands the loop to a framework (Lightning's fit, the HF
 * Trainer's train): its samples there are the framework's own code. */
static int framework_entry(const dcause *c, const dc_func *f)
{
    static const char *const w[] = {".fit(", "trainer.train(", "Trainer("};
    return line_has(c, f, w, sizeof(w) / sizeof(w[0]));
}

/* Whether f's line writes: a log or results file flushed every step is
 * I/O that reads ahead cannot fix. */
static int writes_at(const dcause *c, const dc_func *f)
{
    static const char *const w[] = {".write", "fsync", ".flush", ".dump", "print(", "savetxt",
                                    "to_csv", "writer."};
    return line_has(c, f, w, sizeof(w) / sizeof(w[0]));
}

/* Whether f's line logs metrics (an experiment tracker, a logger, a
 * progress bar): costly every step when steps are short. */
static int logs_at(const dcause *c, const dc_func *f)
{
    static const char *const w[] = {"wandb.log", "run.log(", "mlflow.log", "log_metric",
                                    "add_scalar", "add_histogram", "add_image", "logger.",
                                    "logging.", "self.log(", "self.log_dict(", "accelerator.log",
                                    "set_postfix", "experiment.log", ".log_dict("};
    return line_has(c, f, w, sizeof(w) / sizeof(w[0]));
}

/* Whether f's line builds tensors or arrays from host data: the whole
 * dataset converted again every step is the common case. */
static int converts_at(const dcause *c, const dc_func *f)
{
    static const char *const w[] = {"torch.tensor(", "torch.as_tensor(", "torch.from_numpy(",
                                    "np.array(", "np.asarray(", "numpy.array(", ".astype(",
                                    ".to_numpy(", ".values"};
    return line_has(c, f, w, sizeof(w) / sizeof(w[0]));
}

/* Whether f's line draws a batch by permuting every index: the legacy
 * np.random.choice without replacement, randperm sliced. */
static int permutes_at(const dcause *c, const dc_func *f)
{
    static const char *const w[] = {"replace=False", "randperm(", "permutation("};
    return line_has(c, f, w, sizeof(w) / sizeof(w[0]));
}

int dc_cand_hostcode(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    double train = c->ph_train + c->ph_compile;
    if (!c->have_pyprof || train < 5 || c->nfunc == 0) return 0;
    /* a framework's own loop (Lightning's, the HF Trainer's) sampled under
     * the script's call into it (`trainer.fit(...)`): no code of the
     * user's to move, so no share of the finding; the busiest other
     * function is the one named */
    double fw = 0;
    const dc_func *f = NULL;
    for (int i = 0; i < c->nfunc; i++) {
        if (framework_entry(c, &c->funcs[i])) {
            fw += c->funcs[i].samples;
            continue;
        }
        if (!f || c->funcs[i].samples > f->samples) f = &c->funcs[i];
    }
    if (!f) return 0;
    double share = (c->ph_other - fw) / train, sshare = c->ph_other / train;
    /* GC pauses are the gc-pauses finding's, not the user's code */
    int npause = 0;
    double gcs = r->sum_interval_ns > 0 ? gc_pause(r, &npause) / (r->sum_interval_ns / 1e9) : 0;
    if (!(gcs > 0 && gcs < 1)) gcs = 0;
    /* the steps' own unlabelled share, timed by the hook (over the warm
     * steps: the first one holds the start-up) */
    double so = r->sum_interval_ns > 0 ? r->sum_phase_ns[PH_OTHER] / r->sum_interval_ns : NAN;
    if (r->warm_interval_ns > 0 && r->steps >= HOSTCODE_WARM_STEPS)
        so = r->warm_phase_ns[PH_OTHER] / r->warm_interval_ns;
    /* and the part of the optimizer phase the samples found outside the
     * optimizer's code (a closure running the user's logging) */
    if (isfinite(so)) so += closure_extra_share(r);
    /* a run too short for many samples: the steps' own unlabelled share
     * (which holds the pauses outside phases) carries the size, the few
     * samples still name the function */
    if (train < HOSTCODE_MIN_SAMPLES) {
        if (!(so >= HOSTCODE_SHARE) || !(share >= HOSTCODE_SHARE)) return 0;
        share = so - gcs;
    } else {
        /* the sampler waits for the GIL while the collector runs, so its
         * samples cover the time outside GC pauses (the one taken just
         * after a pause is labelled gc by the hook): a share of that time */
        share *= 1 - gcs;
        /* and no more than the time outside every timed phase: the samples
         * estimate, the hook times; a framework's own code around a timed
         * phase (Lightning's optimizer-step wrapper) samples as outside */
        if (isfinite(so) && share > so) share = so;
    }
    if (!(share >= HOSTCODE_SHARE)) return 0;
    double fshare = f->samples / train;
    /* the kind of the unlabelled time: the kind with the most samples */
    const char *kinds[] = {"input",      "python",     "sync",   "io",        "wait",
                           "input-wait", "input-pool", "format", "pool-start"};
    enum { NKINDS = sizeof(kinds) / sizeof(kinds[0]) };
    double ks[NKINDS] = {0};
    for (int i = 0; i < c->nfunc; i++)
        for (int k = 0; k < NKINDS; k++)
            if (strcmp(c->funcs[i].kind, kinds[k]) == 0) ks[k] += c->funcs[i].samples;
    int best = 0;
    for (int k = 1; k < NKINDS; k++)
        if (ks[k] > ks[best]) best = k;
    /* waiting for a pool is waiting for input too; its advice differs */
    int pool = best == 6;
    if (pool) best = 5, ks[5] += ks[6];
    const char *kind = kinds[best];
    int logging = logs_at(c, f);
    /* the line converts host data itself (no Python below it, a C call);
     * in a function that prepares input (tokenises, builds batches) the
     * conversion is part of that preparation */
    int convert = !logging && best == 1 && strcmp(f->kind, "python") == 0 && converts_at(c, f);
    fmt(d->id, sizeof(d->id), "host-code");
    fmt(d->title, sizeof(d->title), "%s",
        best == 7   ? "Printing tensors in the training loop"
        : best == 8 ? "A process pool started in the training loop"
        : logging   ? "Logging in the training loop"
        : convert   ? "Data conversion in the training loop"
        : best == 0 ? "Input preparation in the training loop"
        : best == 3 ? "I/O in the training loop"
        : best == 2 ? "Synchronisation in the training loop"
        : best == 4 ? "Waiting in the training loop"
        : best == 5 ? "Waiting for input in the training loop"
                    : "Python code in the training loop");
    fmt(d->summary, sizeof(d->summary),
        "%.0f%% of training time is outside the model and the DataLoader: %.0f%% in %s "
        "(%s:%d), %s",
        100 * share, 100 * fshare, f->func, f->file, f->line,
        convert ? "tensors built from host data" : kind_words(f->kind));
    d->score = share;
    ev(d, "unlabelled_share", share,
       "%.0f%% of %.0f stack samples of the training thread fell outside known phases%s",
       100 * sshare, train, gcs > 0 ? " (of the time outside GC pauses)" : "");
    for (int i = 0; i < c->nfunc && i < 4; i++)
        if (c->funcs[i].samples / train >= 0.03)
            ev(d, "function_share", c->funcs[i].samples / train, "%.0f%% in %s (%s:%d): %s",
               100 * c->funcs[i].samples / train, c->funcs[i].func, c->funcs[i].file,
               c->funcs[i].line,
               framework_entry(c, &c->funcs[i]) ? "the framework's own loop, not counted"
                                                 : kind_words(c->funcs[i].kind));
    if (isfinite(r->sum_interval_ns) && r->sum_interval_ns > 0)
        ev(d, "data_wait_share", r->sum_phase_ns[PH_DATA] / r->sum_interval_ns,
           "DataLoader wait %.0f%% of step time (this time is not in a DataLoader)",
           100 * r->sum_phase_ns[PH_DATA] / r->sum_interval_ns);
    if (best == 8) {
        rec(d, "Start the pool once, before the loop, and keep it: %s:%d starts a pool of "
               "processes and stops it again (%.0f%% of training time: each worker is forked or "
               "spawned, and joined). Submit each step's work to the one pool, and submit the "
               "next step's before training on this one so it is ready in time (or move the work "
               "into a Dataset served by a DataLoader with persistent workers).",
            f->file, f->line, 100 * ks[8] / train);
    } else if (best == 7) {
        rec(d, "Print numbers, not tensors, and not every step: %s:%d turns tensors into text "
               "(%.0f%% of training time), and formatting a tensor walks its elements in Python. "
               "Print loss.item() (one float) or a few summary numbers every N steps; keep "
               "whole tensors for a debugger or torch.save.",
            f->file, f->line, 100 * fshare);
    } else if (logging && strcmp(c->framework, "lightning") == 0) {
        rec(d, "Log less in training_step: %s:%d takes %.0f%% of training time, and Lightning "
               "processes every self.log call each step whatever log_every_n_steps says "
               "(on_epoch=True also accumulates each value, prog_bar=True refreshes the bar). "
               "Log fewer values, only every N batches (`if batch_idx %% 50 == 0:`), and with "
               "on_epoch=False where the epoch mean is not needed.",
            f->file, f->line, 100 * fshare);
    } else if (logging) {
        rec(d, "Log every N steps, not every step: %s:%d takes %.0f%% of training time. Keep "
               "the metrics as tensors and log their mean every 50 or 100 steps (one .item() "
               "and one call to the logger per interval).",
            f->file, f->line, 100 * fshare);
    } else if (convert) {
        rec(d, "%s:%d converts host data to tensors or arrays every step (%.0f%% of training "
               "time): convert the dataset once, before the loop, and index the result in the "
               "step (or let a DataLoader convert one batch at a time when it does not fit in "
               "memory).",
            f->file, f->line, 100 * fshare);
    } else if ((best == 0 || best == 1) && permutes_at(c, f)) {
        rec(d, "%s:%d permutes the whole index range to draw one batch: np.random.choice(N, k, "
               "replace=False) and torch.randperm(N)[:k] cost O(N) every step (64 and 28 ms for "
               "N = 2M here). Shuffle once per epoch and take consecutive slices of the "
               "permutation, or draw with np.random.default_rng().choice (0.02 ms) or "
               "torch.randint when repeats are fine.",
            f->file, f->line);
    } else if (best == 0) {
        rec(d,
            "Prepare batches off the training thread: turn %s into a Dataset/IterableDataset "
            "served by a DataLoader with num_workers>0 (or a background thread filling a queue), "
            "so the next batch is ready when the step ends.",
            f->func);
        rec(d, "Make each batch cheaper: vectorise %s (one torch/numpy call instead of a Python "
               "loop), pre-tokenise or preprocess the dataset offline, memory-map it.",
            f->func);
    } else if (best == 3 && writes_at(c, f)) {
        rec(d, "Write less often, or off the training thread: buffer what %s writes and flush "
               "(or fsync: it waits for the disk) every N steps or at the end, or hand it to a "
               "background thread.",
            f->func);
    } else if (best == 3) {
        rec(d, "Read ahead: move the reads in %s to a DataLoader with workers or a background "
               "thread, and cache what is read every step.",
            f->func);
    } else if (best == 2) {
        rec(d, "Read results back less often: .item()/.cpu()/printing every N steps, not every "
               "step (each one waits for all queued work).");
    } else if (best == 5) {
        ev(d, "waits_for_input", ks[5] / train,
           "%.0f%% of the samples wait for the next batch in %s (%s:%d): its producer is slower "
           "than the step",
           100 * ks[5] / train, f->func, f->file, f->line);
        /* where the producer spends it, when it is a thread of this process */
        if (c->bg.samples >= 0.3 * ks[5])
            ev(d, "producer_share", c->bg.samples / ks[5],
               "meanwhile another thread ran %s (%s:%d) in %.0f%% of them", c->bg.func,
               c->bg.file, c->bg.line, 100 * fmin(1, c->bg.samples / ks[5]));
        if (pool)
            rec(d, "The batch comes from a pool of workers (pool.map, futures) and the loop waits "
                   "for it: prefetch, submitting the next batch (map_async, imap, submit) before "
                   "training on this one, or a DataLoader with num_workers>0, which prefetches; "
                   "add workers while cores are idle.");
        else if (c->bg.samples >= 0.3 * ks[5])
            rec(d, "The producer of batches is slower than the step: its time goes to %s (%s:%d). "
                   "A producer thread shares the GIL with training: move the preparation to a "
                   "DataLoader with num_workers>0 (processes), or make %s cheaper.",
                c->bg.func, c->bg.file, c->bg.line, c->bg.func);
        else
            rec(d, "The producer of batches is slower than the step. A producer thread shares the "
                   "GIL with training: move the preparation to a DataLoader with num_workers>0 "
                   "(processes), or run several producers.");
        rec(d, "Make each batch cheaper: vectorise the preparation (one torch/numpy call instead "
               "of a Python loop per sample), or preprocess the dataset offline.");
    } else if (best == 4) {
        rec(d, "The training thread waits in %s (%s:%d): remove the sleep/lock, or move the "
               "work it waits for off the step.",
            f->func, f->file, f->line);
    } else {
        rec(d, "Move the work in %s (%s:%d) out of the step or make it cheaper: run it every N "
               "steps, vectorise it, or wrap the step in torch.compile.",
            f->func, f->file, f->line);
    }
    rec(d, "The sampled stacks are in pyprof/stacks-*.folded (flamegraph.pl or speedscope "
           "open them).");
    (void)kind;
    return 1;
}

/* Another Python thread of the process takes the GIL from the training
 * thread: the training thread sleeps (neither on a CPU nor waiting for
 * one: schedstat) through much of its steps, outside the DataLoader and
 * its own waits, while a thread running Python keeps a core busy. Every
 * torch call gives the GIL up and must win it back, after up to the switch
 * interval (5 ms) of the other thread's Python. */
int dc_cand_gil(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    double train = c->ph_train + c->ph_compile;
    if (!(c->tt_span_s >= GIL_MIN_SPAN_S) || !(c->hog_cpu_share >= GIL_HOG_CPU) ||
        !(train >= HOSTCODE_MIN_SAMPLES) || !(c->hog.samples >= GIL_HOG_SAMPLES * c->samples))
        return 0;
    double on = c->tt_cpu_s / c->tt_span_s, q = c->tt_runq_s / c->tt_span_s;
    double sleep = 1 - on - q;
    /* the sleeps that are the loop's own: waiting for batches, for a
     * producer, for I/O or results, in a sleep or a lock */
    double data = r->sum_interval_ns > 0 ? r->sum_phase_ns[PH_DATA] / r->sum_interval_ns : 0;
    double own = 0;
    for (int i = 0; i < c->nfunc; i++)
        if (strcmp(c->funcs[i].kind, "python") != 0 && strcmp(c->funcs[i].kind, "input") != 0)
            own += c->funcs[i].samples / train;
    /* with a GPU the training thread also sleeps while the autograd
     * engine's device threads run backward */
    double bwd = 0;
    if (r->ngpu > 0 && r->sum_interval_ns > 0)
        bwd = r->sum_phase_ns[PH_BACKWARD] / r->sum_interval_ns;
    double share = sleep - data - own - bwd;
    if (!(share >= GIL_SHARE)) return 0;
    if (share > 0.9) share = 0.9;
    const dc_func *h = &c->hog;
    diag_head(d, "gil-contention", "Another Python thread holds the GIL", share,
              "the training thread slept %.0f%% of its time, not in the DataLoader nor a wait of "
              "its own, while thread \"%s\" ran Python on %.0f%% of a core in %s (%s:%d): they "
              "share one interpreter lock",
              100 * share, c->hog_name, 100 * c->hog_cpu_share, h->func, h->file, h->line);
    ev(d, "training_thread_sleep_share", sleep,
       "training thread: on a CPU %.0f%%, waiting for a CPU %.0f%%, asleep %.0f%% of %.1f s "
       "(schedstat)",
       100 * on, 100 * q, 100 * sleep, c->tt_span_s);
    ev(d, "hog_cpu_share", c->hog_cpu_share,
       "thread \"%s\" used %.0f%% of a core; the sampler found it in %s (%s:%d)", c->hog_name,
       100 * c->hog_cpu_share, h->func, h->file, h->line);
    if (data > 0.01 || own > 0.01)
        ev(d, "own_wait_share", data + own,
           "of the sleep, %.0f%% of the time was the loop's own (DataLoader %.0f%%, waits and "
           "I/O %.0f%%) and is not counted",
           100 * (data + own), 100 * data, 100 * own);
    rec(d, "Move %s out of the training process's threads: a multiprocessing.Process (or a "
           "DataLoader worker, if it makes batches) has an interpreter of its own.",
        h->func);
    rec(d, "Or make it hold the GIL less: run it less often, sleep between rounds, or "
           "vectorise it (numpy/torch calls release the GIL while they compute).");
    rec(d, "As a stopgap, sys.setswitchinterval(0.001) makes the thread hand the GIL back "
           "sooner (default 5 ms), at some cost to its own speed.");
    return 1;
}

int dc_cand_anomaly(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    double train = c->ph_train + c->ph_compile;
    /* the flag was seen on while training, and the sampler found the
     * training thread taking tracebacks for autograd ops */
    if (!(c->anomaly_ticks >= 1) || !(train >= HOSTCODE_MIN_SAMPLES) || !(c->anomaly_samples > 0))
        return 0;
    double share = c->anomaly_samples / train;
    if (share > 0.9) share = 0.9;
    double on = c->set_ticks > 0 ? c->anomaly_ticks / c->set_ticks : NAN;
    diag_head(d, "anomaly-detection", "Autograd anomaly detection is on", share,
              "anomaly detection (torch.autograd.set_detect_anomaly(True) or detect_anomaly()) "
              "was on while the model trained: every op of the forward records a Python "
              "traceback (at least %.0f%% of the training thread's time) and backward checks "
              "every gradient for NaN",
              100 * share);
    ev(d, "anomaly_traceback_share", share,
       "%.0f%% of the training samples were taking a traceback for an autograd op "
       "(torch.fx.traceback.format_stack); the NaN checks in backward come on top",
       100 * share);
    if (isfinite(on))
        ev(d, "anomaly_on_share", on, "anomaly detection was on at %.0f%% of the checks while "
                                      "training (every 0.5 s)",
           100 * on);
    rec(d, "Turn it off for training runs: remove torch.autograd.set_detect_anomaly(True) / "
           "with torch.autograd.detect_anomaly(), or guard it behind a debug flag. It is a "
           "debugging aid that finds the op that made a NaN.");
    rec(d, "To catch NaNs cheaply instead, check the loss (torch.isfinite(loss)) every N steps "
           "and turn anomaly detection on only to find the op once a NaN appears.");
    return 1;
}

/* Seconds of [s, e] that the script's own torch.profiler recorded. */
static double prof_overlap(const dcause *c, double s, double e)
{
    double on = 0;
    for (int i = 0; i < c->nprof; i++) {
        double a = c->prof[i].t > s ? c->prof[i].t : s;
        double b = c->prof[i].t + c->prof[i].dur < e ? c->prof[i].t + c->prof[i].dur : e;
        if (b > a) on += b - a;
    }
    return on;
}

int dc_cand_profiler(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    double s = r->first_start_s, e = r->last_end_s;
    if (!c->nprof || !isfinite(s) || !isfinite(e) || !(e > s)) return 0;
    double on = prof_overlap(c, s, e) / (e - s);
    /* windows of a few steps are profiling done right (their slow steps
     * are named in the step-time finding); recording most of the training
     * slows every step it records */
    if (!(on >= PROF_MIN_SHARE)) return 0;
    double proc = c->hz > 0 ? c->prof_samples / c->hz : NAN;
    diag_head(d, "profiler", "torch.profiler recorded the training", PROF_COST * on,
              "the profiler (torch.profiler) recorded %.0f%% of the training: it records every op "
              "(more with record_shapes, with_stack or profile_memory), so each step it records "
              "is slower than the same step unprofiled, and every figure here includes that",
              100 * on);
    ev(d, "profiler_on_share", on, "the profiler recorded %.0f%% of the time between the first "
                                   "step and the last",
       100 * on);
    if (proc >= 1)
        ev(d, "profiler_processing_s", proc,
           "%.1f s in the profiler's own Python code (turning its records into events, "
           "tables and traces)",
           proc);
    rec(d, "Record a few steps, not the run: torch.profiler.profile(schedule=torch.profiler."
           "schedule(wait=1, warmup=1, active=3, repeat=1), ...) with prof.step() after each "
           "step, or `trainperf run --profile 1,1,3 -- ...` with no code change.");
    rec(d, "Keep the profiler out of training runs whose speed matters (behind a flag).");
    return 1;
}

int dc_cand_tracer(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    if (!(c->set_ticks >= TRACER_MIN_TICKS) || !(c->tracer_ticks >= 0.5 * c->set_ticks))
        return 0;
    const char *k = c->tracer_kind;
    int dbg = strcmp(k, "debugger") == 0, cov = strcmp(k, "coverage") == 0,
        prof = strcmp(k, "profiler") == 0;
    double on = c->tracer_ticks / c->set_ticks;
    diag_head(d, "python-tracer",
              dbg ? "A debugger traces the training" : cov ? "Coverage measurement is on"
              : prof ? "A Python profiler is on" : "A Python trace function is on",
              (strcmp(c->tracer_how, "sys.setprofile") == 0 ? TRACER_COST_CALL
                                                               : TRACER_COST_LINE) * on,
              "%s (%s, through %s) was hooked into the training thread at %.0f%% of the checks: "
              "every Python %s calls into it, so the loop's Python runs slower and every "
              "figure here includes that",
              dbg ? "a debugger" : cov ? "coverage" : prof ? "a profiler" : "a trace function",
              c->tracer, c->tracer_how[0] ? c->tracer_how : "a hook", 100 * on,
              strcmp(c->tracer_how, "sys.setprofile") == 0 ? "call" : "call and line");
    ev(d, "tracer_on_share", on, "%s was on at %.0f%% of the checks while training (every 0.5 s)",
       c->tracer, 100 * on);
    if (dbg)
        rec(d, "Time training outside the debugger (run it plainly, not from the IDE's debug "
               "launcher); a breakpoint anywhere keeps the tracer on for every line.");
    else if (cov)
        rec(d, "Measure coverage on a short test run, not on training runs.");
    else
        rec(d, "Remove the %s for runs whose speed matters; `trainperf run` samples the stacks "
               "already (pyprof/) at far lower cost.",
            prof ? "profiler" : "trace function");
    return 1;
}

int dc_cand_debug(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    double tm = c->set_ticks >= TRACER_MIN_TICKS ? c->tracemalloc_ticks / c->set_ticks : 0;
    int tmon = tm >= 0.5, gpu = r->ngpu_run > 0 || r->ngpu > 0;
    int blocking = gpu && c->cuda_blocking, nocache = gpu && c->no_cuda_cache;
    int pydebug = c->dev_mode || c->malloc_debug;
    if (!tmon && !blocking && !nocache && !pydebug) return 0;
    double score = (tmon ? DEBUG_TRACEMALLOC * tm : 0) + (blocking ? DEBUG_CUDA : 0) +
                   (nocache ? DEBUG_CUDA : 0) + (pydebug ? DEBUG_MINOR : 0);
    if (score > 0.9) score = 0.9;
    char what[200] = "";
    size_t at = 0;
    const char *items[4];
    int n = 0;
    if (tmon) items[n++] = "tracemalloc tracing every allocation";
    if (blocking)
        items[n++] = "CUDA_LAUNCH_BLOCKING=1 (each kernel runs to its end before the next launch)";
    if (nocache)
        items[n++] = "PYTORCH_NO_CUDA_MEMORY_CACHING=1 (device memory allocated and freed for "
                     "every tensor)";
    if (pydebug) items[n++] = "Python's debug memory allocator";
    for (int i = 0; i < n && at < sizeof(what); i++)
        at += (size_t)snprintf(what + at, sizeof(what) - at, "%s%s", i ? ", " : "", items[i]);
    diag_head(d, "debug-settings",
              n == 1 && tmon ? "tracemalloc is tracing the training" : "Debugging aids are on",
              score, "the run trained with %s: %s every step", what,
              n == 1 ? "a debugging aid that slows" : "debugging aids that slow");
    if (tmon) {
        ev(d, "tracemalloc_on_share", tm,
           "tracemalloc.is_tracing() at %.0f%% of the checks while training (every 0.5 s)",
           100 * tm);
        rec(d, "Stop tracemalloc for training runs (tracemalloc.stop(), no -X tracemalloc or "
               "PYTHONTRACEMALLOC): it records a traceback for every allocation, which made an "
               "MLP loop with its DataLoader 2.1x slower here. Trace a short run to find a leak.");
    }
    if (blocking) {
        ev(d, "cuda_launch_blocking", 1, "CUDA_LAUNCH_BLOCKING=1 in the environment");
        rec(d, "Unset CUDA_LAUNCH_BLOCKING: it is for finding the kernel that raised an error; "
               "with it the CPU waits for every kernel, so nothing overlaps.");
    }
    if (nocache) {
        ev(d, "no_cuda_memory_caching", 1, "PYTORCH_NO_CUDA_MEMORY_CACHING=1 in the environment");
        rec(d, "Unset PYTORCH_NO_CUDA_MEMORY_CACHING: every tensor then costs a cudaMalloc and a "
               "synchronising cudaFree.");
    }
    if (pydebug) {
        ev(d, "python_debug_allocator", 1, "%s",
           c->dev_mode ? "Python's development mode is on (-X dev or PYTHONDEVMODE)"
                       : "PYTHONMALLOC selects a debug allocator");
        rec(d, "Run training without -X dev / PYTHONDEVMODE / PYTHONMALLOC=debug (1.1x slower "
            "measured on an MLP loop here).");
    }
    return 1;
}

void dc_warm_shares(const diag_run *r, double *sh)
{
    int warm = r->warm_interval_ns > 0 && r->steps >= 2 * DC_MIN_STEPS;
    for (int p = 0; p < PH_COUNT; p++)
        sh[p] = warm ? r->warm_phase_ns[p] / r->warm_interval_ns
                : r->sum_interval_ns > 0 ? r->sum_phase_ns[p] / r->sum_interval_ns
                                         : NAN;
}

int dc_cand_unused_grads(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    double all = c->params_timed, un = c->params_grad_unused, op = c->params_optimized;
    /* an optimizer updates part of the model itself (not master copies of
     * it, as DeepSpeed's or apex's optimizers hold: then none of the model's
     * own parameters is in one), and backward computes gradients for much
     * of the rest */
    if (!(all > 0) || !(op > 0) || !(un >= UNUSED_MIN_SHARE * all))
        return 0;
    double f = un / (un + op);
    double sh[PH_COUNT];
    dc_warm_shares(r, sh);
    double bwd = sh[PH_BACKWARD];
    /* the weight gradients are about half of those layers' backward (the
     * other half passes the gradient on, still needed above a trained
     * layer): a lower bound of the saving, which is the whole backward of
     * a frozen part at the input end */
    double share = isfinite(bwd) ? 0.5 * bwd * f : NAN;
    char a[32], b[32];
    human_count(a, sizeof(a), un);
    human_count(b, sizeof(b), op);
    diag_head(d, "unused-gradients", "Gradients computed for parameters no optimizer updates",
              isfinite(share) ? (share > 0.9 ? 0.9 : share) : 0.05,
              "backward computes gradients for %s parameters (%.0f%% of the model) that no "
              "optimizer updates; the optimizers update %s: requires_grad is left on for a part "
              "that is not trained",
              a, 100 * un / all, b);
    char t[32];
    ev(d, "params_grad_unused_share", un / all,
       "%s of the model's %s parameters get a gradient and are in no optimizer", a,
       human_count(t, sizeof(t), all));
    if (isfinite(bwd))
        ev(d, "backward_share", bwd, "backward is %.0f%% of step time", 100 * bwd);
    rec(d, "Freeze what you do not train: p.requires_grad_(False) for its parameters (e.g. "
           "`for p in model.backbone.parameters(): p.requires_grad_(False)`), or run it under "
           "torch.no_grad(); backward then skips their gradients, and stops at the first trained "
           "layer when the frozen part is at the input end.");
    rec(d, "`trainperf tune --only freeze` measures it: it freezes the parameters no optimizer "
           "holds after the first step.");
    return 1;
}

/* Evaluation's share of the loop (between steps it falls in the next
 * step's interval); else the hook's own timing of it over the run. */
static double eval_share(const diag_run *r)
{
    double share = r->sum_interval_ns > 0 ? r->sum_phase_ns[PH_EVAL] / r->sum_interval_ns : NAN;
    if (!(share > 0) && r->duration_s > 0) share = r->cause.eval_s / r->duration_s;
    return share;
}

int dc_cand_eval_often(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    double share = eval_share(r);
    if (!(share >= EVAL_OFTEN_SHARE) || !(c->eval_entries >= EVAL_OFTEN_MIN) || !(r->steps > 0))
        return 0;
    double every = r->steps / c->eval_entries;
    char how[64];
    if (every < 1.5)
        fmt(how, sizeof(how), "one every step");
    else
        fmt(how, sizeof(how), "one every %.0f steps", every);
    /* many forwards of a row or two each, against training batches many
     * times larger: inference one step at a time (acting in an
     * environment, sampling), not a pass over held-out batches */
    double per = c->eval_fwd / c->eval_entries;
    double rows = c->eval_sized > 0 ? c->eval_rows / c->eval_sized : NAN;
    double batch = r->steps > 0 && r->samples > 0 ? r->samples / r->steps : NAN;
    /* or an "evaluation" spent much in the script's own Python: not a pass
     * of the model over held-out data but a loop around it (a simulator
     * stepped for a reinforcement-learning rollout: data the next steps
     * train on) */
    double host = c->ph_eval > 0 ? c->eval_host / c->ph_eval : NAN;
    int seq = (per >= EVAL_SEQ_FORWARDS && rows <= 2 && !(batch < 8 * rows)) ||
              host >= EVAL_HOST_SHARE;
    diag_head(d, "eval-often",
              seq ? "Inference between training steps takes much of the run"
                  : "Evaluation takes much of the run",
              share > 0.9 ? 0.9 : share,
              "%s is %.0f%% of the loop's time: %.0f %s in %.0f training steps (%s)%s",
              seq ? "inference outside training (eval mode or no grad)" : "evaluation",
              100 * share, c->eval_entries, seq ? "passes" : "evaluations", r->steps, how,
              seq ? ", each a run of forwards of one or two rows" : "");
    ev(d, "eval_share", share, "evaluation is %.0f%% of the run", 100 * share);
    ev(d, "evaluations", c->eval_entries, "%.0f evaluations (model.eval() or forwards without "
       "grad), %.1f s in all", c->eval_entries, c->eval_s);
    if (seq) {
        char tb[48] = "";
        if (isfinite(batch)) fmt(tb, sizeof(tb), " (training batches: %.0f)", batch);
        ev(d, "eval_forwards_per_pass", per, "%.0f forwards a pass, %.1f rows each on average%s",
           per, rows, tb);
        if (host >= EVAL_HOST_SHARE)
            ev(d, "eval_host_share", host,
               "%.0f%% of that time in the script's own Python, outside the model and torch "
               "(an environment or simulator)",
               100 * host);
        rec(d, "If it collects what training learns from (a reinforcement-learning rollout), "
               "batch it: step several environments together and run the model on all of them "
               "in one forward (vectorised environments, or environments written as tensor "
               "ops); a forward of 16 rows costs about what one of a single row does.");
        rec(d, "If it samples to watch progress (text, images), sample less often or fewer "
               "tokens, or do it after training.");
        return 1;
    }
    const char *fw = c->framework;
    const char *less = strcmp(fw, "hf") == 0
                           ? "TrainingArguments(eval_steps=N) with N in the hundreds, or "
                             "eval_strategy=\"epoch\""
                       : strcmp(fw, "lightning") == 0
                           ? "Trainer(val_check_interval=N) with N in the hundreds, or "
                             "check_val_every_n_epoch"
                           : "every N steps (a few hundred) or once an epoch";
    rec(d, "Evaluate less often: %s, instead of %s; evaluating that often costs %.0f%% of the "
           "run for a figure that moves little from one step to the next.",
        less, how, 100 * share);
    rec(d, "Or evaluate on a fixed subset of the validation set%s, with a larger batch and "
           "under torch.no_grad().",
        strcmp(fw, "hf") == 0          ? " (a smaller eval_dataset)"
        : strcmp(fw, "lightning") == 0 ? " (Trainer(limit_val_batches=...))"
                                       : "");
    return 1;
}

int dc_cand_eval_grad(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    if (!(c->eval_fwd >= EVAL_GRAD_MIN_FWD) || !(c->eval_fwd_grad >= 0.5 * c->eval_fwd)) return 0;
    double share = eval_share(r);
    if (!(share >= EVAL_GRAD_MIN_SHARE)) return 0;
    /* a forward that builds a graph saves activations and records every op:
     * on the CPU an MLP's evaluation ran 2.4x slower with grad on; half its
     * time is the saving taken */
    double score = 0.5 * share;
    diag_head(d, "eval-grad", "Evaluation builds autograd graphs", score > 0.9 ? 0.9 : score,
              "%.0f%% of the evaluation forwards ran with grad enabled (model.eval() does not "
              "turn autograd off): evaluation is %.0f%% of the run, and each of its forwards "
              "records a graph and keeps activations that no backward uses",
              100 * c->eval_fwd_grad / c->eval_fwd, 100 * share);
    ev(d, "eval_share", share, "evaluation is %.0f%% of the run", 100 * share);
    ev(d, "eval_forwards_grad", c->eval_fwd_grad, "%.0f of %.0f evaluation forwards with grad on",
       c->eval_fwd_grad, c->eval_fwd);
    rec(d, "Evaluate under torch.no_grad() (or torch.inference_mode()): `with torch.no_grad(): "
           "out = model(x)` around the evaluation loop; it also frees the memory the graphs "
           "hold.");
    rec(d, "If evaluation still takes much of the run, evaluate less often or on a subset, with "
           "a larger batch.");
    return 1;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median graph probe: nodes and backward µs a node (0 when none). */
static int median_probe(const dcause *c, double *nodes, double *us_node)
{
    if (c->ngraph < 1) return 0;
    double us[64], n[64];
    for (int i = 0; i < c->ngraph; i++) {
        n[i] = c->graph[i][0];
        us[i] = c->graph[i][1] / 1e3 / c->graph[i][0];
    }
    qsort(us, (size_t)c->ngraph, sizeof(double), by_value);
    qsort(n, (size_t)c->ngraph, sizeof(double), by_value);
    *us_node = us[c->ngraph / 2];
    *nodes = n[c->ngraph / 2];
    return 1;
}

int dc_small_steps(const diag_run *r, double p50_ms, double *nodes, double *step_us_node)
{
    double per;
    if (r->ngpu > 0 || !(p50_ms > 0) || !median_probe(&r->cause, nodes, &per)) return 0;
    *step_us_node = 1e3 * p50_ms / *nodes;
    return per <= SMALL_NODE_US && *step_us_node <= SMALL_STEP_US_NODE;
}

int dc_cand_tiny_ops(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    /* on a GPU the backward returns once its kernels are queued: its time
     * per node is the launches', not the ops' */
    double per, n;
    if (r->ngpu > 0 || !median_probe(c, &n, &per)) return 0;
    if (!(n >= TINY_MIN_NODES) || !(per <= TINY_NODE_US * TINY_FACTOR)) return 0;
    double sh[PH_COUNT];
    dc_warm_shares(r, sh);
    double model = 0;
    for (int p = PH_FORWARD; p <= PH_BACKWARD; p++)
        if (isfinite(sh[p])) model += sh[p];
    double over = TINY_NODE_US / per > 1 ? 1 : TINY_NODE_US / per;
    double score = model * over;
    diag_head(d, "tiny-ops", "Many tiny ops: per-op overhead bounds the step",
              score > 0.9 ? 0.9 : score,
              "backward runs %.0f autograd ops a step at %.1f µs each: at that size each op "
              "costs about what torch's own bookkeeping does (%.1f µs a node on a CPU), not "
              "arithmetic; forward and backward are %.0f%% of step time",
              n, per, TINY_NODE_US, 100 * model);
    ev(d, "graph_nodes", n, "%.0f nodes in the backward graph (median of %d probes)", n,
       c->ngraph);
    ev(d, "backward_us_per_node", per, "backward took %.1f µs a node", per);
    /* the line that makes the ops: the busiest line of tensor ops outside
     * the model (plain Python lines are host-code's; backward and the
     * optimizer run what the forward built) */
    const dc_proc *pr = c->nproc ? &c->procs[0] : NULL;
    int li = -1, fwd = 0;
    for (int i = 0; pr && i < pr->nlines; i++) {
        if (li < 0 && strcmp(pr->lines[i].kind, "compute") == 0) li = i;
        if (strcmp(pr->lines[i].kind, "forward") == 0) fwd = 1;
    }
    if (li >= 0)
        rec(d, "Vectorise the loop that makes the small ops: batch the work over samples or "
               "positions into whole-tensor ops (the busiest line of tensor ops outside the "
               "model: %s:%d `%s`).",
            pr->lines[li].file, pr->lines[li].line, pr->src[li]);
    else if (fwd)
        rec(d, "The small ops are the model's own (many small layers, or a recurrent layer "
               "unrolled over time steps): a larger batch spreads the per-op cost over more "
               "samples.");
    else
        rec(d, "Vectorise the loop that makes the small ops: batch the work over samples or "
               "positions into whole-tensor ops.");
    rec(d, "torch.compile fuses chains of small ops into one kernel; a larger batch spreads the "
           "per-op cost over more samples.");
    return 1;
}

/* The optimizer step's share of the warm step, without the forward and
 * backward a closure runs inside it (Lightning, LBFGS: the phases then add
 * up to more than the step); NaN without phases. */
/* The optimizer phase as timed (from its step's start to its end), less a
 * closure's forward and backward. */
static double timed_optimizer_share(const diag_run *r)
{
    double sh[PH_COUNT];
    dc_warm_shares(r, sh);
    double o = sh[PH_OPTIMIZER], fb = 0, all = 0;
    for (int p = 0; p < PH_COUNT; p++)
        if (isfinite(sh[p])) all += sh[p];
    if (isfinite(sh[PH_FORWARD])) fb += sh[PH_FORWARD];
    if (isfinite(sh[PH_BACKWARD])) fb += sh[PH_BACKWARD];
    if (all > 1.05 && o >= fb) o -= fb;
    return o;
}

/* The samples' share in the optimizer's own code, NAN with too few: a
 * closure's code (Lightning's training_step, its logging) is not in it. */
static double sampled_optimizer_share(const diag_run *r)
{
    const dcause *c = &r->cause;
    double train = c->ph_train + c->ph_compile;
    return c->have_pyprof && train >= HOSTCODE_MIN_SAMPLES ? c->ph_opt / train : NAN;
}

double dc_optimizer_share(const diag_run *r)
{
    double o = timed_optimizer_share(r), s = sampled_optimizer_share(r);
    return s < o ? s : o;
}

/* Time the optimizer phase holds that the samples put elsewhere (a
 * closure's logging or Python): outside every phase as far as host code
 * goes. */
static double closure_extra_share(const diag_run *r)
{
    double o = timed_optimizer_share(r), s = sampled_optimizer_share(r);
    return isfinite(o) && isfinite(s) && o > s ? o - s : 0;
}

int dc_optimizer_advice(const diag_run *r, dfinding *d, double share, int small)
{
    const dcause *c = &r->cause;
    const dc_opt *o = &c->opt;
    if (!(share >= OPT_HEAVY_SHARE) || !c->nopt) return 0;
    char n[32];
    human_count(n, sizeof(n), o->params);
    ev(d, "optimizer_share", share, "the optimizer step is %.0f%% of step time (%s over %s "
       "parameters, %s)", 100 * share, o->cls, n,
       o->fused ? "fused" : o->foreach ? "foreach" : "a loop over the parameters");
    /* a dense optimizer walks every row of a table a step touches a few of */
    const dc_emb *e = &c->emb;
    double few = e->rows > 0 ? e->lookups / e->rows : NAN;
    if (c->emb_params >= EMB_MIN_SHARE * o->params && !(few > EMB_FEW_ROWS)) {
        char rows[32], look[32];
        human_count(rows, sizeof(rows), e->rows);
        if (isfinite(few))
            fmt(look, sizeof(look), "%.0f", e->lookups);
        ev(d, "embedding_share", c->emb_params / o->params,
           "dense embeddings are %.0f%% of the parameters updated (%s: %s rows x %.0f%s%s%s)",
           100 * c->emb_params / o->params, e->name, rows, e->dim,
           isfinite(few) ? ", a forward looks up " : "", isfinite(few) ? look : "",
           isfinite(few) ? " of them" : "");
        rec(d, "The optimizer updates every row of the embedding `%s` each step, and the moments "
               "of each (Adam keeps two), while a batch uses a few of its rows: make it "
               "nn.Embedding(..., sparse=True) (EmbeddingBag too) and update its weight with "
               "torch.optim.SparseAdam (or SGD), the rest of the model with the optimizer you have. "
               "A step then costs what its rows cost (SparseAdam is lazy: a row's moments change "
               "when the row is used).",
            e->name);
    }
    if (!o->fused && o->can_fuse)
        rec(d, "Make the optimizer fused: torch.optim.%s(..., fused=True) updates all parameters "
               "in one kernel instead of a loop of small ops per parameter (on the CPU too, "
               "torch 2.4 on). `trainperf tune --only optimizer` measures it on this script.",
            o->cls);
    else if (!o->fused && !o->foreach && o->can_foreach)
        rec(d, "torch.optim.%s(..., foreach=True) updates the parameters together, a few ops for "
               "all of them instead of a loop per parameter (the default on the CPU). `trainperf "
               "tune --only optimizer` measures it on this script.",
            o->cls);
    if (!small)
        rec(d, "The optimizer step costs the same whatever the batch: a larger batch (or "
               "gradients accumulated over several batches per step) spreads it over more "
               "samples.");
    return 1;
}

#define DDP_MIN_WALKS 3 /* looks at the gradients before any is called never set */
#define OPT_REMADE_MIN 10     /* steps, and optimizers made while training */
#define OPT_REMADE_SHARE 0.5  /* optimizers made per step */

int dc_ddp_unused_advice(const diag_run *r, char *out, size_t n)
{
    const dcause *c = &r->cause;
    out[0] = 0;
    if (!c->ddp.find_unused || c->ddp.static_graph) return 0;
    const char *off = strcmp(c->framework, "hf") == 0
                          ? "TrainingArguments(ddp_find_unused_parameters=False)"
                      : strcmp(c->framework, "lightning") == 0
                          ? "strategy=\"ddp\" (not ddp_find_unused_parameters_true)"
                          : "DDP(..., find_unused_parameters=False)";
    if (c->ddp.never > 0 && c->ddp.walks >= DDP_MIN_WALKS) {
        char a[32];
        fmt(out, n, "DDP searches the autograd graph for unused parameters after every forward "
                    "(find_unused_parameters=True), and %s parameters never got a gradient (%s): "
                    "remove them from the model or freeze them (requires_grad_(False)), then "
                    "%s.",
            human_count(a, sizeof(a), c->ddp.never), c->ddp.never_names, off);
        return 2;
    }
    fmt(out, n, "DDP searches the autograd graph for unused parameters after every forward "
                "(find_unused_parameters=True)%s: %s. What it costs depends on the model "
                "(measured here over gloo: 1.9x slower steps on a 4-layer MLP, 10%% on a "
                "40-layer one, nothing measurable on a 2-layer GPT-2 under the HF Trainer).",
        c->ddp.walks >= DDP_MIN_WALKS ? ", yet every parameter got a gradient" : "", off);
    return 1;
}

int dc_cand_ddp_unused(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    char fix[600];
    dc_ddp_unused_advice(r, fix, sizeof(fix));
    if (!fix[0]) return 0;
    /* its cost is not measured in the run: a minor finding, after the
     * verdict (the communication finding puts its fix first) */
    diag_head(d, "ddp-find-unused", "DDP searches for unused parameters every step", 0.05,
              "DistributedDataParallel runs with find_unused_parameters=True: after every "
              "forward it walks the autograd graph for parameters that will get no gradient");
    if (c->ddp.walks >= DDP_MIN_WALKS && c->ddp.params > 0)
        ev(d, "ddp_never_grad_share", c->ddp.never / c->ddp.params,
           "%.0f%% of the trainable parameters never got a gradient",
           100 * c->ddp.never / c->ddp.params);
    rec(d, "%s", fix);
    return 1;
}

/* A new optimizer made for most steps (`opt = Adam(model.parameters())`
 * inside the loop): its state starts from nothing every step. A mistake in
 * what the training computes more than in its speed (its state allocated
 * again each step cost ~10% here), so a minor finding, told after the
 * verdict. */
int dc_cand_opt_remade(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    if (!(r->steps >= OPT_REMADE_MIN) || !(c->opt_made_train >= OPT_REMADE_MIN) ||
        !(c->opt_made_train >= OPT_REMADE_SHARE * r->steps))
        return 0;
    diag_head(d, "optimizer-remade", "A new optimizer every step", 0.05,
              "the script made %.0f optimizers for its %.0f steps: each one starts with empty "
              "state, so momentum and Adam's running averages never build up",
              c->opt_made_train, r->steps);
    ev(d, "optimizers_per_step", c->opt_made_train / r->steps,
       "%.0f torch.optim optimizers made after training began, %.0f steps",
       c->opt_made_train, r->steps);
    rec(d, "Make the optimizer once, before the loop, and keep it: a new one every step "
           "trains with fresh state each time (Adam's first update of each is about lr times "
           "the sign of the gradient) and allocates that state again. To change the learning "
           "rate, set param_group[\"lr\"] or use a torch.optim.lr_scheduler.");
    return 1;
}

/* Steps a rank completed (figs groups), -1 when it has none. */
static double rank_steps(const diag_run *r, int rank)
{
    for (int i = 0; i < r->sf.ngroups; i++)
        if (r->sf.groups[i]->rank == rank) return (double)r->sf.groups[i]->count;
    return -1;
}

/* Whether an error is a collective's: a peer gone, a connection closed, a
 * timeout of the process group. */
static int comm_error(const char *e)
{
    static const char *const w[] = {"Connection closed", "Connection reset", "connection",
                                    "Broken pipe", "timed out", "Timeout", "timeout", "NCCL",
                                    "gloo", "ProcessGroup", "collective", "all_reduce",
                                    "allreduce", "DistBackendError"};
    for (size_t k = 0; k < sizeof(w) / sizeof(w[0]); k++)
        if (strstr(e, w[k])) return 1;
    return 0;
}

int dc_cand_uneven_end(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    if (!r->exit_known || (r->exit_code == 0 && r->exit_signal <= 0)) return 0;
    /* a rank that left its loop without an error, and one that failed in a
     * collective: it waited for a peer that had gone */
    int done = -1, failed = -1;
    for (int i = 0; i < c->nexit; i++) {
        if (c->exits[i].ended && !c->exits[i].error[0] && done < 0) done = i;
        if (c->exits[i].error[0] && comm_error(c->exits[i].error) && failed < 0) failed = i;
    }
    if (done < 0 || failed < 0) return 0;
    int rd = c->exits[done].rank, rf = c->exits[failed].rank;
    double nd = rank_steps(r, rd), nf = rank_steps(r, rf);
    char steps[160] = "";
    if (nd >= 0 && nf >= 0)
        fmt(steps, sizeof(steps), " after %.0f steps while rank %d, %.0f steps done, was in a "
                                  "collective of its next step",
            nd, rf, nf);
    else
        fmt(steps, sizeof(steps), " while rank %d was in a collective", rf);
    /* the innermost message of a chain ("...: RuntimeError: Connection closed") */
    const char *why = c->exits[failed].error;
    for (const char *p = why; (p = strstr(p, "Error: ")) != NULL; p += 7)
        why = p + 7;
    diag_head(d, "uneven-end", "A rank left the training loop before the others", 1.0,
              "rank %d ended normally%s, which then failed (%s): the ranks ran different "
              "numbers of steps",
              rd, steps[0] ? steps : "", why);
    ev(d, "rank_done", rd, "rank %d reached the end of the script without an error", rd);
    ev(d, "rank_failed", rf, "rank %d ended with %s", rf, c->exits[failed].error);
    if (nd >= 0 && nf >= 0)
        ev(d, "steps_done", nd, "steps completed: rank %d %.0f, rank %d %.0f", rd, nd, rf, nf);
    rec(d, "Give every rank the same number of steps: the ranks' shares of the data differ in "
           "length. DistributedSampler(..., drop_last=True) evens them; with a sampler or an "
           "IterableDataset of your own, stop every rank at the same step (a fixed max_steps, or "
           "all_reduce a 'done' flag each step and leave together).");
    rec(d, "Where inputs are uneven by design, run the loop inside "
           "torch.distributed.algorithms.Join([model]): DDP then stands in for the ranks that "
           "finished.");
    return 1;
}

double dc_f64_share(const diag_run *r)
{
    const dcause *c = &r->cause;
    return c->params_all > 0 ? c->params_f64 / c->params_all : NAN;
}

int dc_cand_contention(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    if (c->runq_n < 2) return 0;
    double wait = c->runq_sum / c->runq_n; /* % of one core */
    double used = r->tree_cpu.n ? r->tree_cpu.sum / r->tree_cpu.n : NAN;
    if (!isfinite(used)) return 0;
    double share = wait + used > 0 ? wait / (wait + used) : 0;
    if (!(wait >= CONTEND_MIN_WAIT && share >= CONTEND_WAIT_SHARE)) return 0;
    double cpus = c->usable_n ? round(c->usable_sum / c->usable_n) : (r->cpus > 0 ? r->cpus : NAN);
    double sys = r->cpu.n ? r->cpu.sum / r->cpu.n : NAN; /* % of all cores */
    double outside = isfinite(sys) && r->cpus > 0 ? sys / 100 * r->cpus - used / 100 : NAN;
    if (outside < 0) outside = 0;
    /* the tree itself wanting more threads than cores is oversubscription,
     * its own finding; contention is others taking the cores */
    if (!(outside >= 0.3)) return 0;
    diag_head(d, "cpu-contention", "CPU contention", share > 0.9 ? 0.9 : share,
              "the run's threads waited for a CPU %.0f%% of the time they wanted one: other "
              "processes used %.1f of %.0f cores",
              100 * share, outside, isfinite(cpus) ? cpus : 0.0);
    ev(d, "runqueue_wait_pct", wait,
       "run-queue wait %.0f%% of a core (schedstat), against %.0f%% of a core of CPU used", wait,
       used);
    ev(d, "cpu_outside_tree_cores", outside, "processes outside the run used %.1f cores", outside);
    if (r->psi_cpu.n)
        ev(d, "psi_cpu_some_pct", r->psi_cpu.sum / r->psi_cpu.n,
           "some task waited for a CPU %.0f%% of the time (PSI cpu)", r->psi_cpu.sum / r->psi_cpu.n);
    if (c->thr_n && c->thr_sum / c->thr_n > 1)
        ev(d, "cgroup_throttled_pct", c->thr_sum / c->thr_n,
           "the cgroup's CPU quota throttled it %.0f%% of the time", c->thr_sum / c->thr_n);
    rec(d, "Run where the cores are free, or reserve them: a scheduler allocation with "
           "exclusive cores, taskset/cpuset for this run, or stop the other jobs.");
    rec(d, "Until then, use fewer threads than the cores you actually get (torch.set_num_threads "
           "/ OMP_NUM_THREADS): threads that wait for a core slow every step.");
    return 1;
}

double dc_loader_starved(const diag_run *r, double *wait, double *busy)
{
    const dcause *c = &r->cause;
    double q = r->ldr_n > 0 ? r->ldr_runq : r->nonroot_runq;
    double u = r->ldr_n > 0 ? r->ldr_cpu : r->nonroot_cpu;
    double n = r->ldr_n > 0 ? r->ldr_n : r->nonroot_n;
    double b = c->ldr_span_s > 0 ? c->ldr_fetch_s / c->ldr_span_s : NAN;
    if (wait) *wait = NAN;
    if (busy) *busy = b;
    if (!(n >= 2) || !(q + u > 0)) return NAN;
    if (wait) *wait = q / n;
    double share = q / (q + u);
    /* without the workers' own timing (not a zero-code run) nothing tells
     * idle workers from ones sleeping on a slow store */
    if (!(b < LOADER_IDLE_BUSY)) return NAN;
    return share >= LOADER_STARVED_SHARE && q / n >= LOADER_STARVED_WAIT ? share : NAN;
}

#define OTHER_BUSY_CPU 40  /* % of one core: a process of the run that computes */
#define OTHER_MIN_SAMPLES 4

/* The processes of the run that are neither the training processes (the
 * hook runs in them) nor DataLoader workers, yet kept a core busy: a
 * helper the script started (an evaluation job, a data converter) that
 * takes cores from training. Their count, the cores they used, and the
 * busiest in *top (-1 when none). */
static double other_busy(const diag_run *r, double *cores, int *top)
{
    const dcause *c = &r->cause;
    double n = 0, best = 0;
    *cores = 0;
    *top = -1;
    for (int i = 0; i < r->noproc; i++) {
        double m = r->oproc[i].n >= OTHER_MIN_SAMPLES ? r->oproc[i].cpu_sum / r->oproc[i].n : 0;
        int hooked = 0;
        for (int k = 0; k < c->npypid; k++)
            hooked |= c->pypid[k] == r->oproc[i].pid;
        if (hooked || r->oproc[i].loader || !(m >= OTHER_BUSY_CPU)) continue;
        n++;
        *cores += m / 100;
        if (m > best) best = m, *top = i;
    }
    return n;
}

int dc_cand_oversub(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    double cores = c->usable_n ? round(c->usable_sum / c->usable_n) : (r->cpus > 0 ? r->cpus : NAN);
    if (!isfinite(cores) || cores <= 0) return 0;
    double procs = c->nprocs_py > 1 ? c->nprocs_py : 1;
    double threads = isfinite(c->torch_threads) && c->torch_threads > 0 ? c->torch_threads : NAN;
    double workers = c->loader_workers * procs;
    double want = isfinite(threads) ? threads * procs + workers : NAN;
    /* while it trained (start-up, one thread importing, dilutes the mean
     * of a short run), or over the run where too few samples fell there */
    double runnable = c->tn_n >= 2 ? c->tn_sum / c->tn_n
                      : c->runnable_n ? c->runnable_sum / c->runnable_n : NAN;
    double wait = c->tq_n >= 2 ? c->tq_sum / c->tq_n : c->runq_n ? c->runq_sum / c->runq_n : NAN;
    /* loader workers count when they compute (sleeping ones wait on I/O) */
    double wcpu = r->worker_cpu.n ? r->worker_cpu.sum / r->worker_cpu.n : NAN;
    double busy_workers = isfinite(wcpu) && wcpu >= 40 ? workers : 0;
    /* other busy processes of the run count with the cores they used */
    double ocores;
    int top;
    double others = c->have_pyprof ? other_busy(r, &ocores, &top) : 0;
    if (!others) ocores = 0;
    want = isfinite(threads) ? threads * procs + busy_workers + round(ocores) : NAN;
    /* the run asks for more busy threads than its cores, and its threads
     * were seen queueing: the configuration, confirmed by the scheduler */
    int cfg = isfinite(want) && want > cores * 1.25;
    /* (as clearly as the configuration: 2.5 runnable threads on 2 cores
     * with 41% of a core waiting was two spawn workers importing torch
     * beside a healthy loop) */
    int meas = isfinite(runnable) && runnable > cores * 1.25 && isfinite(wait) && wait >= 50;
    if (!cfg || !meas) return 0;
    workers = busy_workers;
    fmt(d->id, sizeof(d->id), "oversubscription");
    fmt(d->title, sizeof(d->title), "CPU oversubscription");
    char more[96] = "";
    if (round(ocores) >= 1)
        fmt(more, sizeof(more), " + %.0f core%s of %.0f other process%s of the run",
            round(ocores), round(ocores) == 1 ? "" : "s", others, others == 1 ? "" : "es");
    if (isfinite(want))
        fmt(d->summary, sizeof(d->summary),
            "the run asks for %.0f busy threads (%.0f intra-op thread%s x %.0f process%s + %.0f "
            "loader worker%s%s) on %.0f usable cores",
            want, threads, threads == 1 ? "" : "s", procs, procs == 1 ? "" : "es", workers,
            workers == 1 ? "" : "s", more, cores);
    else
        fmt(d->summary, sizeof(d->summary),
            "%.1f threads of the run were runnable on average for %.0f usable cores", runnable,
            cores);
    double s = (want - cores) / want;
    d->score = s < 0.2 ? 0.2 : s > 0.8 ? 0.8 : s;
    if (isfinite(runnable))
        ev(d, "runnable_threads", runnable, "%.1f runnable threads on average (max %.0f)", runnable,
           c->runnable_max);
    if (isfinite(wait)) ev(d, "runqueue_wait_pct", wait, "run-queue wait %.0f%% of a core", wait);
    ev(d, "usable_cores", cores, "%.0f cores usable (affinity and cgroup quota)", cores);
    if (round(ocores) >= 1) {
        ev(d, "other_procs_cores", ocores,
           "%.0f other process%s of the run (not training, not DataLoader workers) used %.1f "
           "cores; the busiest, pid %d (%s), %.0f%% of one",
           others, others == 1 ? "" : "es", ocores, r->oproc[top].pid, r->oproc[top].name,
           r->oproc[top].cpu_sum / r->oproc[top].n);
        rec(d, "Pid %d (%s), started within the run, kept %.0f%% of a core busy while the model "
               "trained: stop it, run it after training or elsewhere, or leave it a core of its "
               "own (fewer intra-op threads).",
            r->oproc[top].pid, r->oproc[top].name, r->oproc[top].cpu_sum / r->oproc[top].n);
    }
    double left = cores - workers - round(ocores);
    int per = (int)floor((left > procs ? left : procs) / procs);
    if (per < 1) per = 1;
    rec(d,
        "Give each process %d intra-op thread%s: torch.set_num_threads(%d) at start-up or "
        "OMP_NUM_THREADS=%d (torchrun sets 1 per process unless told otherwise).",
        per, per == 1 ? "" : "s", per, per);
    if (workers > 0)
        rec(d, "Fewer DataLoader workers (num_workers): %.0f worker processes compete with the "
               "model's threads for %.0f cores.",
            workers, cores);
    rec(d, "Or use fewer processes per node (torchrun --nproc-per-node) so threads x processes "
           "+ workers fits the cores.");
    return 1;
}

/* GC pause seconds after training began, less those inside a torch.compile
 * compile (dynamo allocates a lot: they are the compile's) and those after
 * the last step; *npause gets
 * the pauses long enough to be kept with their time that count. */
static double gc_pause(const diag_run *r, int *npause)
{
    const dcause *c = &r->cause;
    double pause = c->gc_pause_s;
    *npause = 0;
    for (int i = 0; i < c->ngc; i++) {
        /* after the last step (a profiler's records turned into events, a
         * final evaluation): no step waited for it */
        int not_step = isfinite(r->last_end_s) && c->gc[i].t - c->gc[i].dur > r->last_end_s;
        for (int k = 0; k < c->ncomp && !not_step; k++)
            if (c->gc[i].t >= c->comp[k].t && c->gc[i].t <= c->comp[k].t + c->comp[k].dur)
                not_step = 1;
        if (not_step)
            pause -= c->gc[i].dur;
        else
            (*npause)++;
    }
    return pause > 0 ? pause : 0;
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

int dc_cand_gc(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    double train_s = r->sum_interval_ns / 1e9;
    if (!c->have_pyprof || !(train_s > 0) || !(c->gc_pause_s > 0)) return 0;
    /* a finding needs repeated pauses, not one full collection */
    int npause = 0;
    double pause = gc_pause(r, &npause);
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

static int partial_batch_reason(const char *why)
{
    return strstr(why, "size") && (strstr(why, "[0]") || strstr(why, "index 0") ||
                                   strstr(why, "dim 0") || strstr(why, "size()[0]"));
}

int dc_cand_compile(const diag_run *r, dfinding *d)
{
    const dcause *c = &r->cause;
    if (!c->have_pyprof || !(c->recompiles >= 1)) return 0;
    double total_s = isfinite(r->duration_s) && r->duration_s > 0 ? r->duration_s : NAN;
    double recomp_s = 0;
    for (int i = 0; i < c->ncomp; i++)
        if (c->comp[i].what[0]) recomp_s += c->comp[i].dur;
    double score = isfinite(total_s) ? recomp_s / total_s : 0.2;
    diag_head(d, "recompile", "torch.compile recompiles", fmin(fmax(score, 0.15), 0.9),
              "the model was recompiled %.0f time%s (%.1f s)%s%s", c->recompiles,
              c->recompiles == 1 ? "" : "s", recomp_s, c->recompile_reason[0] ? ": " : "",
              c->recompile_reason);
    ev(d, "compile_s", c->compile_s, "compiling took %.1f s in all (%.0f frames)", c->compile_s,
       c->compile_frames);
    ev(d, "recompiles", c->recompiles, "%.0f recompile%s, %.1f s", c->recompiles,
       c->recompiles == 1 ? "" : "s", recomp_s);
    if (c->recompile_reason[0])
        ev(d, "recompile_reason", NAN, "guard failure: %s", c->recompile_reason);
    if (partial_batch_reason(c->recompile_reason)) {
        rec(d, "A batch of another size (the last, partial batch of an epoch) recompiled the "
               "model: DataLoader(drop_last=True) keeps every batch the same size.");
        rec(d, "Or compile for varying batch sizes once: torch._dynamo.mark_dynamic(x, 0) on "
               "the input, or torch.compile(model, dynamic=True).");
    } else {
        rec(d, "Keep what the guards check stable between steps (shapes, dtypes, Python "
               "scalars passed to the model), or mark varying dimensions dynamic "
               "(torch._dynamo.mark_dynamic).");
        rec(d, "TORCH_LOGS=recompiles prints every guard failure with its source line.");
    }
    return 1;
}

/* Causes measured in [start, end] of a slow step. */
static const char *cause_in(const dcause *c, double s, double e, char *o, size_t n)
{
    double cs = 0, gs = 0;
    const char *reason = NULL;
    for (int i = 0; i < c->ncomp; i++)
        if (c->comp[i].t <= e && c->comp[i].t + c->comp[i].dur >= s) {
            cs += c->comp[i].dur;
            if (c->comp[i].what[0]) reason = c->comp[i].what;
        }
    for (int i = 0; i < c->ngc; i++)
        if (c->gc[i].t <= e && c->gc[i].t + c->gc[i].dur >= s) gs += c->gc[i].dur;
    int epoch = 0;
    for (int i = 0; i < c->nepochs; i++)
        if (c->epochs[i].t >= s - 0.001 && c->epochs[i].t <= e) epoch = 1;
    double len = e - s;
    /* a window of the script's profiler: recording, or stopping and
     * writing its trace (which follows the last recorded op in the step) */
    for (int i = 0; i < c->nprof; i++)
        if (c->prof[i].t <= e && c->prof[i].t + c->prof[i].dur >= s) {
            fmt(o, n, "torch.profiler window");
            return "profiler";
        }
    if (cs > 0.3 * len) {
        fmt(o, n, "torch.compile %s (%.1f s)", reason ? "recompile" : "compile", cs);
        return "compile";
    }
    if (gs > 0.3 * len) {
        fmt(o, n, "GC pause (%.0f ms)", 1000 * gs);
        return "gc";
    }
    if (epoch) {
        fmt(o, n, "epoch boundary (DataLoader iterator restarted)");
        return "epoch";
    }
    o[0] = 0;
    return NULL;
}

double dc_epoch_start_cost(const diag_run *r, double p50_ms, int *n, double *mean_ms)
{
    const dcause *c = &r->cause;
    double excess = 0, sum = 0;
    *n = 0;
    for (int i = 0; i < c->nslow; i++) {
        if (!(c->slow[i].ms > ONEOFF_FACTOR * p50_ms)) break;
        char w[160];
        const char *k = cause_in(c, c->slow[i].start, c->slow[i].end, w, sizeof(w));
        if (!k || strcmp(k, "epoch") != 0) continue;
        (*n)++;
        sum += c->slow[i].ms;
        excess += c->slow[i].ms - p50_ms;
    }
    *mean_ms = *n ? sum / *n : NAN;
    return *n && c->tr_s > 0 ? excess / c->tr_s : 0;
}

double dc_explain_variability(const diag_run *r, dfinding *d, double p50_ms)
{
    const dcause *c = &r->cause;
    int nslow = 0, ncomp = 0, ngc = 0, nepoch = 0, nprof = 0;
    char first[4][160] = {{0}};
    for (int i = 0; i < c->nslow; i++) {
        if (!(c->slow[i].ms > ONEOFF_FACTOR * p50_ms)) break;
        nslow++;
        char w[160];
        const char *k = cause_in(c, c->slow[i].start, c->slow[i].end, w, sizeof(w));
        if (!k) continue;
        int slot = strcmp(k, "compile") == 0 ? 0 : strcmp(k, "gc") == 0 ? 1
                 : strcmp(k, "epoch") == 0 ? 2 : 3;
        if (slot == 0) ncomp++;
        if (slot == 1) ngc++;
        if (slot == 2) nepoch++;
        if (slot == 3) nprof++;
        if (!first[slot][0])
            fmt(first[slot], sizeof(first[0]), "step at %.1f s took %.0f ms: %s", c->slow[i].start,
                c->slow[i].ms, w);
    }
    if (c->eval_steps > 0)
        ev(d, "eval_steps", c->eval_steps,
           "%.0f step%s contained evaluation or checkpointing (%.1f s), kept out of step time",
           c->eval_steps, c->eval_steps == 1 ? "" : "s", (c->eval_ns + c->ckpt_ns) / 1e9);
    if (nslow == 0) return 0;
    for (int s = 0; s < 4; s++)
        if (first[s][0]) ev(d, "slow_step", NAN, "%s", first[s]);
    if (ncomp) {
        rec(d, "%d of the %d slowest steps were torch.compile compiling: see the recompile "
               "finding (drop_last=True / mark_dynamic for a partial last batch).",
            ncomp, nslow);
    }
    /* the gc-pauses finding, when it holds, takes this one in (diag.c) */
    if (2 * ngc >= nslow)
        ev(d, "slow_steps_gc_share", (double)ngc / nslow,
           "%d of the %d slowest steps held a long GC pause", ngc, nslow);
    if (ngc)
        rec(d, "%d of the %d slowest steps held a long GC pause: gc.freeze() after start-up, or "
               "gc.collect() at a fixed step interval.",
            ngc, nslow);
    if (nepoch)
        rec(d, "%d of the %d slowest steps began an epoch: the DataLoader restarts its workers; "
               "persistent_workers=True keeps them.",
            nepoch, nslow);
    if (nprof)
        rec(d, "%d of the %d slowest steps were the script's torch.profiler windows (recording, "
               "then writing the trace): expected while profiling; fewer or shorter windows, or "
               "none in runs whose speed matters.",
            nprof, nslow);
    if (!ncomp && !ngc && !nepoch && !nprof)
        ev(d, "cause", NAN,
           "no cause was measured for the %d slowest steps (not compile, GC pauses, evaluation, "
           "epoch boundaries or profiler windows)",
           nslow);
    return (double)(ncomp + nepoch + nprof) / nslow;
}
