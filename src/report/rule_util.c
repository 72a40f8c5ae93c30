/* What the rules share (rule_util.h). */
#include "report/rule_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"

int dr_fired(const diag_run *r, const char *rule, double *t, char *m, size_t mn)
{
    for (int i = 0; i < r->nalerts; i++) {
        const dalert *a = &r->alerts[i];
        if (strcmp(a->rule, rule) == 0 && strcmp(a->state, "fired") == 0) {
            if (t) *t = a->t;
            if (m) fmt(m, mn, "%s", a->message);
            return 1;
        }
    }
    return 0;
}

/* a count from the run directory: 0..1e6, else 0 */
#define count_of(v) diag_int((v), 0, 1e6, 0)

void dr_ctx_make(const diag_run *r, dctx *c)
{
    memset(c, 0, sizeof(*c));
    c->steps_ok = r->steps >= MIN_STEPS;
    c->samples_ok = r->msamples >= MIN_SAMPLES;
    /* the figures the report's tables show: evidence prints the same numbers */
    diag_figures(r, &c->f);
    memcpy(c->share, c->f.share, sizeof(c->share));
    double su = 0;
    int ng = 0;
    c->gpu_util_min = NAN;
    for (int i = 0; i < r->ngpu; i++) {
        if (r->gpus[i].util.n <= 0) continue;
        /* while it trained: start-up (imports, CUDA's initialisation, the
         * dataset) and the exit are not the training's GPU use (a 1.3 s
         * loop in a 12 s run on an H200 read "5%") */
        const dstat *ut = r->gpus[i].util_train.n >= MIN_SAMPLES ? &r->gpus[i].util_train : &r->gpus[i].util;
        double u = dstat_mean(ut);
        su += u;
        ng++;
        if (isnan(c->gpu_util_min) || u < c->gpu_util_min) c->gpu_util_min = u;
    }
    c->has_gpu = ng > 0;
    c->gpu_util = ng ? su / ng : NAN;
    c->main_cpu = dstat_mean(&r->main_cpu);
    c->tree_cpu = dstat_mean(&r->tree_cpu);
    c->sys_cpu = dstat_mean(&r->cpu);
    c->cpus = r->cpus > 0 ? r->cpus : NAN;
    /* rounded once to the tenth that the evidence shows, so the advice
     * derived from it never disagrees with the number printed beside it */
    c->idle_cores = isfinite(c->cpus) && isfinite(c->sys_cpu)
                        ? round(10 * c->cpus * (1 - c->sys_cpu / 100)) / 10
                        : NAN;
    if (c->idle_cores < 0) c->idle_cores = 0;
    c->iowait = dstat_mean(&r->iowait);
    c->psi_io = dstat_mean(&r->psi_io);
    c->psi_mem = dstat_mean(&r->psi_mem);
    c->psi_mem_full = dstat_mean(&r->psi_mem_full);
    double tot = r->mem_total.n ? r->mem_total.max : NAN;
    c->avail_min_pct = r->mem_avail.n && tot > 0 ? 100 * r->mem_avail.min / tot : NAN;
    c->swap_growth = r->swap.n && isfinite(r->swap_first) ? r->swap.max - r->swap_first : NAN;
    /* workers at once (the most child processes alive together), not the
     * distinct PIDs over the run: loaders restarted every epoch are new PIDs */
    c->workers = r->have_procs ? (r->max_procs > 0 ? count_of(r->max_procs) - 1 : 0)
                               : (r->tree_procs.n ? count_of(r->tree_procs.max) - 1 : -1);
    if (c->workers < 0 && r->have_procs) c->workers = 0;
    /* the zero-code hook knows the DataLoader's own count */
    if (r->cause.have_pyprof && r->cause.loader_iters > 0)
        c->workers = count_of(r->cause.loader_workers *
                              (r->cause.nprocs_py > 1 ? r->cause.nprocs_py : 1));
    c->worker_cpu = dstat_mean(&r->worker_cpu);
}

/* The head of a rule on one phase's share of step time; 0 when the share
 * is below thr (or too few steps). */
int dr_phase_rule(const dctx *c, dfinding *d, int ph, double thr, const char *id,
                      const char *title, const char *doing, const char *of)
{
    double s = c->share[ph];
    if (!c->steps_ok || !(s >= thr)) return 0;
    diag_head(d, id, title, s, "%s takes %.0f%% of %s", doing, 100 * s, of);
    char nm[40];
    fmt(nm, sizeof(nm), "%s_share", diag_phase_names[ph]);
    ev(d, nm, s, "%s phases are %.0f%% of step time", diag_phase_names[ph], 100 * s);
    return 1;
}

/* Whether the finding carries evidence of that name. */
int dr_has_ev(const dfinding *d, const char *name)
{
    for (int k = 0; k < d->nev; k++)
        if (strcmp(d->ev[k].name, name) == 0) return 1;
    return 0;
}

/* The step-time variation as evidence of the finding that explains it. */
void dr_cv_ev(dfinding *d, const dctx *c, const char *why)
{
    if (isfinite(c->f.step_cv))
        ev(d, "step_time_cv", c->f.step_cv, "step time varies (coefficient of variation %.2f)%s",
           c->f.step_cv, why);
}

/* One recommendation in the words of the run's code: Python (PyTorch) or
 * native. */
void dr_rec_lang(const diag_run *r, dfinding *d, const char *py, const char *native)
{
    rec(d, "%s", r->python ? py : native);
}

void dr_rec_less_work(const diag_run *r, dfinding *d, const char *where)
{
    if (r->python) {
        const dcause *k = &r->cause;
        int amp = k->amp_bf16 || k->amp_f16, comp = k->compile_frames > 0;
        rec(d, "Do less work per sample%s: %s%sfused/foreach optimizers, flash attention "
               "(scaled_dot_product_attention)%s.",
            where, amp ? "" : "bf16 autocast, ", comp ? "" : "torch.compile, ",
            amp && comp ? " (the run already uses autocast and torch.compile)"
            : amp       ? " (the run already uses autocast)"
            : comp      ? " (the run already uses torch.compile)"
                        : "");
    } else {
        rec(d, "Do less work per sample%s: bf16/fp16 matrix multiplies on tensor cores, fused "
               "kernels, flash attention.",
            where);
    }
}

/* The hang alert fired after the last step and the program then ended by
 * itself with status 0: it finished its loop and spent the time after it
 * (tear-down, a final evaluation or save), it did not hang. */
int dr_ended_after_loop(const diag_run *r, double alert_t)
{
    return r->exit_known && r->exit_code == 0 && r->exit_signal <= 0 &&
           isfinite(r->last_end_s) && r->last_end_s < alert_t;
}

/* Whether an error is a collective's: a peer gone, a connection closed, a
 * timeout of the process group. */
int dr_comm_error(const char *e)
{
    static const char *const w[] = {"Connection closed", "Connection reset", "connection",
                                    "Broken pipe", "timed out", "Timeout", "timeout", "NCCL",
                                    "gloo", "ProcessGroup", "collective", "all_reduce",
                                    "allreduce", "DistBackendError"};
    for (size_t k = 0; k < sizeof(w) / sizeof(w[0]); k++)
        if (strstr(e, w[k])) return 1;
    return 0;
}

/* The program failed with an exception the hook recorded, raised after its
 * last step (before alert_t, when one is given): a process that raises was
 * running, not hung. Not when the exception is what a hang ends with (a
 * collective's timeout or lost peer) or a person stopping it. */
int dr_failed_after_loop(const diag_run *r, double alert_t)
{
    const char *e = r->cause.fail_error;
    return r->exit_known && r->exit_code > 0 && r->exit_signal <= 0 && e[0] &&
           isfinite(r->last_end_s) && !(r->last_end_s >= alert_t) && !dr_comm_error(e) &&
           strncmp(e, "KeyboardInterrupt", 17) != 0;
}

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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dc_window_data_share(const diag_run *r, double *lo, double *hi)
{
    const dcause *c = &r->cause;
    double v[DC_DWIN];
    int n = 0;
    /* the last window is used only when it is at least half full */
    for (int i = 1; i < c->dwin_nb; i++) {
        const double *w = c->dwin[i];
        if (i == c->dwin_nb - 1 && w[2] < c->dwin_width / 2.0) break;
        if (w[1] > 0) v[n++] = w[0] / w[1];
    }
    if (n < 4) return NAN;
    qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
    *lo = v[0], *hi = v[n - 1];
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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
        dc_low2_merge(seg[i / per], c->lv[i]);
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

/* a line the training thread waits for data in, not the loop's own line
 * (`for x, y in loader:`, next(it): where the DataLoader's code is entered) */
static int data_work_line(const dc_func *l, const char *t)
{
    return strcmp(l->kind, "data") == 0 && !(strncmp(t, "for ", 4) == 0 && strstr(t, " in ")) &&
           !strstr(t, "next(");
}

int dc_input_line(const dcause *c, dc_input_fn *o)
{
    const dc_proc *bp = NULL;
    const dc_func *bf = NULL;
    double best = 0;
    /* the function with most such samples, summed over its lines */
    for (int p = 0; p < c->nproc; p++) {
        const dc_proc *pr = &c->procs[p];
        for (int i = 0; i < pr->nlines; i++) {
            const dc_func *l = &pr->lines[i];
            if (!data_work_line(l, pr->src[i])) continue;
            double n = 0;
            for (int j = 0; j < pr->nlines; j++)
                if (data_work_line(&pr->lines[j], pr->src[j]) &&
                    strcmp(pr->lines[j].func, l->func) == 0 &&
                    strcmp(pr->lines[j].file, l->file) == 0)
                    n += pr->lines[j].samples;
            if (n > best) best = n, bp = pr, bf = l;
        }
    }
    if (!bp || !(c->ph_data > 0) || !(best >= INPUT_LINE_MIN_SAMPLES)) return 0;
    o->share = best / c->ph_data;
    if (o->share > 1) o->share = 1;
    if (!(o->share >= INPUT_LINE_SHARE)) return 0;
    /* its lines, most first (lines_top is sorted) */
    o->n = 0;
    for (int j = 0; j < bp->nlines && o->n < DC_INPUT_LINES; j++)
        if (data_work_line(&bp->lines[j], bp->src[j]) && strcmp(bp->lines[j].func, bf->func) == 0 &&
            strcmp(bp->lines[j].file, bf->file) == 0) {
            o->line[o->n] = &bp->lines[j];
            o->src[o->n++] = bp->src[j];
        }
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

const char *dc_kind_words(const char *k)
{
    if (strcmp(k, "input") == 0) return "input preparation on the host";
    if (strcmp(k, "io") == 0) return "file or network I/O";
    if (strcmp(k, "sync") == 0) return "synchronisation (reading results back)";
    if (strcmp(k, "wait") == 0) return "waiting (sleep, locks, queues)";
    if (strcmp(k, "input-wait") == 0) return "waiting for batches from a producer (a queue or thread)";
    if (strcmp(k, "input-pool") == 0) return "waiting for a worker pool to prepare the batch";
    if (strcmp(k, "input-block") == 0)
        return "a blocking wait inside the batch function, on the training thread (a synchronous "
               "fetch: nothing prepares the next batch meanwhile)";
    if (strcmp(k, "format") == 0) return "tensors formatted as text (print or an f-string)";
    if (strcmp(k, "pool-start") == 0) return "starting and stopping a pool of processes";
    return "Python code on the host";
}

void dc_warm_shares(const diag_run *r, double *sh)
{
    int warm = r->warm_interval_ns > 0 && r->steps >= 2 * DC_MIN_STEPS;
    for (int p = 0; p < PH_COUNT; p++)
        sh[p] = warm ? r->warm_phase_ns[p] / r->warm_interval_ns
                : r->sum_interval_ns > 0 ? r->sum_phase_ns[p] / r->sum_interval_ns
                                         : NAN;
}

/* Evaluation's share of the loop (between steps it falls in the next
 * step's interval); else the hook's own timing of it over the run. */
double dc_eval_share(const diag_run *r)
{
    double share = r->sum_interval_ns > 0 ? r->sum_phase_ns[PH_EVAL] / r->sum_interval_ns : NAN;
    if (!(share > 0) && r->duration_s > 0) share = r->cause.eval_s / r->duration_s;
    return share;
}

int dc_waits_for_cpu(const diag_run *r, double *wait, double *used, double *share)
{
    const dcause *c = &r->cause;
    if (c->runq_n < 2 || !r->tree_cpu.n) return 0;
    *wait = c->runq_sum / c->runq_n; /* % of one core */
    *used = r->tree_cpu.sum / r->tree_cpu.n;
    *share = *wait + *used > 0 ? *wait / (*wait + *used) : 0;
    return *wait >= CONTEND_MIN_WAIT && *share >= CONTEND_WAIT_SHARE;
}

/* The quantile q of the evaluation gaps, in seconds (NAN when none). */
static double eval_gap_quantile(const dcause *c, double q)
{
    double want = q * c->eval_gaps, seen = 0;
    for (int k = 0; k < EVAL_GAP_BUCKETS; k++) {
        seen += c->eval_gap_n[k];
        if (c->eval_gap_n[k] > 0 && seen >= want) return 1e-6 * pow(EVAL_GAP_BASE, k + 0.5);
    }
    return NAN;
}

double dc_eval_floor_share(const diag_run *r, double *batch_ms, double *step_ms, double *q)
{
    const dcause *c = &r->cause;
    double wait, used, share;
    *batch_ms = *step_ms = *q = NAN;
    if (!dc_waits_for_cpu(r, &wait, &used, &share) || !(c->eval_gaps >= EVAL_FLOOR_MIN_GAPS) ||
        !(c->eval_fwd > 0) || !(r->steps >= DC_MIN_STEPS) || !r->sf.step_ns.count)
        return NAN;
    *q = EVAL_FLOOR_Q;
    double step = sketch_quantile(&r->sf.step_ns, *q) / 1e9, batch = eval_gap_quantile(c, *q);
    double e = batch * c->eval_fwd, t = step * r->steps;
    if (!(e > 0) || !(t > 0)) return NAN;
    *batch_ms = 1e3 * batch;
    *step_ms = 1e3 * step;
    return e / (e + t);
}

void dc_eval_floor_ev(dfinding *d, double floor, double batch_ms, double step_ms, double q)
{
    if (isfinite(floor))
        ev(d, "eval_floor_share", floor,
           "the run waited for CPUs: without those waits evaluation is %.0f%% of the loop (a "
           "batch of evaluation %.2f ms, a training step %.2f ms: the fastest %.0f%% of each)",
           100 * floor, batch_ms, step_ms, 100 * q);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median graph probe: nodes and backward µs a node (0 when none). */
int dc_median_probe(const dcause *c, double *nodes, double *us_node)
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

int dc_probe_floor(const dcause *c, double *ratio, double *floor_us)
{
    double q[64], fl[64];
    for (int i = 0; i < c->ngraph; i++) {
        if (!(c->graph[i][2] > 0)) return 0;
        q[i] = c->graph[i][1] / c->graph[i][0] / c->graph[i][2];
        fl[i] = c->graph[i][2] / 1e3;
    }
    if (c->ngraph < 1) return 0;
    qsort(q, (size_t)c->ngraph, sizeof(double), by_value);
    qsort(fl, (size_t)c->ngraph, sizeof(double), by_value);
    *ratio = q[c->ngraph / 2];
    *floor_us = fl[c->ngraph / 2];
    return 1;
}

int dc_small_steps(const diag_run *r, double p50_ms, double *nodes, double *step_us_node)
{
    double per;
    if (r->ngpu > 0 || !(p50_ms > 0) || !dc_median_probe(&r->cause, nodes, &per)) return 0;
    *step_us_node = 1e3 * p50_ms / *nodes;
    return per <= SMALL_NODE_US && *step_us_node <= SMALL_STEP_US_NODE;
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
double dc_closure_extra_share(const diag_run *r)
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

double dc_f64_share(const diag_run *r)
{
    const dcause *c = &r->cause;
    return c->params_all > 0 ? c->params_f64 / c->params_all : NAN;
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

/* GC pause seconds after training began, less those inside a torch.compile
 * compile (dynamo allocates a lot: they are the compile's) and those after
 * the last step; *npause gets
 * the pauses long enough to be kept with their time that count. */
double dc_gc_pause(const diag_run *r, int *npause)
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

int dr_select(const dfinding *cand, int nc, const dsel *s)
{
    for (int t = 0; t < 3 && s->ids[t]; t++) {
        int at = -1;
        for (int i = 0; i < nc; i++)
            if (strcmp(cand[i].id, s->ids[t]) == 0 && (!s->pred || s->pred(&cand[i]))) at = i;
        if (at >= 0) return at;
    }
    return -1;
}

/* a busy process the run itself started beside training makes its threads
 * wait for a CPU as other jobs do */
int dr_waits_for_cpu(const dfinding *d)
{
    return strcmp(d->id, "oversubscription") != 0 || dr_has_ev(d, "other_procs_cores");
}

const dsel dr_cpu_wait = DR_CPU_WAIT;
