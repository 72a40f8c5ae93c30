/* Critical path analysis (see trace_cpath.h).
 *
 * Every event of the window has a start and an end node. Edges, with HTA's
 * weights:
 *  - on a CPU thread, nesting order: parent start -> first child start ->
 *    ... -> child end -> next child start -> parent end, weighted by the time
 *    between (the parent's own time); a blocking call (cudaDeviceSynchronize,
 *    cudaStreamSynchronize, cudaEventSynchronize, cudaEventQuery, cudaMemcpy,
 *    cudaMemcpyAsync) weighs 0 to its end: waiting is not work;
 *  - consecutive top-level operators of a thread: weight 0 (idle);
 *  - a kernel: start -> end, its duration;
 *  - a kernel launched onto an empty stream: launch call start -> kernel
 *    start (launch delay); otherwise previous kernel end -> kernel start on
 *    its stream (the gap);
 *  - a synchronisation (Context/Stream/Event Sync, or without those the
 *    blocking calls themselves): the last kernel(s) -> the end of the CPU call
 *    that waited, weight 0.
 * The graph is a DAG; its longest path (Kahn order, one relaxation per edge)
 * is the critical path. Memory: nodes and edges of one window, capped by
 * TW_MAX_EVENTS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace/trace_cpath.h"
#include "trace/trace_int.h"
#include "trace/trace_json.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/jsonw.h"
#include "util/table.h"

typedef struct cp_edge {
    uint32_t u, v;
    int64_t w;
    uint32_t attr;          /* event index the time belongs to */
    uint8_t type;
} cp_edge;

/* What a cuda_sync event waited for (a second read of the file collects
 * these: the compact records do not carry them). */
typedef struct cp_wait {
    int64_t corr, wait_stream, wait_corr;
} cp_wait;

#define CP_MAX_WAITS (1u << 20)

struct trace_cpath {
    char *path;
    cp_wait *waits;         /* by corr */
    size_t nwaits;
    tr_window win;
    cp_edge *e;
    size_t ne, ecap;
    uint32_t *on_path;      /* edge indexes, first to last */
    size_t npath;
    int64_t length;
    int64_t by_type[CP_NTYPES];
    uint64_t nby_type[CP_NTYPES];
    cp_row *rows;
    size_t nrows;
    int top_k;
    int hta;                /* --compat hta: HTA's graph (see trace_cpath_run) */
};

static const char *const type_names[CP_NTYPES] = {
    "cpu", "kernel", "launch_delay", "kernel_gap", "dependency", "sync",
};

static const char *ev_name(const tr_window *w, uint32_t i) { return w->arena + w->noff[w->ev[i].name]; }
static int64_t node_ts(const tr_window *w, uint32_t node)
{
    const tw_ev *e = &w->ev[node / 2];
    return node & 1 ? e->ts + e->dur : e->ts;
}

static int add_edge(trace_cpath *c, uint32_t u, uint32_t v, int type, uint32_t attr)
{
    if (u == v) return 0;
    if (c->ne == c->ecap) {
        size_t nc = c->ecap ? c->ecap * 2 : 4096;
        if (nc > (size_t)TW_MAX_EVENTS * 8) return TPF_ETOOBIG;
        cp_edge *ne = realloc(c->e, nc * sizeof(*ne));
        if (!ne) return TPF_ENOMEM;
        c->e = ne;
        c->ecap = nc;
    }
    int64_t w = 0;
    if (type != CP_DEP && type != CP_SYNC) {
        w = node_ts(&c->win, v) - node_ts(&c->win, u);
        if (w < 0) w = 0; /* overlap (clock skew, rounding): no negative time on a path */
    }
    c->e[c->ne++] = (cp_edge){u, v, w, attr, (uint8_t)type};
    return 0;
}

static int blocking_call(const char *n)
{
    static const char *const calls[] = {
        "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaEventQuery",
        "cudaMemcpy", "cudaMemcpyAsync", "hipDeviceSynchronize", "hipStreamSynchronize",
        "hipEventSynchronize", "hipMemcpy", "hipMemcpyAsync",
    };
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
        if (strcmp(n, calls[i]) == 0) return 1;
    return 0;
}

/* ---- CPU threads ----------------------------------------------------------- */

typedef struct thr_st {
    uint32_t *stack;        /* event indexes */
    uint32_t n, cap;
    int64_t last;           /* node, -1 none: last node inside the current top-level op */
    int64_t last_top;       /* end node of the previous top-level op, -1 none */
} thr_st;

static int thr_exit(trace_cpath *c, thr_st *t)
{
    const tr_window *w = &c->win;
    uint32_t f = t->stack[--t->n];
    int rc = 0;
    if (t->last >= 0) {
        int blocking = w->ev[f].kind == TW_RUNTIME && blocking_call(ev_name(w, f));
        /* a blocking call's wait is not its work: weight 0, as a sync */
        rc = add_edge(c, (uint32_t)t->last, 2 * f + 1, blocking ? CP_SYNC : CP_CPU, f);
    }
    if (t->n == 0) {
        t->last = -1;
        t->last_top = 2 * f + 1;
    } else {
        t->last = 2 * f + 1;
    }
    return rc;
}

static int build_cpu(trace_cpath *c)
{
    const tr_window *w = &c->win;
    thr_st *ts = calloc(w->nthreads ? w->nthreads : 1, sizeof(*ts));
    if (!ts) return TPF_ENOMEM;
    for (uint32_t i = 0; i < w->nthreads; i++) ts[i].last = ts[i].last_top = -1;
    int rc = 0;
    for (uint32_t i = 0; i < w->n && !rc; i++) {
        const tw_ev *e = &w->ev[i];
        if (e->kind != TW_CPU && e->kind != TW_RUNTIME) continue;
        thr_st *t = &ts[e->thread];
        int64_t end = e->ts + e->dur;
        /* close what ended, and what only partly overlaps (not nesting) */
        while (!rc && t->n) {
            const tw_ev *top = &w->ev[t->stack[t->n - 1]];
            if (top->ts + top->dur <= e->ts || top->ts + top->dur < end) rc = thr_exit(c, t);
            else break;
        }
        if (rc) break;
        if (t->n == 0 && t->last_top >= 0) rc = add_edge(c, (uint32_t)t->last_top, 2 * i, CP_DEP, i);
        else if (t->n && t->last >= 0) rc = add_edge(c, (uint32_t)t->last, 2 * i, CP_CPU, t->stack[t->n - 1]);
        if (rc) break;
        if (t->n == t->cap) {
            uint32_t nc = t->cap ? t->cap * 2 : 16;
            uint32_t *ns = realloc(t->stack, nc * sizeof(*ns));
            if (!ns) { rc = TPF_ENOMEM; break; }
            t->stack = ns;
            t->cap = nc;
        }
        t->stack[t->n++] = i;
        t->last = 2 * i;
    }
    for (uint32_t k = 0; k < w->nthreads; k++) {
        while (!rc && ts[k].n) rc = thr_exit(c, &ts[k]);
        free(ts[k].stack);
    }
    free(ts);
    return rc;
}

/* ---- GPU ------------------------------------------------------------------- */

typedef struct corr_ix {
    int64_t corr;
    uint32_t ev;
} corr_ix;

static int corr_ix_cmp(const void *a, const void *b)
{
    const corr_ix *x = a, *y = b;
    return x->corr < y->corr ? -1 : x->corr > y->corr;
}

/* The runtime call with this correlation, or -1. */
static int64_t find_runtime(const corr_ix *ix, size_t n, int64_t corr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ix[mid].corr < corr) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && ix[lo].corr == corr ? (int64_t)ix[lo].ev : -1;
}

typedef struct gitem {
    int64_t key;            /* kernels by start, syncs by end (HTA) */
    uint32_t ev;
    int sync;               /* 1 cuda_sync event, 2 blocking call standing for one */
} gitem;

static int gitem_cmp(const void *a, const void *b)
{
    const gitem *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->ev < y->ev ? -1 : x->ev > y->ev;
}

typedef struct slast {
    int64_t stream;
    int64_t ev;             /* last kernel, -1 */
} slast;

static slast *stream_last(slast *v, size_t *n, size_t cap, int64_t s)
{
    for (size_t i = 0; i < *n; i++)
        if (v[i].stream == s) return &v[i];
    if (*n >= cap) return NULL;
    v[*n] = (slast){s, -1};
    return &v[(*n)++];
}

static int wait_cmp(const void *a, const void *b)
{
    const cp_wait *x = a, *y = b;
    return x->corr < y->corr ? -1 : x->corr > y->corr;
}

static int on_wait(void *ud, const trace_ev *ev)
{
    trace_cpath *c = ud;
    if (!(ev->has & TEV_CAT) || !(ev->has & TEV_CORR) || strcmp(ev->cat, "cuda_sync") != 0) return 0;
    if (c->nwaits >= CP_MAX_WAITS) return 0; /* bounded: later syncs fall back to "every stream" */
    if ((c->nwaits & (c->nwaits - 1)) == 0) {
        size_t nc = c->nwaits ? c->nwaits * 2 : 64;
        cp_wait *nw = realloc(c->waits, nc * sizeof(*nw));
        if (!nw) return TPF_ENOMEM;
        c->waits = nw;
    }
    c->waits[c->nwaits++] = (cp_wait){ev->corr, (ev->has & TEV_WAIT) ? ev->wait_stream : -2,
                                      (ev->has & TEV_WAIT) ? ev->wait_corr : -2};
    return 0;
}

static const cp_wait *find_wait(const trace_cpath *c, int64_t corr)
{
    size_t lo = 0, hi = c->nwaits;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->waits[mid].corr < corr) lo = mid + 1;
        else hi = mid;
    }
    return lo < c->nwaits && c->waits[lo].corr == corr ? &c->waits[lo] : NULL;
}

/* The kernel on stream s whose launch is the last before t (before = 1) or
 * the first after t (before = 0), by launch time; -1 if none. */
static int64_t kernel_by_launch(const tr_window *w, const int64_t *launch, int64_t s, int64_t t, int before)
{
    int64_t best = -1;
    for (uint32_t i = 0; i < w->n; i++) {
        if (launch[i] < 0 || w->ev[i].stream != s) continue;
        if (before ? launch[i] < t && (best < 0 || launch[i] > launch[best])
                   : launch[i] > t && (best < 0 || launch[i] < launch[best]))
            best = i;
    }
    return best;
}

static int build_gpu(trace_cpath *c)
{
    const tr_window *w = &c->win;
    size_t nr = 0, ng = 0, nsync = 0;
    for (uint32_t i = 0; i < w->n; i++) {
        if (w->ev[i].kind == TW_RUNTIME && w->ev[i].corr >= 0) nr++;
        if (w->ev[i].kind == TW_KERNEL || w->ev[i].kind == TW_MEMCPY || w->ev[i].kind == TW_MEMSET ||
            w->ev[i].kind == TW_SYNC || w->ev[i].kind == TW_RUNTIME)
            ng++;
        if (w->ev[i].kind == TW_SYNC) nsync++;
    }
    corr_ix *ix = malloc((nr ? nr : 1) * sizeof(*ix));
    gitem *g = malloc((ng ? ng : 1) * sizeof(*g));
    slast *sl = malloc(4096 * sizeof(*sl));
    int64_t *launch = NULL, *next_launch = NULL;
    int rc = 0;
    if (!ix || !g || !sl) { rc = TPF_ENOMEM; goto out; }
    nr = ng = 0;
    for (uint32_t i = 0; i < w->n; i++) {
        const tw_ev *e = &w->ev[i];
        if (e->kind == TW_RUNTIME && e->corr >= 0) ix[nr++] = (corr_ix){e->corr, i};
        if (e->kind == TW_KERNEL || e->kind == TW_MEMCPY || e->kind == TW_MEMSET)
            g[ng++] = (gitem){e->ts, i, 0};
        else if (e->kind == TW_SYNC)
            g[ng++] = (gitem){e->ts + e->dur, i, 1};
        else if (!c->hta && !nsync && e->kind == TW_RUNTIME && blocking_call(ev_name(w, i)) &&
                 strstr(ev_name(w, i), "Synchronize"))
            g[ng++] = (gitem){e->ts + e->dur, i, 2}; /* no cuda_sync events: the call stands for one */
    }
    qsort(ix, nr, sizeof(*ix), corr_ix_cmp);
    qsort(g, ng, sizeof(*g), gitem_cmp);
    /* launch time of every kernel (for the syncs on CUDA events) */
    launch = malloc((w->n ? w->n : 1) * sizeof(*launch));
    if (!launch) { rc = TPF_ENOMEM; goto out; }
    for (uint32_t i = 0; i < w->n; i++) {
        const tw_ev *e = &w->ev[i];
        int64_t rt = (e->kind == TW_KERNEL || e->kind == TW_MEMCPY || e->kind == TW_MEMSET) ? find_runtime(ix, nr, e->corr) : -1;
        launch[i] = rt >= 0 ? w->ev[rt].ts : -1;
    }
    /* the launch of the next work on each kernel's stream (in the window) */
    next_launch = malloc((w->n ? w->n : 1) * sizeof(*next_launch));
    if (!next_launch) { rc = TPF_ENOMEM; goto out; }
    size_t ns = 0;
    for (size_t k = ng; k-- > 0;) {
        uint32_t i = g[k].ev;
        if (g[k].sync) continue;
        slast *nx = stream_last(sl, &ns, 4096, w->ev[i].stream);
        /* kernels of one launch (a CUDA graph) are not launched after it */
        next_launch[i] = !nx || nx->ev < 0 ? -1
                         : w->ev[nx->ev].corr == w->ev[i].corr ? next_launch[nx->ev] : launch[nx->ev];
        if (nx && launch[i] >= 0) nx->ev = i;
    }
    ns = 0;
    for (size_t k = 0; k < ng && !rc; k++) {
        uint32_t i = g[k].ev;
        const tw_ev *e = &w->ev[i];
        if (g[k].sync) {
            int64_t rt = g[k].sync == 2 ? (int64_t)i : find_runtime(ix, nr, e->corr);
            if (rt < 0) continue;
            const char *sn = ev_name(w, i);
            const cp_wait *wt = g[k].sync == 1 ? find_wait(c, e->corr) : NULL;
            int ev_sync = strcmp(sn, "Event Sync") == 0, sw = strcmp(sn, "Stream Wait Event") == 0;
            if ((ev_sync || sw) && wt && wt->wait_corr != -2) {
                /* HTA: the kernel launched on the recorded stream last before
                 * cudaEventRecord; an event never recorded waits for nothing */
                int64_t rec = wt->wait_corr >= 0 ? find_runtime(ix, nr, wt->wait_corr) : -1;
                int64_t src = rec >= 0 ? kernel_by_launch(w, launch, wt->wait_stream, w->ev[rec].ts, 1) : -1;
                if (src < 0) continue;
                if (ev_sync) {
                    rc = add_edge(c, 2 * (uint32_t)src + 1, 2 * (uint32_t)rt + 1, CP_SYNC, (uint32_t)rt);
                } else { /* the next kernel launched on the waiting stream waits for src */
                    int64_t dst = kernel_by_launch(w, launch, e->stream, w->ev[rt].ts, 0);
                    if (dst >= 0) rc = add_edge(c, 2 * (uint32_t)src + 1, 2 * (uint32_t)dst, CP_SYNC, (uint32_t)dst);
                }
                continue;
            }
            if (sw) continue; /* no record to follow */
            int one = g[k].sync == 1 && strcmp(sn, "Stream Sync") == 0 && e->stream >= 0;
            for (size_t s = 0; s < ns && !rc; s++) {
                if (sl[s].ev < 0 || (one && sl[s].stream != e->stream)) continue;
                if (node_ts(w, 2 * (uint32_t)sl[s].ev + 1) > w->ev[rt].ts + w->ev[rt].dur) continue;
                rc = add_edge(c, 2 * (uint32_t)sl[s].ev + 1, 2 * (uint32_t)rt + 1, CP_SYNC, (uint32_t)rt);
            }
            continue;
        }
        if ((rc = add_edge(c, 2 * i, 2 * i + 1, CP_KERNEL, i))) break;
        slast *last = stream_last(sl, &ns, 4096, e->stream);
        if (!last) { rc = TPF_ETOOBIG; break; }
        int64_t rt = find_runtime(ix, nr, e->corr);
        /* launch delay: the stream had nothing left to run at the launch,
         * work launched before the window included, and nothing else was
         * launched onto it before the kernel started (HTA's queue length:
         * 1 at the launch, 0 at the start); else the kernel waited for its
         * stream, or for something the trace does not show */
        if (rt >= 0 && e->prev_end < w->ev[rt].ts && (next_launch[i] < 0 || next_launch[i] > e->ts) &&
            (!c->hta || hta_queue_name(ev_name(w, (uint32_t)rt))) && /* HTA: its launch list */
            (last->ev < 0 || node_ts(w, 2 * (uint32_t)last->ev + 1) < w->ev[rt].ts))
            rc = add_edge(c, 2 * (uint32_t)rt, 2 * i, CP_LAUNCH, (uint32_t)rt);
        else if (last->ev >= 0)
            rc = add_edge(c, 2 * (uint32_t)last->ev + 1, 2 * i, CP_KGAP, i);
        last->ev = i;
    }
out:
    free(launch);
    free(next_launch);
    free(ix);
    free(g);
    free(sl);
    return rc;
}

/* ---- longest path ------------------------------------------------------------ */

static int longest_path(trace_cpath *c)
{
    size_t nn = 2 * c->win.n;
    if (!nn || !c->ne) return 0;
    uint32_t *indeg = calloc(nn, sizeof(*indeg));
    uint32_t *start = calloc(nn + 1, sizeof(*start)); /* CSR by source */
    uint32_t *adj = malloc(c->ne * sizeof(*adj));
    uint32_t *queue = malloc(nn * sizeof(*queue));
    int64_t *dist = calloc(nn, sizeof(*dist));
    int64_t *pred = malloc(nn * sizeof(*pred));
    int rc = 0;
    if (!indeg || !start || !adj || !queue || !dist || !pred) { rc = TPF_ENOMEM; goto out; }
    for (size_t k = 0; k < c->ne; k++) {
        indeg[c->e[k].v]++;
        start[c->e[k].u + 1]++;
    }
    for (size_t i = 0; i < nn; i++) start[i + 1] += start[i];
    {
        uint32_t *fill = malloc(nn * sizeof(*fill));
        if (!fill) { rc = TPF_ENOMEM; goto out; }
        memcpy(fill, start, nn * sizeof(*fill));
        for (size_t k = 0; k < c->ne; k++) adj[fill[c->e[k].u]++] = (uint32_t)k;
        free(fill);
    }
    size_t qh = 0, qt = 0;
    for (size_t i = 0; i < nn; i++) {
        pred[i] = -1;
        if (!indeg[i]) queue[qt++] = (uint32_t)i;
    }
    while (qh < qt) {
        uint32_t u = queue[qh++];
        for (uint32_t a = start[u]; a < start[u + 1]; a++) {
            const cp_edge *e = &c->e[adj[a]];
            /* ties go to the later-found edge only when strictly longer */
            if (pred[e->v] < 0 || dist[u] + e->w > dist[e->v]) {
                dist[e->v] = dist[u] + e->w;
                pred[e->v] = adj[a];
            }
            if (--indeg[e->v] == 0) queue[qt++] = e->v;
        }
    }
    /* the end: the longest distance, the latest node among equals */
    size_t best = 0;
    for (size_t i = 1; i < nn; i++)
        if (dist[i] > dist[best] || (dist[i] == dist[best] && node_ts(&c->win, (uint32_t)i) > node_ts(&c->win, (uint32_t)best)))
            best = i;
    c->length = dist[best];
    size_t n = 0;
    for (int64_t v = (int64_t)best; pred[v] >= 0 && n < c->ne; v = c->e[pred[v]].u) n++;
    c->on_path = malloc((n ? n : 1) * sizeof(*c->on_path));
    if (!c->on_path) { rc = TPF_ENOMEM; goto out; }
    c->npath = n;
    for (int64_t v = (int64_t)best; pred[v] >= 0 && n > 0; v = c->e[pred[v]].u) c->on_path[--n] = (uint32_t)pred[v];
out:
    free(indeg);
    free(start);
    free(adj);
    free(queue);
    free(dist);
    free(pred);
    return rc;
}

/* ---- summary -------------------------------------------------------------------- */

static int row_cmp(const void *a, const void *b)
{
    const cp_row *x = a, *y = b;
    if (x->time != y->time) return x->time > y->time ? -1 : 1;
    if (x->type != y->type) return x->type - y->type;
    return strcmp(x->name, y->name);
}

static int summarize(trace_cpath *c)
{
    const tr_window *w = &c->win;
    /* (type, name id) -> row, by a sort of the path's edges */
    size_t n = 0;
    cp_row *rows = calloc(c->npath ? c->npath : 1, sizeof(*rows));
    uint64_t *keys = malloc((c->npath ? c->npath : 1) * sizeof(*keys));
    if (!rows || !keys) {
        free(rows);
        free(keys);
        return TPF_ENOMEM;
    }
    for (size_t k = 0; k < c->npath; k++) {
        const cp_edge *e = &c->e[c->on_path[k]];
        c->by_type[e->type] += e->w;
        c->nby_type[e->type]++;
        if (e->type == CP_DEP || e->type == CP_SYNC) continue;
        uint64_t key = ((uint64_t)e->type << 32) | w->ev[e->attr].name;
        size_t j = 0;
        for (j = 0; j < n && keys[j] != key; j++) {}
        if (j == n) { /* few distinct names on one path: linear is fine up to thousands */
            if (n >= 4096) continue;
            keys[n] = key;
            rows[n].type = e->type;
            rows[n].name = (char *)ev_name(w, e->attr);
            n++;
        }
        rows[j].edges++;
        rows[j].time += e->w;
    }
    free(keys);
    qsort(rows, n, sizeof(*rows), row_cmp);
    size_t m = n < (size_t)c->top_k ? n : (size_t)c->top_k;
    for (size_t i = 0; i < m; i++) {
        size_t l = strlen(rows[i].name);
        char *s = malloc(l + 1);
        if (!s) {
            for (size_t j = 0; j < i; j++) free(rows[j].name);
            free(rows);
            return TPF_ENOMEM;
        }
        memcpy(s, rows[i].name, l + 1);
        rows[i].name = s;
    }
    c->rows = rows;
    c->nrows = m;
    return 0;
}

int trace_cpath_run(const char *path, int has_step, long step, const char *ann, long ann_index, int top_k,
                    int hta, trace_cpath **out, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen) err[0] = '\0';
    trace_cpath *c = calloc(1, sizeof(*c));
    if (!c) return TPF_ENOMEM;
    c->top_k = top_k > 0 ? top_k : 10;
    c->hta = hta;
    size_t pl = strlen(path);
    c->path = malloc(pl + 1);
    if (!c->path) {
        free(c);
        return TPF_ENOMEM;
    }
    memcpy(c->path, path, pl + 1);
    tw_select sel = {has_step, step, ann, ann_index, hta};
    int rc = trace_window(path, &sel, &c->win, err, errlen);
    if (!rc) {
        char e2[512];
        rc = trace_read(path, on_wait, c, 0, NULL, e2, sizeof(e2));
        if (rc) snprintf(err, errlen, "%s", e2[0] ? e2 : tpf_strerror(rc));
        else if (c->nwaits) qsort(c->waits, c->nwaits, sizeof(*c->waits), wait_cmp);
    }
    if (!rc) rc = build_cpu(c);
    if (!rc) rc = build_gpu(c);
    if (!rc) rc = longest_path(c);
    if (!rc) rc = summarize(c);
    if (rc) {
        if (!err[0]) snprintf(err, errlen, "%s: critical path: %s", path, tpf_strerror(rc));
        trace_cpath_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void trace_cpath_free(trace_cpath *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->nrows; i++) free(c->rows[i].name);
    free(c->rows);
    free(c->on_path);
    free(c->e);
    free(c->waits);
    trace_window_free(&c->win);
    free(c->path);
    free(c);
}

/* ---- rendering ----------------------------------------------------------------- */

static int64_t events_span(const trace_cpath *c);

static int64_t win_span(const trace_cpath *c)
{
    const tr_window *w = &c->win;
    if (w->lo != INT64_MIN) return w->hi - w->lo;
    return events_span(c);
}

/* From the first event's start to the last one's end: the window's CPU events
 * and the GPU work they launched, which may run on past the window's end. */
static int64_t events_span(const trace_cpath *c)
{
    const tr_window *w = &c->win;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < w->n; i++) {
        if (w->ev[i].ts < lo) lo = w->ev[i].ts;
        if (w->ev[i].ts + w->ev[i].dur > hi) hi = w->ev[i].ts + w->ev[i].dur;
    }
    return w->n ? hi - lo : 0;
}

/* From the path's first node to its last. Every edge goes forward in time and
 * weighs at most the time it spans, so the path's length is at most this (the
 * invariant tests/test_analyze_more.py checks on every trace). */
static int64_t path_span(const trace_cpath *c)
{
    if (!c->npath) return 0;
    return node_ts(&c->win, c->e[c->on_path[c->npath - 1]].v) - node_ts(&c->win, c->e[c->on_path[0]].u);
}

/* The category that holds most of the path: what bounds the iteration. */
static const char *bound_by(const trace_cpath *c)
{
    int64_t cpu = c->by_type[CP_CPU], gpu = c->by_type[CP_KERNEL] + c->by_type[CP_KGAP],
            launch = c->by_type[CP_LAUNCH];
    if (!c->length) return "nothing (empty path)";
    if (cpu >= gpu && cpu >= launch) return "CPU (operators and runtime calls)";
    if (gpu >= launch) return "GPU (kernels)";
    return "kernel launches (launch delay)";
}

int trace_cpath_json(const trace_cpath *c, buf *out)
{
    jw w;
    jw_init(&w, out, 1);
    jw_obj_begin(&w);
    jw_kstr(&w, "file", c->path);
    jw_kstr(&w, "window", c->win.what);
    jw_kint(&w, "window_ns", win_span(c));
    jw_kuint(&w, "events", c->win.n);
    jw_kuint(&w, "edges", c->ne);
    jw_kint(&w, "span_ns", events_span(c));
    jw_kint(&w, "path_ns", c->length);
    jw_kint(&w, "path_span_ns", path_span(c));
    jw_kuint(&w, "path_edges", c->npath);
    jw_kstr(&w, "bound_by", bound_by(c));
    jw_key(&w, "by_type");
    jw_obj_begin(&w);
    for (int t = 0; t < CP_NTYPES; t++) {
        jw_key(&w, type_names[t]);
        jw_obj_begin(&w);
        jw_kint(&w, "ns", c->by_type[t]);
        jw_kuint(&w, "edges", c->nby_type[t]);
        jw_obj_end(&w);
    }
    jw_obj_end(&w);
    jw_key(&w, "top");
    jw_arr_begin(&w);
    for (size_t i = 0; i < c->nrows; i++) {
        jw_obj_begin(&w);
        jw_kstr(&w, "type", type_names[c->rows[i].type]);
        jw_kstr(&w, "name", c->rows[i].name);
        jw_kuint(&w, "edges", c->rows[i].edges);
        jw_kint(&w, "ns", c->rows[i].time);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    buf_putc(out, '\n');
    return jw_error(&w) ? jw_error(&w) : out->err;
}

int trace_cpath_text(const trace_cpath *c, buf *o, int color)
{
    const char *bo = color ? "\033[1m" : "", *rs = color ? "\033[0m" : "";
    int64_t span = win_span(c);
    buf_printf(o, "%sCritical path of %s%s (%s)\n", bo, c->win.what, rs, c->path);
    int64_t all = events_span(c);
    buf_printf(o, "  %.3f ms on the path of a %.3f ms window", (double)c->length / 1e6, (double)span / 1e6);
    if (all > span) /* kernels launched in the window that ran on past its end */
        buf_printf(o, " (%.3f ms with the GPU work it launched)", (double)all / 1e6);
    buf_printf(o, "; %zu events, %zu edges; bound by %s\n", c->win.n, c->ne, bound_by(c));
    static const char *const labels[CP_NTYPES] = {
        "CPU operators and runtime calls", "GPU kernels and copies", "launch delay", "kernel waiting on its stream",
        "dependencies (no time)", "synchronisations (no time)",
    };
    for (int t = 0; t < CP_NTYPES; t++) {
        if (!c->nby_type[t]) continue;
        buf_printf(o, "  %10.3f ms %6.1f%%  %s (%llu edges)\n", (double)c->by_type[t] / 1e6,
                   c->length ? 100.0 * (double)c->by_type[t] / (double)c->length : 0.0, labels[t],
                   (unsigned long long)c->nby_type[t]);
    }
    static const tbl_col cols[] = {
        {"ms", 10, TBL_RIGHT}, {"%", 7, TBL_RIGHT}, {"edges", 6, TBL_RIGHT},
        {"type", 12, TBL_GAP}, {"name", 0, TBL_GAP},
    };
    tbl t;
    tbl_begin_sub(&t, o, TBL_TEXT, color, "On the critical path, by name", cols, 5);
    for (size_t i = 0; i < c->nrows; i++) {
        char nm[100], a[32], b[32], e[32];
        trace_short_name(nm, sizeof(nm), c->rows[i].name);
        snprintf(a, sizeof(a), "%.3f", (double)c->rows[i].time / 1e6);
        snprintf(b, sizeof(b), "%.1f%%", c->length ? 100.0 * (double)c->rows[i].time / (double)c->length : 0.0);
        snprintf(e, sizeof(e), "%llu", (unsigned long long)c->rows[i].edges);
        const char *cells[] = {a, b, e, type_names[c->rows[i].type], nm};
        tbl_row(&t, cells, TBL_PLAIN);
    }
    tbl_end(&t);
    return o->err;
}

/* ---- overlay trace ---------------------------------------------------------------- */

typedef struct ov_st {
    FILE *f;
    int first;
} ov_st;

static int ov_copy(void *ud, const trace_ev *ev)
{
    ov_st *s = ud;
    if (!s->first && fputs(",\n", s->f) == EOF) return TPF_EIO;
    s->first = 0;
    if (fwrite(ev->raw, 1, ev->raw_len, s->f) != ev->raw_len) return TPF_EIO;
    return 0;
}

/* ns -> the file's microseconds with 3 decimals */
static void us(char *b, size_t n, int64_t ns)
{
    int64_t a = ns < 0 ? -ns : ns;
    snprintf(b, n, "%s%lld.%03lld", ns < 0 ? "-" : "", (long long)(a / 1000), (long long)(a % 1000));
}

#define CP_PID 999999999    /* the overlay's own process (Perfetto sorts it apart) */
#define CP_FLOW_ID (1ull << 40) /* above any id Kineto gives its own flows */

int trace_cpath_overlay(const trace_cpath *c, const char *out_path, char *err, size_t errlen)
{
    afile_out o;
    int rc = afile_out_open(&o, out_path, err, errlen);
    if (rc) return rc;
    FILE *f = o.f;
    ov_st s = {f, 1};
    fputs("{\"traceEvents\": [\n", f);
    char e2[512];
    rc = trace_read(c->path, ov_copy, &s, TRACE_RAW, NULL, e2, sizeof(e2));
    if (rc) {
        snprintf(err, errlen, "%s", e2[0] ? e2 : tpf_strerror(rc));
        return afile_out_fail(&o, rc, err, errlen);
    }
    const tr_window *w = &c->win;
    static const char *const tnames[CP_NTYPES] = {
        "CPU", "GPU kernels", "launch delay", "kernel gap", "dependency", "sync",
    };
    fprintf(f, "%s{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": {\"name\": \"critical path\"}}",
            s.first ? "" : ",\n", CP_PID);
    for (int t = 0; t < CP_NTYPES; t++)
        fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                CP_PID, t + 1, tnames[t]);
    for (size_t k = 0; k < c->npath; k++) {
        const cp_edge *e = &c->e[c->on_path[k]];
        char a[64], b[64], ta[64];
        us(a, sizeof(a), node_ts(w, e->u));
        us(b, sizeof(b), e->w);
        jw j;
        buf nb;
        buf_init(&nb, 1 << 20);
        jw_init(&j, &nb, 0);
        jw_str(&j, ev_name(w, e->attr));
        if (e->w > 0 || e->type == CP_SYNC)
            fprintf(f, ",\n{\"ph\": \"X\", \"cat\": \"critical_path\", \"name\": %.*s, \"pid\": %d, \"tid\": %d, "
                       "\"ts\": %s, \"dur\": %s, \"args\": {\"type\": \"%s\"}}",
                    (int)nb.len, nb.data, CP_PID, e->type + 1, a, b, type_names[e->type]);
        buf_free(&nb);
        /* an arrow between the original events the edge joins */
        const tw_ev *eu = &w->ev[e->u / 2], *ev = &w->ev[e->v / 2];
        if (e->u / 2 != e->v / 2) {
            us(ta, sizeof(ta), node_ts(w, e->v));
            fprintf(f, ",\n{\"ph\": \"s\", \"cat\": \"critical_path\", \"name\": \"%s\", \"id\": %llu, \"pid\": %lld, "
                       "\"tid\": %lld, \"ts\": %s, \"bp\": \"e\"}",
                    type_names[e->type], CP_FLOW_ID + (unsigned long long)k, (long long)w->threads[eu->thread][0],
                    (long long)w->threads[eu->thread][1], a);
            fprintf(f, ",\n{\"ph\": \"f\", \"cat\": \"critical_path\", \"name\": \"%s\", \"id\": %llu, \"pid\": %lld, "
                       "\"tid\": %lld, \"ts\": %s, \"bp\": \"e\"}",
                    type_names[e->type], CP_FLOW_ID + (unsigned long long)k, (long long)w->threads[ev->thread][0],
                    (long long)w->threads[ev->thread][1], ta);
        }
    }
    fputs("\n]}\n", f);
    return afile_out_commit(&o, err, errlen);
}
