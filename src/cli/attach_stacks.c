/* py-spy driven from outside for `trainperf attach` (see attach_stacks.h). */
#include "cli/attach_stacks.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trainperf.h"
#include "util/afile.h"
#include "util/buf.h"
#include "util/jsonr.h"
#include "util/jsonw.h"
#include "watch/hangdump.h"

#define AS_MAX_PROCS 256
#define AS_MAX_THREADS 64
#define AS_MAX_STACKS 5000    /* distinct stacks kept per thread, as the hook keeps */
#define AS_MAX_LINES 512      /* distinct user lines kept per thread */
#define AS_MAX_IVL 4096       /* optimizer step intervals kept per thread */
#define AS_MAX_FAILS 3        /* py-spy starts that failed before a process is given up */
#define AS_CHUNK_S 10.0       /* one py-spy's span: it keeps every sample in memory */
#define AS_CHUNK_MAX (256u << 20)
#define AS_CHUNK_NODES ((size_t)6 << 20)
#define AS_STOP_WAIT_S 5.0
#define AS_TREE_MAX 4096
#define AS_OUT_MAX (64u << 20)
/* A steady period. Intervals are counted in py-spy's samples, and py-spy's
 * samples are not evenly spaced even on an idle machine: a 0.25 s sleep in
 * step() was seen for 2 to 18 samples at 50 a second, and a steady 0.5 s step
 * for 0.6x to 1.75x the median interval. So: this share of the intervals in
 * [AS_STEADY_LO, AS_STEADY_HI) times the median, where a step that fell
 * between samples makes one of about 2x; the mean no more than AS_STEADY_MEAN
 * times the median (the steps the span holds at the median period, against
 * those entered); and every step() seen for AS_OPT_MIN_RUN samples in a row.
 * Measured on 60 s of py-spy over a steady loop, idle and with three burners
 * on two cores, in 9 s windows: no healthy window is taken for unsteady (the
 * old +-50% band took 10 of 102), and with one step in six erased 69-77 of
 * 102 are. */
#define AS_STEADY_SHARE 0.90
#define AS_STEADY_LO 0.50
#define AS_STEADY_HI 1.75
#define AS_STEADY_MEAN 1.10
#define AS_STEADY_MIN_IVL 4
#define AS_OPT_MIN_RUN 2

enum { AP_DATA, AP_FORWARD, AP_BACKWARD, AP_OPTIMIZER, AP_OTHER, AP_N };
static const char *const ph_name[AP_N] = {"data", "forward", "backward", "optimizer", "other"};

/* a capped map of strings to counts (open addressing) */
typedef struct as_map {
    char **key;
    uint64_t *n;
    unsigned char *ph;
    size_t cap, len, max;
    uint64_t truncated;
} as_map;

typedef struct as_thread {
    unsigned long long tid;
    char name[64];
    uint64_t samples, ph[AP_N];
    uint64_t opt_entries, opt_samples;
    int min_run; /* the fewest samples in a row one step() call was seen; 0 none yet */
    int worker; /* a DataLoader worker's loop was sampled */
    int nivl;
    double *ivl;
    as_map stacks, lines;
} as_thread;

typedef struct as_proc {
    pid_t pid, ppid;
    char comm[32];
    char exe[256];
    int python, gone, fails;
    char err[160];
    pid_t spy, old;       /* the sampler now, and the one being stopped */
    int chunk, old_chunk;
    double spy_t0;
    unsigned chunks_ok, chunks_lost;
    int nth;
    as_thread *th[AS_MAX_THREADS];
} as_proc;

struct astk {
    char run_dir[PATH_MAX - 256]; /* room for the names under it */
    pid_t root;
    double rate, chunk_s;
    int nproc;
    as_proc *p[AS_MAX_PROCS];
    int dropped_procs;
    int stopping; /* astk_finish: a sampler stopped before its first sample is no failure */
    char version[64];
};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the capped map ---- */

static uint64_t hash_str(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int map_grow(as_map *m)
{
    size_t nc = m->cap ? m->cap * 2 : 64;
    char **k = calloc(nc, sizeof(*k));
    uint64_t *n = calloc(nc, sizeof(*n));
    unsigned char *ph = calloc(nc, 1);
    if (!k || !n || !ph) {
        free(k);
        free(n);
        free(ph);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->key[i]) continue;
        size_t j = hash_str(m->key[i], strlen(m->key[i])) & (nc - 1);
        while (k[j]) j = (j + 1) & (nc - 1);
        k[j] = m->key[i];
        n[j] = m->n[i];
        ph[j] = m->ph[i];
    }
    free(m->key);
    free(m->n);
    free(m->ph);
    m->key = k;
    m->n = n;
    m->ph = ph;
    m->cap = nc;
    return 0;
}

/* Count key (n bytes) once more; past max distinct keys it is counted as
 * truncated. */
static void map_add(as_map *m, const char *key, size_t len, int phase)
{
    if ((m->len + 1) * 2 > m->cap && m->len < m->max && map_grow(m) != 0) {
        m->truncated++;
        return;
    }
    if (!m->cap) {
        m->truncated++;
        return;
    }
    size_t j = hash_str(key, len) & (m->cap - 1);
    while (m->key[j]) {
        if (strlen(m->key[j]) == len && memcmp(m->key[j], key, len) == 0) {
            m->n[j]++;
            return;
        }
        j = (j + 1) & (m->cap - 1);
    }
    if (m->len >= m->max || (m->len + 1) * 2 > m->cap) {
        m->truncated++;
        return;
    }
    m->key[j] = strndup(key, len);
    if (!m->key[j]) {
        m->truncated++;
        return;
    }
    m->n[j] = 1;
    m->ph[j] = (unsigned char)phase;
    m->len++;
}

static void map_free(as_map *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->key[i]);
    free(m->key);
    free(m->n);
    free(m->ph);
    memset(m, 0, sizeof(*m));
}

/* ---- processes and threads ---- */

static as_thread *thread_of(as_proc *p, unsigned long long tid, const char *name)
{
    for (int i = 0; i < p->nth; i++)
        if (p->th[i]->tid == tid) return p->th[i];
    if (p->nth >= AS_MAX_THREADS) return NULL;
    as_thread *t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->ivl = calloc(AS_MAX_IVL, sizeof(double));
    if (!t->ivl) {
        free(t);
        return NULL;
    }
    t->tid = tid;
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->stacks.max = AS_MAX_STACKS;
    t->lines.max = AS_MAX_LINES;
    p->th[p->nth++] = t;
    return t;
}

static uint64_t train_samples(const as_thread *t)
{
    return t->ph[AP_DATA] + t->ph[AP_FORWARD] + t->ph[AP_BACKWARD] + t->ph[AP_OPTIMIZER];
}

/* The thread that trains: the most samples in the loader, the model, the
 * backward and the optimizer; else the main thread; else the busiest. */
static const as_thread *training_thread(const as_proc *p)
{
    const as_thread *best = NULL;
    for (int i = 0; i < p->nth; i++)
        if (train_samples(p->th[i]) > 0 && (!best || train_samples(p->th[i]) > train_samples(best)))
            best = p->th[i];
    for (int i = 0; i < p->nth && !best; i++)
        if (strcmp(p->th[i]->name, "MainThread") == 0) best = p->th[i];
    for (int i = 0; i < p->nth; i++)
        if (!best || p->th[i]->samples > best->samples) best = p->th[i];
    return best;
}

static const char *role_of(const as_proc *p, const as_thread *t)
{
    if (!p->python) return "not-python";
    for (int i = 0; i < p->nth; i++)
        if (p->th[i]->worker) return "loader-worker";
    if (t && train_samples(t) > 0) return "training";
    return "other";
}

static void read_exe(pid_t pid, char *out, size_t n)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/exe", (long)pid);
    ssize_t k = readlink(path, out, n - 1);
    out[k > 0 ? k : 0] = 0;
}

static void read_comm(pid_t pid, char *out, size_t n)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/comm", (long)pid);
    out[0] = 0;
    FILE *f = fopen(path, "re");
    if (!f) return;
    if (fgets(out, (int)n, f)) out[strcspn(out, "\n")] = 0;
    fclose(f);
}

/* ---- one chunk's samples ---- */

/* What a frame says about the training thread's phase. FK_STEP: the
 * optimizer's step() itself (zero_grad is the optimizer too, but no step). */
enum { FK_NONE, FK_DATA, FK_FORWARD, FK_BACKWARD, FK_OPTIMIZER, FK_WORKER, FK_STEP };

/* py-spy names a function by its qualified name ("_BaseDataLoaderIter.__next__") */
static int fn_is(const char *fn, const char *name)
{
    size_t n = strlen(fn), k = strlen(name);
    return n >= k && strcmp(fn + n - k, name) == 0 && (n == k || fn[n - k - 1] == '.');
}

static int frame_kind(const char *fn, const char *file)
{
    if (!fn || !file) return FK_NONE;
    if (strstr(file, "torch/utils/data/dataloader.py") &&
        (fn_is(fn, "__next__") || fn_is(fn, "_next_data")))
        return FK_DATA;
    if (strstr(file, "torch/utils/data/_utils/worker.py") && fn_is(fn, "_worker_loop"))
        return FK_WORKER;
    /* the optimizer's work, not its construction */
    if (strstr(file, "torch/optim/") && (fn_is(fn, "step") || strstr(fn, "profile_hook_step")))
        return FK_STEP;
    if (strstr(file, "torch/optim/") && fn_is(fn, "zero_grad")) return FK_OPTIMIZER;
    if ((strstr(file, "torch/_tensor.py") || strstr(file, "torch/autograd/__init__.py")) &&
        fn_is(fn, "backward"))
        return FK_BACKWARD;
    if (strstr(file, "torch/nn/modules/module.py") &&
        (fn_is(fn, "_call_impl") || fn_is(fn, "_wrapped_call_impl")))
        return FK_FORWARD;
    return FK_NONE;
}

/* The user's own code: not the interpreter's library, not an installed package. */
static int user_file(const char *file)
{
    return file && *file && file[0] != '<' && !strstr(file, "/site-packages/") &&
           !strstr(file, "/dist-packages/") && !strstr(file, "/lib/python");
}

typedef struct chunk_frames {
    int n;
    const char **fn, **file;
    int *line, *kind;
} chunk_frames;

/* 'Thread 10549 "MainThread"' */
static void parse_thread_name(const char *s, unsigned long long *tid, char *name, size_t n)
{
    *tid = 0;
    name[0] = 0;
    if (!s) return;
    if (sscanf(s, "Thread %llu", tid) != 1) *tid = hash_str(s, strlen(s));
    const char *q = strchr(s, '"');
    const char *e = q ? strrchr(q + 1, '"') : NULL;
    if (q && e && e > q) snprintf(name, n, "%.*s", (int)(e - q - 1), q + 1);
    else snprintf(name, n, "%s", s);
}

static void fold_profile(as_proc *p, const jr_node *prof, const chunk_frames *cf, double rate,
                         buf *key)
{
    unsigned long long tid;
    char name[64];
    parse_thread_name(jr_str(jr_get(prof, "name")), &tid, name, sizeof(name));
    as_thread *t = thread_of(p, tid, name);
    const jr_node *samples = jr_get(prof, "samples");
    if (!t || !samples || samples->type != JR_ARR) return;
    int prev = -1; /* the previous sample was in step(): 1, not: 0, none yet: -1 */
    long idx = 0, last_entry = -1;
    int run = -1; /* samples in the step() call going on; -1: it began before the chunk */
    for (const jr_node *s = samples->child; s; s = s->next, idx++) {
        if (s->type != JR_ARR) continue;
        int phase = AP_OTHER, user = -1, in_step = 0;
        for (const jr_node *f = s->child; f; f = f->next) {
            int i = (int)jr_num(f);
            if (i < 0 || i >= cf->n) continue;
            int k = cf->kind[i];
            if (k == FK_WORKER) t->worker = 1;
            if (k == FK_STEP) k = FK_OPTIMIZER, in_step = 1;
            if (phase == AP_OTHER && k >= FK_DATA && k <= FK_OPTIMIZER) phase = k - FK_DATA;
            if (user_file(cf->file[i])) user = i;
        }
        t->samples++;
        t->ph[phase]++;
        if (!in_step && prev == 1 && run > 0 && (t->min_run == 0 || run < t->min_run))
            t->min_run = run; /* a whole call: seen begin and end in this chunk */
        if (in_step && prev == 0) run = 0;
        if (in_step && run >= 0) run++;
        if (in_step) {
            t->opt_samples++;
            /* an entry into step(); the chunk's first sample starts nothing */
            if (prev == 0) {
                t->opt_entries++;
                if (last_entry >= 0 && t->nivl < AS_MAX_IVL)
                    t->ivl[t->nivl++] = (double)(idx - last_entry) / rate;
                last_entry = idx;
            }
        }
        prev = in_step;
        /* "[phase];frame;frame" outermost first, as the hook's folded files */
        buf_reset(key);
        buf_printf(key, "%s", ph_name[phase]);
        for (const jr_node *f = s->child; f; f = f->next) {
            int i = (int)jr_num(f);
            if (i < 0 || i >= cf->n) continue;
            buf_printf(key, ";%s (%s:%d)", cf->fn[i] ? cf->fn[i] : "?",
                       cf->file[i] ? cf->file[i] : "?", cf->line[i]);
        }
        if (!key->err && key->data) map_add(&t->stacks, key->data, key->len, phase);
        if (user >= 0) {
            buf_reset(key);
            buf_printf(key, "%s\t%s\t%d", cf->fn[user] ? cf->fn[user] : "?", cf->file[user],
                       cf->line[user]);
            if (!key->err && key->data) map_add(&t->lines, key->data, key->len, phase);
        }
    }
}

/* Fold a finished chunk (py-spy's speedscope file) into p. 0, or -1 when it
 * could not be read (the chunk is counted as lost). */
static int fold_chunk(as_proc *p, const char *path, double rate)
{
    int fd = afile_open_read(path);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0 || (size_t)st.st_size > AS_CHUNK_MAX) {
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *text = malloc(n + 1);
    while (text && got < n) {
        ssize_t r = read(fd, text + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!text || got != n) {
        free(text);
        return -1;
    }
    jr_doc d;
    char err[200];
    if (jr_parse(&d, text, n, AS_CHUNK_NODES, err, sizeof(err)) != 0) {
        free(text);
        return -1;
    }
    const jr_node *frames = jr_path(d.root, "shared.frames");
    const jr_node *profs = jr_get(d.root, "profiles");
    int rc = -1;
    chunk_frames cf = {0};
    if (frames && frames->type == JR_ARR && profs && profs->type == JR_ARR) {
        cf.n = frames->count;
        cf.fn = calloc((size_t)cf.n + 1, sizeof(char *));
        cf.file = calloc((size_t)cf.n + 1, sizeof(char *));
        cf.line = calloc((size_t)cf.n + 1, sizeof(int));
        cf.kind = calloc((size_t)cf.n + 1, sizeof(int));
    }
    if (cf.fn && cf.file && cf.line && cf.kind) {
        int i = 0;
        for (const jr_node *f = frames->child; f && i < cf.n; f = f->next, i++) {
            cf.fn[i] = jr_str(jr_get(f, "name"));
            cf.file[i] = jr_str(jr_get(f, "file"));
            double l = jr_num(jr_get(f, "line"));
            cf.line[i] = isfinite(l) ? (int)l : 0;
            cf.kind[i] = frame_kind(cf.fn[i], cf.file[i]);
        }
        buf key;
        buf_init(&key, 1u << 20);
        for (const jr_node *pr = profs->child; pr; pr = pr->next) fold_profile(p, pr, &cf, rate, &key);
        buf_free(&key);
        rc = 0;
    }
    free(cf.fn);
    free(cf.file);
    free(cf.line);
    free(cf.kind);
    jr_free(&d);
    free(text);
    return rc;
}

/* ---- the samplers ---- */

static void chunk_path(const astk *s, pid_t pid, int chunk, const char *ext, char *out, size_t n)
{
    snprintf(out, n, "%s/live/pyspy-%ld-%d.%s", s->run_dir, (long)pid, chunk, ext);
}

static pid_t spawn_spy(const astk *s, as_proc *p, int chunk)
{
    char pidtxt[24], rate[32], out[PATH_MAX], log[PATH_MAX];
    snprintf(pidtxt, sizeof(pidtxt), "%ld", (long)p->pid);
    snprintf(rate, sizeof(rate), "%d", (int)lround(s->rate));
    chunk_path(s, p->pid, chunk, "json", out, sizeof(out));
    chunk_path(s, p->pid, chunk, "log", log, sizeof(log));
    pid_t h = fork();
    if (h != 0) return h < 0 ? 0 : h;
    /* its own group: a Ctrl-C meant for attach reaches it through us, after
     * the other samplers are told too */
    setpgid(0, 0);
    /* a killed attach leaves no sampler behind (its chunk is lost, the
     * chunks folded before are in the run directory) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(127);
    int devnull = open("/dev/null", O_RDWR);
    int lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (devnull >= 0) dup2(devnull, 0);
    if (lf >= 0) {
        dup2(lf, 1);
        dup2(lf, 2);
    }
    char *argv[] = {"py-spy", "record", "--nonblocking", "--idle", "--full-filenames",
                    "--format", "speedscope", "--rate", rate, "--pid", pidtxt, "-o", out, NULL};
    execvp(argv[0], argv);
    _exit(127);
}

/* The reason in a failed sampler's log: py-spy's "Error: ..." line. */
static void spy_error(const astk *s, as_proc *p, int chunk)
{
    char log[PATH_MAX], line[512];
    chunk_path(s, p->pid, chunk, "log", log, sizeof(log));
    FILE *f = fopen(log, "re");
    if (!f) return;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "Error: ", 7) != 0) continue;
        line[strcspn(line, "\n")] = 0;
        snprintf(p->err, sizeof(p->err), "py-spy: %.150s", line + 7);
        break;
    }
    fclose(f);
}

/* A sampler that ended: its chunk folded (or counted as lost), its files gone. */
static int spy_ended(astk *s, as_proc *p, int chunk, int status)
{
    char path[PATH_MAX];
    chunk_path(s, p->pid, chunk, "json", path, sizeof(path));
    int ok = fold_chunk(p, path, s->rate) == 0;
    if (ok) {
        p->chunks_ok++;
        p->fails = 0;
    } else {
        /* a process that exited before py-spy could read it is no failure of ours */
        if (!p->gone && !s->stopping) {
            p->chunks_lost++;
            p->fails++;
            spy_error(s, p, chunk);
            if (!p->err[0])
                snprintf(p->err, sizeof(p->err), "py-spy ended with status %d and no samples",
                         WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        }
    }
    unlink(path);
    chunk_path(s, p->pid, chunk, "log", path, sizeof(path));
    unlink(path);
    return ok;
}

/* Reap p's samplers that ended; 1 when a chunk was folded. */
static int reap(astk *s, as_proc *p)
{
    int folded = 0, st;
    if (p->old > 0 && waitpid(p->old, &st, WNOHANG) == p->old) {
        p->old = 0;
        folded |= spy_ended(s, p, p->old_chunk, st);
    }
    if (p->spy > 0 && waitpid(p->spy, &st, WNOHANG) == p->spy) {
        p->spy = 0;
        folded |= spy_ended(s, p, p->chunk, st);
    }
    return folded;
}

static as_proc *proc_find(astk *s, pid_t pid)
{
    for (int i = 0; i < s->nproc; i++)
        if (s->p[i]->pid == pid) return s->p[i];
    return NULL;
}

/* ---- the files ---- */

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Steps told from the optimizer's frames: a count only where the period is
 * steady and long enough that no step can fall between two samples. */
static void steps_json(jw *w, const as_thread *t, double rate)
{
    double count = NAN, period = NAN;
    char why[240] = "";
    if (!t || t->opt_samples == 0) {
        snprintf(why, sizeof(why), "no optimizer step() (torch.optim) was sampled");
    } else if (t->nivl < AS_STEADY_MIN_IVL) {
        snprintf(why, sizeof(why),
                 "the optimizer's step() was entered %llu times: too few to tell a steady period",
                 (unsigned long long)t->opt_entries);
    } else {
        double *v = malloc(sizeof(double) * (size_t)t->nivl);
        if (v) {
            memcpy(v, t->ivl, sizeof(double) * (size_t)t->nivl);
            qsort(v, (size_t)t->nivl, sizeof(double), cmp_dbl);
            double med = v[t->nivl / 2], sum = 0;
            int in = 0;
            for (int i = 0; i < t->nivl; i++) {
                sum += v[i];
                if (v[i] >= AS_STEADY_LO * med && v[i] < AS_STEADY_HI * med) in++;
            }
            double share = (double)in / t->nivl, mean = sum / t->nivl;
            if (share < AS_STEADY_SHARE)
                snprintf(why, sizeof(why),
                         "step() was entered at an unsteady period (%.0f%% of the intervals "
                         "within 0.5x-1.75x the median %.3f s): steps may have fallen between "
                         "samples",
                         100 * share, med);
            else if (mean > AS_STEADY_MEAN * med)
                snprintf(why, sizeof(why),
                         "the intervals between step() entries average %.2fx their median "
                         "%.3f s: steps may have fallen between samples",
                         mean / med, med);
            else if (t->min_run < AS_OPT_MIN_RUN)
                snprintf(why, sizeof(why),
                         "a step() call was seen for %d sample%s only at %.0f samples a second: "
                         "steps may have fallen between samples",
                         t->min_run, t->min_run == 1 ? "" : "s", rate);
            else {
                count = (double)t->opt_entries;
                period = med;
            }
            free(v);
        }
    }
    jw_key(w, "steps");
    jw_obj_begin(w);
    jw_knum(w, "count", count);
    jw_knum(w, "period_s", period);
    jw_kuint(w, "optimizer_entries", t ? t->opt_entries : 0);
    jw_kstr(w, "how", isfinite(count) ? "optimizer step() entries at a steady period" : NULL);
    jw_kstr(w, "why_unknown", why[0] ? why : NULL);
    jw_obj_end(w);
}

static void by_phase_json(jw *w, const uint64_t *ph)
{
    jw_key(w, "by_phase");
    jw_obj_begin(w);
    for (int k = 0; k < AP_N; k++) jw_kuint(w, ph_name[k], ph[k]);
    jw_obj_end(w);
}

/* the user's lines the training thread was in most, at most 10 */
static void lines_json(jw *w, const as_thread *t)
{
    jw_key(w, "lines_top");
    jw_arr_begin(w);
    int used[10];
    for (int k = 0; t && k < 10; k++) {
        int best = -1;
        for (size_t i = 0; i < t->lines.cap; i++) {
            if (!t->lines.key[i]) continue;
            int seen = 0;
            for (int j = 0; j < k; j++) seen |= used[j] == (int)i;
            if (!seen && (best < 0 || t->lines.n[i] > t->lines.n[best])) best = (int)i;
        }
        if (best < 0) break;
        used[k] = best;
        const char *key = t->lines.key[best], *tab = strchr(key, '\t');
        const char *file = tab ? tab + 1 : "", *tab2 = strchr(file, '\t');
        jw_obj_begin(w);
        jw_key(w, "func");
        jw_strn(w, key, tab ? (size_t)(tab - key) : strlen(key));
        jw_key(w, "file");
        jw_strn(w, file, tab2 ? (size_t)(tab2 - file) : strlen(file));
        jw_kint(w, "line", tab2 ? strtol(tab2 + 1, NULL, 10) : 0);
        jw_kuint(w, "samples", t->lines.n[best]);
        jw_kstr(w, "phase", ph_name[t->lines.ph[best] < AP_N ? t->lines.ph[best] : AP_OTHER]);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

static void write_files(astk *s)
{
    buf b, folded;
    buf_init(&b, AS_OUT_MAX);
    buf_init(&folded, AS_OUT_MAX);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/pyprof", s->run_dir);
    mkdir(path, 0755);
    jw w;
    jw_doc_begin(&w, &b, "format", 1);
    jw_kstr(&w, "sampler", "py-spy");
    jw_kstr(&w, "sampler_version", s->version[0] ? s->version : NULL);
    jw_kstr(&w, "how", "py-spy record --nonblocking --idle, speedscope output, one per process, "
                       "rotated every chunk_s");
    jw_knum(&w, "rate_hz", s->rate);
    jw_knum(&w, "chunk_s", s->chunk_s);
    jw_kint(&w, "processes_dropped", s->dropped_procs);
    uint64_t tot[AP_N] = {0}, tsamples = 0;
    int ntrain = 0;
    jw_key(&w, "processes");
    jw_arr_begin(&w);
    for (int i = 0; i < s->nproc; i++) {
        as_proc *p = s->p[i];
        const as_thread *t = training_thread(p);
        const char *role = role_of(p, t);
        jw_obj_begin(&w);
        jw_kint(&w, "pid", p->pid);
        jw_kint(&w, "ppid", p->ppid);
        jw_kstr(&w, "comm", p->comm);
        jw_kstr(&w, "role", role);
        jw_kstr(&w, "thread", t ? t->name : NULL);
        jw_kuint(&w, "samples", t ? t->samples : 0);
        uint64_t zero[AP_N] = {0};
        by_phase_json(&w, t ? t->ph : zero);
        jw_kuint(&w, "chunks", p->chunks_ok);
        jw_kuint(&w, "chunks_lost", p->chunks_lost);
        jw_kstr(&w, "error", p->err[0] ? p->err : NULL);
        if (p->python) {
            steps_json(&w, t, s->rate);
            lines_json(&w, t);
            jw_key(&w, "threads");
            jw_arr_begin(&w);
            for (int k = 0; k < p->nth; k++) {
                jw_obj_begin(&w);
                jw_kuint(&w, "tid", p->th[k]->tid);
                jw_kstr(&w, "name", p->th[k]->name);
                jw_kuint(&w, "samples", p->th[k]->samples);
                jw_obj_end(&w);
            }
            jw_arr_end(&w);
        }
        jw_obj_end(&w);
        if (strcmp(role, "training") == 0 && t) {
            ntrain++;
            tsamples += t->samples;
            for (int k = 0; k < AP_N; k++) tot[k] += t->ph[k];
        }
        /* the training thread's stacks, in the hook's folded format */
        if (t && t->samples) {
            buf_reset(&folded);
            for (size_t k = 0; k < t->stacks.cap; k++)
                if (t->stacks.key[k])
                    buf_printf(&folded, "%s %llu\n", t->stacks.key[k],
                               (unsigned long long)t->stacks.n[k]);
            if (t->stacks.truncated)
                buf_printf(&folded, "[truncated] %llu\n", (unsigned long long)t->stacks.truncated);
            snprintf(path, sizeof(path), "%s/pyprof/stacks-%ld.folded", s->run_dir, (long)p->pid);
            if (!folded.err) afile_write(path, folded.data ? folded.data : "", folded.len);
        }
    }
    jw_arr_end(&w);
    jw_key(&w, "training");
    jw_obj_begin(&w);
    jw_kint(&w, "processes", ntrain);
    jw_kuint(&w, "samples", tsamples);
    by_phase_json(&w, tot);
    jw_obj_end(&w);
    jw_obj_end(&w);
    buf_putc(&b, '\n');
    snprintf(path, sizeof(path), "%s/pyprof/attach.json", s->run_dir);
    if (!b.err) afile_write(path, b.data, b.len);
    buf_free(&b);
    buf_free(&folded);
}

/* ---- life cycle ---- */

static void read_version(astk *s)
{
    FILE *f = popen("py-spy --version 2>/dev/null", "re");
    if (!f) return;
    char line[128];
    if (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        const char *v = strncmp(line, "py-spy ", 7) == 0 ? line + 7 : line;
        snprintf(s->version, sizeof(s->version), "%.63s", v);
    }
    pclose(f);
}

int astk_create(astk **out, const char *run_dir, pid_t root, double rate_hz, char *why, size_t n)
{
    *out = NULL;
    astk *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(why, n, "out of memory");
        return -1;
    }
    snprintf(s->run_dir, sizeof(s->run_dir), "%s", run_dir);
    s->root = root;
    s->rate = rate_hz;
    s->chunk_s = AS_CHUNK_S;
    *out = s;
    if (!hd_in_path("py-spy")) {
        snprintf(why, n, "py-spy is not installed (pip install py-spy)");
        return -1;
    }
    read_version(s);
    return 0;
}

void astk_tick(astk *s)
{
    if (!s) return;
    pid_t *pids = malloc(sizeof(pid_t) * AS_TREE_MAX), *pp = malloc(sizeof(pid_t) * AS_TREE_MAX);
    int nt = pids && pp && kill(s->root, 0) == 0 ? hd_tree(s->root, pids, pp, AS_TREE_MAX) : 0;
    for (int i = 0; i < s->nproc; i++) s->p[i]->gone = 1;
    for (int i = 0; i < nt; i++) {
        as_proc *p = proc_find(s, pids[i]);
        if (!p) {
            if (s->nproc >= AS_MAX_PROCS) {
                s->dropped_procs++;
                continue;
            }
            p = calloc(1, sizeof(*p));
            if (!p) continue;
            p->pid = pids[i];
            s->p[s->nproc++] = p;
        }
        p->gone = 0;
        p->ppid = pp[i];
        /* a process may exec into Python later: checked again when its executable changes */
        char exe[256];
        read_exe(p->pid, exe, sizeof(exe));
        if (strcmp(exe, p->exe) != 0) {
            snprintf(p->exe, sizeof(p->exe), "%s", exe);
            read_comm(p->pid, p->comm, sizeof(p->comm));
            p->python = hd_is_python(p->pid);
        }
    }
    free(pids);
    free(pp);
    int changed = 0;
    double now = mono_s();
    for (int i = 0; i < s->nproc; i++) {
        as_proc *p = s->p[i];
        changed |= reap(s, p);
        if (p->gone) {
            /* out of the tree but alive (re-parented away): not ours to watch */
            if (p->spy > 0 && kill(p->pid, 0) == 0) kill(p->spy, SIGINT);
            continue;
        }
        if (!p->python || p->fails >= AS_MAX_FAILS) continue;
        if (p->spy <= 0) {
            p->chunk++;
            p->spy = spawn_spy(s, p, p->chunk);
            p->spy_t0 = now;
        } else if (now - p->spy_t0 >= s->chunk_s && p->old <= 0) {
            /* the next chunk starts before this one stops: no gap */
            int next = p->chunk + 1;
            pid_t h = spawn_spy(s, p, next);
            if (h > 0) {
                kill(p->spy, SIGINT);
                p->old = p->spy;
                p->old_chunk = p->chunk;
                p->spy = h;
                p->chunk = next;
                p->spy_t0 = now;
            }
        }
    }
    if (changed) write_files(s);
}

void astk_finish(astk *s)
{
    if (!s) return;
    s->stopping = 1;
    for (int i = 0; i < s->nproc; i++) {
        if (s->p[i]->spy > 0) kill(s->p[i]->spy, SIGINT);
        if (s->p[i]->old > 0) kill(s->p[i]->old, SIGINT);
    }
    double t0 = mono_s();
    for (;;) {
        int left = 0;
        for (int i = 0; i < s->nproc; i++) {
            reap(s, s->p[i]);
            left += (s->p[i]->spy > 0) + (s->p[i]->old > 0);
        }
        if (!left) break;
        if (mono_s() - t0 > AS_STOP_WAIT_S) {
            /* a sampler that does not stop loses its chunk, never the attach */
            for (int i = 0; i < s->nproc; i++) {
                as_proc *p = s->p[i];
                pid_t h[2] = {p->spy, p->old};
                for (int k = 0; k < 2; k++)
                    if (h[k] > 0) {
                        kill(h[k], SIGKILL);
                        waitpid(h[k], NULL, 0);
                        p->chunks_lost++;
                    }
                p->spy = p->old = 0;
            }
            break;
        }
        struct timespec nap = {0, 20 * 1000000L};
        nanosleep(&nap, NULL);
    }
    write_files(s);
}

void astk_get_info(const astk *s, astk_info *out)
{
    memset(out, 0, sizeof(*out));
    if (!s) return;
    for (int i = 0; i < s->nproc; i++) {
        const as_proc *p = s->p[i];
        if (!p->python) continue;
        if (p->chunks_ok) out->python_procs++;
        else if (p->err[0]) out->failed++;
        if (p->err[0] && !out->error[0]) snprintf(out->error, sizeof(out->error), "%s", p->err);
        for (int k = 0; k < p->nth; k++) out->samples += p->th[k]->samples;
    }
}

void astk_free(astk *s)
{
    if (!s) return;
    for (int i = 0; i < s->nproc; i++) {
        as_proc *p = s->p[i];
        for (int k = 0; k < p->nth; k++) {
            map_free(&p->th[k]->stacks);
            map_free(&p->th[k]->lines);
            free(p->th[k]->ivl);
            free(p->th[k]);
        }
        free(p);
    }
    free(s);
}
