/* Per-thread step state machines and run aggregates (see agg.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collect/agg.h"
#include "collect/ranks.h"
#include "trainperf.h"

typedef struct agg_frame_ent {
    tpf_name name;
    uint8_t counted;      /* outermost of its phase: its time goes to the step */
    uint8_t paused;       /* a comm range inside it is open: the time is comm's */
    uint64_t begin_ns;    /* for the trace */
    uint64_t cut_ns;      /* time before this was already given to a step */
} agg_frame_ent;

typedef struct agg_thread {
    pid_t tid;
    uint8_t in_step;
    uint64_t step;
    uint64_t begin_ns, prev_end_ns; /* prev_end_ns 0: no step ended yet */
    uint64_t pre_data_ns;           /* data time before the first step began */
    int depth, overflow;
    agg_frame_ent stack[AGG_MAX_DEPTH];
    uint32_t phase_open[AGG_NPHASES];
    uint64_t acc[AGG_NPHASES];      /* phase time since the previous step ended */
} agg_thread;

struct agg_proc {
    pid_t pid;
    int rank, local_rank;
    agg_thread **threads;
    int nthreads, cap, last;
};

int agg_create(agg **out, const agg_sink *sink)
{
    agg *a = calloc(1, sizeof(*a));
    if (!a) return TPF_ENOMEM;
    if (sink) a->sink = *sink;
    figs_init(&a->f);
    *out = a;
    return 0;
}

void agg_free(agg *a)
{
    if (!a) return;
    figs_free(&a->f);
    free(a);
}

int agg_proc_create(agg_proc **out, pid_t pid, int rank, int local_rank)
{
    agg_proc *p = calloc(1, sizeof(*p));
    if (!p) return TPF_ENOMEM;
    p->pid = pid;
    p->rank = rank;
    p->local_rank = local_rank;
    *out = p;
    return 0;
}

void agg_proc_free(agg_proc *p)
{
    if (!p) return;
    for (int i = 0; i < p->nthreads; i++) free(p->threads[i]);
    free(p->threads);
    free(p);
}

/* Drains hand out events thread by thread, so the last hit almost always
 * matches; a linear search is fine for the rest. */
static agg_thread *thread_of(agg *a, agg_proc *p, pid_t tid)
{
    if (p->last < p->nthreads && p->threads[p->last]->tid == tid) return p->threads[p->last];
    for (int i = 0; i < p->nthreads; i++)
        if (p->threads[i]->tid == tid) {
            p->last = i;
            return p->threads[i];
        }
    if (p->nthreads >= AGG_MAX_THREADS) {
        a->f.untracked_threads++;
        return NULL;
    }
    if (p->nthreads == p->cap) {
        int nc = p->cap ? p->cap * 2 : 8;
        if (nc > AGG_MAX_THREADS) nc = AGG_MAX_THREADS;
        agg_thread **nt = realloc(p->threads, (size_t)nc * sizeof(*nt));
        if (!nt) {
            a->f.untracked_threads++;
            return NULL;
        }
        p->threads = nt;
        p->cap = nc;
    }
    agg_thread *t = calloc(1, sizeof(*t));
    if (!t) {
        a->f.untracked_threads++;
        return NULL;
    }
    t->tid = tid;
    p->last = p->nthreads;
    p->threads[p->nthreads++] = t;
    return t;
}

static int phase_index(tpf_name n)
{
    return (n >= TPF_PHASE_DATA && n <= TPF_PHASE_CHECKPOINT) ? (int)n - 1 : -1;
}

static uint64_t span(uint64_t from, uint64_t to) { return to > from ? to - from : 0; }

#define PH_COMM_IDX (TPF_PHASE_COMM - 1)

/* Communication is exclusive: while the outermost comm range is open, the
 * phases it sits in (an all-reduce inside backward) stop counting, so comm
 * time is not counted twice. */
static void comm_pause(agg_thread *t, uint64_t now)
{
    for (int i = 0; i < t->depth; i++) {
        agg_frame_ent *e = &t->stack[i];
        int ph = phase_index(e->name);
        if (ph < 0 || ph == PH_COMM_IDX || !e->counted || e->paused) continue;
        t->acc[ph] += span(e->cut_ns, now);
        e->cut_ns = now;
        e->paused = 1;
    }
}

static void comm_resume(agg_thread *t, uint64_t now)
{
    for (int i = 0; i < t->depth; i++)
        if (t->stack[i].paused) {
            t->stack[i].paused = 0;
            t->stack[i].cut_ns = now;
        }
}

static void on_push(agg_thread *t, const seg_event *ev)
{
    if (t->depth >= AGG_MAX_DEPTH) {
        t->overflow++; /* keep pops matched */
        return;
    }
    agg_frame_ent *e = &t->stack[t->depth++];
    e->name = ev->name;
    e->begin_ns = e->cut_ns = ev->ts_ns;
    e->counted = 0;
    e->paused = 0;
    int ph = phase_index(ev->name);
    if (ph >= 0) {
        /* Nested ranges of the same phase are not counted twice. */
        e->counted = t->phase_open[ph] == 0;
        if (ph == PH_COMM_IDX && e->counted) comm_pause(t, ev->ts_ns);
        t->phase_open[ph]++;
    }
}

static void on_pop(agg *a, agg_proc *p, agg_thread *t, const seg_event *ev)
{
    if (t->overflow > 0) {
        t->overflow--;
        return;
    }
    if (t->depth == 0) {
        a->f.unmatched_pops++;
        return;
    }
    agg_frame_ent *e = &t->stack[--t->depth];
    int ph = phase_index(e->name);
    if (ph >= 0) {
        if (e->counted && !e->paused) t->acc[ph] += span(e->cut_ns, ev->ts_ns);
        t->phase_open[ph]--;
        if (ph == PH_COMM_IDX && e->counted) comm_resume(t, ev->ts_ns);
    }
    if (a->sink.range) {
        agg_range r = {p->pid, t->tid, e->name, e->begin_ns, ev->ts_ns, t->depth};
        if (r.end_ns < r.begin_ns) r.end_ns = r.begin_ns;
        a->sink.range(a->sink.ctx, &r);
    }
}

static void on_step_end(agg *a, agg_proc *p, agg_thread *t, const seg_event *ev)
{
    uint64_t end = ev->ts_ns;
    if (!t->in_step) {
        /* An end without a begin: the step ran since the previous end. */
        t->begin_ns = t->prev_end_ns ? t->prev_end_ns : end;
        if (!t->prev_end_ns) t->pre_data_ns = t->acc[0];
    }
    /* Ranges still open give the time so far to this step. */
    for (int i = 0; i < t->depth; i++) {
        agg_frame_ent *e = &t->stack[i];
        int ph = phase_index(e->name);
        if (ph >= 0 && e->counted) {
            if (!e->paused) t->acc[ph] += span(e->cut_ns, end);
            e->cut_ns = end;
        }
    }
    agg_step s;
    memset(&s, 0, sizeof(s));
    s.rank = p->rank;
    s.local_rank = p->local_rank;
    s.pid = p->pid;
    s.tid = t->tid;
    s.step = t->step;
    s.begin_ns = t->begin_ns;
    s.end_ns = end;
    s.duration_ns = span(t->begin_ns, end);
    s.interval_ns = t->prev_end_ns ? span(t->prev_end_ns, end) : s.duration_ns + t->pre_data_ns;
    uint64_t phases = 0;
    for (int i = 0; i < AGG_NPHASES; i++) {
        s.phase_ns[i] = t->acc[i];
        phases += t->acc[i];
    }
    s.other_ns = s.interval_ns > phases ? s.interval_ns - phases : 0;
    s.samples = ev->samples;
    s.tokens = ev->tokens;

    memset(t->acc, 0, sizeof(t->acc));
    t->prev_end_ns = end;
    t->in_step = 0;
    t->step++;

    figs_add(&a->f, &s);
    a->live_count++;
    a->live_interval_ns += s.interval_ns;
    a->live_data_ns += s.phase_ns[0];
    a->live_samples += s.samples;
    a->live_tokens += s.tokens;
    if (a->sink.step) a->sink.step(a->sink.ctx, &s);
}

void agg_event(agg *a, agg_proc *p, const seg_event *ev)
{
    if (ev->kind == SEG_EV_COUNTER) {
        if (a->sink.counter) a->sink.counter(a->sink.ctx, p->pid, ev->tid, ev->name, ev->ts_ns, ev->value);
        return;
    }
    if (ev->kind == SEG_EV_MARK) {
        if (a->sink.mark) a->sink.mark(a->sink.ctx, p->pid, ev->tid, ev->name, ev->ts_ns);
        return;
    }
    agg_thread *t = thread_of(a, p, ev->tid);
    if (!t) return;
    switch (ev->kind) {
    case SEG_EV_STEP_BEGIN:
        /* A second begin restarts the step; phase time so far is kept. */
        if (!t->prev_end_ns && !t->in_step) t->pre_data_ns = t->acc[0];
        t->in_step = 1;
        t->begin_ns = ev->ts_ns;
        break;
    case SEG_EV_STEP_END: on_step_end(a, p, t, ev); break;
    case SEG_EV_PUSH: on_push(t, ev); break;
    case SEG_EV_POP: on_pop(a, p, t, ev); break;
    default: break;
    }
}

void agg_live(agg *a, coll_frame *f, double dt, uint64_t now_ns)
{
    fv_set(&f->steps, (double)figs_global_steps(&a->f)); /* the job's, not a sum over ranks */
    /* Rates are per rank (a DDP step is one step of every rank). */
    double ng = a->f.ngroups > 0 ? a->f.ngroups : 1;
    if (dt > 0) {
        fv_set(&f->step_rate, (double)a->live_count / dt / ng);
        fv_set(&f->sample_rate, (double)a->live_samples / dt);
        fv_set(&f->token_rate, (double)a->live_tokens / dt);
    }
    if (a->live_interval_ns > 0)
        fv_set(&f->data_wait_share, (double)a->live_data_ns / (double)a->live_interval_ns);
    if (a->live_count > 0)
        fv_set(&f->step_time_ms, (double)a->live_interval_ns / (double)a->live_count / 1e6);
    if (a->f.count > 0) {
        fv_set(&f->step_time_median_ms, sketch_quantile(&a->f.step_ns, 0.5) / 1e6);
        fv_set(&f->since_last_step_s, (double)span(a->f.last_end_ns, now_ns) / 1e9);
    }
    a->live_count = a->live_interval_ns = a->live_data_ns = 0;
    a->live_samples = a->live_tokens = 0;
    f->straggler_rank = -1;
    ranks_live(a, f);
}
