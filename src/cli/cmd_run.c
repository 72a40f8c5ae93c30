/* trainperf run: start a command, watch it, write its run directory, report.
 *
 * Everything that can be checked is checked before the child starts (one
 * line, exit 2, nothing run). The child gets its own process group; the
 * signals a user sends to `trainperf run` go to that group. Whatever way the
 * child ends, the run directory is finished and the child's status is ours
 * (128 + N after signal N). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "report/report.h"
#include "cli/cli.h"
#include "cli/run_prof.h"
#include "cli/supervise.h"
#include "util/human.h"
#include "collect/collector.h"
#include "cli/run_export.h"
#include "probe/probe.h"
#include "probe/segment.h"
#include "record/exporter.h"
#include "record/recover.h"
#include "record/rundir.h"
#include "record/safeout.h"
#include "record/segdir.h"
#include "record/sinks.h"
#include "record/status.h"
#include "trainperf.h"
#include "util/buf.h"
#include "watch/alerts.h"

extern char **environ;

#define RUN_MAX_ALERT_ARGS 64

typedef struct run_args {
    const char *out;
    double interval_s;
    int quiet, no_auto, no_default_alerts, clean_live, force;
    const char *alert_rules[RUN_MAX_ALERT_ARGS];
    int nalert_rules;
    const char *alerts_file;
    run_prof prof; /* profiling hook settings (run_prof.c) */
    const char *prometheus; /* [HOST:]PORT or NULL */
    int no_tensorboard;
    int no_gpu_trace;
    const char *gpu_trace; /* --gpu-trace: "windows", "full" (off: no_gpu_trace); NULL: not given */
    char **cmd;
    sup_opts sup; /* hang watch, restarts (supervise.c) */
} run_args;

static volatile sig_atomic_t run_child_pgid; /* 0 once the child is reaped */
static volatile sig_atomic_t run_signals;
static volatile sig_atomic_t run_last_signal;

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: trainperf run [OPTIONS] [--] CMD [ARGS...]\n\n"
            "Run CMD, show a live status line, write a run directory and end with a report.\n\n"
            "  --out DIR             run directory (default ./trainperf-runs/<time>-<cmd>,\n"
            "                        with a `latest` link beside it)\n"
            "  --force               replace the earlier run already in --out DIR\n"
            "  --interval SECONDS    resource sampling interval (default 1)\n"
            "  --quiet               no status line, no report text\n"
            "  --no-auto             do not inject the Python auto-instrumentation\n"
            "  --alert RULE          add an alert rule, e.g. 'gpu.util < 50 for 30s' (repeatable)\n"
            "  --alerts FILE         alert rules, one per line\n"
            "  --no-default-alerts   only the rules given\n"
            "  --clean-live          delete the shared segments (live/) at the end\n"
            "  --prometheus [HOST:]PORT  serve /metrics for Prometheus while the run lasts\n"
            "                        (HOST defaults to 127.0.0.1; docs/exporters.md)\n"
            "  --no-tensorboard      no TensorBoard event file in the run directory\n"
            "  --gpu-trace MODE      CUPTI GPU records (kernels, copies, syncs) on an NVIDIA\n"
            "                        machine: windows (default: a few steps at a time, CUDA\n"
            "                        events for every step), full (every step), off\n"
            "  --no-gpu-trace        the same as --gpu-trace off (docs/gpu.md)\n\n");
    runprof_usage(f);
    sup_usage(f);
    fprintf(f,
            "\nThe status line, the summary and the report go to stderr; CMD's own output\n"
            "is left as it is. Signals sent to trainperf go to CMD's process group.\n\n"
            "Exit status: CMD's own (its last attempt's; 128+N when it died of signal N);\n"
            "2 for bad usage;\n"
            "127 when CMD cannot be found, 126 when it cannot be executed.\n");
}

static int need_value(int argc, char **argv, int i, const char *opt)
{
    if (i + 1 >= argc) {
        cli_error("%s needs a value (see `trainperf run --help`)", opt);
        return -1;
    }
    return 0;
}

/* Returns -1 after printing the error, 1 for --help, 0 when fine. */
static int parse_args(int argc, char **argv, run_args *a)
{
    memset(a, 0, sizeof(*a));
    a->interval_s = 1.0;
    sup_opts_default(&a->sup);
    int i;
    for (i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *eq = NULL;
        if (strcmp(s, "--") == 0) {
            i++;
            break;
        }
        if (s[0] != '-' || s[1] == 0) break; /* the command */
        char opt[64];
        if (strncmp(s, "--", 2) == 0 && (eq = strchr(s, '=')) != NULL) {
            size_t n = (size_t)(eq - s);
            if (n >= sizeof(opt)) n = sizeof(opt) - 1;
            memcpy(opt, s, n);
            opt[n] = 0;
            eq++;
        } else {
            snprintf(opt, sizeof(opt), "%s", s);
        }
        int takes = strcmp(opt, "--out") == 0 || strcmp(opt, "--interval") == 0 ||
                    strcmp(opt, "--alert") == 0 || strcmp(opt, "--alerts") == 0 ||
                    strcmp(opt, "--prometheus") == 0 || strcmp(opt, "--gpu-trace") == 0 ||
                    runprof_takes_value(opt) == 1 ||
                    sup_opt_takes_value(opt);
        const char *val = NULL;
        if (takes) {
            if (eq) {
                val = eq;
            } else {
                if (need_value(argc, argv, i, opt)) return -1;
                val = argv[++i];
            }
        } else if (eq) {
            cli_error("%s takes no value", opt);
            return -1;
        }
        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) return 1;
        if (strcmp(opt, "--out") == 0) {
            if (!*val) {
                cli_error("--out needs a directory");
                return -1;
            }
            a->out = val;
        } else if (strcmp(opt, "--interval") == 0) {
            double v;
            if (cli_parse_double(val, &v) || v < 0.01 || v > 3600) {
                cli_error("--interval '%s': expected seconds between 0.01 and 3600", val);
                return -1;
            }
            a->interval_s = v;
        } else if (strcmp(opt, "--quiet") == 0 || strcmp(opt, "-q") == 0) {
            a->quiet = 1;
        } else if (strcmp(opt, "--no-auto") == 0) {
            a->no_auto = 1;
        } else if (strcmp(opt, "--no-default-alerts") == 0) {
            a->no_default_alerts = 1;
        } else if (strcmp(opt, "--force") == 0 || strcmp(opt, "-f") == 0) {
            a->force = 1;
        } else if (strcmp(opt, "--clean-live") == 0) {
            a->clean_live = 1;
        } else if (strcmp(opt, "--alert") == 0) {
            if (a->nalert_rules == RUN_MAX_ALERT_ARGS) {
                cli_error("at most %d --alert options (use --alerts FILE)", RUN_MAX_ALERT_ARGS);
                return -1;
            }
            a->alert_rules[a->nalert_rules++] = val;
        } else if (strcmp(opt, "--alerts") == 0) {
            a->alerts_file = val;
        } else if (strcmp(opt, "--prometheus") == 0) {
            a->prometheus = val;
        } else if (strcmp(opt, "--no-tensorboard") == 0) {
            a->no_tensorboard = 1;
        } else if (strcmp(opt, "--no-gpu-trace") == 0) {
            a->no_gpu_trace = 1;
        } else if (strcmp(opt, "--gpu-trace") == 0) {
            if (strcmp(val, "off") == 0) {
                a->no_gpu_trace = 1;
            } else if (strcmp(val, "windows") == 0 || strcmp(val, "full") == 0) {
                a->gpu_trace = val;
            } else {
                cli_error("--gpu-trace takes windows, full or off, not '%s'", val);
                return -1;
            }
        } else {
            int r = runprof_option(&a->prof, opt, val);
            if (r == 0) r = sup_parse_opt(&a->sup, opt, val);
            if (r < 0) return -1;
            if (r == 0) {
                cli_error("unknown option '%s' for run (see `trainperf run --help`)", s);
                return -1;
            }
        }
    }
    if (sup_opts_check(&a->sup) < 0) return -1;
    a->sup.settle_s = a->interval_s + 0.5;
    if (i >= argc) {
        cli_error("no command to run (usage: trainperf run [OPTIONS] -- CMD [ARGS...])");
        return -1;
    }
    a->cmd = argv + i;
    return 0;
}

/* PATH lookup as execvp does it, so a missing command is caught before
 * anything starts. Returns 0, or 127 (not found) / 126 (not executable). */
static int resolve_cmd(const char *cmd, char *out, size_t n)
{
    if (strchr(cmd, '/')) {
        snprintf(out, n, "%s", cmd);
        struct stat st;
        if (stat(cmd, &st) != 0) return 127;
        if (S_ISDIR(st.st_mode) || access(cmd, X_OK) != 0) return 126;
        return 0;
    }
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    int found_noexec = 0;
    while (*path) {
        const char *e = strchr(path, ':');
        size_t len = e ? (size_t)(e - path) : strlen(path);
        int w = len ? snprintf(out, n, "%.*s/%s", (int)len, path, cmd) : snprintf(out, n, "%s", cmd);
        if (w > 0 && (size_t)w < n) {
            struct stat st;
            if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
                if (access(out, X_OK) == 0) return 0;
                found_noexec = 1;
            }
        }
        if (!e) break;
        path = e + 1;
    }
    return found_noexec ? 126 : 127;
}

/* The directory of the running CLI into exe (PATH_MAX); 0, or -1. */
static int exe_dir(char *exe)
{
    ssize_t len = readlink("/proc/self/exe", exe, PATH_MAX - 1);
    if (len <= 0) return -1;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0;
    return 0;
}

void cli_python_dir(char *out, size_t n)
{
    out[0] = 0;
    const char *env = getenv("TRAINPERF_PYTHON_DIR");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    if (exe_dir(exe) != 0) return;
    char probe[PATH_MAX + 64];
    int w = snprintf(probe, sizeof(probe), "%s/../python/trainperf/__init__.py", exe);
    if (w > 0 && (size_t)w < sizeof(probe) && access(probe, R_OK) == 0) {
        w = snprintf(out, n, "%s/../python", exe);
    } else {
        w = snprintf(probe, sizeof(probe), "%s/../share/trainperf", exe);
        if (w > 0 && (size_t)w < sizeof(probe) && access(probe, R_OK) == 0)
            w = snprintf(out, n, "%s", probe);
    }
    if (w < 0 || (size_t)w >= n) out[0] = 0;
    /* pip's layout: PREFIX/bin/trainperf, the hook in
     * PREFIX/lib/pythonX.Y/site-packages/trainperf/_hook (setup.py) */
    if (!out[0]) {
        w = snprintf(probe, sizeof(probe), "%s/../lib/python3*/site-packages/trainperf/_hook/sitecustomize.py", exe);
        glob_t g;
        if (w > 0 && (size_t)w < sizeof(probe) && glob(probe, 0, NULL, &g) == 0) {
            if (g.gl_pathc > 0) {
                w = snprintf(out, n, "%s", g.gl_pathv[g.gl_pathc - 1]);
                char *sl = w > 0 && (size_t)w < n ? strrchr(out, '/') : NULL;
                if (sl) *sl = 0;
                else out[0] = 0;
            }
            globfree(&g);
        }
    }
    char real[PATH_MAX];
    if (out[0] && realpath(out, real)) snprintf(out, n, "%s", real);
}

/* The CUPTI injection library (docs/gpu.md) when GPU records can be had:
 * an NVIDIA driver is loaded (or TRAINPERF_GPU_TRACE=1 asks regardless),
 * the library sits beside the CLI (build/) or in ../lib (make install), and
 * neither --no-gpu-trace nor TRAINPERF_GPU_TRACE=0 said no. "" otherwise: a
 * machine without a GPU runs exactly as before. */
static void cupti_lib_path(char *out, size_t n, int no_gpu_trace)
{
    out[0] = 0;
    const char *want = getenv("TRAINPERF_GPU_TRACE");
    if (no_gpu_trace || (want && strcmp(want, "0") == 0)) return;
    int forced = want && strcmp(want, "1") == 0;
    if (!forced && access("/proc/driver/nvidia/version", R_OK) != 0 && access("/dev/nvidiactl", F_OK) != 0)
        return;
    char exe[PATH_MAX];
    if (exe_dir(exe) != 0) return;
    static const char *const where[] = {"", "/../lib"};
    for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
        char p[PATH_MAX + 64], real[PATH_MAX];
        int w = snprintf(p, sizeof(p), "%s%s/libtrainperf-cupti.so", exe, where[i]);
        if (w > 0 && (size_t)w < sizeof(p) && realpath(p, real) && strlen(real) < n) {
            snprintf(out, n, "%s", real);
            return;
        }
    }
}

static int has_key(const char *entry, const char *key)
{
    size_t k = strlen(key);
    return strncmp(entry, key, k) == 0 && entry[k] == '=';
}

/* The child's environment: ours, with the run's variables set. */
typedef struct child_envp {
    char **env;
    char *own[4];   /* strings made here */
} child_envp;

static void env_free(child_envp *e)
{
    free(e->own[0]);
    free(e->own[1]);
    free(e->own[2]);
    free(e->own[3]);
    free(e->env);
    memset(e, 0, sizeof(*e));
}

static int child_env(child_envp *e, const char *run_dir, const char *seg_dir, const char *pydir,
                     const char *cupti, const char *gpu_mode, int no_auto, const run_prof *prof)
{
    memset(e, 0, sizeof(*e));
    size_t n = 0;
    while (environ[n]) n++;
    e->env = calloc(n + 8 + RUNPROF_MAX_ENV, sizeof(char *));
    if (!e->env) return -1;
    size_t k = 0;
    const char *oldpp = getenv("PYTHONPATH");
    int set_pp = !no_auto && pydir[0];
    for (size_t i = 0; i < n; i++) {
        /* with --no-auto the user's own TRAINPERF_AUTO (an opt-out) stays */
        if (has_key(environ[i], "TRAINPERF_RUN_DIR") || has_key(environ[i], "TRAINPERF_SEG_DIR") ||
            (!no_auto && has_key(environ[i], "TRAINPERF_AUTO")))
            continue;
        if (set_pp && has_key(environ[i], "PYTHONPATH")) continue;
        /* --gpu-trace given: it wins over the user's TRAINPERF_GPU_TRACE_MODE */
        if (gpu_mode && has_key(environ[i], "TRAINPERF_GPU_TRACE_MODE")) continue;
        if (runprof_overrides(prof, environ[i])) continue;
        e->env[k++] = environ[i];
    }
    if (asprintf(&e->own[0], "TRAINPERF_RUN_DIR=%s", run_dir) < 0) {
        e->own[0] = NULL;
        env_free(e);
        return -1;
    }
    e->env[k++] = e->own[0];
    /* The probes' segments off the run directory (record/segdir.h). */
    if (seg_dir && *seg_dir) {
        if (asprintf(&e->own[2], "TRAINPERF_SEG_DIR=%s", seg_dir) < 0) {
            e->own[2] = NULL;
            env_free(e);
            return -1;
        }
        e->env[k++] = e->own[2];
    }
    if (!no_auto) e->env[k++] = "TRAINPERF_AUTO=1";
    /* GPU records (docs/gpu.md); an injection the user set stays theirs */
    if (cupti && *cupti && !getenv("CUDA_INJECTION64_PATH")) {
        if (asprintf(&e->own[3], "CUDA_INJECTION64_PATH=%s", cupti) < 0) {
            e->own[3] = NULL;
            env_free(e);
            return -1;
        }
        e->env[k++] = e->own[3];
        /* the CUPTI library's mode (gpu/cupti_inject.c); unset: windows */
        if (gpu_mode)
            e->env[k++] = strcmp(gpu_mode, "full") == 0 ? "TRAINPERF_GPU_TRACE_MODE=full"
                                                        : "TRAINPERF_GPU_TRACE_MODE=windows";
    }
    for (int i = 0; i < prof->nenv; i++)
        e->env[k++] = (char *)prof->env[i];
    if (set_pp) {
        int w = oldpp && *oldpp ? asprintf(&e->own[1], "PYTHONPATH=%s:%s", pydir, oldpp)
                                : asprintf(&e->own[1], "PYTHONPATH=%s", pydir);
        if (w < 0) {
            e->own[1] = NULL;
            env_free(e);
            return -1;
        }
        e->env[k++] = e->own[1];
    }
    e->env[k] = NULL;
    return 0;
}

static void on_signal(int sig)
{
    run_signals++;
    run_last_signal = sig;
    pid_t pg = (pid_t)run_child_pgid;
    /* Forward to the child's group; once it is gone the run is being
     * finished and further signals only count (the run dir is not lost). */
    if (pg > 0) kill(-pg, sig);
}

/* The handler reaches only the root's group (all it can do safely): the
 * rest of the tree (setsid, orphans) hears of it here, from the wait loop,
 * and the supervisor bounds the wait for it (SIGKILL after the grace). */
static void pass_signals(sup *sv, sig_atomic_t *passed)
{
    if (!sv || run_signals == *passed) return;
    *passed = run_signals;
    sup_user_signal(sv, (int)run_last_signal);
}

int cli_claim_run_dir(const char *run_dir, int force, const char *shown)
{
    int rc = rec_rundir_claim(run_dir, force ? REC_CLAIM_FORCE : 0);
    if (rc == TPF_EBUSY || rc == TPF_EEXIST) {
        struct stat ost;
        if (rc == TPF_EBUSY)
            cli_error("run directory %s is in use by another run", run_dir);
        else if (stat(run_dir, &ost) == 0 && !S_ISDIR(ost.st_mode))
            cli_error("--out %s is not a directory (a file of that name is there)", run_dir);
        else if (force)
            cli_error("run directory %s holds a run that --force could not replace", run_dir);
        else
            cli_error("run directory %s already holds a run (--force replaces it)", run_dir);
        return -1;
    }
    if (rc < 0) {
        cli_error("cannot write the run directory %s: %s", shown, tpf_strerror(rc));
        return -1;
    }
    return rc;
}

static void install_signals(void)
{
    cli_on_signals(on_signal, 1);
}

/* On a terminal the status line lives on the last row, below a scrolling
 * region that holds CMD's own output (as apt draws its progress bar), so the
 * two never run into each other. status_rows is the terminal's height while
 * the region is set, 0 otherwise. Each update is one write(): CMD writes to
 * the same terminal at the same time. */
static int status_rows;

static void status_put(const char *s, int n)
{
    if (n <= 0) return;
    ssize_t w = write(STDERR_FILENO, s, (size_t)n);
    (void)w;
}

static void status_reserve(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row < 4) return;
    status_rows = ws.ws_row;
    char seq[64];
    /* a free row first, so that the cursor is never on the reserved one */
    int n = snprintf(seq, sizeof(seq), "\n\0337\033[1;%dr\0338\033[1A", status_rows - 1);
    status_put(seq, n);
}

static void status_release(void)
{
    if (!status_rows) return;
    char seq[64];
    int n = snprintf(seq, sizeof(seq), "\0337\033[r\033[%d;1H\033[K\0338", status_rows);
    status_put(seq, n);
    status_rows = 0;
}

static void status_draw(const char *line)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row != status_rows) {
        status_release(); /* resized: reserve the new last row */
        status_reserve();
    }
    char out[1200];
    int n;
    if (status_rows) {
        /* cut to the width: a wrapped status line would scroll the screen */
        int width = ws.ws_col > 1 && ws.ws_col < 1024 ? ws.ws_col - 1 : 1023;
        n = snprintf(out, sizeof(out), "\0337\033[%d;1H\033[K%.*s\0338", status_rows, width,
                     line);
    } else {
        n = snprintf(out, sizeof(out), "\r%s\033[K", line);
    }
    if (n >= (int)sizeof(out)) n = (int)sizeof(out) - 1;
    status_put(out, n);
}

/* What the status sink (record/status.h, one of rec_sinks) keeps for the
 * line: filled on the collector thread, drawn from this one. */
static rec_status status_data;

static void status_line(int tty, int color)
{
    static coll_frame f;
    char alerts[REC_STATUS_ALERTS];
    if (rec_status_get(&status_data, &f, alerts) != 0) return;
    char line[1024], tmp[64];
    size_t off = 0;
#define PUT(...)                                                                          \
    do {                                                                                  \
        int w_ = snprintf(line + off, sizeof(line) - off, __VA_ARGS__);                   \
        if (w_ > 0) off = (size_t)w_ < sizeof(line) - off ? off + (size_t)w_ : sizeof(line) - 1; \
    } while (0)
    PUT("%s[trainperf %.0fs]%s", color ? CLI_BOLD : "", f.t, color ? CLI_RESET : "");
    if (f.steps.ok && f.steps.v > 0) {
        PUT(" steps %.0f", f.steps.v);
        if (f.step_rate.ok) PUT(" | %.2f steps/s", f.step_rate.v);
        if (f.sample_rate.ok && f.sample_rate.v > 0) PUT(" | %.1f samples/s", f.sample_rate.v);
        if (f.data_wait_share.ok) PUT(" | data wait %.0f%%", 100 * f.data_wait_share.v);
    } else {
        PUT(" no steps yet");
    }
    if (f.tree_cpu_pct.ok) PUT(" | CPU %.0f%%", f.tree_cpu_pct.v);
    if (f.tree_rss_bytes.ok) {
        human_bytes(tmp, sizeof(tmp), f.tree_rss_bytes.v);
        PUT(" | RSS %s", tmp);
    }
    for (int g = 0; g < f.ngpu && g < 4; g++) {
        const gpu_frame *gf = &f.gpu[g];
        PUT(" | GPU%d", gf->index);
        if (gf->lost) {
            PUT(" lost");
            continue;
        }
        if (gf->util_pct.ok) PUT(" %.0f%%", gf->util_pct.v);
        if (gf->mem_used_bytes.ok) {
            human_bytes(tmp, sizeof(tmp), gf->mem_used_bytes.v);
            PUT(" %s", tmp);
        }
        if (gf->power_w.ok) PUT(" %.0fW", gf->power_w.v);
    }
    if (alerts[0])
        PUT(" | %salerts: %s%s", color ? CLI_YELLOW : "", alerts, color ? CLI_RESET : "");
#undef PUT
    if (tty)
        status_draw(line);
    else
        fprintf(stderr, "%s\n", line);
    fflush(stderr);
}


/* 1 while a process other than the (reaped) root is still our child. */
static int orphans_left(pid_t root)
{
    sup_reap_others(root);
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The status line when its period has come (the wait loops call this every
 * 50 ms); *drawn says whether a TTY line is up and must be cleared. */
static void status_due(int tty, int color, double period, double *next, int *drawn)
{
    double now = mono_s();
    if (now < *next) return;
    status_line(tty, color);
    *drawn = tty;
    *next = now + period;
}

/* The short end-of-run summary. With the report following it (full), the
 * percentiles are left to the report, so the terminal never shows two
 * definitions of the same figure. */
static void print_summary(const coll_summary *s, const char *run_dir, const run_exit *ex, int color,
                          int full)
{
    const char *b = color ? CLI_BOLD : "", *r = color ? CLI_RESET : "";
    FILE *o = stderr;
    char how[64];
    if (ex->signal > 0)
        snprintf(how, sizeof(how), "killed by signal %d (%s)", ex->signal, strsignal(ex->signal));
    else
        snprintf(how, sizeof(how), "exit %d", ex->code);
    fprintf(o, "%strainperf:%s finished in %.1f s, %s\n", b, r, s->duration_s, how);
    if (s->steps > 0) {
        fprintf(o, "  steps       %llu (%.2f steps/s", (unsigned long long)s->steps, s->steps_per_s);
        if (isfinite(s->samples_per_s)) fprintf(o, ", %.1f samples/s", s->samples_per_s);
        if (isfinite(s->tokens_per_s)) fprintf(o, ", %.0f tokens/s", s->tokens_per_s);
        fprintf(o, ")\n");
        if (full) {
            fprintf(o, "  step time   p50 %.2f ms, p95 %.2f ms\n", s->step_p50_ms, s->step_p95_ms);
            fprintf(o, "  data wait   %.0f%% of step time, p95 %.2f ms\n", 100 * s->data_share,
                    s->data_p95_ms);
        }
    } else {
        fprintf(o, "  steps       none recorded (resources only)\n");
    }
    char rss[32];
    human_bytes(rss, sizeof(rss), s->tree_rss_max_bytes);
    if (isfinite(s->tree_cpu_mean_pct))
        fprintf(o, "  CPU         %.0f%% of one core (mean), peak RSS %s\n", s->tree_cpu_mean_pct, rss);
    for (int g = 0; g < s->ngpu; g++) {
        char used[32], total[32];
        human_bytes(used, sizeof(used), s->gpu_mem_max_bytes[g]);
        human_bytes(total, sizeof(total), s->gpu_mem_total_bytes[g]);
        fprintf(o, "  GPU %-7d util %.0f%% (mean), memory %s of %s (peak)\n", s->gpu_index[g],
                s->gpu_util_mean_pct[g], used, total);
    }
    if (s->events_dropped || s->trace_dropped)
        fprintf(o, "  dropped     %llu events (full rings), %llu trace events (cap)\n",
                (unsigned long long)s->events_dropped, (unsigned long long)s->trace_dropped);
    if (s->nalerts) fprintf(o, "  alerts      %d fired (alerts.jsonl)\n", s->nalerts);
    for (int i = 0; i < s->nsources; i++)
        if (strcmp(s->sources[i].status, "ok") != 0 && strcmp(s->sources[i].status, "disabled") != 0)
            fprintf(o, "  %-11s %s\n", s->sources[i].name, s->sources[i].status);
    if (s->exporter_lost)
        fprintf(o, "  exporters   %llu updates lost to slow consumers\n",
                (unsigned long long)s->exporter_lost);
    /* A full disk has its own line (after the summary, even with --quiet). */
    if (s->io_error[0] && !s->lost.error[0])
        fprintf(o, "  %swarning%s     %s\n", color ? CLI_YELLOW : "", r, s->io_error);
    fprintf(o, "  run dir     %s\n", run_dir);
}

static void clean_live(const char *run_dir)
{
    char live[PATH_MAX];
    int w = snprintf(live, sizeof(live), "%s/live", run_dir);
    if (w < 0 || (size_t)w >= sizeof(live)) return;
    DIR *d = opendir(live);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "seg-", 4) != 0) continue;
        char p[PATH_MAX + 300];
        w = snprintf(p, sizeof(p), "%s/%s", live, de->d_name);
        if (w > 0 && (size_t)w < sizeof(p)) unlink(p);
    }
    closedir(d);
    rmdir(live);
}

/* Start one attempt of the command in its own process group (given the
 * terminal when tty_fd >= 0). Returns 0 with *out set, the exec errno (> 0)
 * once the child is reaped, -1 (pipe) or -2 (fork) with errno set. */
static int spawn(const char *exe, char **cmd, char **env, int tty_fd, pid_t *out)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) return -1;
    sigset_t block, old;
    /* No forwarding until the child has its group. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGQUIT);
    sigprocmask(SIG_BLOCK, &block, &old);
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) {
        int e = errno;
        sigprocmask(SIG_SETMASK, &old, NULL);
        close(pfd[0]);
        close(pfd[1]);
        errno = e;
        return -2;
    }
    if (child == 0) {
        setpgid(0, 0);
        if (tty_fd >= 0) {
            signal(SIGTTOU, SIG_IGN);
            tcsetpgrp(tty_fd, getpid());
            signal(SIGTTOU, SIG_DFL);
        }
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGQUIT, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        execve(exe, cmd, env);
        int e = errno;
        ssize_t w = write(pfd[1], &e, sizeof(e));
        (void)w;
        _exit(e == ENOENT ? 127 : 126);
    }
    setpgid(child, child);
    if (tty_fd >= 0) {
        /* Both sides set it: whichever runs first, the child never reads
         * the terminal from the background. */
        signal(SIGTTOU, SIG_IGN);
        tcsetpgrp(tty_fd, child);
    }
    run_child_pgid = child;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(pfd[1]);
    int exec_errno = 0;
    ssize_t got;
    do {
        got = read(pfd[0], &exec_errno, sizeof(exec_errno));
    } while (got < 0 && errno == EINTR);
    close(pfd[0]);
    if (got == (ssize_t)sizeof(exec_errno)) {
        int st;
        waitpid(child, &st, 0);
        run_child_pgid = 0;
        if (tty_fd >= 0) tcsetpgrp(tty_fd, getpgrp());
        return exec_errno ? exec_errno : EIO;
    }
    *out = child;
    return 0;
}

/* A dead run the sweep recovered: its summary and reports (ctx: quiet). */
static void run_swept_run(const char *dir, const rec_recovery *rv, void *ctx)
{
    cli_finish_recovered(dir, rv, *(const int *)ctx);
}

int cmd_run(int argc, char **argv)
{
    run_args a;
    int pr = parse_args(argc, argv, &a);
    if (pr == 1) {
        run_usage(stdout);
        return CLI_OK;
    }
    if (pr < 0) return CLI_USAGE;
    /* The probe cannot say that its clock setting is wrong (the library never
     * prints): say it here, before anything starts. */
    const char *clk = getenv("TRAINPERF_CLOCK");
    if (clk && *clk && strcmp(clk, "mono") != 0 && strcmp(clk, "tsc") != 0) {
        cli_error("TRAINPERF_CLOCK='%s': expected mono or tsc", clk);
        return CLI_USAGE;
    }
    /* TRAINPERF_AUTO=0 in the user's environment is the documented opt-out. */
    const char *user_auto = getenv("TRAINPERF_AUTO");
    if (user_auto && strcmp(user_auto, "0") == 0) a.no_auto = 1;
    if (a.prof.any && a.no_auto) {
        cli_error("%s needs the Python auto-instrumentation, which %s turns off", a.prof.first,
                  user_auto && strcmp(user_auto, "0") == 0 ? "TRAINPERF_AUTO=0" : "--no-auto");
        return CLI_USAGE;
    }

    /* The probes would quietly take the default for a bad value: say so
     * here, before anything starts. */
    const char *rev = getenv("TRAINPERF_RING_EVENTS");
    uint32_t ring_ev;
    if (rev && *rev && probe_ring_events_parse(rev, &ring_ev) != 0) {
        cli_error("TRAINPERF_RING_EVENTS='%s': expected a whole number of events, 1..%u", rev,
                  (unsigned)SEG_RING_MAX);
        return CLI_USAGE;
    }

    /* Alerts first: a malformed rule must not leave a run directory behind. */
    alert_set *alerts = NULL;
    char err[256];
    if (alerts_create(&alerts, !a.no_default_alerts) < 0) {
        cli_error("cannot set up alerts: out of memory");
        return CLI_FAIL;
    }
    for (int i = 0; i < a.nalert_rules; i++) {
        err[0] = 0;
        if (alerts_add(alerts, a.alert_rules[i], err, sizeof(err)) < 0) {
            cli_error("bad --alert '%s': %s", a.alert_rules[i], err);
            alerts_free(alerts);
            return CLI_USAGE;
        }
    }
    if (a.alerts_file) {
        err[0] = 0;
        int rc = alerts_load_file(alerts, a.alerts_file, err, sizeof(err));
        if (rc < 0) {
            cli_error("--alerts %s: %s", a.alerts_file, err[0] ? err : tpf_strerror(rc));
            alerts_free(alerts);
            return CLI_USAGE;
        }
    }

    char exe[PATH_MAX];
    int rr = resolve_cmd(a.cmd[0], exe, sizeof(exe));
    if (rr) {
        cli_error(rr == 127 ? "command not found: %s" : "cannot execute %s: permission denied",
                  a.cmd[0]);
        alerts_free(alerts);
        return rr;
    }

    /* Listen before the run directory exists: a port in use leaves nothing. */
    int prom_fd = -1;
    char prom_url[400] = "";
    if (a.prometheus && run_export_listen(a.prometheus, &prom_fd, prom_url, sizeof(prom_url)) != CLI_OK) {
        alerts_free(alerts);
        return CLI_USAGE;
    }

    char run_dir[PATH_MAX];
    int rc;
    if (a.out) {
        if (strlen(a.out) >= sizeof(run_dir) - 64) {
            cli_error("--out: path longer than %d bytes", (int)sizeof(run_dir) - 64);
            alerts_free(alerts);
            return CLI_USAGE;
        }
        snprintf(run_dir, sizeof(run_dir), "%s", a.out);
    } else {
        const char *base = strrchr(a.cmd[0], '/');
        rc = rec_rundir_create("trainperf-runs", base ? base + 1 : a.cmd[0], run_dir,
                               sizeof(run_dir));
        if (rc) {
            cli_error("cannot write the run directory under ./trainperf-runs: %s",
                      tpf_strerror(rc));
            alerts_free(alerts);
            return CLI_USAGE;
        }
    }
    /* Segment directories of dead runs: recovered into their run
     * directories (with their summaries and reports), then removed (they
     * hold memory). */
    rec_sweep_dead_runs(run_swept_run, &a.quiet);
    /* One run per directory, locked for the whole run (rundir.h). */
    int lock_fd = cli_claim_run_dir(run_dir, a.force, a.out ? a.out : "under ./trainperf-runs");
    if (lock_fd < 0) {
        alerts_free(alerts);
        return CLI_USAGE;
    }
    rc = 0;
    char absdir[PATH_MAX];
    /* The child may chdir: give it an absolute path. */
    if (!realpath(run_dir, absdir)) snprintf(absdir, sizeof(absdir), "%s", run_dir);

    if (prom_fd >= 0) run_export_note(absdir, prom_url, a.quiet);

    /* The probes' segments go off the run directory's file system, so a
     * stalled one never stalls the steps (record/segdir.h); when that cannot
     * be, they go to live/ and the user is told once. */
    rec_segdir sd;
    char why[PATH_MAX + 100];
    if (rec_segdir_make(&sd, absdir, probe_ring_events(), why, sizeof(why)) != 0)
        cli_warn("the probes' segments go to the run directory (%s): a stalled file system "
                 "there can stall the steps",
                 why);

    char pydir[PATH_MAX];
    cli_python_dir(pydir, sizeof(pydir));
    char cupti[PATH_MAX];
    cupti_lib_path(cupti, sizeof(cupti), a.no_gpu_trace);
    child_envp cenv;
    if (child_env(&cenv, absdir, sd.path, pydir, cupti, a.gpu_trace, a.no_auto, &a.prof) != 0) {
        cli_error("out of memory");
        rec_segdir_remove(&sd);
        alerts_free(alerts);
        return CLI_FAIL;
    }

    struct timespec ts0, tsu;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    /* the wall-clock anchor at the same instant: hosts' runs are aligned on it */
    clock_gettime(CLOCK_REALTIME, &tsu);
    uint64_t start_mono = (uint64_t)ts0.tv_sec * 1000000000ull + (uint64_t)ts0.tv_nsec;
    double start_unix = (double)tsu.tv_sec + (double)tsu.tv_nsec / 1e9;
    install_signals();
    /* Processes of the tree that outlive its root come to us (not to init),
     * so the run goes on while any of them lives (orphans_left). */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    /* In the terminal's foreground, hand the terminal to the child's group:
     * otherwise a command reading the terminal (a prompt, a debugger) would
     * stop on SIGTTIN. Ctrl-C then reaches the child directly. */
    int tty_fd = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp() ? STDIN_FILENO : -1;
    pid_t child = 0;
    int exec_errno = spawn(exe, a.cmd, cenv.env, tty_fd, &child);
    if (exec_errno < 0) {
        cli_error("%s: %s", exec_errno == -1 ? "pipe" : "fork", strerror(errno));
        rec_segdir_remove(&sd);
        env_free(&cenv);
        alerts_free(alerts);
        return CLI_FAIL;
    }
    if (exec_errno > 0) {
        cli_error("cannot run %s: %s", a.cmd[0], strerror(exec_errno));
        rec_segdir_remove(&sd);
        rec_rundir_release(lock_fd);
        env_free(&cenv);
        alerts_free(alerts);
        return exec_errno == ENOENT ? 127 : 126;
    }

    coll_opts co;
    memset(&co, 0, sizeof(co));
    co.run_dir = absdir;
    co.seg_dir = sd.path[0] ? sd.path : NULL;
    co.mode = "run";
    co.argv = a.cmd;
    co.root_pid = child;
    co.interval_s = a.interval_s;
    co.auto_hook = !a.no_auto;
    co.alerts = alerts;
    co.start_mono_ns = start_mono;
    co.start_unix_s = start_unix;
    co.sinks = rec_sinks;
    co.nsinks = rec_nsinks;
    rec_status_init(&status_data);
    rec_export_config xc = {prom_fd, !a.no_tensorboard, a.quiet ? NULL : &status_data};
    co.sink_config = &xc;
    coll *c = NULL;
    rc = coll_create(&c, &co);
    if (rc == 0) rc = coll_start(c);
    if (rc) {
        /* The child runs on unwatched: never stop someone's training for us. */
        cli_warn("cannot watch the run (%s); waiting for the command", tpf_strerror(rc));
        coll_free(c);
        rec_status_destroy(&status_data);
        c = NULL;
    }
    sup *sv = NULL;
    /* the supervisor works without the collector too (restarts, stacks) */
    if (sup_create(&sv, &a.sup, absdir, start_mono, start_unix) == 0)
        sup_attempt_start(sv, child);

    int tty = isatty(2), color = cli_color(stderr);
    double period = tty ? 1.0 : 10.0, next_status = mono_s() + period;
    int status = 0, drawn = 0;
    sig_atomic_t sigs_passed = 0;
    for (;;) {
        run_signals = 0;
        sigs_passed = 0;
        for (;;) {
            pid_t w = waitpid(child, &status, WNOHANG | (tty_fd >= 0 ? WUNTRACED : 0));
            if (w == child && WIFSTOPPED(status)) {
                /* Ctrl-Z stopped the child: stop too, so the shell gets its
                 * terminal and job back; on `fg`, hand the terminal over again. */
                tcsetpgrp(tty_fd, getpgrp());
                status_release(); /* the shell gets a normal terminal back */
                kill(getpid(), SIGSTOP);
                if (tcgetpgrp(tty_fd) == getpgrp()) tcsetpgrp(tty_fd, child);
                kill(-child, SIGCONT);
                continue;
            }
            if (w == child) break;
            if (w < 0 && errno != EINTR) break;
            sup_reap_others(child);
            struct timespec nap = {0, 50 * 1000000L};
            nanosleep(&nap, NULL);
            pass_signals(sv, &sigs_passed);
            if (sv) sup_tick(sv, color);
            if (c && !a.quiet) status_due(tty, color, period, &next_status, &drawn);
        }
        run_child_pgid = 0;
        /* The terminal comes back for the summary; a Ctrl-C now only counts. */
        if (tty_fd >= 0) tcsetpgrp(tty_fd, getpgrp());
        if (drawn && status_rows)
            status_release();
        else if (drawn)
            fputs("\r\033[K", stderr);
        drawn = 0;
        /* --restart: another attempt (supervise.c decides, after its backoff) */
        if (!sv || !sup_attempt_end(sv, status, run_signals > 0, &run_signals)) break;
        pid_t next = 0;
        exec_errno = spawn(exe, a.cmd, cenv.env, tty_fd, &next);
        if (exec_errno != 0) {
            cli_warn("cannot restart %s: %s", a.cmd[0],
                     strerror(exec_errno > 0 ? exec_errno : errno));
            break;
        }
        child = next;
        if (c) coll_set_root(c, child);
        sup_attempt_start(sv, child);
    }
    /* Children that outlive the root still publish steps: keep collecting
     * until the last one exits (signals still go to the tree's group). */
    if (orphans_left(child)) {
        if (!a.quiet)
            fprintf(stderr, "trainperf: the command exited; waiting for the processes it left "
                            "running (Ctrl-C ends them)\n");
        run_child_pgid = child;
        if (sv) sup_tail_start(sv);
        while (orphans_left(child)) {
            struct timespec nap = {0, 50 * 1000000L};
            nanosleep(&nap, NULL);
            pass_signals(sv, &sigs_passed);
            if (sv) {
                sup_tick(sv, color);
                if (sup_tail_done(sv)) break;
            }
            if (c && !a.quiet) status_due(tty, color, period, &next_status, &drawn);
        }
        run_child_pgid = 0;
        if (drawn && status_rows)
            status_release();
        else if (drawn)
            fputs("\r\033[K", stderr);
        drawn = 0;
    }
    env_free(&cenv);

    run_exit ex = {1, 0, 0};
    if (WIFEXITED(status)) {
        ex.code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        ex.signal = WTERMSIG(status);
        ex.code = 128 + ex.signal;
    }
    if (c) coll_finish(c, &ex);
    if (sv) sup_finish(sv); /* after the collector: steps.csv is complete */
    sup_free(sv);
    if (c) {
        coll_summary s;
        coll_get_summary(c, &s);
        coll_free(c);
        rec_status_destroy(&status_data);
        /* Drained to the last event: the segments' memory goes back. */
        rec_segdir_remove(&sd);
        if (a.clean_live) clean_live(absdir);
        buf term;
        buf_init(&term, 4u << 20);
        err[0] = 0;
        int r2 = report_finish_run(absdir, color, a.quiet ? NULL : &term, err, sizeof(err));
        int have_report = r2 >= 0 && term.len > 0;
        /* A full disk: one line, whatever the verbosity, saying what was lost. */
        char lost[400];
        rec_loss_text(&s.lost, lost, sizeof(lost));
        if (lost[0]) cli_warn("%s", lost);
        if (s.noroom_procs)
            cli_warn("the disk holding the probes' segments (%s/live) was full: %llu process%s "
                     "could not record, %llu events lost",
                     run_dir, (unsigned long long)s.noroom_procs, s.noroom_procs == 1 ? "" : "es",
                     (unsigned long long)s.noroom_events);
        /* An exporter's target could not be written: once each, the run
         * went on without it. */
        for (int i = 0; i < s.nwarnings; i++)
            if (!(lost[0] && s.warning_err[i] == TPF_ENOSPC)) /* the line above says it */
                cli_warn("%s (the run went on without it)", s.warnings[i]);
        if (s.bad_segments)
            cli_warn("%s%s: not a readable trainperf segment (corrupt header); its events "
                     "were skipped",
                     s.bad_segment, s.bad_segments > 1 ? " and others" : "");
        if (a.quiet)
            fprintf(stderr, "trainperf: run directory %s\n", run_dir);
        else
            print_summary(&s, run_dir, &ex, color, !have_report);
        if (r2 < 0)
            cli_warn("report: %s", err[0] ? err : tpf_strerror(r2));
        else if (have_report)
            cli_print_report(&term); /* on a terminal, wrapped to its width */
        buf_free(&term);
    }
    rec_segdir_remove(&sd); /* no collector: nothing to drain */
    alerts_free(alerts);
    rec_rundir_release(lock_fd);
    return ex.code;
}
