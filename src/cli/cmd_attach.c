/* trainperf attach PID: watch a process tree trainperf did not start (a
 * torchrun agent, a Slurm step, a script started by hand) until Ctrl-C,
 * SIGTERM or --duration: resources of the whole tree as `run` samples them
 * (procfs, sched, NVML), and the Python stacks of every Python process in it
 * read from outside by py-spy (cli/attach_stacks.c). Nothing is injected,
 * nothing is signalled, no process is paused. Writes a run directory (mode
 * "attached") and its report: the verdicts stacks and resources support,
 * and which need the hook. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/attach_stacks.h"
#include "cli/cli.h"
#include "cli/run_live.h"
#include "collect/collector.h"
#include "record/rundir.h"
#include "record/exporter.h"
#include "record/sinks.h"
#include "record/writers.h"
#include "report/report.h"
#include "trainperf.h"
#include "util/buf.h"
#include "util/jsonw.h"
#include "util/pstat.h"

#define ATTACH_RATE_MAX 1000.0

static volatile sig_atomic_t attach_sig;

static void on_signal(int sig)
{
    attach_sig = sig;
}

/* heartbeat.json as `run`'s supervisor writes it (docs/failures.md), so
 * that `trainperf dump RUN_DIR` finds the attached tree; no steps are
 * known attached, so their keys are null. */
static void attach_heartbeat(const char *dir, pid_t pid, const char *state, double t)
{
    buf b;
    buf_init(&b, 4096);
    jw w;
    jw_doc_begin(&w, &b, "format", 1);
    jw_kstr(&w, "state", state);
    jw_kstr(&w, "mode", "attached");
    jw_kint(&w, "supervisor_pid", getpid());
    jw_kint(&w, "pid", pid);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    jw_key(&w, "updated_unix_s");
    jw_numf(&w, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9, 3);
    jw_key(&w, "t");
    jw_numf(&w, t, 3);
    static const char *const unknown[] = {"steps", "last_step_t", "last_step_unix_s",
                                          "since_last_step_s", "hang_bound_s"};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        jw_key(&w, unknown[i]);
        jw_null(&w);
    }
    jw_obj_end(&w);
    buf_putc(&b, '\n');
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/heartbeat.json", dir);
    if (!b.err) rec_write_atomic(path, &b);
    buf_free(&b);
}

static void attach_usage(FILE *f)
{
    fprintf(f,
            "usage: trainperf attach PID [--duration S] [--out DIR] [--rate HZ] [--interval S]\n"
            "                        [--force] [--quiet]\n\n"
            "Watch a process and its descendants that trainperf did not start, until Ctrl-C,\n"
            "SIGTERM, --duration or the process's end: resources of the whole tree every\n"
            "--interval (default 1 s) as `trainperf run` samples them, and the Python stacks of\n"
            "every Python process in it, read from outside by py-spy at --rate samples a second\n"
            "(default 100; nothing is injected, no process is paused). Writes a run directory\n"
            "(--out, default ./trainperf-runs/<time>-attach-<name>) and its report: the verdicts\n"
            "that stacks and resources support, and those that need the zero-code hook\n"
            "(`trainperf run`).\n");
}

/* The process is gone, or a zombie waiting for its parent. */
static int pid_gone(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    char line[512];
    const char *p = pstat_fields(pid, line, sizeof(line));
    char st;
    return !p || (sscanf(p, " %c", &st) == 1 && (st == 'Z' || st == 'X'));
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cmd_attach(int argc, char **argv)
{
    const char *target = NULL, *out = NULL;
    double duration = 0, rate = 100, interval = 1.0;
    int force = 0, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            attach_usage(stdout);
            return CLI_OK;
        } else if (strcmp(a, "--force") == 0) {
            force = 1;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            quiet = 1;
        } else if ((strcmp(a, "--out") == 0 || strcmp(a, "-o") == 0) && val) {
            out = argv[++i];
        } else if (strcmp(a, "--duration") == 0 || strcmp(a, "--rate") == 0 ||
                   strcmp(a, "--interval") == 0) {
            double v;
            if (!val || cli_parse_double(val, &v) != 0 || !(v > 0)) {
                cli_error("attach: %s wants a positive number, not '%s'", a, val ? val : "");
                return CLI_USAGE;
            }
            if (a[2] == 'd') duration = v;
            else if (a[2] == 'r') rate = v;
            else interval = v;
            i++;
        } else if (a[0] == '-' && a[1]) {
            cli_error("attach: unknown option '%s' (see `trainperf attach --help`)", a);
            return CLI_USAGE;
        } else if (target) {
            cli_error("attach: one PID, not '%s' too", a);
            return CLI_USAGE;
        } else {
            target = a;
        }
    }
    if (!target) {
        attach_usage(stderr);
        return CLI_USAGE;
    }
    if (rate > ATTACH_RATE_MAX || rate < 1) {
        cli_error("attach: --rate %g is outside 1..%.0f samples a second", rate, ATTACH_RATE_MAX);
        return CLI_USAGE;
    }
    if (interval > 3600 || interval < 0.05) {
        cli_error("attach: --interval %g is outside 0.05..3600 seconds", interval);
        return CLI_USAGE;
    }
    pid_t pid = live_parse_pid(target);
    if (!pid) {
        cli_error("attach: '%s' is not a process id", target);
        return CLI_USAGE;
    }
    if (pid == getpid()) {
        cli_error("attach: %ld is trainperf itself", (long)pid);
        return CLI_USAGE;
    }
    if (kill(pid, 0) != 0 && errno == ESRCH) {
        cli_error("attach: no process %ld", (long)pid);
        return CLI_USAGE;
    }
    /* its memory is read from outside: the same user (or root), as py-spy needs */
    char exe_link[64], exe[PATH_MAX];
    snprintf(exe_link, sizeof(exe_link), "/proc/%ld/exe", (long)pid);
    if ((kill(pid, 0) != 0 && errno == EPERM) || (readlink(exe_link, exe, sizeof(exe) - 1) < 0 &&
                                                  (errno == EACCES || errno == EPERM))) {
        cli_error("attach: process %ld is not yours to read (another user's: run trainperf as "
                  "that user, or as root)",
                  (long)pid);
        return CLI_USAGE;
    }
    if (pid_gone(pid)) {
        cli_error("attach: process %ld has exited", (long)pid);
        return CLI_USAGE;
    }

    char comm[32] = "process", path[64];
    snprintf(path, sizeof(path), "/proc/%ld/comm", (long)pid);
    FILE *cf = fopen(path, "re");
    if (cf) {
        if (fgets(comm, sizeof(comm), cf)) comm[strcspn(comm, "\n")] = 0;
        fclose(cf);
    }

    char run_dir[PATH_MAX];
    int rc;
    if (out) {
        if (strlen(out) >= sizeof(run_dir) - 64) {
            cli_error("--out: path longer than %d bytes", (int)sizeof(run_dir) - 64);
            return CLI_USAGE;
        }
        snprintf(run_dir, sizeof(run_dir), "%s", out);
    } else {
        char label[64];
        snprintf(label, sizeof(label), "attach-%s", comm);
        rc = rec_rundir_create("trainperf-runs", label, run_dir, sizeof(run_dir));
        if (rc) {
            cli_error("cannot write the run directory under ./trainperf-runs: %s",
                      tpf_strerror(rc));
            return CLI_USAGE;
        }
    }
    int lock_fd = cli_claim_run_dir(run_dir, force, run_dir);
    if (lock_fd < 0) return CLI_USAGE;
    char absdir[PATH_MAX];
    if (!realpath(run_dir, absdir)) snprintf(absdir, sizeof(absdir), "%s", run_dir);

    cli_on_signals(on_signal, 0);

    /* the Python stacks: listed in run.json's sources beside procfs, sched, nvml */
    astk *stk = NULL;
    run_source src[2];
    memset(src, 0, sizeof(src));
    src[0].name = "pystacks";
    char why[200] = "";
    if (astk_create(&stk, absdir, pid, rate, why, sizeof(why)) == 0)
        snprintf(src[0].status, sizeof(src[0].status), "ok");
    else
        snprintf(src[0].status, sizeof(src[0].status), "%s", why);
    /* the zero-code hook's steps, phases and events: never in an attached run */
    src[1].name = "hook";
    snprintf(src[1].status, sizeof(src[1].status),
             "not available attached (steps, phases and events need `trainperf run`)");

    coll_opts co;
    memset(&co, 0, sizeof(co));
    co.run_dir = absdir;
    co.mode = "attached";
    co.root_pid = pid;
    co.interval_s = interval;
    co.auto_hook = -1;
    co.sinks = rec_sinks;
    co.nsinks = rec_nsinks;
    rec_export_config xc = {-1, 0, NULL};
    co.sink_config = &xc;
    co.extra_sources = src;
    co.nextra = 2;
    co.no_steps = 1;
    coll *c = NULL;
    rc = coll_create(&c, &co);
    if (rc == 0) rc = coll_start(c);
    if (rc) {
        cli_error("attach: cannot write the run directory %s: %s", run_dir, tpf_strerror(rc));
        coll_free(c);
        astk_free(stk);
        rec_rundir_release(lock_fd);
        return CLI_FAIL;
    }
    if (!quiet)
        fprintf(stderr,
                "trainperf: attached to pid %ld (%s): resources every %g s, %s%s%s; %s ends it\n",
                (long)pid, comm, interval, why[0] ? "no Python stacks (" : "Python stacks by py-spy",
                why, why[0] ? ")" : "", duration > 0 ? "--duration or Ctrl-C" : "Ctrl-C");
    if (why[0]) {
        astk_free(stk);
        stk = NULL;
    }

    double t0 = mono_s(), next_tick = t0, next_beat = t0 + 5.0;
    const char *ended = "the process exited";
    attach_heartbeat(absdir, pid, "running", 0);
    for (;;) {
        double now = mono_s();
        if (attach_sig) {
            ended = attach_sig == SIGINT ? "Ctrl-C" : strsignal(attach_sig);
            break;
        }
        if (duration > 0 && now - t0 >= duration) {
            ended = "--duration";
            break;
        }
        if (pid_gone(pid)) break;
        if (now >= next_tick) {
            astk_tick(stk);
            next_tick = now + 1.0;
        }
        if (now >= next_beat) {
            attach_heartbeat(absdir, pid, "running", now - t0);
            next_beat = now + 5.0;
        }
        struct timespec nap = {0, 50 * 1000000L};
        nanosleep(&nap, NULL);
    }
    if (!quiet) fprintf(stderr, "trainperf: %s: finishing the run directory\n", ended);
    /* a second Ctrl-C while finishing changes nothing: the samplers are told already */
    astk_finish(stk);
    astk_info info;
    astk_get_info(stk, &info);
    astk_free(stk);

    attach_heartbeat(absdir, pid, "finished", mono_s() - t0);
    run_exit ex = {0, 0, 0}; /* not ours: how it ends is not known here */
    coll_finish(c, &ex);
    coll_free(c);
    buf term;
    buf_init(&term, 4u << 20);
    char err[400] = "";
    int r2 = report_finish_run(absdir, cli_color(stderr), quiet ? NULL : &term, err, sizeof(err));
    if (r2 < 0) cli_warn("report: %s", err[0] ? err : tpf_strerror(r2));
    if (info.failed && info.error[0])
        cli_warn("py-spy could not read %d Python process%s: %s", info.failed,
                 info.failed == 1 ? "" : "es", info.error);
    if (!quiet && term.len) cli_print_report(&term);
    buf_free(&term);
    fprintf(stderr, "trainperf: run directory %s\n", run_dir);
    rec_rundir_release(lock_fd);
    return CLI_OK;
}
