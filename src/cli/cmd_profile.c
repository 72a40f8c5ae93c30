/* trainperf profile RUN --steps N | --memory: a torch.profiler window of N
 * steps, or a CUDA memory snapshot, taken now in a run already going under
 * `trainperf run`. The request is one file, RUN/live/request.json; the
 * zero-code hook of each training process polls it from its stack sampler's
 * thread (python/trainperf/_ondemand.py) and answers in
 * RUN/live/answer-PID.json, which this command reads until every process
 * that took the request is done. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/run_live.h"
#include "cli/supervise.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/buf.h"
#include "util/jsonr.h"
#include "util/jsonw.h"

#define PROF_MAX_STEPS 1000      /* as _ondemand.MAX_STEPS */
#define PROF_ACCEPT_S 30.0       /* for a first process to take the request */
#define PROF_GATHER_S 3.0        /* for the other processes after the first one */
#define PROF_MAX_ANSWERS 256

static void profile_usage(FILE *f)
{
    fprintf(f,
            "usage: trainperf profile RUN_DIR [--steps N] [--memory] [--record-shapes]\n"
            "                         [--profile-memory] [--with-stack] [--timeout D] [--json]\n\n"
            "Take a profile now in a run going under `trainperf run` (a Python command with\n"
            "the zero-code hook): --steps N records a torch.profiler window of the next N\n"
            "steps of every training process (1..%d), written to RUN/profile/ and analysed\n"
            "in the report like --profile windows; --memory writes a CUDA memory snapshot of\n"
            "each process that has CUDA up to RUN/memory/ (https://pytorch.org/memory_viz).\n"
            "Waits until the processes are done, at most --timeout (default 10m).\n",
            PROF_MAX_STEPS);
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile sig_atomic_t interrupted;
static void on_int(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct answer {
    pid_t pid;
    int final;      /* every kind asked for is done or skipped */
    int done;       /* something was written */
    int gone;       /* the process ended before it was final */
    jr_doc doc;
    int loaded;
} answer;

static const char *kind_state(const jr_node *root, const char *kind)
{
    const jr_node *k = jr_get(root, kind);
    return k ? jr_pstr(k, "state") : NULL;
}

static int is_final(const char *st)
{
    return st && (strcmp(st, "done") == 0 || strcmp(st, "skipped") == 0);
}

/* Read every RUN/live/answer-PID.json of request id into a[]; returns how many. */
static int read_answers(const char *dir, long long id, int steps, int memory, answer *a, int n)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/live", dir);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "answer-", 7) != 0) continue;
        char *end;
        long pid = strtol(de->d_name + 7, &end, 10);
        if (pid <= 0 || strcmp(end, ".json") != 0) continue;
        int i;
        for (i = 0; i < n && a[i].pid != (pid_t)pid; i++) {
        }
        if (i == n && n == PROF_MAX_ANSWERS) continue;
        if (i < n && a[i].final) continue;
        snprintf(path, sizeof(path), "%s/live/%s", dir, de->d_name);
        jr_doc doc;
        char err[128];
        if (jr_load_file(&doc, path, 1u << 20, err, sizeof(err)) != 0) continue;
        if (jr_pnum(doc.root, "id") != (double)id) {
            jr_free(&doc);
            continue;
        }
        if (i == n) {
            memset(&a[n], 0, sizeof(a[n]));
            a[n++].pid = (pid_t)pid;
        }
        if (a[i].loaded) jr_free(&a[i].doc);
        a[i].doc = doc;
        a[i].loaded = 1;
        const char *ps = kind_state(doc.root, "profile"), *ms = kind_state(doc.root, "memory");
        a[i].final = (!steps || is_final(ps)) && (!memory || is_final(ms));
        a[i].done = (ps && strcmp(ps, "done") == 0) || (ms && strcmp(ms, "done") == 0);
    }
    if (d) closedir(d);
    for (int i = 0; i < n; i++)
        if (!a[i].final && !live_pid_alive(a[i].pid)) a[i].gone = 1;
    return n;
}

static void say_kind(const answer *a, const char *kind, const char *label)
{
    const jr_node *k = jr_get(a->doc.root, kind);
    if (!k) return;
    const char *st = jr_pstr(k, "state");
    double rank = jr_pnum(a->doc.root, "rank");
    char who[64];
    if (isfinite(rank))
        snprintf(who, sizeof(who), "rank %d (pid %ld)", (int)rank, (long)a->pid);
    else
        snprintf(who, sizeof(who), "pid %ld", (long)a->pid);
    if (st && strcmp(st, "done") == 0) {
        const jr_node *files = jr_get(k, "files");
        double first = jr_pnum(k, "first_step"), last = jr_pnum(k, "last_step");
        printf("%s: %s", who, label);
        if (isfinite(first) && isfinite(last)) printf(" of steps %.0f-%.0f", first, last);
        const jr_node *early = jr_get(k, "ended_early");
        if (early && early->type == JR_BOOL && early->num == 1)
            printf(" (the process ended first: the steps it made)");
        printf(":");
        for (int i = 0; files && jr_at(files, i); i++) printf(" %s", jr_str(jr_at(files, i)));
        printf("\n");
        const char *note = jr_pstr(k, "note");
        if (note) printf("  note: %s\n", note);
    } else if (st && strcmp(st, "skipped") == 0) {
        const char *why = jr_pstr(k, "reason");
        printf("%s: no %s: %s\n", who, label, why ? why : "skipped");
    } else {
        printf("%s: %s %s, not finished\n", who, label, st ? st : "asked");
    }
}

int cmd_profile(int argc, char **argv)
{
    const char *dir = NULL;
    long steps = 0;
    int memory = 0, json = 0, shapes = 0, pmem = 0, stack = 0;
    double timeout = 600;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            profile_usage(stdout);
            return CLI_OK;
        } else if (strcmp(a, "--steps") == 0) {
            if (!val || cli_parse_long(val, &steps) != 0 || steps < 1 || steps > PROF_MAX_STEPS) {
                cli_error("profile: --steps needs a number of steps 1..%d, not '%s'",
                          PROF_MAX_STEPS, val ? val : "");
                return CLI_USAGE;
            }
            i++;
        } else if (strcmp(a, "--timeout") == 0) {
            timeout = val ? sup_parse_duration(val) : -1;
            if (!(timeout > 0)) {
                cli_error("profile: --timeout needs a duration (90s, 10m), not '%s'",
                          val ? val : "");
                return CLI_USAGE;
            }
            i++;
        } else if (strcmp(a, "--memory") == 0) {
            memory = 1;
        } else if (strcmp(a, "--record-shapes") == 0) {
            shapes = 1;
        } else if (strcmp(a, "--profile-memory") == 0) {
            pmem = 1;
        } else if (strcmp(a, "--with-stack") == 0) {
            stack = 1;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (a[0] == '-' && a[1]) {
            cli_error("profile: unknown option '%s' (see `trainperf profile --help`)", a);
            return CLI_USAGE;
        } else if (dir) {
            cli_error("profile: one RUN_DIR, not '%s' too", a);
            return CLI_USAGE;
        } else {
            dir = a;
        }
    }
    if (!dir) {
        profile_usage(stderr);
        return CLI_USAGE;
    }
    if (!steps && !memory) {
        cli_error("profile: say what to take: --steps N (a profiler window) and/or --memory");
        return CLI_USAGE;
    }
    if (!steps && (shapes || pmem || stack)) {
        cli_error("profile: --record-shapes, --profile-memory and --with-stack go with --steps N");
        return CLI_USAGE;
    }
    live_run lr;
    char err[PATH_MAX + 200];
    if (live_run_find(dir, &lr, err, sizeof(err)) != 0) {
        cli_error("profile: %s", err);
        return CLI_USAGE;
    }
    if (!lr.nhooked) {
        cli_error("profile: no process of %s has trainperf's zero-code hook (a Python command "
                  "under `trainperf run`, without --no-auto)", dir);
        return CLI_USAGE;
    }

    double now = wall_s();
    long long id = (long long)(now * 1000);
    buf rq;
    buf_init(&rq, 1u << 16);
    jw w;
    jw_doc_begin(&w, &rq, "format", 1);
    jw_kint(&w, "id", id);
    jw_key(&w, "steps");
    if (steps)
        jw_int(&w, steps);
    else
        jw_null(&w);
    jw_kbool(&w, "memory", memory);
    jw_kbool(&w, "record_shapes", shapes);
    jw_kbool(&w, "profile_memory", pmem);
    jw_kbool(&w, "with_stack", stack);
    jw_knum(&w, "unix_s", now);
    /* a process that starts later does not take a request nobody waits for */
    jw_knum(&w, "expires_unix_s", now + PROF_ACCEPT_S);
    jw_obj_end(&w);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/live/request.json", dir);
    int rc = jw_error(&w) ? jw_error(&w) : afile_write(path, rq.data, rq.len);
    buf_free(&rq);
    if (rc) {
        cli_error("profile: cannot write %s: %s", path, tpf_strerror(rc));
        return CLI_FAIL;
    }
    if (!json)
        fprintf(stderr, "trainperf: asked %d process%s of %s for %s%s%s; waiting...\n",
                lr.nhooked, lr.nhooked == 1 ? "" : "es", dir, steps ? "a profiler window" : "",
                steps && memory ? " and " : "", memory ? "a memory snapshot" : "");

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_int;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    answer *a = calloc(PROF_MAX_ANSWERS, sizeof(answer));
    if (!a) return CLI_FAIL;
    int n = 0, timed_out = 0;
    double t0 = wall_s(), first_t = -1;
    for (;;) {
        n = read_answers(dir, id, (int)steps, memory, a, n);
        double t = wall_s();
        if (n && first_t < 0) first_t = t;
        int pending = 0;
        for (int i = 0; i < n; i++) pending += !a[i].final && !a[i].gone;
        if (interrupted) break;
        if (!n && t - t0 > PROF_ACCEPT_S) break;
        /* every process with the hook answered, or the others had time to */
        if (n && !pending && (n >= lr.nhooked || t - first_t >= PROF_GATHER_S)) break;
        if (t - t0 > timeout) {
            timed_out = 1;
            break;
        }
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }

    int ok = 0;
    for (int i = 0; i < n; i++) ok |= a[i].done;
    if (json) {
        buf out;
        buf_init(&out, 64u << 20);
        jw_doc_begin(&w, &out, "format", 1);
        jw_kint(&w, "id", id);
        jw_kbool(&w, "timed_out", timed_out);
        jw_kbool(&w, "interrupted", interrupted);
        jw_key(&w, "processes");
        jw_arr_begin(&w);
        for (int i = 0; i < n; i++) jr_write(&w, a[i].doc.root);
        jw_arr_end(&w);
        jw_obj_end(&w);
        buf_putc(&out, '\n');
        cli_write_out(NULL, &out);
        buf_free(&out);
    } else {
        for (int i = 0; i < n; i++) {
            if (steps) say_kind(&a[i], "profile", "profiler window");
            if (memory) say_kind(&a[i], "memory", "memory snapshot");
            if (a[i].gone) printf("pid %ld ended before it was done\n", (long)a[i].pid);
        }
    }
    if (!n)
        cli_error("profile: no process took the request within %.0f s (the hook's stack sampler "
                  "polls it once training has begun; TRAINPERF_SAMPLE_HZ=0 turns it off)",
                  PROF_ACCEPT_S);
    else if (timed_out || interrupted)
        fprintf(stderr, "trainperf: stopped waiting; a window still recording lands in "
                        "%s/profile/ when its steps are done\n", dir);
    for (int i = 0; i < n; i++)
        if (a[i].loaded) jr_free(&a[i].doc);
    free(a);
    return ok ? CLI_OK : CLI_FAIL;
}
