/* Per-thread step state machines and run aggregates (see agg.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collect/agg.h"
#include "collect/gpujoin.h"
#include "collect/ranks.h"
#include "trainperf.h"

typedef struct agg_frame_ent {
    tpf_name name;
    uint64_t begin_ns;    /* for the trace */
} agg_frame_ent;

/* Phase time is exclusive, so the phases of a step never sum to more than
 * its interval however ranges nest: at any instant at most one phase of a
 * thread counts (t->cur, since t->mark_ns). See cur_phase for which. */
typedef struct agg_thread {
    pid_t tid;
    uint8_t in_step;
    uint64_t step;
    uint64_t begin_ns, prev_end_ns; /* prev_end_ns 0: no step ended yet */
    uint64_t pre_ns;                /* phase time before the first step began */
    int depth, overflow;
    int cur;                        /* phase index counting now, -1: none */
    uint64_t mark_ns;               /* since when cur counts */
    agg_frame_ent stack[AGG_MAX_DEPTH];
    uint64_t acc[AGG_NPHASES];      /* phase time since the previous step ended */
} agg_thread;

struct agg_proc {
    pid_t pid;
    int rank, local_rank;
    uint8_t loop_open, exiting; /* its training loop runs; it is shutting down */
    agg_thread **threads;
    int nthreads, cap, last;
};

static void on_gpu_step(void *ctx, const gpu_step *g)
{
    agg *a = ctx;
    figs_add_gpu(&a->f, g);
    if (a->sink.gpu_step && !g->drain) a->sink.gpu_step(a->sink.ctx, g);
}

int agg_create(agg **out, const agg_sink *sink)
{
    agg *a = calloc(1, sizeof(*a));
    if (!a) return TPF_ENOMEM;
    if (sink) a->sink = *sink;
    figs_init(&a->f);
    if (gj_create(&a->gpu, on_gpu_step, a) != 0) {
        free(a);
        return TPF_ENOMEM;
    }
    *out = a;
    return 0;
}

void agg_gpu_flush(agg *a, uint64_t now_ns, int final)
{
    gj_flush(a->gpu, now_ns, final);
    gj_counts(a->gpu, &a->f.gpu.records, &a->f.gpu.records_late, &a->f.gpu.steps_paused);
    a->f.gpu.steps_undetailed = gj_undetailed(a->gpu);
}

void agg_free(agg *a)
{
    if (!a) return;
    gj_free(a->gpu);
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

void agg_proc_set_rank(agg_proc *p, int rank, int local_rank)
{
    p->rank = rank;
    p->local_rank = local_rank;
}

/* The loop of p runs (a step, a batch fetched) or ended (it said so, or
 * it has gone). */
static void loop_open(agg *a, agg_proc *p)
{
    if (p->loop_open) return;
    p->loop_open = 1;
    a->loops_open++;
    a->loop_end_ns = 0;
}

static void loop_close(agg *a, agg_proc *p, uint64_t ts)
{
    if (!p->loop_open) return;
    p->loop_open = 0;
    if (--a->loops_open == 0) a->loop_end_ns = ts ? ts : 1;
}

static void on_exit_mark(agg *a, agg_proc *p, uint64_t ts)
{
    loop_close(a, p, ts);
    if (p->exiting) return;
    p->exiting = 1;
    if (a->exiting++ == 0) a->exit_ns = ts ? ts : 1;
}

void agg_proc_end(agg *a, agg_proc *p, uint64_t now_ns)
{
    if (!a || !p) return;
    loop_close(a, p, now_ns);
    if (p->exiting && --a->exiting == 0) a->exit_ns = 0;
    p->exiting = 0;
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
    t->cur = -1;
    p->last = p->nthreads;
    p->threads[p->nthreads++] = t;
    return t;
}

static int phase_index(tpf_name n)
{
    return (n >= TPF_PHASE_DATA && n <= TPF_PHASE_CHECKPOINT) ? (int)n - 1 : -1;
}

static uint64_t span(uint64_t from, uint64_t to) { return to > from ? to - from : 0; }

#define PH_EVAL_IDX (TPF_PHASE_EVAL - 1)
#define PH_CKPT_IDX (TPF_PHASE_CHECKPOINT - 1)

/* Which phase counts for a stack of ranges: evaluation and checkpointing
 * take everything inside them (the eval loader, a save's collectives: not
 * training), the outermost of them wins; otherwise the innermost phase does,
 * so an all-reduce inside backward is comm, and the forward and backward a
 * closure runs inside optimizer.step() (Lightning, LBFGS) are forward and
 * backward, not optimizer time as well. Ranges of other names are
 * transparent. */
static int cur_phase(const agg_thread *t)
{
    int inner = -1;
    for (int i = 0; i < t->depth; i++) {
        int ph = phase_index(t->stack[i].name);
        if (ph == PH_EVAL_IDX || ph == PH_CKPT_IDX) return ph;
        if (ph >= 0) inner = ph;
    }
    return inner;
}

/* Give the time since mark to the phase counting so far, from now on to
 * whatever the stack says. */
static void phase_cut(agg_thread *t, uint64_t now)
{
    if (t->cur >= 0) t->acc[t->cur] += span(t->mark_ns, now);
    if (now > t->mark_ns) t->mark_ns = now;
    t->cur = cur_phase(t);
}

static void on_push(agg_thread *t, const seg_event *ev)
{
    if (t->depth >= AGG_MAX_DEPTH) {
        t->overflow++; /* keep pops matched */
        return;
    }
    phase_cut(t, ev->ts_ns);
    agg_frame_ent *e = &t->stack[t->depth++];
    e->name = ev->name;
    e->begin_ns = ev->ts_ns;
    t->cur = cur_phase(t);
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
    phase_cut(t, ev->ts_ns);
    agg_frame_ent *e = &t->stack[--t->depth];
    t->cur = cur_phase(t);
    if (a->sink.range) {
        agg_range r = {p->pid, t->tid, e->name, e->begin_ns, ev->ts_ns, t->depth};
        if (r.end_ns < r.begin_ns) r.end_ns = r.begin_ns;
        a->sink.range(a->sink.ctx, &r);
    }
}

static uint64_t acc_sum(const agg_thread *t)
{
    uint64_t n = 0;
    for (int i = 0; i < AGG_NPHASES; i++) n += t->acc[i];
    return n;
}

static void on_step_end(agg *a, agg_proc *p, agg_thread *t, const seg_event *ev)
{
    uint64_t end = ev->ts_ns;
    /* A range still open gives the time so far to this step. */
    phase_cut(t, end);
    if (!t->in_step) {
        /* An end without a begin: the step ran since the previous end (the
         * first one: its phases are all the time there is). */
        t->begin_ns = t->prev_end_ns ? t->prev_end_ns : end;
        if (!t->prev_end_ns) t->pre_ns = acc_sum(t);
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
    s.interval_ns = t->prev_end_ns ? span(t->prev_end_ns, end) : s.duration_ns + t->pre_ns;
    uint64_t phases = 0;
    for (int i = 0; i < AGG_NPHASES; i++) {
        s.phase_ns[i] = t->acc[i];
        phases += t->acc[i];
    }
    if (phases > s.interval_ns) {
        /* Cannot happen with exclusive phases and one clock per thread; a
         * last line so that a row never says more than 100%. */
        uint64_t sum = 0;
        for (int i = 0; i < AGG_NPHASES; i++) {
            s.phase_ns[i] = (uint64_t)((double)s.phase_ns[i] * (double)s.interval_ns / (double)phases);
            sum += s.phase_ns[i];
        }
        for (int i = 0; i < AGG_NPHASES && sum > s.interval_ns; i++) { /* rounding */
            uint64_t d = sum - s.interval_ns < s.phase_ns[i] ? sum - s.interval_ns : s.phase_ns[i];
            s.phase_ns[i] -= d;
            sum -= d;
        }
        phases = sum;
    }
    s.other_ns = s.interval_ns > phases ? s.interval_ns - phases : 0;
    s.samples = ev->samples;
    s.tokens = ev->tokens;

    memset(t->acc, 0, sizeof(t->acc));
    t->prev_end_ns = end;
    t->in_step = 0;
    t->step++;

    figs_add(&a->f, &s);
    gj_step(a->gpu, &s);
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
    if (ev->kind == SEG_EV_MARK && ev->name == SEG_NAME_LOOP_END) {
        loop_close(a, p, ev->ts_ns);
        return;
    }
    if (ev->kind == SEG_EV_MARK && ev->name == SEG_NAME_EXIT) {
        on_exit_mark(a, p, ev->ts_ns);
        return;
    }
    if (ev->kind == SEG_EV_MARK && ev->name == SEG_NAME_GPU_PAUSED) {
        gj_pause(a->gpu, p->pid, ev->ts_ns);
        return;
    }
    if (ev->kind == SEG_EV_MARK && ev->name == SEG_NAME_GPU_RESUMED) {
        gj_resume(a->gpu, p->pid, ev->ts_ns);
        return;
    }
    if (ev->kind == SEG_EV_MARK && (ev->name == SEG_NAME_GPU_DETAIL_ON || ev->name == SEG_NAME_GPU_DETAIL_OFF)) {
        gj_detail(a->gpu, p->pid, ev->ts_ns, ev->name == SEG_NAME_GPU_DETAIL_ON);
        return;
    }
    if (ev->kind == SEG_EV_MARK) {
        if (a->sink.mark) a->sink.mark(a->sink.ctx, p->pid, ev->tid, ev->name, ev->ts_ns);
        return;
    }
    if (ev->kind >= SEG_EV_GPU_KERNEL) {
        if (ev->kind == SEG_EV_GPU_KERNEL)
            sketch_add(&a->f.gpu.kernel_dur_ns, (double)(ev->end_ns - ev->ts_ns));
        gj_record(a->gpu, p->pid, ev);
        if (a->sink.gpu_record && ev->kind != SEG_EV_GPU_STEP) a->sink.gpu_record(a->sink.ctx, p->pid, ev);
        return;
    }
    agg_thread *t = thread_of(a, p, ev->tid);
    if (!t) return;
    /* a step completed, or a batch fetched: the loop runs (again, after an
     * epoch). Not a step begun: the auto hook opens one at any forward,
     * an evaluation's in a process that never trains too */
    if (ev->kind == SEG_EV_STEP_END || (ev->kind == SEG_EV_PUSH && ev->name == TPF_PHASE_DATA))
        loop_open(a, p);
    switch (ev->kind) {
    case SEG_EV_STEP_BEGIN:
        /* A second begin restarts the step; phase time so far is kept. Before
         * the first step, the phase time so far (loading the first batch, a
         * sanity evaluation) lengthens that step's interval, which it is
         * counted in. */
        if (!t->prev_end_ns) {
            phase_cut(t, ev->ts_ns);
            t->pre_ns = acc_sum(t);
        }
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
        fv_set(&f->step_time_p90_ms, sketch_quantile(&a->f.step_ns, 0.9) / 1e6);
        fv_set(&f->since_last_step_s, (double)span(a->f.last_end_ns, now_ns) / 1e9);
        if (a->loops_open == 0 && a->loop_end_ns)
            fv_set(&f->loop_ended_s, (double)span(a->loop_end_ns, now_ns) / 1e9);
    }
    if (a->exiting > 0 && a->exit_ns)
        fv_set(&f->shutdown_s, (double)span(a->exit_ns, now_ns) / 1e9);
    a->live_count = a->live_interval_ns = a->live_data_ns = 0;
    a->live_samples = a->live_tokens = 0;
    f->straggler_rank = -1;
    ranks_live(a, f);
}
