/* The supervisor of `trainperf run` (see supervise.h).
 *
 * It learns progress from steps.csv as the collector streams it (flushed at
 * every sample), so it needs nothing from the collector's internals and sees
 * exactly what the run directory records. */
#include "cli/supervise.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "watch/hangdump.h"
#include "record/writers.h"
#include "report/failures.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/buf.h"
#include "util/jsonw.h"

#define SUP_MAX_STREAMS 256   /* threads with steps tracked for the heartbeat */
#define SUP_RING 1024         /* recent step intervals the learned bound uses */
#define SUP_ARM_STEPS 10      /* steps (warm-up excluded) before the learned bound is armed */
#define SUP_K 10.0            /* learned bound = max(K x p99, floor) */
#define SUP_MAX_ATTEMPTS 1000
#define SUP_LINE_MAX 4096
#define SUP_TICK_S 0.25
#define SUP_KILL_WAIT_S 10.0  /* after SIGKILL, how long a process of the run is waited for */
#define SUP_HEARTBEAT_IDLE_S 5.0 /* rewrite at least this often while nothing moves */
#define SUP_BUSY_CAP 10.0        /* a checkpoint/eval pauses the watch for at most this x the bound */

void sup_opts_default(sup_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->hang_timeout_s = 0;
    o->hang_floor_s = 60;
    o->on_hang = SUP_HANG_DUMP;
    o->restarts = -1;
    o->restart_on = SUP_ON_NONZERO | SUP_ON_SIGNAL | SUP_ON_HANG;
    o->backoff_s = 1;
    o->backoff_max_s = 60;
    o->no_progress = 2;
    o->kill_grace_s = 5;
    o->settle_s = 1.5;
}

double sup_parse_duration(const char *s)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0) return -1;
    double mul = 1;
    if (*end == 0 || strcmp(end, "s") == 0)
        mul = 1;
    else if (strcmp(end, "ms") == 0)
        mul = 0.001;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        mul = 60;
    else if (strcmp(end, "h") == 0)
        mul = 3600;
    else if (strcmp(end, "d") == 0)
        mul = 86400;
    else
        return -1;
    return v * mul;
}

static const char *const sup_value_opts[] = {"--hang-timeout",  "--startup-timeout",
                                             "--on-hang",       "--restart",
                                             "--restart-on",    "--restart-backoff",
                                             "--restart-no-progress", "--mtbf", "--kill-grace", NULL};

int sup_opt_takes_value(const char *opt)
{
    for (int i = 0; sup_value_opts[i]; i++)
        if (strcmp(opt, sup_value_opts[i]) == 0) return 1;
    return 0;
}

static int parse_restart_on(sup_opts *o, const char *val)
{
    o->restart_on = 0;
    o->ncodes = 0;
    const char *p = val;
    while (*p) {
        size_t n = strcspn(p, ",");
        char tok[32];
        if (n == 0 || n >= sizeof(tok)) goto bad;
        memcpy(tok, p, n);
        tok[n] = 0;
        if (strcmp(tok, "nonzero") == 0 || strcmp(tok, "fail") == 0)
            o->restart_on |= SUP_ON_NONZERO;
        else if (strcmp(tok, "signal") == 0)
            o->restart_on |= SUP_ON_SIGNAL;
        else if (strcmp(tok, "hang") == 0)
            o->restart_on |= SUP_ON_HANG;
        else {
            long code;
            if (cli_parse_long(tok, &code) || code < 1 || code > 255 || o->ncodes == SUP_MAX_CODES)
                goto bad;
            o->codes[o->ncodes++] = (int)code;
        }
        p += n;
        if (*p == ',') p++;
    }
    if (!o->restart_on && !o->ncodes) goto bad;
    return 1;
bad:
    cli_error("--restart-on '%s': expected a comma list of nonzero, signal, hang and exit codes "
              "1-255 (e.g. 'signal,137')",
              val);
    return -1;
}

/* A bound given as a duration, 'auto' (0) or 'off' (-1) into *out; 1, or -1
 * after saying what was expected. */
static int parse_bound(const char *opt, const char *val, const char *expect, double *out)
{
    if (strcmp(val, "off") == 0 || strcmp(val, "auto") == 0) {
        *out = strcmp(val, "off") == 0 ? -1 : 0;
        return 1;
    }
    double d = sup_parse_duration(val);
    if (d < 1 || d > 30 * 86400.0) {
        cli_error("%s '%s': expected a duration of at least 1s %s", opt, val, expect);
        return -1;
    }
    *out = d;
    return 1;
}

int sup_parse_opt(sup_opts *o, const char *opt, const char *val)
{
    if (strcmp(opt, "--hang-timeout") == 0) {
        if (strncmp(val, "auto:", 5) == 0) {
            double f = sup_parse_duration(val + 5);
            if (f < 1 || f > 30 * 86400.0) {
                cli_error("--hang-timeout '%s': the floor after 'auto:' must be a duration "
                          "of at least 1s (e.g. auto:2m)",
                          val);
                return -1;
            }
            o->hang_timeout_s = 0;
            o->hang_floor_s = f;
            return 1;
        }
        return parse_bound(opt, val, "(90s, 10m, 2h), 'auto', 'auto:FLOOR' or 'off'",
                           &o->hang_timeout_s);
    }
    if (strcmp(opt, "--startup-timeout") == 0)
        return parse_bound(opt, val, "(5m, 1h), 'auto' or 'off'", &o->startup_s);
    if (strcmp(opt, "--on-hang") == 0) {
        if (strcmp(val, "dump") == 0)
            o->on_hang = SUP_HANG_DUMP;
        else if (strcmp(val, "kill") == 0)
            o->on_hang = SUP_HANG_KILL;
        else if (strcmp(val, "restart") == 0)
            o->on_hang = SUP_HANG_RESTART;
        else {
            cli_error("--on-hang '%s': expected dump, kill or restart", val);
            return -1;
        }
        return 1;
    }
    if (strcmp(opt, "--restart") == 0) {
        long n;
        if (cli_parse_long(val, &n) || n < 0 || n > SUP_MAX_ATTEMPTS - 1) {
            cli_error("--restart '%s': expected a number of restarts from 0 to %d", val,
                      SUP_MAX_ATTEMPTS - 1);
            return -1;
        }
        o->restarts = (int)n;
        return 1;
    }
    if (strcmp(opt, "--restart-on") == 0) return parse_restart_on(o, val);
    if (strcmp(opt, "--restart-backoff") == 0) {
        double d = sup_parse_duration(val);
        if (d < 0 || d > 3600) {
            cli_error("--restart-backoff '%s': expected a duration from 0s to 1h", val);
            return -1;
        }
        o->backoff_s = d;
        if (o->backoff_max_s < d) o->backoff_max_s = d;
        return 1;
    }
    if (strcmp(opt, "--restart-no-progress") == 0) {
        long n;
        if (cli_parse_long(val, &n) || n < 0 || n > SUP_MAX_ATTEMPTS) {
            cli_error("--restart-no-progress '%s': expected a number of attempts (0: no cap)", val);
            return -1;
        }
        o->no_progress = (int)n;
        return 1;
    }
    if (strcmp(opt, "--kill-grace") == 0) {
        double d = sup_parse_duration(val);
        if (d < 0 || d > 3600) {
            cli_error("--kill-grace '%s': expected a duration from 0s to 1h", val);
            return -1;
        }
        o->kill_grace_s = d;
        return 1;
    }
    if (strcmp(opt, "--mtbf") == 0) {
        double d = sup_parse_duration(val);
        if (d < 1) {
            cli_error("--mtbf '%s': expected a duration (e.g. 12h, 3d)", val);
            return -1;
        }
        o->mtbf_s = d;
        return 1;
    }
    return 0;
}

int sup_opts_check(sup_opts *o)
{
    /* auto: the given bound but at least 5 min (imports, loading a model and
     * the rendezvous take minutes: a short bound meant for steps must not kill
     * a slow start), 30 min with the learned one, off with the watch off */
    if (o->startup_s == 0)
        o->startup_s = o->hang_timeout_s > 0    ? fmax(o->hang_timeout_s, SUP_STARTUP_MIN_S)
                       : o->hang_timeout_s == 0 ? SUP_STARTUP_AUTO_S
                                                : -1;
    if (o->on_hang != SUP_HANG_DUMP && o->hang_timeout_s < 0 && o->startup_s < 0) {
        cli_error("--on-hang %s needs the hang watch: drop --hang-timeout off",
                  o->on_hang == SUP_HANG_KILL ? "kill" : "restart");
        return -1;
    }
    /* --on-hang restart alone means: restart hung attempts a few times */
    if (o->on_hang == SUP_HANG_RESTART && o->restarts < 0) o->restarts = 3;
    return 0;
}

void sup_usage(FILE *f)
{
    fprintf(f,
            "Failures (docs/failures.md):\n"
            "  --hang-timeout D      no step for D (90s, 10m, 1h) is a hang: stacks of every\n"
            "                        process go to hangs/; 'auto' (default): max(10 x p99 step\n"
            "                        time, 60s) learned after 10 steps, 'auto:FLOOR', 'off'\n"
            "  --startup-timeout D   no first step for D after the command starts is a hang too\n"
            "                        (rendezvous, loading); default: the given --hang-timeout\n"
            "                        but at least 5m, or 30m with the learned one; 'off'\n"
            "  --on-hang ACTION      dump (default: stacks only), kill, or restart\n"
            "  --restart N           restart a failed command up to N times\n"
            "  --restart-on LIST     what restarts: nonzero,signal,hang (default all) or exit codes\n"
            "  --restart-backoff D   wait before the first restart, doubled each time (default 1s)\n"
            "  --restart-no-progress K  stop restarting after K attempts in a row without a step\n"
            "                        (default 2; 0: no cap)\n"
            "  --kill-grace D        SIGTERM to SIGKILL when the run's processes are ended (hang,\n"
            "                        restart, a signal to trainperf; default 5s)\n"
            "  --mtbf D              mean time between failures for the checkpoint interval advice\n"
            "                        (default: from this run's own failures)\n");
}

/* ---- state ---- */

typedef struct sup_stream {
    pid_t pid, tid;
    int rank;
    uint64_t steps;
    double last_end_t;
} sup_stream;

typedef struct sup_attempt {
    pid_t pid;
    double start_t, end_t;       /* run-relative seconds */
    int ended, exit_code, signal;
    const char *ended_by;        /* "exit", "signal", "hang", "user" */
    uint64_t steps;
    double first_step_t, last_step_t, last_ckpt_t; /* NAN: none */
    int nckpt;
    int restarted;               /* another attempt followed */
    double backoff_s;            /* waited after this one */
    char stop_why[160];          /* why no further attempt, when restarts were on */
} sup_attempt;

struct sup {
    sup_opts o;
    char run_dir[PATH_MAX];
    uint64_t start_mono_ns;
    double start_unix_s;
    /* steps.csv tail */
    int tfd;
    off_t toff;
    char line[SUP_LINE_MAX];
    size_t linelen;
    int skipping;                /* inside an over-long line */
    int header;                  /* header seen */
    int c_rank, c_pid, c_tid, c_step, c_start, c_dur, c_int, c_eval, c_ckpt;
    uint64_t total_steps;
    double last_end_t;
    sup_stream streams[SUP_MAX_STREAMS];
    int nstreams, streams_dropped;
    /* learned bound */
    double ring[SUP_RING];
    int nring, ring_pos;
    uint64_t warm_steps;
    double bound_s;              /* current bound; 0 not armed */
    int bound_dirty;
    /* attempts */
    sup_attempt *att;
    int natt;
    pid_t child;                 /* running attempt; 0 none */
    int noprog_run;
    /* hang watch */
    int stall_fired;             /* fired for the current stall (dump): wait for progress */
    int nhangs;
    double busy_end_t, busy_since_t; /* NAN when not busy */
    double seen_t;               /* when new steps were last read */
    double term_t;               /* SIGTERM sent (kill/restart); NAN none */
    int killed;                  /* SIGKILL sent */
    int hang_ended;              /* the running attempt is being ended by the watch */
    pid_t pgid;                  /* the last attempt's process group (its root's pid) */
    int tail;                    /* the root is gone, processes it left are watched */
    int user_sig;                /* a signal the user sent trainperf was passed on */
    char last_verdict[640];
    char last_stacks[64];
    /* ticks */
    double next_tick, last_hb;
    uint64_t hb_steps;
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double run_t(const sup *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return ((double)now - (double)s->start_mono_ns) / 1e9;
}

int sup_create(sup **out, const sup_opts *o, const char *run_dir, uint64_t start_mono_ns,
               double start_unix_s)
{
    sup *s = calloc(1, sizeof(*s));
    if (!s) return TPF_ENOMEM;
    s->att = calloc(SUP_MAX_ATTEMPTS, sizeof(sup_attempt));
    if (!s->att) {
        free(s);
        return TPF_ENOMEM;
    }
    s->o = *o;
    snprintf(s->run_dir, sizeof(s->run_dir), "%s", run_dir);
    s->start_mono_ns = start_mono_ns;
    s->start_unix_s = start_unix_s;
    s->tfd = -1;
    s->last_end_t = NAN;
    s->busy_end_t = s->busy_since_t = NAN;
    s->term_t = NAN;
    s->c_rank = s->c_pid = s->c_tid = s->c_step = s->c_start = s->c_dur = s->c_int = s->c_eval =
        s->c_ckpt = -1;
    /* a run directory used again (--out): no hang of an earlier run stays */
    char p[PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/hangs.jsonl", run_dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/hangs", run_dir);
    DIR *d = opendir(p);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        char f[PATH_MAX + 300];
        if (de->d_name[0] == '.') continue;
        snprintf(f, sizeof(f), "%s/%s", p, de->d_name);
        unlink(f);
    }
    if (d) closedir(d);
    *out = s;
    return 0;
}

void sup_free(sup *s)
{
    if (!s) return;
    if (s->tfd >= 0) close(s->tfd);
    free(s->att);
    free(s);
}

int sup_attempts(const sup *s) { return s->natt; }

/* ---- steps.csv tail ---- */

static int split(char *l, char **cells, int max)
{
    int n = 0;
    cells[n++] = l;
    for (char *p = l; *p && n < max; p++)
        if (*p == ',') {
            *p = 0;
            cells[n++] = p + 1;
        }
    return n;
}

static double cell_num(char **cells, int n, int c)
{
    if (c < 0 || c >= n || !*cells[c]) return NAN;
    char *end;
    double v = strtod(cells[c], &end);
    return end == cells[c] ? NAN : v;
}

static sup_attempt *attempt_at(sup *s, double t)
{
    for (int i = s->natt - 1; i >= 0; i--)
        if (s->att[i].start_t <= t + 1e-6) return &s->att[i];
    return s->natt ? &s->att[0] : NULL;
}

static void on_row(sup *s, char *l)
{
    char *cells[64];
    if (!s->header) {
        int n = split(l, cells, 64);
        for (int i = 0; i < n; i++) {
            const char *h = cells[i];
            if (strcmp(h, "rank") == 0) s->c_rank = i;
            else if (strcmp(h, "pid") == 0) s->c_pid = i;
            else if (strcmp(h, "tid") == 0) s->c_tid = i;
            else if (strcmp(h, "step") == 0) s->c_step = i;
            else if (strcmp(h, "start_s") == 0) s->c_start = i;
            else if (strcmp(h, "duration_ns") == 0) s->c_dur = i;
            else if (strcmp(h, "interval_ns") == 0) s->c_int = i;
            else if (strcmp(h, "eval_ns") == 0) s->c_eval = i;
            else if (strcmp(h, "checkpoint_ns") == 0) s->c_ckpt = i;
        }
        s->header = 1;
        return;
    }
    int n = split(l, cells, 64);
    double start = cell_num(cells, n, s->c_start), dur = cell_num(cells, n, s->c_dur);
    if (!isfinite(start) || !isfinite(dur)) return;
    double end = start + dur / 1e9;
    double rank = cell_num(cells, n, s->c_rank), pid = cell_num(cells, n, s->c_pid);
    double tid = cell_num(cells, n, s->c_tid), step = cell_num(cells, n, s->c_step);
    double iv = cell_num(cells, n, s->c_int), ev = cell_num(cells, n, s->c_eval);
    double ck = cell_num(cells, n, s->c_ckpt);
    /* never a cast of NaN or of a value out of range */
    if (!(pid >= 0 && pid < 1e9)) pid = -1;
    if (!(tid >= 0 && tid < 1e9)) tid = -1;
    if (!(rank >= 0 && rank < 1e9)) rank = NAN;
    s->total_steps++;
    if (!(s->last_end_t >= end)) s->last_end_t = end;
    int k;
    for (k = 0; k < s->nstreams; k++)
        if (s->streams[k].pid == (pid_t)pid && s->streams[k].tid == (pid_t)tid) break;
    if (k == s->nstreams) {
        if (k < SUP_MAX_STREAMS) {
            s->nstreams++;
            s->streams[k].pid = (pid_t)pid;
            s->streams[k].tid = (pid_t)tid;
            s->streams[k].rank = isfinite(rank) ? (int)rank : -1;
            s->streams[k].last_end_t = NAN;
        } else {
            s->streams_dropped = 1;
            k = -1;
        }
    }
    if (k >= 0) {
        s->streams[k].steps++;
        if (!(s->streams[k].last_end_t >= end)) s->streams[k].last_end_t = end;
    }
    sup_attempt *a = attempt_at(s, start);
    if (a) {
        a->steps++;
        if (!(a->first_step_t <= end)) a->first_step_t = end;
        if (!(a->last_step_t >= end)) a->last_step_t = end;
        if (ck > 0) {
            a->nckpt++;
            if (!(a->last_ckpt_t >= end)) a->last_ckpt_t = end;
        }
    }
    /* the learned bound: steps after each thread's first, less eval and checkpoint time */
    if (step > 0 && isfinite(iv)) {
        double v = iv - (ev > 0 ? ev : 0) - (ck > 0 ? ck : 0);
        if (v < 0) v = 0;
        /* a step that spanned a stall past the armed bound (a hang that
         * resumed) is not a step time: learning it would raise the bound to
         * 10 x the hang */
        if (s->bound_s > 0 && v / 1e9 >= s->bound_s) return;
        s->ring[s->ring_pos] = v / 1e9;
        s->ring_pos = (s->ring_pos + 1) % SUP_RING;
        if (s->nring < SUP_RING) s->nring++;
        s->warm_steps++;
        s->bound_dirty = 1;
    }
}

static void tail_read(sup *s)
{
    if (s->tfd < 0) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/steps.csv", s->run_dir);
        s->tfd = afile_open_read(path);
        if (s->tfd < 0) return;
    }
    char chunk[65536];
    for (int rounds = 0; rounds < 256; rounds++) { /* at most 16 MiB per tick */
        ssize_t r = pread(s->tfd, chunk, sizeof(chunk), s->toff);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return;
        s->toff += r;
        for (ssize_t i = 0; i < r; i++) {
            char ch = chunk[i];
            if (ch == '\n') {
                if (!s->skipping) {
                    s->line[s->linelen] = 0;
                    if (s->linelen && s->line[s->linelen - 1] == '\r') s->line[s->linelen - 1] = 0;
                    on_row(s, s->line);
                }
                s->linelen = 0;
                s->skipping = 0;
            } else if (!s->skipping) {
                if (s->linelen + 1 >= sizeof(s->line))
                    s->skipping = 1; /* not a steps.csv row: drop it */
                else
                    s->line[s->linelen++] = ch;
            }
        }
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double p99(const sup *s)
{
    double tmp[SUP_RING];
    memcpy(tmp, s->ring, sizeof(double) * (size_t)s->nring);
    qsort(tmp, (size_t)s->nring, sizeof(double), cmp_d);
    int i = (int)ceil(0.99 * s->nring) - 1;
    if (i < 0) i = 0;
    return tmp[i];
}

/* The bound now in force for the running attempt; 0 when not armed. *kind:
 * "given", "learned", or "startup" (before the attempt's first step, and
 * with the learned bound until it is armed). */
static double bound_now(sup *s, const sup_attempt *a, const char **kind)
{
    if (!a) return 0;
    if (a->steps > 0 && s->o.hang_timeout_s > 0) {
        *kind = "given";
        return s->o.hang_timeout_s;
    }
    if (a->steps > 0 && s->o.hang_timeout_s == 0) {
        if (s->bound_dirty) {
            s->bound_dirty = 0;
            if (s->warm_steps >= SUP_ARM_STEPS) {
                double b = SUP_K * p99(s);
                s->bound_s = b > s->o.hang_floor_s ? b : s->o.hang_floor_s;
            }
        }
        if (s->bound_s > 0) {
            *kind = "learned";
            return s->bound_s;
        }
    }
    if (a->steps > 0 && s->o.hang_timeout_s < 0) return 0;
    if (s->o.startup_s > 0) {
        *kind = "startup";
        return s->o.startup_s;
    }
    return 0;
}

/* ---- files ---- */

static void put_json(sup *s, const char *name, buf *b)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s", s->run_dir, name);
    if (!b->err) rec_write_atomic(path, b);
    buf_free(b);
}

/* One of the supervisor's JSON files (format 1, at most cap bytes), which
 * put_json writes and frees. */
static void doc_begin(jw *w, buf *b, size_t cap)
{
    buf_init(b, cap);
    jw_doc_begin(w, b, "format", 1);
}

static void append_line(sup *s, const char *name, buf *b)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s", s->run_dir, name);
    buf_putc(b, '\n');
    if (!b->err) {
        /* one write with O_APPEND: lines from the collector never interleave */
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            ssize_t w = write(fd, b->data, b->len);
            (void)w;
            close(fd);
        }
    }
    buf_free(b);
}

/* When a step last ended (end: seconds since the start; NaN before the
 * first step, written as nulls) and how long ago, at t: the job's and each
 * rank's. */
static void last_step_json(jw *w, const sup *s, double end, double t)
{
    jw_key(w, "last_step_t");
    jw_numf(w, end, 3);
    jw_key(w, "last_step_unix_s");
    jw_numf(w, s->start_unix_s + end, 3);
    jw_key(w, "since_last_step_s");
    jw_numf(w, t - end, 3);
}

static void heartbeat(sup *s, const char *state)
{
    double t = run_t(s);
    buf b;
    jw w;
    doc_begin(&w, &b, 1u << 20);
    jw_kstr(&w, "state", state);
    jw_kint(&w, "supervisor_pid", getpid());
    jw_kint(&w, "attempt", s->natt);
    if (s->child > 0) jw_kint(&w, "pid", s->child);
    jw_key(&w, "updated_unix_s");
    jw_numf(&w, s->start_unix_s + t, 3);
    jw_key(&w, "t");
    jw_numf(&w, t, 3);
    jw_kuint(&w, "steps", s->total_steps);
    last_step_json(&w, s, s->last_end_t, t);
    /* the bound in force now: the startup bound before the first step */
    const char *kind = NULL;
    double bound = s->natt ? bound_now(s, &s->att[s->natt - 1], &kind) : 0;
    jw_key(&w, "hang_bound_s");
    if (bound > 0)
        jw_numf(&w, bound, 3);
    else
        jw_null(&w);
    jw_kstr(&w, "hang_bound_kind", bound > 0 ? kind : NULL);
    jw_kint(&w, "hangs", s->nhangs);
    /* per rank: the stream of each rank with the most steps; rank-less per pid */
    jw_key(&w, "ranks");
    jw_arr_begin(&w);
    for (int i = 0; i < s->nstreams; i++) {
        const sup_stream *x = &s->streams[i];
        int best = 1;
        for (int j = 0; j < s->nstreams && best; j++) {
            const sup_stream *y = &s->streams[j];
            if (j == i) continue;
            int same = x->rank >= 0 ? y->rank == x->rank : (y->rank < 0 && y->pid == x->pid);
            if (same && (y->steps > x->steps || (y->steps == x->steps && j < i))) best = 0;
        }
        if (!best) continue;
        jw_obj_begin(&w);
        if (x->rank >= 0)
            jw_kint(&w, "rank", x->rank);
        else {
            jw_key(&w, "rank");
            jw_null(&w);
        }
        jw_kint(&w, "pid", x->pid);
        jw_kuint(&w, "step", x->steps);
        last_step_json(&w, s, x->last_end_t, t);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    put_json(s, "heartbeat.json", &b);
    s->last_hb = mono_now();
    s->hb_steps = s->total_steps;
}

static void attempt_json(jw *w, const sup_attempt *a, int n)
{
    jw_obj_begin(w);
    jw_kint(w, "attempt", n);
    jw_kint(w, "pid", a->pid);
    jw_key(w, "start_t");
    jw_numf(w, a->start_t, 3);
    jw_key(w, "end_t");
    if (a->ended)
        jw_numf(w, a->end_t, 3);
    else
        jw_null(w);
    jw_key(w, "duration_s");
    if (a->ended)
        jw_numf(w, a->end_t - a->start_t, 3);
    else
        jw_null(w);
    jw_key(w, "exit_code");
    if (a->ended && !a->signal)
        jw_int(w, a->exit_code);
    else
        jw_null(w);
    jw_key(w, "signal");
    if (a->signal)
        jw_int(w, a->signal);
    else
        jw_null(w);
    jw_kstr(w, "ended_by", a->ended ? a->ended_by : "running");
    jw_kuint(w, "steps", a->steps);
    jw_key(w, "first_step_t");
    jw_numf(w, a->first_step_t, 3);
    jw_key(w, "last_step_t");
    jw_numf(w, a->last_step_t, 3);
    jw_kint(w, "checkpoints", a->nckpt);
    jw_key(w, "last_checkpoint_t");
    jw_numf(w, a->last_ckpt_t, 3);
    jw_kbool(w, "restarted", a->restarted);
    jw_key(w, "backoff_s");
    jw_numf(w, a->restarted ? a->backoff_s : NAN, 3);
    if (a->stop_why[0]) jw_kstr(w, "stopped", a->stop_why);
    jw_obj_end(w);
}

static int attempt_failed(const sup_attempt *a)
{
    return a->ended && strcmp(a->ended_by, "user") != 0 &&
           (a->signal || a->exit_code != 0 || strcmp(a->ended_by, "hang") == 0);
}

static void write_attempts(sup *s)
{
    buf b;
    jw w;
    doc_begin(&w, &b, 16u << 20);
    jw_key(&w, "attempts");
    jw_arr_begin(&w);
    for (int i = 0; i < s->natt; i++) attempt_json(&w, &s->att[i], i + 1);
    jw_arr_end(&w);
    jw_obj_end(&w);
    put_json(s, "attempts.json", &b);
}

/* ---- hang watch ---- */

/* A checkpoint or an evaluation in progress (the auto hook's live/busy-PID
 * files): the watch pauses while one lasts, up to SUP_BUSY_CAP x the bound. */
static int busy_now(sup *s)
{
    char live[PATH_MAX + 8];
    snprintf(live, sizeof(live), "%s/live", s->run_dir);
    DIR *d = opendir(live);
    if (!d) return 0;
    struct dirent *de;
    int busy = 0;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "busy-", 5) != 0) continue;
        long pid = strtol(de->d_name + 5, NULL, 10);
        if (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) {
            busy = 1;
            break;
        }
    }
    closedir(d);
    return busy;
}

/* Every process of the run: our descendants, whatever session or group
 * they moved to (we are the subreaper, so the orphans among them are our
 * children). Signals them all; returns how many there were. */
static int tree_signal(int sig, pid_t skip_pgid)
{
    pid_t pids[HD_MAX_PROCS];
    int n = hd_tree(getpid(), pids, NULL, HD_MAX_PROCS);
    for (int i = 1; i < n; i++)
        if (skip_pgid <= 0 || getpgid(pids[i]) != skip_pgid) kill(pids[i], sig);
    return n - 1;
}

static void group_signal(sup *s, int sig)
{
    /* the root's group first (one call, no race with its forks), then the
     * rest of the tree (setsid, reparented orphans) */
    if (s->child > 0) kill(-s->child, sig);
    tree_signal(sig, 0);
}

/* Zombies of the tree that came to us; never the root, whose status the
 * caller takes (root 0: it is already reaped). */
void sup_reap_others(pid_t root)
{
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0 ||
            si.si_pid == root)
            return;
        waitpid(si.si_pid, NULL, 0);
    }
}

/* End what is left of the tree: SIGTERM, SIGKILL after the grace period,
 * then at most SUP_KILL_WAIT_S more for processes the kernel holds (D
 * state). Returns the number still there (0: all gone). */
static int end_tree(sup *s)
{
    sup_reap_others(0);
    if (tree_signal(SIGTERM, 0) <= 0) return 0;
    double t0 = mono_now();
    int killed = 0, left = 1;
    while (left > 0) {
        struct timespec nap = {0, 20 * 1000000L};
        nanosleep(&nap, NULL);
        sup_reap_others(0);
        double el = mono_now() - t0;
        if (el >= s->o.kill_grace_s) {
            left = tree_signal(SIGKILL, 0);
            killed = 1;
        } else {
            left = tree_signal(0, 0);
        }
        if (killed && el >= s->o.kill_grace_s + SUP_KILL_WAIT_S) break;
    }
    return left;
}

void sup_end_leftovers(sup *s)
{
    int left = end_tree(s);
    if (left > 0) {
        fprintf(stderr, "trainperf: %d process%s of the run did not end %.0f s after SIGKILL "
                        "(stuck in the kernel?); going on without waiting for them\n",
                left, left == 1 ? "" : "es", SUP_KILL_WAIT_S);
        fflush(stderr);
    }
}

void sup_tail_start(sup *s)
{
    s->tail = 1;
}

int sup_tail_done(sup *s)
{
    /* a kill that cannot complete (D state) is not waited for past the bound */
    return isfinite(s->term_t) && mono_now() - s->term_t >= s->o.kill_grace_s + SUP_KILL_WAIT_S;
}

void sup_user_signal(sup *s, int sig)
{
    if (s->user_sig && isfinite(s->term_t)) {
        /* asked twice: no more grace */
        group_signal(s, SIGKILL);
        s->killed = 1;
        return;
    }
    s->user_sig = 1;
    /* the root's group has it from the handler: a second SIGINT would cut
     * short a clean shutdown */
    tree_signal(sig, s->pgid);
    if (!isfinite(s->term_t)) s->term_t = mono_now();
}

static const char *action_name(int a)
{
    return a == SUP_HANG_KILL ? "kill" : a == SUP_HANG_RESTART ? "restart" : "dump";
}

/* since: from the last step, or from the attempt's start when it made none
 * (first: 1). kind: the bound's (bound_now). */
static void fire_hang(sup *s, double t, double since, double bound, const char *kind, int first,
                      int color)
{
    s->nhangs++;
    char headline[256], what[96];
    if (first)
        snprintf(what, sizeof(what), "no first step %.1f s after the command started", since);
    else
        snprintf(what, sizeof(what), "no step for %.1f s", since);
    snprintf(headline, sizeof(headline),
             "trainperf hang %d: %s (bound %.1f s, %s), attempt %d, t = %.1f s", s->nhangs, what,
             bound, kind, s->natt, t);
    hd_result *res = calloc(1, sizeof(*res));
    if (!res) return;
    /* with the root gone, the tree it left (its first process, ours now) */
    pid_t root = s->child;
    if (root <= 0) {
        pid_t pids[2];
        root = hd_tree(getpid(), pids, NULL, 2) == 2 ? pids[1] : 0;
    }
    /* the processes that recorded steps: the verdict names them, not a
     * child sleeping meanwhile */
    pid_t stepped[SUP_MAX_STREAMS];
    int nstepped = 0;
    for (int k = 0; k < s->nstreams; k++) {
        int j = 0;
        while (j < nstepped && stepped[j] != s->streams[k].pid) j++;
        if (j == nstepped && s->streams[k].pid > 0) stepped[nstepped++] = s->streams[k].pid;
    }
    int rc = root > 0 ? hd_dump(s->run_dir, root, s->nhangs, headline, stepped, nstepped, res)
                      : TPF_EIO;
    snprintf(s->last_verdict, sizeof(s->last_verdict), "%s", res->verdict);
    snprintf(s->last_stacks, sizeof(s->last_stacks), "%s", rc ? "" : res->stacks);
    char msg[1024];
    snprintf(msg, sizeof(msg), "hang: %s (%s %.0f s, %sbound %.0f s; stacks in %s)",
             res->verdict[0] ? res->verdict : "no process answered",
             first ? "no first step after" : "no step for", since, first ? "startup " : "", bound,
             rc ? "(not written)" : res->stacks);

    buf b;
    buf_init(&b, 1u << 20);
    jw w;
    jw_init(&w, &b, 0);
    jw_obj_begin(&w);
    jw_key(&w, "t");
    jw_numf(&w, t, 3);
    jw_kstr(&w, "rule", "hang_watch");
    char expr[96];
    snprintf(expr, sizeof(expr), "%s %.1fs", first ? "no first step for" : "no step for", bound);
    jw_kstr(&w, "expr", expr);
    jw_kstr(&w, "state", "fired");
    jw_kstr(&w, "severity", "critical");
    jw_knum(&w, "value", since);
    jw_kstr(&w, "message", msg);
    jw_obj_end(&w);
    append_line(s, "alerts.jsonl", &b);

    buf_init(&b, 4u << 20);
    jw_init(&w, &b, 0);
    jw_obj_begin(&w);
    jw_kint(&w, "hang", s->nhangs);
    jw_key(&w, "t");
    jw_numf(&w, t, 3);
    jw_kint(&w, "attempt", s->natt);
    jw_key(&w, "since_last_step_s");
    jw_numf(&w, since, 3);
    jw_key(&w, "bound_s");
    jw_numf(&w, bound, 3);
    jw_kstr(&w, "bound_kind", kind);
    jw_kbool(&w, "before_first_step", first);
    jw_kstr(&w, "verdict", res->verdict);
    jw_kstr(&w, "stacks", rc ? NULL : res->stacks);
    jw_kstr(&w, "action", action_name(s->o.on_hang));
    jw_key(&w, "processes");
    hd_procs_json(&w, res);
    jw_obj_end(&w);
    append_line(s, "hangs.jsonl", &b);
    free(res);

    fprintf(stderr, "\n%strainperf: %s%s\n", color ? CLI_RED CLI_BOLD : "", msg,
            color ? CLI_RESET : "");
    if (s->o.on_hang != SUP_HANG_DUMP) {
        fprintf(stderr, "trainperf: --on-hang %s: ending the command (SIGTERM, SIGKILL after %.0f s)\n",
                action_name(s->o.on_hang), s->o.kill_grace_s);
        s->hang_ended = 1;
        s->term_t = mono_now();
        group_signal(s, SIGTERM);
    }
    fflush(stderr);
    heartbeat(s, "hung");
}

void sup_attempt_start(sup *s, pid_t child)
{
    if (s->natt == SUP_MAX_ATTEMPTS) return;
    sup_attempt *a = &s->att[s->natt++];
    memset(a, 0, sizeof(*a));
    a->pid = child;
    a->start_t = run_t(s);
    a->first_step_t = a->last_step_t = a->last_ckpt_t = NAN;
    a->ended_by = "running";
    s->child = child;
    s->pgid = child;
    s->stall_fired = 0;
    s->hang_ended = 0;
    s->term_t = NAN;
    s->killed = 0;
    s->tail = 0;
    s->busy_end_t = s->busy_since_t = NAN;
    s->seen_t = NAN;
    s->next_tick = 0;
    heartbeat(s, "running");
}

void sup_tick(sup *s, int color)
{
    double m = mono_now();
    if (m < s->next_tick) return;
    s->next_tick = m + SUP_TICK_S;
    if ((s->child <= 0 && !s->tail) || !s->natt) return;
    /* again at every tick: a process forked since the last one is caught too */
    if (isfinite(s->term_t) && m - s->term_t >= s->o.kill_grace_s) {
        group_signal(s, SIGKILL);
        s->killed = 1;
    }
    uint64_t before = s->total_steps;
    tail_read(s);
    sup_attempt *a = &s->att[s->natt - 1];
    double t = run_t(s);
    if (s->total_steps != before) {
        s->stall_fired = 0; /* progress re-arms the watch */
        s->seen_t = t;
    }
    if (s->total_steps != s->hb_steps || m - s->last_hb >= SUP_HEARTBEAT_IDLE_S)
        heartbeat(s, s->stall_fired ? "hung" : "running");
    if (s->hang_ended || s->stall_fired) return;
    const char *kind = "";
    double bound = bound_now(s, a, &kind);
    if (bound <= 0) return;
    if (busy_now(s)) {
        /* one busy stretch: since it began, or since the last step within it
         * (eval, steps, a checkpoint may follow each other between two ticks) */
        if (!isfinite(s->busy_since_t) || a->last_step_t > s->busy_since_t)
            s->busy_since_t = isfinite(s->busy_since_t) ? a->last_step_t : t;
        if (t - s->busy_since_t < SUP_BUSY_CAP * bound) s->busy_end_t = t;
    } else {
        s->busy_since_t = NAN;
    }
    /* before the attempt's first step: since it started (rendezvous, loading) */
    double mark = isfinite(a->last_step_t) ? a->last_step_t : a->start_t;
    if (isfinite(s->busy_end_t) && s->busy_end_t > mark) mark = s->busy_end_t;
    /* steps reach steps.csv a sampling interval late (more on a loaded host):
     * count from when they were seen, so our own lag never fires the watch
     * early (it may fire up to that lag late) */
    if (isfinite(s->seen_t) && s->seen_t > mark) mark = s->seen_t;
    if (!isfinite(mark)) return;
    double since = t - mark;
    /* before the first step nothing was seen to count from: a first step
     * that ended just inside the bound may still be on its way to
     * steps.csv, so the watch waits the collector's lag on top */
    double need = bound + (isfinite(a->last_step_t) ? 0 : s->o.settle_s);
    if (since > need) {
        s->stall_fired = 1;
        fire_hang(s, t, t - (isfinite(a->last_step_t) ? a->last_step_t : a->start_t), bound,
                  kind, !isfinite(a->last_step_t), color);
    }
}

static int restart_wanted(const sup *s, const sup_attempt *a)
{
    /* --on-hang restart is the explicit ask, whatever --restart-on says */
    if (strcmp(a->ended_by, "hang") == 0) return s->o.on_hang == SUP_HANG_RESTART;
    if (a->signal) return (s->o.restart_on & SUP_ON_SIGNAL) != 0;
    if (a->exit_code == 0) return 0;
    if (s->o.restart_on & SUP_ON_NONZERO) return 1;
    for (int i = 0; i < s->o.ncodes; i++)
        if (s->o.codes[i] == a->exit_code) return 1;
    return 0;
}

int sup_attempt_end(sup *s, int status, int user_signal, volatile sig_atomic_t *stop)
{
    if (!s->natt) return 0;
    sup_attempt *a = &s->att[s->natt - 1];
    a->ended = 1;
    a->end_t = run_t(s);
    if (WIFSIGNALED(status)) {
        a->signal = WTERMSIG(status);
        a->exit_code = 128 + a->signal;
    } else {
        a->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    a->ended_by = user_signal ? "user" : s->hang_ended ? "hang" : a->signal ? "signal" : "exit";
    pid_t ended = s->child;
    s->child = 0;
    int again = s->o.restarts > 0 && !user_signal && restart_wanted(s, a);
    if (again && s->natt > s->o.restarts) {
        snprintf(a->stop_why, sizeof(a->stop_why), "restart limit reached (--restart %d)",
                 s->o.restarts);
        again = 0;
    }
    if (again && s->o.no_progress > 0 && !a->steps) {
        /* The collector streams steps.csv once per sample: let the last
         * attempt's steps arrive before judging its progress. */
        double until = mono_now() + s->o.settle_s;
        while (mono_now() < until && !(stop && *stop)) {
            struct timespec nap = {0, 100 * 1000000L};
            nanosleep(&nap, NULL);
        }
        tail_read(s);
        s->noprog_run = a->steps ? 0 : s->noprog_run + 1;
        if (s->noprog_run >= s->o.no_progress) {
            snprintf(a->stop_why, sizeof(a->stop_why),
                     "no progress: %d attempt%s in a row made no step (--restart-no-progress %d)",
                     s->noprog_run, s->noprog_run == 1 ? "" : "s", s->o.no_progress);
            again = 0;
        }
    }
    if (again && stop && *stop) again = 0;
    /* what the attempt left running never overlaps the next one */
    if (again) sup_end_leftovers(s);
    if (again) {
        int done = s->natt - 1;
        double wait = s->o.backoff_s;
        for (int i = 0; i < done && wait < s->o.backoff_max_s; i++) wait *= 2;
        if (wait > s->o.backoff_max_s) wait = s->o.backoff_max_s;
        a->restarted = 1;
        a->backoff_s = wait;
        fprintf(stderr, "trainperf: attempt %d (pid %ld) ended with %s%d after %llu steps; "
                        "restarting in %.1f s (%d of %d)\n",
                s->natt, (long)ended, a->signal ? "signal " : "exit ",
                a->signal ? a->signal : a->exit_code, (unsigned long long)a->steps, wait,
                s->natt, s->o.restarts);
        fflush(stderr);
        write_attempts(s);
        heartbeat(s, "restarting");
        double until = mono_now() + wait;
        while (mono_now() < until) {
            if (stop && *stop) {
                a->restarted = 0;
                snprintf(a->stop_why, sizeof(a->stop_why), "interrupted during the backoff");
                write_attempts(s);
                return 0;
            }
            struct timespec nap = {0, 50 * 1000000L};
            nanosleep(&nap, NULL);
        }
        return 1;
    }
    if (a->stop_why[0] && s->o.restarts > 0) {
        fprintf(stderr, "trainperf: not restarting: %s\n", a->stop_why);
        fflush(stderr);
    }
    write_attempts(s);
    return 0;
}

/* The FIFOs and busy marks of processes that are gone: a FIFO left in the
 * run directory would block a plain `cp -r` of it. */
static void clean_live(sup *s)
{
    char live[PATH_MAX + 8];
    snprintf(live, sizeof(live), "%s/live", s->run_dir);
    DIR *d = opendir(live);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        int stack = strncmp(n, "pystack-", 8) == 0;
        if (strncmp(n, "ctl-", 4) != 0 && strncmp(n, "busy-", 5) != 0 && !stack) continue;
        char p[PATH_MAX + 300];
        snprintf(p, sizeof(p), "%s/%s", live, n);
        struct stat st;
        /* faulthandler files that never received a dump: only their header
         * line (every forked DataLoader worker has one) */
        if (stack && (stat(p, &st) != 0 || st.st_size > 96)) continue;
        unlink(p);
    }
    closedir(d);
}

void sup_finish(sup *s)
{
    clean_live(s);
    tail_read(s);
    s->child = 0;
    write_attempts(s);
    heartbeat(s, "finished");

    /* failures.json: the figures the report shows (docs/run-format.md) */
    int failures = 0;
    double run_s = 0, lost_work = 0, restart_s = 0;
    for (int i = 0; i < s->natt; i++) {
        const sup_attempt *a = &s->att[i];
        if (!a->ended) continue;
        run_s += a->end_t - a->start_t;
        if (!attempt_failed(a)) continue;
        failures++;
        /* work since the last checkpoint (all of it without one) is lost */
        double from = isfinite(a->last_ckpt_t) ? a->last_ckpt_t : a->start_t;
        if (a->end_t > from) lost_work += a->end_t - from;
        if (i + 1 < s->natt) {
            const sup_attempt *b = &s->att[i + 1];
            double resume = isfinite(b->first_step_t) ? b->first_step_t
                                                      : (b->ended ? b->end_t : b->start_t);
            if (resume > a->end_t) restart_s += resume - a->end_t;
        }
    }
    /* the run's own history counts only where failures were expected and
     * restarted: one crash of an unsupervised run is no failure rate */
    int hist = failures && s->o.restarts > 0;
    double mtbf = s->o.mtbf_s > 0 ? s->o.mtbf_s : hist ? run_s / failures : NAN;
    const char *mtbf_src = s->o.mtbf_s > 0 ? "option" : hist ? "restarts" : NULL;
    fail_ckpt ck;
    fail_ckpt_load(s->run_dir, &ck);

    buf b;
    jw w;
    doc_begin(&w, &b, 1u << 20);
    jw_key(&w, "options");
    jw_obj_begin(&w);
    jw_key(&w, "hang_timeout_s");
    if (s->o.hang_timeout_s > 0)
        jw_num(&w, s->o.hang_timeout_s);
    else
        jw_null(&w);
    jw_kstr(&w, "hang_timeout", s->o.hang_timeout_s > 0 ? "given" : s->o.hang_timeout_s < 0 ? "off" : "auto");
    jw_knum(&w, "hang_floor_s", s->o.hang_floor_s);
    jw_key(&w, "startup_timeout_s");
    if (s->o.startup_s > 0)
        jw_num(&w, s->o.startup_s);
    else
        jw_null(&w);
    jw_kstr(&w, "on_hang", action_name(s->o.on_hang));
    jw_kint(&w, "restarts", s->o.restarts < 0 ? 0 : s->o.restarts);
    jw_knum(&w, "mtbf_s", s->o.mtbf_s > 0 ? s->o.mtbf_s : NAN);
    jw_obj_end(&w);
    jw_kint(&w, "attempts", s->natt);
    jw_kint(&w, "failures", failures);
    jw_kint(&w, "hangs", s->nhangs);
    jw_key(&w, "hang_bound_s");
    jw_numf(&w, s->o.hang_timeout_s > 0 ? s->o.hang_timeout_s : s->bound_s > 0 ? s->bound_s : NAN, 3);
    jw_kstr(&w, "last_hang_verdict", s->nhangs ? s->last_verdict : NULL);
    jw_kstr(&w, "last_hang_stacks", s->nhangs && s->last_stacks[0] ? s->last_stacks : NULL);
    jw_key(&w, "run_s");
    jw_numf(&w, run_s, 3);
    jw_key(&w, "lost_work_s");
    jw_numf(&w, lost_work, 3);
    jw_key(&w, "restart_s");
    jw_numf(&w, restart_s, 3);
    jw_key(&w, "time_lost_s");
    jw_numf(&w, lost_work + restart_s, 3);
    jw_knum(&w, "mtbf_s", mtbf);
    jw_kstr(&w, "mtbf_source", mtbf_src);
    jw_key(&w, "checkpoint");
    fail_ckpt_json(&w, &ck, mtbf);
    jw_obj_end(&w);
    put_json(s, "failures.json", &b);
}
