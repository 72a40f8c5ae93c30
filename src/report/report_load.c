/* Loading a run directory into bounded aggregates (report_load.h): the
 * layer below the rules, which calls none of them. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "core/metrics.h"
#include "report/report_load.h"
#include "report/load_ranks.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/csvr.h"

const char *const diag_phase_names[PH_COUNT] = {"data", "forward", "backward",   "optimizer",
                                                "comm", "eval",    "checkpoint", "other"};

#define HIST_MIN_MS 1e-3
#define HIST_LOG_STEP 0.0198026272961797 /* log(1.02) */
#define MAX_PIDS 4096

/* Bounded message into err (paths may be long; truncation is fine here). */
static void msg(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int diag_grow(void **arr, int *cap, int need, size_t sz)
{
    if (need <= *cap) return 0;
    int nc = *cap ? *cap : 8;
    while (nc < need) nc *= 2;
    char *na = realloc(*arr, (size_t)nc * sz);
    if (!na) return TPF_ENOMEM;
    memset(na + (size_t)*cap * sz, 0, (size_t)(nc - *cap) * sz);
    *arr = na;
    *cap = nc;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double diag_median(double *v, int n)
{
    if (n < 1) return NAN;
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void msg(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void copy_str(char *dst, size_t n, const char *src)
{
    size_t l = src ? strlen(src) : 0;
    if (l >= n) l = n - 1;
    if (l) memcpy(dst, src, l);
    dst[l] = '\0';
}

/* A count from a file as uint64_t: 0 when negative, NaN or past the type. */
static uint64_t u64_or_0(double v)
{
    return v > 0 && v < 1.8e19 ? (uint64_t)v : 0;
}

/* Control bytes in a run's strings (ESC, BEL: a hostile run.json or
 * alerts.jsonl) become '?': no report format passes them to a terminal. */
static void unctrl(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = '?';
}

static void unctrl_run(diag_run *r)
{
    unctrl(r->name);
    unctrl(r->command);
    unctrl(r->host);
    unctrl(r->nvml_source);
    unctrl(r->io_error);
    for (int i = 0; i < r->ngpu; i++) {
        unctrl(r->gpus[i].name);
        unctrl(r->gpus[i].throttle_words);
    }
    for (int i = 0; i < r->nalerts && i < DIAG_MAX_ALERTS; i++) {
        unctrl(r->alerts[i].rule);
        unctrl(r->alerts[i].state);
        unctrl(r->alerts[i].severity);
        unctrl(r->alerts[i].message);
    }
}

/* ---- small statistics -------------------------------------------------- */

static void dstat_add(dstat *s, double v)
{
    if (s->n == 0 || v < s->min) s->min = v;
    if (s->n == 0 || v > s->max) s->max = v;
    s->n++;
    s->sum += v;
    s->sumsq += v * v;
}

double dstat_mean(const dstat *s)
{
    return s->n > 0 ? s->sum / s->n : NAN;
}

static void dhist_add(dhist *h, double ms)
{
    h->n++;
    if (!(ms > HIST_MIN_MS)) {
        h->zero++;
        return;
    }
    double kd = log(ms / HIST_MIN_MS) / HIST_LOG_STEP; /* inf for ms = inf */
    int k = kd < DIAG_HIST_BINS ? (int)kd : DIAG_HIST_BINS - 1;
    if (k < 0) k = 0;
    if (k >= DIAG_HIST_BINS) k = DIAG_HIST_BINS - 1;
    h->bins[k]++;
}

double dhist_quantile(const dhist *h, double q)
{
    if (h->n <= 0) return NAN;
    double rank = q * (h->n - 1) + 1; /* 1-based rank of the wanted value */
    if (rank <= h->zero) return 0;
    double acc = h->zero;
    for (int k = 0; k < DIAG_HIST_BINS; k++) {
        acc += h->bins[k];
        if (acc >= rank) return HIST_MIN_MS * exp((k + 0.5) * HIST_LOG_STEP);
    }
    return HIST_MIN_MS * exp(DIAG_HIST_BINS * HIST_LOG_STEP);
}

static void dseries_init(dseries *s, double width)
{
    memset(s, 0, sizeof(*s));
    s->width = width > 0 ? width : 1.0;
}

/* Halve the resolution until bucket k fits: merge neighbours pairwise. */
static void dseries_add(dseries *s, double t, double v)
{
    if (!isfinite(t) || !isfinite(v)) return;
    if (t < s->t0) t = s->t0;
    /* Doubling the width until the point fits: a time of 1e19 s (a
     * hostile steps.csv) must neither overflow the conversion to long (UB)
     * nor loop for ever; 1e15 bucket widths past the start is not a time. */
    if (!(s->width > 0) || (t - s->t0) / s->width > 1e15) return;
    long k = (long)((t - s->t0) / s->width);
    while (k >= DIAG_SERIES_CAP) {
        for (int i = 0; i < DIAG_SERIES_CAP / 2; i++) {
            s->sum[i] = s->sum[2 * i] + s->sum[2 * i + 1];
            s->cnt[i] = s->cnt[2 * i] + s->cnt[2 * i + 1];
        }
        for (int i = DIAG_SERIES_CAP / 2; i < DIAG_SERIES_CAP; i++)
            s->sum[i] = s->cnt[i] = 0;
        s->width *= 2;
        s->n = (s->n + 1) / 2;
        k = (long)((t - s->t0) / s->width);
    }
    s->sum[k] += v;
    s->cnt[k] += 1;
    if (k + 1 > s->n) s->n = (int)k + 1;
}

int dseries_value(const dseries *s, int k, double *t, double *v)
{
    if (k < 0 || k >= s->n || s->cnt[k] <= 0) return 0;
    *t = s->t0 + (k + 0.5) * s->width;
    *v = s->sum[k] / s->cnt[k];
    return 1;
}

/* ---- run.json / summary.json -------------------------------------------- */

/* Add the '+'-separated words of src to the '+'-joined list dst, each word
 * once: samples report combinations ("sw_power_cap+hw_slowdown") and the
 * list names each reason once, however it was combined. */
static void add_words(char *dst, size_t cap, const char *src)
{
    while (*src) {
        size_t n = strcspn(src, "+");
        int seen = 0;
        for (const char *p = dst; *p && !seen;) {
            size_t m = strcspn(p, "+");
            if (m == n && memcmp(p, src, n) == 0) seen = 1;
            p += m;
            if (*p == '+') p++;
        }
        size_t len = strlen(dst);
        if (n && !seen && len + n + 2 < cap) {
            if (len) dst[len++] = '+';
            memcpy(dst + len, src, n);
            dst[len + n] = '\0';
        }
        src += n;
        if (*src == '+') src++;
    }
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Whether an argument marks a Python run: argv[0] is python* or a launcher
 * of Python training (torchrun, accelerate, deepspeed, lightning), or any
 * argument is a script ending in .py (`env python3 x.py`, `uv run x.py`). */
static int is_python_arg(const char *a, int first)
{
    size_t n = strlen(a);
    if (n > 3 && strcmp(a + n - 3, ".py") == 0) return 1;
    if (!first) return 0;
    static const char *const launchers[] = {"torchrun", "accelerate", "deepspeed", "lightning"};
    const char *b = base_name(a);
    if (strncmp(b, "python", 6) == 0) return 1;
    for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++)
        if (strcmp(b, launchers[i]) == 0) return 1;
    return 0;
}

static void load_run_json(diag_run *r)
{
    const jr_node *root = r->run.root;
    r->cpus = diag_int(jr_pnum(root, "cpus"), INT_MIN, INT_MAX, 0);
    r->duration_s = jr_pnum(root, "duration_s");
    r->start_unix_s = jr_pnum(root, "start_unix_s");
    r->interval_s = jr_pnum(root, "interval_s");
    r->root_pid = diag_int(jr_pnum(root, "root_pid"), INT_MIN, INT_MAX, -1);
    const char *h = jr_pstr(root, "host");
    snprintf(r->host, sizeof(r->host), "%s", h ? h : "");
    const jr_node *cmd = jr_get(root, "command");
    size_t o = 0;
    r->command[0] = '\0';
    r->python = r->trainer = r->trainer_workers = 0;
    for (const jr_node *c = cmd && cmd->type == JR_ARR ? cmd->child : NULL; c; c = c->next) {
        const char *a = jr_str(c);
        if (!a) continue;
        if (is_python_arg(a, c == cmd->child)) r->python = 1;
        if (c == cmd->child) r->trainer = strcmp(base_name(a), "trainer") == 0;
        /* its loader threads are invisible in the process tree */
        if (r->trainer && strcmp(a, "--workers") == 0 && c->next && jr_str(c->next)) {
            char *end;
            long w = strtol(jr_str(c->next), &end, 10);
            if (*end == '\0' && w > 0 && w <= 256) r->trainer_workers = (int)w;
        }
        int w = snprintf(r->command + o, sizeof(r->command) - o, "%s%s", o ? " " : "", a);
        if (w < 0 || (size_t)w >= sizeof(r->command) - o) break;
        o += (size_t)w;
    }
    const jr_node *g = jr_get(root, "gpus");
    r->ngpu_run = g && g->type == JR_ARR ? g->count : 0;
    if (diag_grow((void **)&r->gpus, &r->capgpu, r->ngpu_run, sizeof(*r->gpus))) r->ngpu_run = 0;
    for (int i = 0; i < r->ngpu_run; i++) {
        const jr_node *gi = jr_at(g, i);
        dgpu *d = &r->gpus[i];
        double idx = jr_pnum(gi, "index");
        d->index = diag_int(idx, INT_MIN, INT_MAX, i);
        const char *nm = jr_pstr(gi, "name");
        snprintf(d->name, sizeof(d->name), "%s", nm ? nm : "");
        d->mem_total = jr_pnum(gi, "mem_total_bytes");
    }
    r->ngpu = r->ngpu_run;
    const char *nv = jr_pstr(root, "sources.nvml");
    snprintf(r->nvml_source, sizeof(r->nvml_source), "%s", nv ? nv : "");
}

/* pyprof/attach.json of `trainperf attach`: the training processes' stacks
 * summed (a damaged file leaves at.have 0). */
static void load_attach(diag_run *r)
{
    dattach *a = &r->at;
    a->steps = a->period_s = NAN;
    const char *ps = jr_pstr(r->run.root, "sources.pystacks");
    copy_str(a->pystacks, sizeof(a->pystacks), ps ? ps : "");
    char path[PATH_MAX + 32], e[200];
    snprintf(path, sizeof(path), "%s/pyprof/attach.json", r->dir);
    jr_doc d;
    if (jr_load_file(&d, path, 0, e, sizeof(e)) != 0) {
        copy_str(a->steps_why, sizeof(a->steps_why), "no Python stacks were sampled");
        return;
    }
    static const char *const ph[DA_N] = {"data", "forward", "backward", "optimizer", "other"};
    a->have = d.root->type == JR_OBJ;
    a->rate_hz = jr_pnum(d.root, "rate_hz");
    a->samples = jr_pnum(d.root, "training.samples");
    const jr_node *bp = jr_path(d.root, "training.by_phase");
    for (int k = 0; k < DA_N; k++) a->ph[k] = jr_pnum(bp, ph[k]);
    const jr_node *procs = jr_get(d.root, "processes");
    int first = 1;
    for (const jr_node *p = procs && procs->type == JR_ARR ? procs->child : NULL; p; p = p->next) {
        const char *role = jr_pstr(p, "role"), *err = jr_pstr(p, "error");
        if (err && !a->sampler_error[0]) copy_str(a->sampler_error, sizeof(a->sampler_error), err);
        if (role && strcmp(role, "not-python") != 0) {
            if (jr_pnum(p, "samples") > 0) a->python_procs++;
            else if (err) a->failed_procs++;
        }
        if (!role || strcmp(role, "training") != 0) continue;
        a->train_procs++;
        /* steps: the most of any training process (a data-parallel step is
         * one step of every rank, as global_steps), known only where every
         * one could tell its own */
        double n = jr_pnum(p, "steps.count"), per = jr_pnum(p, "steps.period_s");
        const char *why = jr_pstr(p, "steps.why_unknown");
        if (first) {
            a->steps = n;
            a->period_s = per;
            const jr_node *l = jr_at(jr_get(p, "lines_top"), 0);
            const char *fn = jr_pstr(l, "func"), *file = jr_pstr(l, "file"), *lp = jr_pstr(l, "phase");
            copy_str(a->top_func, sizeof(a->top_func), fn ? fn : "");
            copy_str(a->top_file, sizeof(a->top_file), file ? file : "");
            copy_str(a->top_phase, sizeof(a->top_phase), lp ? lp : "");
            a->top_line = diag_int(jr_pnum(l, "line"), 0, INT_MAX, 0);
            a->top_samples = jr_pnum(l, "samples");
        } else {
            a->steps = isfinite(a->steps) && isfinite(n) ? fmax(a->steps, n) : NAN;
        }
        if (why && !a->steps_why[0]) copy_str(a->steps_why, sizeof(a->steps_why), why);
        first = 0;
    }
    if (!a->train_procs)
        copy_str(a->steps_why, sizeof(a->steps_why),
                 "no training thread was sampled (no DataLoader, module forward, backward or "
                 "optimizer frame in the stacks)");
    jr_free(&d);
}

static void load_exit(diag_run *r, const jr_node *ex)
{
    if (!ex || ex->type != JR_OBJ) return;
    double c = jr_pnum(ex, "code"), s = jr_pnum(ex, "signal");
    r->exit_known = 1;
    r->exit_code = diag_int(c, INT_MIN, INT_MAX, -1);
    r->exit_signal = diag_int(s, INT_MIN, INT_MAX, -1);
}

/* ---- steps.csv ------------------------------------------------------------ */

static int rank_is(const drank *k, int rank, int pid, int tid)
{
    return rank >= 0 ? k->rank == rank : (k->rank < 0 && k->pid == pid && k->tid == tid);
}

static int rank_slot(diag_run *r, int rank, int pid, int tid)
{
    if (r->last_rank < r->nranks && rank_is(&r->ranks[r->last_rank], rank, pid, tid))
        return r->last_rank;
    for (int i = 0; i < r->nranks; i++)
        if (rank_is(&r->ranks[i], rank, pid, tid)) return r->last_rank = i;
    if (diag_grow((void **)&r->ranks, &r->capranks, r->nranks + 1, sizeof(*r->ranks))) return -1;
    drank *k = &r->ranks[r->nranks];
    memset(k, 0, sizeof(*k));
    k->rank = rank;
    k->pid = pid;
    k->tid = tid;
    k->node = r->cur_node;
    dseries_init(&k->s_step, r->s_step_rate.width > 0 ? r->s_step_rate.width : 1.0);
    r->last_rank = r->nranks;
    r->ranks_indexed = 0; /* appended out of order until diag_index_ranks */
    return r->nranks++;
}

/* The index of stream (pid, tid) in *s (n of them), added when new; last:
 * the previous row's (consecutive rows are often one stream's). */
static int stream_of(int (**s)[2], int *cap, int *n, int last, int pid, int tid)
{
    if (last < *n && (*s)[last][0] == pid && (*s)[last][1] == tid) return last;
    for (int i = 0; i < *n; i++)
        if ((*s)[i][0] == pid && (*s)[i][1] == tid) return i;
    if (diag_grow((void **)s, cap, *n + 1, sizeof(**s))) return last;
    (*s)[*n][0] = pid;
    (*s)[*n][1] = tid;
    return (*n)++;
}

static int load_steps(diag_run *r, const char *path, char *err, size_t errlen)
{
    csvr c;
    int rc = csvr_open(&c, path, err, errlen);
    if (rc == TPF_ENOENT) return 0;
    if (rc) return rc;
    r->have_steps = 1;
    int c_rank = csvr_col(&c, "rank"), c_pid = csvr_col(&c, "pid"), c_tid = csvr_col(&c, "tid");
    int c_step = csvr_col(&c, "step"), c_start = csvr_col(&c, "start_s");
    int c_dur = csvr_col(&c, "duration_ns"), c_int = csvr_col(&c, "interval_ns");
    int c_samples = csvr_col(&c, "samples"), c_tokens = csvr_col(&c, "tokens");
    int c_ph[PH_COUNT];
    for (int p = 0; p < PH_COUNT; p++) {
        char nm[32];
        snprintf(nm, sizeof(nm), "%s_ns", diag_phase_names[p]);
        c_ph[p] = csvr_col(&c, nm);
    }
    if (c_start < 0 || c_dur < 0) {
        msg(err, errlen, "%s: header lacks start_s/duration_ns: not a trainperf steps.csv", path);
        csvr_close(&c);
        return TPF_EFORMAT;
    }
    if (!r->cur_node) { /* later nodes add to node 0's figures */
        double width = r->duration_s > 0 ? r->duration_s / DIAG_SERIES_CAP : 1.0;
        if (width < 0.1) width = 0.1;
        dseries_init(&r->s_sample_rate, width);
        dseries_init(&r->s_step_rate, width);
        for (int p = 0; p < PH_COUNT; p++)
            dseries_init(&r->s_phase[p], width);
        r->first_end_s = r->last_end_s = r->first_start_s = NAN;
    }
    int (*streams)[2] = NULL, capstreams = 0, nstreams = 0, last_stream = 0;
    while ((rc = csvr_next(&c)) == 1) {
        double start, dur, iv, v;
        if (!csvr_num(&c, c_start, &start) || !csvr_num(&c, c_dur, &dur)) continue;
        start += r->cur_offset_s;
        if (!csvr_num(&c, c_int, &iv)) iv = dur;
        double rank = -1, pid = -1, tid = -1, stepno = -1;
        csvr_num(&c, c_rank, &rank);
        csvr_num(&c, c_pid, &pid);
        csvr_num(&c, c_tid, &tid);
        csvr_num(&c, c_step, &stepno);
        /* A hostile or damaged row must not make an undefined conversion:
         * times and counts out of any real range skip the row, ids out of
         * int range are unknown (fuzzed, tests/test_rundir_fuzz.py). */
        if (!(start > -1e9 && start < 1e9) || !(dur >= 0 && dur < 1e17) ||
            !(iv >= 0 && iv < 1e17))
            continue;
        if (!(rank >= -1 && rank <= INT_MAX)) rank = -1;
        if (!(pid >= -1 && pid <= INT_MAX)) pid = -1;
        if (!(tid >= -1 && tid <= INT_MAX)) tid = -1;
        if (!(stepno >= -1 && stepno < 1e18)) stepno = -1;
        double end = start + dur / 1e9;
        r->steps++;
        if (isnan(r->first_end_s) || end < r->first_end_s) r->first_end_s = end;
        if (isnan(r->last_end_s) || end > r->last_end_s) r->last_end_s = end;
        double begin = end - iv / 1e9;
        if (isnan(r->first_start_s) || begin < r->first_start_s) r->first_start_s = begin;
        r->sum_interval_ns += iv;
        r->sum_duration_ns += dur;
        double known = 0;
        for (int p = 0; p < PH_COUNT; p++) {
            if (p == PH_OTHER) continue;
            if (csvr_num(&c, c_ph[p], &v) && v > 0) {
                r->sum_phase_ns[p] += v;
                if (stepno != 0) r->warm_phase_ns[p] += v;
                known += v;
                dseries_add(&r->s_phase[p], end, v / 1e6);
            } else {
                dseries_add(&r->s_phase[p], end, 0);
            }
        }
        double other;
        if (!csvr_num(&c, c_ph[PH_OTHER], &other)) other = iv - known > 0 ? iv - known : 0;
        r->sum_phase_ns[PH_OTHER] += other;
        if (stepno != 0) r->warm_phase_ns[PH_OTHER] += other, r->warm_interval_ns += iv;
        dseries_add(&r->s_phase[PH_OTHER], end, other / 1e6);
        double sm = 0;
        if (csvr_num(&c, c_samples, &sm)) r->samples += sm;
        if (csvr_num(&c, c_tokens, &v)) r->tokens += v;
        dseries_add(&r->s_sample_rate, end, sm);
        dseries_add(&r->s_step_rate, end, 1);
        last_stream = stream_of(&streams, &capstreams, &nstreams, last_stream, (int)pid, (int)tid);
        /* The row through the collector's own aggregation: the report's
         * step figures are those summary.json has (one owner per figure). */
        agg_step s;
        memset(&s, 0, sizeof(s));
        s.rank = rank >= 0 ? (int)rank : -1;
        s.pid = (pid_t)pid;
        s.tid = (pid_t)tid;
        s.step = stepno >= 0 ? (uint64_t)stepno : 1; /* unknown: not a warm-up step */
        s.duration_ns = dur > 0 ? (uint64_t)dur : 0;
        s.interval_ns = iv > 0 ? (uint64_t)iv : 0;
        s.end_ns = u64_or_0(end * 1e9) ? u64_or_0(end * 1e9) : 1;
        for (int p = 0; p < AGG_NPHASES && p < PH_OTHER; p++)
            if (csvr_num(&c, c_ph[p], &v)) s.phase_ns[p] = u64_or_0(v);
        s.other_ns = u64_or_0(other);
        s.samples = u64_or_0(sm);
        if (csvr_num(&c, c_tokens, &v)) s.tokens = u64_or_0(v);
        figs_add(&r->sf, &s);
        /* the data-wait chart leaves out warm-up steps as the figures do */
        double data = 0;
        if (stepno != 0 && csvr_num(&c, c_ph[PH_DATA], &data)) dhist_add(&r->h_data, data / 1e6);
        /* evaluation and checkpointing are not training (figs_add leaves
         * them out of step time); the slowest steps feed cause matching */
        double evn = 0, ckn = 0;
        if (!csvr_num(&c, c_ph[PH_EVAL], &evn) || evn < 0) evn = 0;
        if (!csvr_num(&c, c_ph[PH_CHECKPOINT], &ckn) || ckn < 0) ckn = 0;
        if (stepno != 0) {
            double tok = 0;
            if (!csvr_num(&c, c_tokens, &tok)) tok = 0;
            double train = iv - evn - ckn > 0 ? iv - evn - ckn : 0;
            dc_step(&r->cause, (long long)stepno, begin, end, train, evn, ckn, data);
            dc_work(&r->cause, tok, sm, train);
        }
        /* the rank view's own extras (report_ranks.c): node, heatmap series */
        int k = rank_slot(r, (int)rank, (int)pid, (int)tid);
        /* its own time: the step less its data and comm waits (synchronous
         * training evens step times out; a straggler shows in its own time) */
        double cw = 0, own = iv - (data > 0 ? data : 0);
        if (csvr_num(&c, c_ph[PH_COMM], &cw) && cw > 0) own -= cw;
        if (k >= 0) dseries_add(&r->ranks[k].s_step, end, (own > 0 ? own : 0) / 1e6);
    }
    r->nstreams += nstreams;
    free(streams);
    csvr_close(&c);
    if (rc < 0) {
        msg(err, errlen, "%s: %s", path, tpf_strerror(rc));
        return rc;
    }
    return 0;
}

/* ---- metrics.csv ------------------------------------------------------------ */

static int gpu_metric_known(const char *name)
{
    for (size_t i = 0; i < metric_gpu_table_len; i++)
        if (strcmp(metric_gpu_table[i].name, name) == 0) return 1;
    return 0;
}

static int load_metrics(diag_run *r, const char *path, char *err, size_t errlen)
{
    csvr c;
    int rc = csvr_open(&c, path, err, errlen);
    if (rc == TPF_ENOENT) return 0;
    if (rc) return rc;
    r->have_metrics = 1;
    int c_t = csvr_col(&c, "t");
    if (c_t < 0) {
        msg(err, errlen, "%s: header lacks 't': not a trainperf metrics.csv", path);
        csvr_close(&c);
        return TPF_EFORMAT;
    }
    /* Columns by their metrics.csv header name (core/metrics.c's table);
     * the M_ names below say which is which, never a column number. */
    enum {
        M_CPU, M_IOWAIT, M_MEM_USED, M_MEM_AVAIL, M_MEM_TOTAL, M_SWAP, M_PSI_CPU, M_PSI_MEM,
        M_PSI_MEM_FULL, M_PSI_IO, M_PSI_IO_FULL, M_DISK_R, M_DISK_W, M_TREE_CPU, M_MAIN_CPU,
        M_TREE_RSS, M_TREE_PROCS, M_TREE_READ, M_TREE_WRITE, M_NET_RX, M_NET_TX, M_DATA_WAIT,
    };
    static const struct {
        const char *col;
        size_t off;
    } cols[] = {
        [M_CPU] = {"cpu_pct", offsetof(diag_run, cpu)},
        [M_IOWAIT] = {"cpu_iowait_pct", offsetof(diag_run, iowait)},
        [M_MEM_USED] = {"mem_used_bytes", offsetof(diag_run, mem_used)},
        [M_MEM_AVAIL] = {"mem_available_bytes", offsetof(diag_run, mem_avail)},
        [M_MEM_TOTAL] = {"mem_total_bytes", offsetof(diag_run, mem_total)},
        [M_SWAP] = {"swap_used_bytes", offsetof(diag_run, swap)},
        [M_PSI_CPU] = {"psi_cpu_some_pct", offsetof(diag_run, psi_cpu)},
        [M_PSI_MEM] = {"psi_mem_some_pct", offsetof(diag_run, psi_mem)},
        [M_PSI_MEM_FULL] = {"psi_mem_full_pct", offsetof(diag_run, psi_mem_full)},
        [M_PSI_IO] = {"psi_io_some_pct", offsetof(diag_run, psi_io)},
        [M_PSI_IO_FULL] = {"psi_io_full_pct", offsetof(diag_run, psi_io_full)},
        [M_DISK_R] = {"disk_read_bps", offsetof(diag_run, disk_r)},
        [M_DISK_W] = {"disk_write_bps", offsetof(diag_run, disk_w)},
        [M_TREE_CPU] = {"tree_cpu_pct", offsetof(diag_run, tree_cpu)},
        [M_MAIN_CPU] = {"main_cpu_pct", offsetof(diag_run, main_cpu)},
        [M_TREE_RSS] = {"tree_rss_bytes", offsetof(diag_run, tree_rss)},
        [M_TREE_PROCS] = {"tree_procs", offsetof(diag_run, tree_procs)},
        [M_TREE_READ] = {"tree_read_bps", offsetof(diag_run, tree_read)},
        [M_TREE_WRITE] = {"tree_write_bps", offsetof(diag_run, tree_write)},
        [M_NET_RX] = {"net_rx_bps", offsetof(diag_run, net_rx)},
        [M_NET_TX] = {"net_tx_bps", offsetof(diag_run, net_tx)},
        [M_DATA_WAIT] = {"data_wait_share", offsetof(diag_run, data_wait_share)},
    };
    enum { NC = sizeof(cols) / sizeof(cols[0]) };
    int idx[NC];
    for (int i = 0; i < NC; i++) {
        /* a name the collector's metric table lacks is this code's bug: a
         * renamed metric must not silently read as unknown */
        if (!metric_find(cols[i].col)) {
            msg(err, errlen, "report: metric %s is not in the metric table", cols[i].col);
            csvr_close(&c);
            return TPF_EINVAL;
        }
        idx[i] = csvr_col(&c, cols[i].col);
    }
    /* run directories written by earlier builds have the data-wait share
     * as data_wait_pct (0-100) */
    int dw_pct = idx[M_DATA_WAIT] < 0 ? csvr_col(&c, "data_wait_pct") : -1;
    if (dw_pct >= 0) idx[M_DATA_WAIT] = dw_pct;
    /* per-GPU columns (core/metrics.c metric_gpu_table names): gpu<N>_util_pct
     * defines which GPUs exist; the dstat order below is G_UTIL .. G_ENERGY */
    enum { G_UTIL, G_MEM_UTIL, G_MEM_USED, G_TEMP, G_POWER, G_ENERGY, G_THROTTLE, G_MEM_TOTAL };
    int gcol[DIAG_GPU_INDEX_MAX][8];
    int gslot[DIAG_GPU_INDEX_MAX];
    int ng = 0;
    for (int n = 0; n < DIAG_GPU_INDEX_MAX; n++) {
        char nm[48];
        snprintf(nm, sizeof(nm), "gpu%d_util_pct", n);
        int cu = csvr_col(&c, nm);
        if (cu < 0) continue;
        static const char *const gc[8] = {
            [G_UTIL] = "util_pct",   [G_MEM_UTIL] = "mem_util_pct", [G_MEM_USED] = "mem_used_bytes",
            [G_TEMP] = "temp_c",     [G_POWER] = "power_w",         [G_ENERGY] = "energy_j",
            [G_THROTTLE] = "throttle", [G_MEM_TOTAL] = "mem_total_bytes"};
        for (int j = 0; j < 8; j++) {
            if (!gpu_metric_known(gc[j])) {
                msg(err, errlen, "report: GPU metric %s is not in the metric table", gc[j]);
                csvr_close(&c);
                return TPF_EINVAL;
            }
            snprintf(nm, sizeof(nm), "gpu%d_%s", n, gc[j]);
            gcol[ng][j] = csvr_col(&c, nm);
        }
        /* match run.json's GPU by index, else append */
        int slot = -1;
        for (int i = 0; i < r->ngpu; i++)
            if (r->gpus[i].index == n) slot = i;
        if (slot < 0 && !diag_grow((void **)&r->gpus, &r->capgpu, r->ngpu + 1, sizeof(*r->gpus))) {
            slot = r->ngpu++;
            r->gpus[slot].index = n;
            r->gpus[slot].mem_total = NAN;
        }
        gslot[ng++] = slot;
    }
    double width = r->duration_s > 0 ? r->duration_s / DIAG_SERIES_CAP : 1.0;
    if (width < 0.1) width = 0.1;
    dseries *all[] = {
        &r->s_cpu,      &r->s_tree_cpu,      &r->s_main_cpu,          &r->s_mem_used_pct,
        &r->s_tree_rss, &r->s_data_wait_share, &r->s_metric_sample_rate};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        dseries_init(all[i], width);
    for (int i = 0; i < r->ngpu; i++) {
        dseries_init(&r->gpus[i].s_util, width);
        dseries_init(&r->gpus[i].s_mem, width);
    }
    int c_sr = csvr_col(&c, "sample_rate");
    static const char *const ccols[] = {"tree_runq_pct", "tree_runnable", "cpus_usable",
                                        "cg_throttled_pct", "tree_rss_bytes"};
    int cidx[5];
    for (int i = 0; i < 5; i++)
        cidx[i] = csvr_col(&c, ccols[i]);
    r->cause.rss_warm = NAN;
    r->swap_first = NAN;
    while ((rc = csvr_next(&c)) == 1) {
        double t, v;
        if (!csvr_num(&c, c_t, &t)) continue;
        r->msamples++;
        double val[NC];
        int ok[NC];
        for (int i = 0; i < NC; i++)
            ok[i] = csvr_num(&c, idx[i], &val[i]);
        if (dw_pct >= 0) val[M_DATA_WAIT] /= 100;
        /* a sample taken after the whole tree exited describes no process:
         * its zeros would pull the tree's means below the main process's */
        if (ok[M_TREE_PROCS] && val[M_TREE_PROCS] == 0)
            ok[M_TREE_CPU] = ok[M_TREE_RSS] = ok[M_TREE_READ] = ok[M_TREE_WRITE] = 0;
        for (int i = 0; i < NC; i++)
            if (ok[i]) dstat_add((dstat *)((char *)r + cols[i].off), val[i]);
        if (ok[M_SWAP] && isnan(r->swap_first)) r->swap_first = val[M_SWAP];
        if (ok[M_CPU]) dseries_add(&r->s_cpu, t, val[M_CPU]);
        if (ok[M_TREE_CPU]) dseries_add(&r->s_tree_cpu, t, val[M_TREE_CPU]);
        if (ok[M_MAIN_CPU]) dseries_add(&r->s_main_cpu, t, val[M_MAIN_CPU]);
        if (ok[M_TREE_RSS]) dseries_add(&r->s_tree_rss, t, val[M_TREE_RSS]);
        if (ok[M_DATA_WAIT]) dseries_add(&r->s_data_wait_share, t, val[M_DATA_WAIT]);
        if (ok[M_MEM_USED] && ok[M_MEM_TOTAL] && val[M_MEM_TOTAL] > 0)
            dseries_add(&r->s_mem_used_pct, t, 100 * val[M_MEM_USED] / val[M_MEM_TOTAL]);
        if (csvr_num(&c, c_sr, &v)) dseries_add(&r->s_metric_sample_rate, t, v);
        {
            double cv[5];
            int cok[5];
            for (int i = 0; i < 5; i++)
                cok[i] = csvr_num(&c, cidx[i], &cv[i]);
            if (ok[16] && val[16] == 0) cok[4] = 0;
            dc_metric(&r->cause, r->first_end_s, r->last_end_s, t, cv, cok);
        }
        for (int g = 0; g < ng; g++) {
            if (gslot[g] < 0) continue;
            dgpu *d = &r->gpus[gslot[g]];
            dstat *gs[6] = {&d->util, &d->mem_util, &d->mem_used, &d->temp, &d->power, &d->energy};
            for (int j = 0; j < 6; j++)
                if (csvr_num(&c, gcol[g][j], &v)) dstat_add(gs[j], v);
            if (csvr_num(&c, gcol[g][G_UTIL], &v)) {
                dseries_add(&d->s_util, t, v);
                d->samples++;
                if (t >= r->first_start_s && t <= r->last_end_s) dstat_add(&d->util_train, v);
            }
            double tot = d->mem_total;
            if (csvr_num(&c, gcol[g][G_MEM_TOTAL], &v)) tot = d->mem_total = v;
            if (csvr_num(&c, gcol[g][G_MEM_USED], &v) && tot > 0)
                dseries_add(&d->s_mem, t, 100 * v / tot);
            const char *th = csvr_str(&c, gcol[g][G_THROTTLE]);
            if (*th) {
                d->throttle_samples++;
                /* idle and application-clock settings are not slowdowns */
                if (strstr(th, "thermal") || strstr(th, "hw") || strstr(th, "slowdown") ||
                    strstr(th, "brake") || strstr(th, "power_cap"))
                    d->slowdown_samples++;
                add_words(d->throttle_words, sizeof(d->throttle_words), th);
            }
        }
    }
    csvr_close(&c);
    if (rc < 0) {
        msg(err, errlen, "%s: %s", path, tpf_strerror(rc));
        return rc;
    }
    return 0;
}

/* ---- procs.csv ------------------------------------------------------------ */

/* One sample of a non-root process; loader: named as a DataLoader worker
 * (a spawned one is named so only once it has imported torch). */
static void other_proc(diag_run *r, int pid, const char *name, double cpu, int loader)
{
    int i = 0;
    while (i < r->noproc && r->oproc[i].pid != pid)
        i++;
    if (i == r->noproc) {
        if (diag_grow((void **)&r->oproc, &r->capoproc, r->noproc + 1, sizeof(*r->oproc))) return;
        r->noproc++;
        r->oproc[i].pid = pid;
        snprintf(r->oproc[i].name, sizeof(r->oproc[i].name), "%s", name ? name : "");
        r->oproc[i].cpu_sum = r->oproc[i].n = 0;
        r->oproc[i].loader = 0;
    }
    if (loader) r->oproc[i].loader = 1;
    r->oproc[i].cpu_sum += cpu;
    r->oproc[i].n++;
}

static int load_procs(diag_run *r, const char *path, char *err, size_t errlen)
{
    csvr c;
    int rc = csvr_open(&c, path, err, errlen);
    if (rc == TPF_ENOENT) return 0;
    if (rc) return rc;
    r->have_procs = 1;
    int c_t = csvr_col(&c, "t"), c_pid = csvr_col(&c, "pid"), c_cpu = csvr_col(&c, "cpu_pct");
    int c_rq = csvr_col(&c, "runq_pct"), c_name = csvr_col(&c, "name");
    int *pids = malloc(MAX_PIDS * sizeof(int));
    if (!pids) {
        csvr_close(&c);
        return TPF_ENOMEM;
    }
    int npids = 0;
    double cur_t = NAN, cur_n = 0;
    int root = r->root_pid;
    while ((rc = csvr_next(&c)) == 1) {
        double t, pid, v;
        if (!csvr_num(&c, c_t, &t) || !csvr_num(&c, c_pid, &pid)) continue;
        if (!(pid >= 0 && pid <= INT_MAX)) continue; /* not a pid */
        /* no run.json: the first process listed stands for the root */
        if (root < 0) root = (int)pid;
        if (t != cur_t) {
            if (cur_n > r->max_procs) r->max_procs = cur_n;
            cur_t = t;
            cur_n = 0;
        }
        cur_n++;
        if ((int)pid == root) continue;
        int seen = 0;
        for (int i = 0; i < npids; i++)
            seen |= pids[i] == (int)pid;
        if (!seen && npids < MAX_PIDS) pids[npids++] = (int)pid;
        if (csvr_num(&c, c_cpu, &v)) {
            dstat_add(&r->worker_cpu, v);
            double q;
            const char *nm = c_name >= 0 ? csvr_str(&c, c_name) : NULL;
            int loader = nm && strncmp(nm, "pt_data_worker", 14) == 0;
            if (c_rq >= 0 && csvr_num(&c, c_rq, &q) && q >= 0) {
                r->nonroot_runq += q, r->nonroot_cpu += v, r->nonroot_n++;
                if (loader) r->ldr_runq += q, r->ldr_cpu += v, r->ldr_n++;
            }
            if (v >= 0) other_proc(r, (int)pid, nm, v, loader);
        }
    }
    if (cur_n > r->max_procs) r->max_procs = cur_n;
    r->nworkers = npids;
    free(pids);
    csvr_close(&c);
    if (rc < 0) {
        msg(err, errlen, "%s: %s", path, tpf_strerror(rc));
        return rc;
    }
    return 0;
}

/* ---- alerts.jsonl ----------------------------------------------------------- */

static int load_alerts(diag_run *r, const char *path, char *err, size_t errlen)
{
    FILE *f = afile_fopen_read(path);
    if (!f) {
        if (errno == ENOENT) return 0;
        msg(err, errlen, "%s: %s", path, afile_read_why(errno));
        return TPF_EIO;
    }
    r->have_alerts = 1;
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        size_t l = strlen(line);
        if (l == sizeof(line) - 1 && line[l - 1] != '\n') {
            /* skip the rest of an over-long line: one bad alert is not a bad run */
            int ch;
            while ((ch = getc(f)) != EOF && ch != '\n') {
            }
            continue;
        }
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r' || line[l - 1] == ' '))
            line[--l] = 0;
        if (!l) continue;
        jr_doc d;
        char e[128];
        if (jr_parse(&d, line, l, 256, e, sizeof(e)) != 0) {
            /* a crash can leave a torn last line; anything else is damage */
            if (!feof(f) && getc(f) != EOF) {
                msg(err, errlen, "%s:%d: %s", path, lineno, e);
                fclose(f);
                return TPF_EFORMAT;
            }
            break;
        }
        const char *st = jr_pstr(d.root, "state");
        if (st && strcmp(st, "fired") == 0) r->nalerts_fired++;
        if (r->nalerts == DIAG_MAX_ALERTS) r->nalerts_dropped++; /* said in ALERTS */
        if (r->nalerts < DIAG_MAX_ALERTS) {
            dalert *a = &r->alerts[r->nalerts++];
            a->t = jr_pnum(d.root, "t");
            const char *s;
            snprintf(a->rule, sizeof(a->rule), "%s", (s = jr_pstr(d.root, "rule")) ? s : "?");
            snprintf(a->state, sizeof(a->state), "%s", st ? st : "?");
            snprintf(a->severity, sizeof(a->severity), "%s",
                     (s = jr_pstr(d.root, "severity")) ? s : "warning");
            snprintf(a->message, sizeof(a->message), "%s",
                     (s = jr_pstr(d.root, "message")) ? s : "");
        }
        jr_free(&d);
    }
    fclose(f);
    return 0;
}

/* ---- the whole directory ------------------------------------------------------ */

void diag_free(diag_run *r)
{
    if (!r) return;
    jr_free(&r->run);
    jr_free(&r->summary);
    figs_free(&r->sf);
    free(r->gpus);
    free(r->oproc);
    free(r->ranks);
    free(r->nodes);
    free(r);
}

static int load_dir(const char *run_dir, int node_only, diag_run **out, char *err,
                    size_t errlen);

int diag_load(const char *run_dir, diag_run **out, char *err, size_t errlen)
{
    return load_dir(run_dir, 0, out, err, errlen);
}

int diag_load_node(const char *run_dir, diag_run **out, char *err, size_t errlen)
{
    return load_dir(run_dir, 1, out, err, errlen);
}

static int load_dir(const char *run_dir, int node_only, diag_run **out, char *err,
                    size_t errlen)
{
    char path[PATH_MAX + 32], e[400];
    *out = NULL;
    if (err && errlen) err[0] = '\0';
    struct stat st;
    if (!run_dir || stat(run_dir, &st) != 0) {
        msg(err, errlen, "%s: no such run directory", run_dir ? run_dir : "(null)");
        return TPF_ENOENT;
    }
    if (!S_ISDIR(st.st_mode)) {
        msg(err, errlen, "%s: not a directory (give the run directory)", run_dir);
        return TPF_ENOENT;
    }
    diag_run *r = calloc(1, sizeof(*r));
    if (!r) return TPF_ENOMEM;
    snprintf(r->dir, sizeof(r->dir), "%s", run_dir);
    size_t dl = strlen(r->dir);
    while (dl > 1 && r->dir[dl - 1] == '/')
        r->dir[--dl] = '\0';
    /* the run's own name: through a link (trainperf-runs/latest) or ".", the
     * directory it is */
    char *real = realpath(r->dir, NULL);
    const char *named = real ? real : r->dir;
    const char *base = strrchr(named, '/');
    copy_str(r->name, sizeof(r->name), base && base[1] ? base + 1 : named);
    free(real);
    r->exit_code = r->exit_signal = -1;
    r->root_pid = -1;
    r->duration_s = r->start_unix_s = r->interval_s = NAN;
    r->events_dropped = r->trace_events = NAN;
    figs_init(&r->sf);
    r->sf.max_groups = 0; /* a report's ranks: as many as the job has */

    int rc;
    snprintf(path, sizeof(path), "%s/run.json", r->dir);
    rc = jr_load_file(&r->run, path, 0, e, sizeof(e));
    if (rc == 0) {
        r->have_run = 1;
        if (r->run.root->type != JR_OBJ) {
            msg(err, errlen, "%s: not a JSON object", path);
            diag_free(r);
            return TPF_EFORMAT;
        }
        load_run_json(r);
        load_exit(r, jr_get(r->run.root, "exit"));
        const char *mode = jr_pstr(r->run.root, "mode");
        r->attached = mode && strcmp(mode, "attached") == 0;
        if (r->attached) load_attach(r);
    } else if (rc != TPF_ENOENT) {
        msg(err, errlen, "damaged run directory: %s", e);
        diag_free(r);
        return TPF_EFORMAT;
    }
    snprintf(path, sizeof(path), "%s/summary.json", r->dir);
    rc = jr_load_file(&r->summary, path, 0, e, sizeof(e));
    if (rc == 0 && r->summary.root->type == JR_OBJ) {
        r->have_summary = 1;
        if (!r->exit_known) load_exit(r, jr_get(r->summary.root, "exit"));
        if (isnan(r->duration_s)) r->duration_s = jr_pnum(r->summary.root, "duration_s");
        r->events_dropped = jr_pnum(r->summary.root, "steps.events_dropped");
        r->noroom_procs = jr_pnum(r->summary.root, "steps.no_room.processes");
        r->noroom_events = jr_pnum(r->summary.root, "steps.no_room.events_dropped");
        r->trace_events = jr_pnum(r->summary.root, "trace.events_written");
        r->lost_steps = jr_pnum(r->summary.root, "io.lost.steps");
        r->lost_trace = jr_pnum(r->summary.root, "io.lost.trace_events");
        r->lost_rows = jr_pnum(r->summary.root, "io.lost.metrics");
        const char *ioe = jr_pstr(r->summary.root, "io.error");
        copy_str(r->io_error, sizeof(r->io_error), ioe ? ioe : "");
        double td = jr_pnum(r->summary.root, "trace.events_dropped");
        if (!isnan(td)) r->events_dropped = (isnan(r->events_dropped) ? 0 : r->events_dropped) + td;
    } else if (rc == 0) {
        jr_free(&r->summary);
        msg(err, errlen, "damaged run directory: %s: not a JSON object", path);
        diag_free(r);
        return TPF_EFORMAT;
    } else if (rc != TPF_ENOENT) {
        msg(err, errlen, "damaged run directory: %s", e);
        diag_free(r);
        return TPF_EFORMAT;
    }
    snprintf(path, sizeof(path), "%s/recovered.json", r->dir);
    r->recovered = access(path, F_OK) == 0; /* written by a recovery (record/recover.c) */
    snprintf(path, sizeof(path), "%s/steps.csv", r->dir);
    if (node_only) /* the job's loader reads it into the job's run */
        r->have_steps = access(path, F_OK) == 0;
    else if ((rc = load_steps(r, path, e, sizeof(e))) != 0)
        goto damaged;
    snprintf(path, sizeof(path), "%s/metrics.csv", r->dir);
    if ((rc = load_metrics(r, path, e, sizeof(e))) != 0) goto damaged;
    snprintf(path, sizeof(path), "%s/procs.csv", r->dir);
    if ((rc = load_procs(r, path, e, sizeof(e))) != 0) goto damaged;
    snprintf(path, sizeof(path), "%s/alerts.jsonl", r->dir);
    if ((rc = load_alerts(r, path, e, sizeof(e))) != 0) goto damaged;
    if (!r->have_run && !r->have_steps && !r->have_metrics && !r->have_summary) {
        msg(err, errlen,
            "%s: not a trainperf run directory (no run.json, steps.csv or metrics.csv)", run_dir);
        diag_free(r);
        return TPF_ENOENT;
    }
    if (isnan(r->duration_s) && r->have_steps && !isnan(r->last_end_s))
        r->duration_s = r->last_end_s;
    double t0 = r->have_run ? jr_pnum(r->run.root, "start_mono_ns") / 1e9 : NAN;
    if (!node_only) {
        dc_load_pyprof(&r->cause, r->dir, isnan(t0) ? 0 : t0);
        lg_load(&r->gs, r->have_summary ? r->summary.root : NULL, r->dir);
        rr_load_comm(r, r->dir);
        rr_load_flops(r, r->dir);
    }
    unctrl_run(r);
    diag_index_ranks(r);
    *out = r;
    return 0;
damaged:
    msg(err, errlen, "damaged run directory: %s", e);
    diag_free(r);
    return rc == TPF_ENOMEM ? rc : TPF_EFORMAT;
}

/* rank order, rank-less entries last (in pid, tid order) */
static int rank_order(const void *a, const void *b)
{
    const drank *x = a, *y = b;
    unsigned rx = (unsigned)x->rank, ry = (unsigned)y->rank; /* -1 sorts last */
    if (rx != ry) return (rx > ry) - (rx < ry);
    if (x->pid != y->pid) return (x->pid > y->pid) - (x->pid < y->pid);
    return (x->tid > y->tid) - (x->tid < y->tid);
}

void diag_index_ranks(diag_run *r)
{
    if (r->nranks > 1) qsort(r->ranks, (size_t)r->nranks, sizeof(*r->ranks), rank_order);
    r->last_rank = 0;
    r->ranks_indexed = 1;
    for (int i = 0; i < r->nranks; i++) r->ranks[i].group = -1;
    for (int g = 0; g < r->sf.ngroups; g++) {
        drank *k = r->sf.groups[g]->rank >= 0
                       ? (drank *)diag_find_rank(r, r->sf.groups[g]->rank)
                       : NULL;
        if (k) k->group = g;
    }
}

const drank *diag_find_rank(const diag_run *r, int rank)
{
    if (rank < 0 || !r->ranks_indexed) { /* rank-less entries: the first (sorted last) */
        for (int i = 0; i < r->nranks; i++)
            if (r->ranks[i].rank == rank) return &r->ranks[i];
        return NULL;
    }
    int lo = 0, hi = r->nranks - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        unsigned m = (unsigned)r->ranks[mid].rank;
        if (m == (unsigned)rank) return &r->ranks[mid];
        if (m < (unsigned)rank)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

const agg_group *diag_rank_group(const diag_run *r, int rank)
{
    const drank *k = diag_find_rank(r, rank);
    if (rank >= 0 && k && r->ranks_indexed) return k->group >= 0 ? r->sf.groups[k->group] : NULL;
    for (int i = 0; i < r->sf.ngroups; i++)
        if (r->sf.groups[i]->rank == rank) return r->sf.groups[i];
    return NULL;
}

int diag_gpus_listed(const diag_run *r)
{
    return r->all_ranks || r->ngpu <= DIAG_LIST_GPUS ? r->ngpu : DIAG_LIST_GPUS;
}

int diag_load_node_steps(diag_run *r, const char *run_dir, double offset_s, char *err,
                         size_t errlen)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/steps.csv", run_dir);
    r->cur_offset_s = offset_s;
    return load_steps(r, path, err, errlen);
}

/* ---- headline figures -------------------------------------------------------- */

static double mean_or_nan(const dstat *s)
{
    return s->n > 0 ? s->sum / s->n : NAN;
}
static double max_or_nan(const dstat *s)
{
    return s->n > 0 ? s->max : NAN;
}
static double min_or_nan(const dstat *s)
{
    return s->n > 0 ? s->min : NAN;
}

void diag_figures(const diag_run *r, dfig *f)
{
    f->duration_s = r->duration_s;
    f->steps = r->have_steps ? rr_global_steps(r) : NAN;
    figs_headline(&r->sf, &f->v);
    const figs_view v = f->v;
    f->steps_per_s = v.steps_per_s;
    if (r->attached) {
        /* no hook recorded steps: those the stacks told, or unknown (never 0) */
        f->steps = r->at.steps;
        f->steps_per_s = isfinite(r->at.period_s) && r->at.period_s > 0 ? 1 / r->at.period_s : NAN;
    }
    f->samples_per_s = v.samples_per_s;
    f->tokens_per_s = v.tokens_per_s;
    f->step_p50 = v.step_p50_ms;
    f->step_p95 = v.step_p95_ms;
    f->step_p99 = v.step_p99_ms;
    f->step_mean = v.step_mean_ms;
    f->step_max = v.step_max_ms;
    f->step_cv = v.step_cv;
    f->data_p50 = v.data_wait_p50_ms;
    f->data_p95 = v.data_wait_p95_ms;
    f->data_p99 = v.data_wait_p99_ms;
    f->data_mean = v.data_wait_mean_ms;
    f->data_max = v.data_wait_max_ms;
    for (int p = 0; p < PH_COUNT; p++)
        f->share[p] = r->sum_interval_ns > 0 ? r->sum_phase_ns[p] / r->sum_interval_ns : NAN;
    f->data_share = f->share[PH_DATA];
    f->cpu_mean = mean_or_nan(&r->cpu);
    f->cpu_max = max_or_nan(&r->cpu);
    f->tree_cpu_mean = mean_or_nan(&r->tree_cpu);
    f->tree_cpu_max = max_or_nan(&r->tree_cpu);
    f->main_cpu_mean = mean_or_nan(&r->main_cpu);
    f->main_cpu_max = max_or_nan(&r->main_cpu);
    f->rss_mean = mean_or_nan(&r->tree_rss);
    f->rss_max = max_or_nan(&r->tree_rss);
    f->mem_avail_min = min_or_nan(&r->mem_avail);
    f->mem_total = max_or_nan(&r->mem_total);
    f->swap_max = max_or_nan(&r->swap);
    f->iowait_mean = mean_or_nan(&r->iowait);
    f->psi_cpu = mean_or_nan(&r->psi_cpu);
    f->psi_mem = mean_or_nan(&r->psi_mem);
    f->psi_io = mean_or_nan(&r->psi_io);
    f->disk_read = mean_or_nan(&r->disk_r);
    f->disk_write = mean_or_nan(&r->disk_w);
    f->procs_max = r->have_procs ? r->max_procs : max_or_nan(&r->tree_procs);
    double su = 0, pw = 0;
    int nu = 0, np = 0;
    f->gpu_mem_max = f->gpu_temp_max = NAN;
    for (int i = 0; i < r->ngpu; i++) {
        const dgpu *g = &r->gpus[i];
        if (g->util.n) su += mean_or_nan(&g->util), nu++;
        if (g->power.n) pw += mean_or_nan(&g->power), np++;
        if (g->mem_used.n && !(g->mem_used.max <= f->gpu_mem_max)) f->gpu_mem_max = g->mem_used.max;
        if (g->temp.n && !(g->temp.max <= f->gpu_temp_max)) f->gpu_temp_max = g->temp.max;
    }
    f->gpu_util_mean = nu ? su / nu : NAN;
    f->gpu_power_mean = np ? pw : NAN;
}

/* ---- formatting ------------------------------------------------------------- */

const char *diag_fmt_dur(char *o, size_t n, double s)
{
    if (!isfinite(s))
        msg(o, n, "?");
    else if (s >= 3600 * 1e6)
        msg(o, n, "%.3g h", s / 3600); /* no int holds it: not a real run */
    else if (s >= 3600)
        msg(o, n, "%dh %02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else if (s >= 60)
        msg(o, n, "%dm %02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        msg(o, n, "%.1f s", s);
    return o;
}

const char *diag_fmt_num(char *o, size_t n, const char *f, double v)
{
    if (!isfinite(v)) {
        msg(o, n, "?");
        return o;
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(o, n, f, v);
#pragma GCC diagnostic pop
    return o;
}

const char *diag_fmt_exit(const diag_run *r, char *o, size_t n)
{
    static const char *const names[] = {
        NULL,     "SIGHUP",  "SIGINT",  "SIGQUIT", "SIGILL",  "SIGTRAP", "SIGABRT", "SIGBUS",
        "SIGFPE", "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM"};
    if (!r->exit_known && r->attached)
        msg(o, n, "unknown (attached: the process is not trainperf's)");
    else if (!r->exit_known)
        msg(o, n, "unknown");
    else if (r->exit_signal > 0)
        msg(o, n, "signal %d%s%s%s", r->exit_signal, r->exit_signal < 16 ? " (" : "",
            r->exit_signal < 16 ? names[r->exit_signal] : "", r->exit_signal < 16 ? ")" : "");
    else if (r->exit_code >= 0)
        msg(o, n, "%d", r->exit_code);
    else
        msg(o, n, "unknown");
    return o;
}
