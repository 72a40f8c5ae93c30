/* trainperf merge TRACE... -o OUT.json : per-rank traces on one timeline. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "report/report_ranks.h"
#include "trace/trace.h"
#include "cli/cli.h"
#include "trainperf.h"

static void merge_usage(FILE *f)
{
    fprintf(f,
            "usage: trainperf merge TRACE... -o OUT.json [--align start]\n"
            "       trainperf merge RUN_DIR... -o OUT.json\n\n"
            "Merge per-rank torch.profiler traces (.json or .json.gz) into one trace that\n"
            "Perfetto (ui.perfetto.dev) or chrome://tracing opens: every rank gets its own\n"
            "processes, named \"rank R: ...\", and all ranks share one timeline. Run\n"
            "directories (the nodes of one job): their trace.json files on the clock\n"
            "`trainperf report DIR...` aligns on their collectives.\n\n"
            "  -o, --out FILE   the merged trace (required)\n"
            "  --align start    start every rank at 0 instead of keeping their common clock\n");
}

/* Run directories (run.json inside): the nodes of one job, whose trace.json
 * files are merged on the clock `trainperf report DIR...` aligns them on. */
static int merge_is_job(const char *const *paths, int n)
{
    for (int i = 0; i < n; i++) {
        char p[4200];
        struct stat st;
        snprintf(p, sizeof(p), "%s/run.json", paths[i]);
        if (stat(p, &st) != 0) return 0;
    }
    return n > 0;
}

static int merge_job_into(const char *const *dirs, int n, const char *out, double *off,
                          double *aerr, char (*traces)[4200], const char **tp);

static int merge_job(const char *const *dirs, int n, const char *out)
{
    /* as many run directories as the job has nodes */
    double *off = calloc((size_t)n, sizeof(*off)), *aerr = calloc((size_t)n, sizeof(*aerr));
    char (*traces)[4200] = calloc((size_t)n, sizeof(*traces));
    const char **tp = calloc((size_t)n, sizeof(*tp));
    int rc = off && aerr && traces && tp ? merge_job_into(dirs, n, out, off, aerr, traces, tp)
                                         : (cli_error("merge: out of memory"), CLI_FAIL);
    free(off);
    free(aerr);
    free(traces);
    free(tp);
    return rc;
}

static int merge_job_into(const char *const *dirs, int n, const char *out, double *off,
                          double *aerr, char (*traces)[4200], const char **tp)
{
    char err[1024];
    int e = rr_job_offsets(dirs, n, off, aerr, err, sizeof(err));
    if (e) {
        cli_error("%s", err[0] ? err : tpf_strerror(e));
        return e == TPF_ENOMEM ? CLI_FAIL : CLI_USAGE;
    }
    for (int i = 0; i < n; i++) {
        snprintf(traces[i], sizeof(traces[i]), "%s/trace.json", dirs[i]);
        tp[i] = traces[i];
    }
    e = trace_merge_offsets(tp, n, out, off, err, sizeof(err));
    if (e) {
        cli_error("%s", err);
        return (e == TPF_ENOMEM || e == TPF_ETOOBIG) ? CLI_FAIL : CLI_USAGE;
    }
    for (int i = 1; i < n; i++) {
        if (isfinite(aerr[i]))
            fprintf(stderr, "trainperf: %s: clock %+.6f s, aligned on collectives (error %.2f ms)\n",
                    dirs[i], off[i], aerr[i] * 1e3);
        else
            fprintf(stderr, "trainperf: %s: clock %+.6f s from the wall clocks (no collectives)\n",
                    dirs[i], off[i]);
    }
    return CLI_OK;
}

int cmd_merge(int argc, char **argv)
{
    const char **paths = calloc((size_t)argc, sizeof(*paths));
    const char *out = NULL;
    int np = 0, align_start = 0, rc = CLI_USAGE;
    if (!paths) {
        cli_error("out of memory");
        return CLI_FAIL;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            merge_usage(stdout);
            rc = CLI_OK;
            goto done;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) {
            if (i + 1 >= argc) {
                cli_error("%s needs a file name", a);
                goto done;
            }
            out = argv[++i];
        } else if (strncmp(a, "--out=", 6) == 0) {
            out = a + 6;
        } else if (strcmp(a, "--align") == 0 || strncmp(a, "--align=", 8) == 0) {
            const char *v = a[7] == '=' ? a + 8 : (i + 1 < argc ? argv[++i] : "");
            if (strcmp(v, "start") == 0) align_start = 1;
            else if (strcmp(v, "clock") == 0) align_start = 0;
            else {
                cli_error("--align takes 'start' or 'clock', not '%s'", v);
                goto done;
            }
        } else if (a[0] == '-' && a[1]) {
            cli_error("unknown option '%s' (see `trainperf merge --help`)", a);
            goto done;
        } else {
            paths[np++] = a;
        }
    }
    if (!np) {
        cli_error("no trace files given (see `trainperf merge --help`)");
        goto done;
    }
    if (!out || !*out) {
        cli_error("no output file: give -o OUT.json");
        goto done;
    }
    char err[1024];
    if (merge_is_job(paths, np)) {
        rc = merge_job(paths, np, out);
        goto done;
    }
    char **files = NULL;
    int nf = 0;
    int e = trace_expand_args(paths, np, &files, &nf, err, sizeof(err));
    if (!e) e = trace_merge((const char *const *)files, nf, out, align_start, err, sizeof(err));
    if (!e && err[0]) cli_warn("%s", err); /* merged; what was not kept apart */
    if (!e) fprintf(stderr, "trainperf: merged %d traces into %s\n", nf, out);
    trace_paths_free(files, nf);
    if (e) {
        cli_error("%s", err);
        rc = (e == TPF_ENOMEM || e == TPF_ETOOBIG) ? CLI_FAIL : CLI_USAGE;
        goto done;
    }
    rc = CLI_OK;
done:
    free(paths);
    return rc;
}
