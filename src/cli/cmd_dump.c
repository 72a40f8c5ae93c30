/* trainperf dump RUN|PID: every process's stacks now, as the hang watch saves
 * them (watch/hangdump.c): Python stacks from the zero-code hook where a
 * process has it, else from py-spy, native stacks from gdb, thread states
 * and wait channels from /proc. Of a run directory (its live processes) or
 * of any process tree. Nothing is signalled that did not ask for it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/run_live.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/buf.h"
#include "util/jsonw.h"
#include "watch/hangdump.h"

#define DUMP_MAX_ROOTS 16
#define DUMP_OUT_MAX (256u << 20)

static void dump_usage(FILE *f)
{
    fprintf(f, "usage: trainperf dump RUN_DIR|PID [--native] [--json] [--out FILE]\n\n"
               "Every process's stacks now: of the live processes of a run directory that\n"
               "`trainperf run` (or trainperf.start()) is writing, or of a process and its\n"
               "descendants. Python stacks from the zero-code hook where a process has it, else\n"
               "from py-spy; native stacks from gdb for the processes without the hook\n"
               "(--native: for every process, stopping each while gdb reads it); thread states\n"
               "and kernel wait channels from /proc. A run directory also keeps the dump as\n"
               "RUN/dumps/N.txt. --json prints where each process is instead of the stacks.\n");
}

/* RUN/dumps/<n>.txt for the first free n; its name relative to the run
 * directory into rel. 0 or -errno. */
static int save_dump(const char *run_dir, const buf *b, char *rel, size_t n)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/dumps", run_dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -errno;
    for (int i = 1; i < 100000; i++) {
        snprintf(rel, n, "dumps/%d.txt", i);
        snprintf(path, sizeof(path), "%s/%s", run_dir, rel);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) return -errno;
        close(fd);
        int rc = afile_write(path, b->data ? b->data : "", b->len);
        return rc < 0 ? rc : 0;
    }
    return -EEXIST;
}

int cmd_dump(int argc, char **argv)
{
    const char *target = NULL, *out = NULL;
    int json = 0;
    unsigned flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            dump_usage(stdout);
            return CLI_OK;
        } else if (strcmp(a, "--native") == 0) {
            flags |= HD_NATIVE;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if ((strcmp(a, "--out") == 0 || strcmp(a, "-o") == 0) && i + 1 < argc) {
            out = argv[++i];
        } else if (strncmp(a, "--out=", 6) == 0) {
            out = a + 6;
        } else if (a[0] == '-' && a[1]) {
            cli_error("dump: unknown option '%s' (see `trainperf dump --help`)", a);
            return CLI_USAGE;
        } else if (target) {
            cli_error("dump: one RUN_DIR or PID, not '%s' too", a);
            return CLI_USAGE;
        } else {
            target = a;
        }
    }
    if (!target) {
        dump_usage(stderr);
        return CLI_USAGE;
    }

    /* what to dump: a run's live processes, or a process tree */
    pid_t roots[DUMP_MAX_ROOTS];
    int nroots = 0;
    const char *run_dir = NULL, *save_dir = NULL;
    char pid_run[PATH_MAX];
    struct stat st;
    pid_t pid = live_parse_pid(target);
    if (stat(target, &st) == 0 && S_ISDIR(st.st_mode)) {
        live_run lr;
        char err[PATH_MAX + 200];
        if (live_run_find(target, &lr, err, sizeof(err)) != 0) {
            cli_error("dump: %s", err);
            return CLI_USAGE;
        }
        run_dir = save_dir = target;
        if (lr.root)
            roots[nroots++] = lr.root;
        else /* embedded mode: the processes that run trainperf.start() */
            for (int i = 0; i < lr.nhooked && nroots < DUMP_MAX_ROOTS; i++)
                roots[nroots++] = lr.hooked[i];
        if (!nroots) {
            cli_error("dump: %s is running but none of its processes is alive now", target);
            return CLI_USAGE;
        }
    } else if (pid) {
        if (!live_pid_alive(pid)) {
            cli_error("dump: no process %ld", (long)pid);
            return CLI_USAGE;
        }
        roots[nroots++] = pid;
        /* started under `trainperf run`: its hook answers through the run's live/ */
        if (live_pid_run_dir(pid, pid_run, sizeof(pid_run)) == 0) run_dir = pid_run;
    } else {
        cli_error("dump: '%s' is neither a run directory nor a process id", target);
        return CLI_USAGE;
    }

    /* a request number of its own: never one a supervisor's hang dump uses */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int req = 1000000 + (int)(((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000) % 1000000000);

    hd_result *res = calloc((size_t)nroots, sizeof(hd_result));
    buf b, body, doc;
    buf_init(&b, DUMP_OUT_MAX);
    buf_init(&body, DUMP_OUT_MAX);
    buf_init(&doc, DUMP_OUT_MAX);
    int rc = res ? 0 : TPF_ENOMEM;
    for (int i = 0; i < nroots && !rc; i++)
        rc = hd_collect(run_dir, roots[i], req, flags, NULL, 0, &res[i], &body);
    if (!rc && body.err) rc = body.err;
    if (rc) {
        cli_error("dump: %s", tpf_strerror(rc));
        free(res);
        buf_free(&b);
        buf_free(&body);
        buf_free(&doc);
        return CLI_FAIL;
    }

    char when[64];
    time_t now = ts.tv_sec;
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    buf_printf(&b, "trainperf dump of %s%s at %s\n", pid && !save_dir ? "pid " : "", target, when);
    for (int i = 0; i < nroots; i++) buf_printf(&b, "verdict: %s\n", res[i].verdict);
    buf_putc(&b, '\n');
    buf_append(&b, body.data ? body.data : "", body.len);

    char rel[64] = "";
    if (save_dir) {
        int s = save_dump(save_dir, &b, rel, sizeof(rel));
        if (s) {
            cli_warn("dump: could not keep the dump in %s/dumps/: %s", save_dir, strerror(-s));
            rel[0] = 0;
        }
    }
    int ex;
    if (json) {
        jw w;
        jw_doc_begin(&w, &doc, "format", 1);
        jw_kstr(&w, "target", target);
        jw_kstr(&w, "kind", save_dir ? "run" : "pid");
        jw_kstr(&w, "stacks", rel[0] ? rel : NULL);
        jw_key(&w, "trees");
        jw_arr_begin(&w);
        for (int i = 0; i < nroots; i++) {
            jw_obj_begin(&w);
            jw_kint(&w, "root", roots[i]);
            jw_kstr(&w, "verdict", res[i].verdict);
            jw_key(&w, "processes");
            hd_procs_json(&w, &res[i]);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
        buf_putc(&doc, '\n');
        ex = cli_write_out(out, &doc);
    } else {
        ex = cli_write_out(out, &b);
    }
    if (rel[0] && !json) fprintf(stderr, "trainperf: dump kept in %s/%s\n", save_dir, rel);
    free(res);
    buf_free(&b);
    buf_free(&body);
    buf_free(&doc);
    return ex;
}
