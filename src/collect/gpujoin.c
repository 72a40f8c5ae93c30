/* GPU records joined to the host's steps (see gpujoin.h). */
#include <stdlib.h>
#include <string.h>

#include "collect/gpujoin.h"
#include "trainperf.h"

typedef struct gj_proc {
    pid_t pid;
    gj_rec *r;
    size_t n, cap;
    int sorted;
    uint64_t max_dur;   /* longest record kept: how far back a start may lie */
    uint64_t watermark; /* latest end of any record seen */
    uint64_t done_ns;   /* steps ending by here have their rows: older records are no use */
    int had_step;       /* a step of this process was seen: no windows */
    uint64_t first_ns;  /* the earliest record's start */
    uint64_t win_end;   /* windows made up to here (0: none yet) */
    uint64_t nwin;
    uint64_t snap_t, snap_wm; /* the watermark as of a flush at snap_t */
    uint64_t settled;   /* the watermark GJ_SETTLE_NS to twice that ago */
    int drained;
    struct {
        uint64_t b, e; /* e: UINT64_MAX while the profiler holds CUPTI */
    } pz[GJ_MAX_PAUSES];
    int npz;
    struct {
        uint64_t b, e; /* e: UINT64_MAX while the window is open */
    } dz[GJ_MAX_PAUSES];
    int ndz;
    int has_detail;     /* windows: kernel records only inside dz */
    struct {
        uint64_t b, e, gpu_ns;
    } *ev;              /* CUDA-event spans, in order of end (GJ_MAX_EVS) */
    size_t nev;
} gj_proc;

struct gj {
    gj_emit_fn emit;
    void *ctx;
    gj_proc procs[GJ_MAX_PROCS];
    int nprocs;
    agg_step *pend;
    size_t npend;
    uint64_t records, late, paused, undetailed;
};

int gj_create(gj **out, gj_emit_fn emit, void *ctx)
{
    gj *j = calloc(1, sizeof(*j));
    if (!j) return TPF_ENOMEM;
    j->emit = emit;
    j->ctx = ctx;
    *out = j;
    return 0;
}

void gj_free(gj *j)
{
    if (!j) return;
    for (int i = 0; i < j->nprocs; i++) {
        free(j->procs[i].r);
        free(j->procs[i].ev);
    }
    free(j->pend);
    free(j);
}

static gj_proc *proc_of(gj *j, pid_t pid, int make)
{
    for (int i = 0; i < j->nprocs; i++)
        if (j->procs[i].pid == pid) return &j->procs[i];
    if (!make || j->nprocs == GJ_MAX_PROCS) return NULL;
    gj_proc *p = &j->procs[j->nprocs++];
    memset(p, 0, sizeof(*p));
    p->pid = pid;
    p->sorted = 1;
    return p;
}

void gj_step(gj *j, const agg_step *s)
{
    if (!j->pend) {
        j->pend = malloc(GJ_MAX_PEND * sizeof(*j->pend));
        if (!j->pend) return;
    }
    /* Full: the oldest goes out with what has come for it. */
    if (j->npend == GJ_MAX_PEND) gj_flush(j, UINT64_MAX, 0);
    if (j->npend == GJ_MAX_PEND) return;
    j->pend[j->npend++] = *s;
    gj_proc *p = proc_of(j, s->pid, 0);
    if (p) p->had_step = 1;
}

/* A step's CUDA-event span: kept in order of end (the library reads the
 * events back in order), the oldest going when full. It also says the
 * process's GPU is done up to the step's end: the watermark. */
static void event_span(gj_proc *p, const seg_event *ev)
{
    if (!p->ev && !(p->ev = malloc(GJ_MAX_EVS * sizeof(*p->ev)))) return;
    if (p->nev == GJ_MAX_EVS) {
        memmove(&p->ev[0], &p->ev[1], sizeof(p->ev[0]) * (GJ_MAX_EVS - 1));
        p->nev--;
    }
    p->ev[p->nev].b = ev->ts_ns;
    p->ev[p->nev].e = ev->end_ns;
    p->ev[p->nev].gpu_ns = ev->arg;
    p->nev++;
    if (ev->end_ns > p->watermark) p->watermark = ev->end_ns;
}

void gj_record(gj *j, pid_t pid, const seg_event *ev)
{
    if (ev->kind == SEG_EV_GPU_STEP) {
        gj_proc *p = proc_of(j, pid, 1);
        if (p) event_span(p, ev);
        return;
    }
    j->records++;
    gj_proc *p = proc_of(j, pid, 1);
    if (!p || ev->end_ns <= p->done_ns) {
        j->late++;
        return;
    }
    if (p->n == 0 && p->first_ns == 0) {
        /* new: a step of it may already be waiting */
        for (size_t q = 0; q < j->npend && !p->had_step; q++)
            if (j->pend[q].pid == pid) p->had_step = 1;
    }
    if (!p->first_ns || ev->ts_ns < p->first_ns) p->first_ns = ev->ts_ns;
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 4096;
        if (nc > GJ_MAX_RECS) nc = GJ_MAX_RECS;
        gj_rec *nr = nc > p->cap ? realloc(p->r, nc * sizeof(*nr)) : NULL;
        if (!nr) {
            j->late++;
            return;
        }
        p->r = nr;
        p->cap = nc;
    }
    gj_rec *r = &p->r[p->n];
    *r = (gj_rec){ev->ts_ns, ev->end_ns, ev->arg, ev->kind, ev->name};
    if (p->n && r->b < p->r[p->n - 1].b) p->sorted = 0;
    p->n++;
    if (r->e - r->b > p->max_dur) p->max_dur = r->e - r->b;
    if (r->e > p->watermark) p->watermark = r->e;
}

void gj_counts(const gj *j, uint64_t *records, uint64_t *late, uint64_t *paused)
{
    *records = j->records;
    *late = j->late;
    *paused = j->paused;
}

uint64_t gj_undetailed(const gj *j) { return j->undetailed; }

void gj_detail(gj *j, pid_t pid, uint64_t ts_ns, int on)
{
    gj_proc *p = proc_of(j, pid, 1);
    if (!p) return;
    p->has_detail = 1;
    int open = p->ndz && p->dz[p->ndz - 1].e == UINT64_MAX;
    if (!on) {
        if (open) p->dz[p->ndz - 1].e = ts_ns;
        return;
    }
    if (open) return;
    if (p->ndz == GJ_MAX_PAUSES) {
        memmove(&p->dz[0], &p->dz[1], sizeof(p->dz[0]) * (GJ_MAX_PAUSES - 1));
        p->ndz--;
    }
    p->dz[p->ndz].b = ts_ns;
    p->dz[p->ndz].e = UINT64_MAX;
    p->ndz++;
}

/* [b, e] lies in a kernel-detail window (or the process has no windows:
 * `--gpu-trace full`, or a library from before them) */
static int detailed(const gj_proc *p, uint64_t b, uint64_t e)
{
    if (!p->has_detail) return 1;
    for (int i = 0; i < p->ndz; i++)
        if (b >= p->dz[i].b && e <= p->dz[i].e) return 1;
    return 0;
}

/* The CUDA-event span of the host step that ended at end (0: none). */
static int span_of(gj_proc *p, uint64_t end, uint64_t *gpu_ns)
{
    for (size_t i = p->nev; i-- > 0;) {
        if (p->ev[i].e < end) break;
        if (p->ev[i].e - end <= GJ_EV_MATCH_NS) {
            *gpu_ns = p->ev[i].gpu_ns;
            return 1;
        }
    }
    return 0;
}

void gj_pause(gj *j, pid_t pid, uint64_t ts_ns)
{
    gj_proc *p = proc_of(j, pid, 1);
    if (!p) return;
    if (p->npz == GJ_MAX_PAUSES) {
        memmove(&p->pz[0], &p->pz[1], sizeof(p->pz[0]) * (GJ_MAX_PAUSES - 1));
        p->npz--;
    }
    p->pz[p->npz].b = ts_ns;
    p->pz[p->npz].e = UINT64_MAX;
    p->npz++;
    /* the library flushed CUPTI's buffers before it marked the pause, into
     * the same ring: every record that ended before it is in */
    if (ts_ns > p->watermark) p->watermark = ts_ns;
    if (ts_ns > p->settled) p->settled = ts_ns;
}

void gj_resume(gj *j, pid_t pid, uint64_t ts_ns)
{
    gj_proc *p = proc_of(j, pid, 0);
    if (p && p->npz && p->pz[p->npz - 1].e == UINT64_MAX) p->pz[p->npz - 1].e = ts_ns;
}

/* The interval [b, e] overlaps a window a profiler held CUPTI in: 1; 2
 * when it ends inside it (no record of ours can come for it). */
static int paused_in(const gj_proc *p, uint64_t b, uint64_t e)
{
    int in = 0;
    for (int i = 0; i < p->npz; i++)
        if (b < p->pz[i].e && e > p->pz[i].b) in = e <= p->pz[i].e ? 2 : in ? in : 1;
    return in;
}

static int cmp_rec(const void *a, const void *b)
{
    const gj_rec *x = a, *y = b;
    return (x->b > y->b) - (x->b < y->b);
}

static uint64_t u64max(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t u64min(uint64_t a, uint64_t b) { return a < b ? a : b; }

void gj_figures(const gj_rec *r, size_t n, uint64_t max_dur, gpu_step *g)
{
    uint64_t e = g->end_ns, s0 = g->end_ns > g->interval_ns ? g->end_ns - g->interval_ns : 0;
    /* first record that can reach into the interval */
    uint64_t from = s0 > max_dur ? s0 - max_dur : 0;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid].b < from)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t cur_b = 0, cur_e = 0, last_end = s0;
    int open = 0;
    for (size_t i = lo; i < n && r[i].b < e; i++) {
        const gj_rec *x = &r[i];
        int starts_in = x->b >= s0;
        uint64_t cb = u64max(x->b, s0), ce = u64min(x->e, e);
        switch (x->kind) {
        case SEG_EV_GPU_KERNEL:
            if (starts_in) {
                g->kernels++;
                g->kernel_ns += x->e - x->b;
                if (x->bytes & GPU_KB_COMM) g->comm_kernel_ns += x->e - x->b;
            }
            if (ce <= cb) break;
            if (!open || cb > cur_e) {
                if (open) {
                    g->busy_ns += cur_e - cur_b;
                    last_end = cur_e;
                }
                if (cb - last_end > g->idle_max_ns) g->idle_max_ns = cb - last_end;
                cur_b = cb;
                cur_e = ce;
                open = 1;
            } else if (ce > cur_e) {
                cur_e = ce;
            }
            break;
        case SEG_EV_GPU_COPY:
            if (!starts_in) break;
            g->copy_ns += x->e - x->b;
            if (GPU_CN_COPY(x->aux) == GPU_COPY_HTOD) {
                g->h2d_bytes += x->bytes;
                if (GPU_CN_SRC(x->aux) == GPU_MEM_PAGEABLE) g->h2d_pageable_bytes += x->bytes;
            } else if (GPU_CN_COPY(x->aux) == GPU_COPY_DTOH) {
                g->d2h_bytes += x->bytes;
                if (GPU_CN_DST(x->aux) == GPU_MEM_PAGEABLE) g->d2h_pageable_bytes += x->bytes;
            }
            break;
        case SEG_EV_GPU_MEMSET:
            if (starts_in) g->memset_bytes += x->bytes;
            break;
        case SEG_EV_GPU_SYNC:
            if (ce > cb) g->sync_ns += ce - cb;
            if (starts_in) g->syncs++;
            break;
        default: break;
        }
    }
    if (open) {
        g->busy_ns += cur_e - cur_b;
        last_end = cur_e;
    }
    if (e - last_end > g->idle_max_ns) g->idle_max_ns = e - last_end;
    /* after each host wait that ends in the interval: how long the GPU had
     * nothing to run until the host's next launch reached it */
    for (size_t i = lo; i < n && r[i].b < e; i++) {
        if (r[i].kind != SEG_EV_GPU_SYNC || r[i].e <= s0 || r[i].e >= e) continue;
        uint64_t se = r[i].e, running = se, next = e;
        for (size_t k = lo; k < n && r[k].b < e; k++) {
            if (r[k].kind != SEG_EV_GPU_KERNEL) continue;
            if (r[k].b < se && r[k].e > running) running = r[k].e;
            if (r[k].b >= se && r[k].b < next) next = r[k].b;
        }
        if (next > running) g->sync_idle_ns += next - running;
    }
}

/* Drop the records that end before every step still to come. */
static void prune(gj_proc *p)
{
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->r[i].e > p->done_ns) p->r[k++] = p->r[i];
    p->n = k;
}

static int cmp_pend(const void *a, const void *b)
{
    const agg_step *x = a, *y = b;
    return (x->end_ns > y->end_ns) - (x->end_ns < y->end_ns);
}

/* A row's identity and interval; its figures are gj_figures'. */
static gpu_step row(int rank, pid_t pid, pid_t tid, uint64_t step, uint64_t end, uint64_t interval)
{
    return (gpu_step){.rank = rank, .pid = pid, .tid = tid, .step = step, .end_ns = end,
                      .interval_ns = interval};
}

/* A process with GPU records and no step (a CUDA program with no step
 * markers; a trainee's first seconds before its first step): its figures
 * over windows of GJ_WINDOW_NS instead, once GJ_WINDOW_AFTER_NS of GPU time
 * passed with no step, and at the end. Rows with tid 0, step = the window. */
static void windows(gj *j, gj_proc *p, int final)
{
    if (p->had_step || p->n == 0 || !p->first_ns) return;
    if (!final && p->watermark < p->first_ns + GJ_WINDOW_AFTER_NS) return;
    if (!p->win_end) p->win_end = p->first_ns;
    while (p->win_end < p->watermark) {
        uint64_t e = p->win_end + GJ_WINDOW_NS;
        /* a window goes when the records are in past its end; the last,
         * at the end of the run, to the last record */
        if (p->watermark < e + GJ_WINDOW_NS / 4) {
            if (!final) break;
            e = p->watermark;
        }
        gpu_step g = row(-1, p->pid, 0, p->nwin++, e, e - p->win_end);
        gj_figures(p->r, p->n, p->max_dur, &g);
        if (j->emit) j->emit(j->ctx, &g);
        p->win_end = p->done_ns = e;
        prune(p);
    }
}

/* The GPU's work after the last step of a process with steps, while it
 * stays busy: what the steps queued and the host did not wait for. */
static void drain(gj *j, gj_proc *p)
{
    if (p->drained || !p->had_step || !p->done_ns) return;
    p->drained = 1;
    uint64_t end = p->done_ns, run = p->done_ns;
    for (size_t i = 0; i < p->n; i++) {
        const gj_rec *x = &p->r[i];
        if (x->e <= p->done_ns) continue;
        if (x->b > run + GJ_DRAIN_GAP_NS) break;
        if (x->e > run) run = x->e;
        end = run;
    }
    if (end <= p->done_ns) return;
    gpu_step g = row(-1, p->pid, p->pid, 0, end, end - p->done_ns);
    g.drain = 1;
    gj_figures(p->r, p->n, p->max_dur, &g);
    if (j->emit) j->emit(j->ctx, &g);
}

/* A ready step's row: from kernel records inside a window, from its CUDA
 * events outside one, or none. */
static void step_row(gj *j, gj_proc *p, const agg_step *s)
{
    gpu_step g = row(s->rank, s->pid, s->tid, s->step, s->end_ns, s->interval_ns);
    g.span_ok = p->nev && span_of(p, s->end_ns, &g.span_ns);
    if (detailed(p, s->end_ns - s->interval_ns, s->end_ns)) {
        g.source = GPU_SRC_CUPTI;
        gj_figures(p->r, p->n, p->max_dur, &g);
    } else if (g.span_ok) {
        g.source = GPU_SRC_EVENTS;
    } else {
        j->undetailed++;
        return;
    }
    if (j->emit) j->emit(j->ctx, &g);
}

/* Event spans of steps that have their rows are no use any more. */
static void prune_events(gj_proc *p)
{
    size_t k = 0;
    while (k < p->nev && p->ev[k].e + GJ_EV_MATCH_NS < p->done_ns) k++;
    if (!k) return;
    memmove(&p->ev[0], &p->ev[k], sizeof(p->ev[0]) * (p->nev - k));
    p->nev -= k;
}

void gj_flush(gj *j, uint64_t now_ns, int final)
{
    for (int i = 0; i < j->nprocs; i++) {
        gj_proc *p = &j->procs[i];
        if (!p->sorted) qsort(p->r, p->n, sizeof(*p->r), cmp_rec);
        p->sorted = 1;
        windows(j, p, final);
        /* the watermark of a flush GJ_SETTLE_NS ago (or more, up to twice) */
        if (now_ns != UINT64_MAX && (!p->snap_t || now_ns - p->snap_t >= GJ_SETTLE_NS)) {
            if (p->snap_t && p->snap_wm > p->settled) p->settled = p->snap_wm;
            p->snap_t = now_ns;
            p->snap_wm = p->watermark;
        }
    }
    if (j->npend == 0) return;
    qsort(j->pend, j->npend, sizeof(*j->pend), cmp_pend);
    int full = j->npend == GJ_MAX_PEND && now_ns == UINT64_MAX;
    size_t k = 0;
    for (size_t i = 0; i < j->npend; i++) {
        const agg_step *s = &j->pend[i];
        gj_proc *p = proc_of(j, s->pid, 0);
        int old = now_ns > s->end_ns && now_ns - s->end_ns >= GJ_LAG_NS;
        /* in a profiler's window: no row, and when it ends inside the
         * window, no records to wait for (one the window's end falls in
         * waits for its own, so that they are not counted late) */
        int paused = p ? paused_in(p, s->end_ns - s->interval_ns, s->end_ns) : 0;
        int ready = p && (paused == 2 || p->settled >= s->end_ns || old || final || (full && i == 0));
        if (!ready) {
            /* no GPU record from this process (yet): a CPU process, or CUDA
             * not started; let go once no record can come for it */
            if (!p && (old || final || (full && i == 0))) continue;
            j->pend[k++] = *s;
            continue;
        }
        if (paused)
            j->paused++;
        else
            step_row(j, p, s);
        if (s->end_ns > p->done_ns) p->done_ns = s->end_ns;
    }
    j->npend = k;
    if (final)
        for (int i = 0; i < j->nprocs; i++) drain(j, &j->procs[i]);
    /* A step still waiting keeps its process's records from its start on. */
    for (int i = 0; i < j->nprocs; i++) {
        gj_proc *p = &j->procs[i];
        uint64_t keep = p->done_ns;
        for (size_t q = 0; q < j->npend; q++)
            if (j->pend[q].pid == p->pid) {
                uint64_t b = j->pend[q].end_ns - j->pend[q].interval_ns;
                if (b < keep) keep = b;
            }
        uint64_t saved = p->done_ns;
        p->done_ns = keep;
        prune(p);
        prune_events(p);
        p->done_ns = saved;
    }
}
