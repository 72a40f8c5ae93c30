/* trainperf report RUN [--format text|md|html|json] [--out FILE] */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/flame.h"
#include "report/report.h"
#include "cli/cli.h"
#include "record/recover.h"
#include "trainperf.h"
#include "util/afile.h"

static void report_usage(FILE *f)
{
    fprintf(f, "usage: trainperf report RUN_DIR... [--format text|md|html|json] [--json] [--out FILE]\n"
               "                           [--color] [--job] [--all-ranks]\n\n"
               "Diagnosis and report from a run directory (works on old runs and runs copied\n"
               "from other machines). Several run directories (or their parent) are the nodes\n"
               "of one job: reported as one, clocks aligned on their collectives. They are taken\n"
               "as one job when their commands name the same rendezvous (torchrun --rdzv-id and\n"
               "--rdzv-endpoint, or --master-addr and --master-port) or, naming none, when their\n"
               "times overlap; other runs are refused (report each on its own).\n\n"
               "  -f, --format F   text (the default), md, html or json\n"
               "  --json           the same as --format json\n"
               "  -o, --out FILE   write to FILE instead of stdout\n"
               "  --color          ANSI colour in text even when stdout is not a terminal;\n"
               "                   NO_COLOR still turns it off (text on a terminal is coloured)\n"
               "  --job            the run directories are one job whatever their commands and times\n"
               "  --all-ranks      every rank's row in the RANKS and NODES tables (more than 16\n"
               "                   ranks show their distribution and the worst ranks; JSON has all)\n\n"
               "Exit status: 0 written; 1 the report could not be built or written (a cap,\n"
               "out of memory); 2 bad usage, a missing/unreadable run directory, or runs that\n"
               "are not one job.\n");
}

int cli_parse_format(const char *s, int *fmt)
{
    static const struct {
        const char *n;
        int f;
    } t[] = {
        {"text", REPORT_TEXT},   {"txt", REPORT_TEXT},  {"md", REPORT_MD},
        {"markdown", REPORT_MD}, {"html", REPORT_HTML}, {"json", REPORT_JSON},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (strcmp(s, t[i].n) == 0) {
            *fmt = t[i].f;
            return 0;
        }
    return -1;
}

int cli_output_opt(int argc, char **argv, int *i, int *fmt, const char **out)
{
    const char *a = argv[*i];
    if (strcmp(a, "--json") == 0) {
        *fmt = REPORT_JSON;
        return 1;
    }
    int is_fmt = strcmp(a, "--format") == 0 || strcmp(a, "-f") == 0;
    int is_out = strcmp(a, "--out") == 0 || strcmp(a, "-o") == 0;
    const char *v = NULL;
    if (strncmp(a, "--format=", 9) == 0) {
        is_fmt = 1;
        v = a + 9;
    } else if (strncmp(a, "--out=", 6) == 0) {
        is_out = 1;
        v = a + 6;
    } else if (is_fmt || is_out) {
        v = *i + 1 < argc ? argv[++*i] : NULL;
    }
    if (is_fmt) {
        if (!v || cli_parse_format(v, fmt)) {
            cli_error("--format wants text, md, html or json%s%s", v ? ", not " : "", v ? v : "");
            return -1;
        }
        return 1;
    }
    if (is_out) {
        if (!v || !*v) {
            cli_error("--out wants a file name");
            return -1;
        }
        *out = v;
        return 1;
    }
    return 0;
}

int cli_write_out(const char *out, const buf *b)
{
    if (out) {
        /* the one way outputs are written (util/afile.h): never replaces a
         * device, FIFO or link, and a write error is an error */
        char err[PATH_MAX + 200];
        if (afile_out_write(out, b->data, b->len, err, sizeof(err)) != 0) {
            cli_error("%s", err);
            return CLI_USAGE;
        }
        return CLI_OK;
    }
    size_t n = b->len ? fwrite(b->data, 1, b->len, stdout) : 0;
    if (n != b->len || fflush(stdout) != 0) {
        cli_error("writing stdout failed: %s", strerror(errno));
        return CLI_USAGE;
    }
    return CLI_OK;
}

int cli_put_doc(int rc, buf *b, const char *err, const char *out)
{
    if (rc) {
        cli_error("%s", err && err[0] ? err : tpf_strerror(rc));
        /* a missing or damaged run directory, or runs that are not one job, are
         * bad input: nothing was made */
        rc = rc == TPF_ENOENT || rc == TPF_EFORMAT || rc == TPF_EIO || rc == TPF_EINVAL
                 ? CLI_USAGE
                 : CLI_FAIL;
    } else {
        rc = cli_write_out(out, b);
    }
    buf_free(b);
    return rc;
}

int cli_finish_recovered(const char *dir, const rec_recovery *rv, int quiet)
{
    char err[512] = "";
    int frc = report_finish_run(dir, 0, NULL, err, sizeof(err));
    if (!quiet) {
        if (rv->earlier)
            fprintf(stderr, "trainperf: finished the interrupted run in %s (recovered earlier)%s\n",
                    dir, frc == 0 ? ": summary.json and the reports written" : "");
        else
            fprintf(stderr,
                    "trainperf: recovered an interrupted run in %s: %llu steps drained from its "
                    "segments (%llu were on disk)%s\n",
                    dir, (unsigned long long)rv->steps, (unsigned long long)rv->steps_before,
                    frc == 0 ? "; summary.json and the reports written" : "");
    }
    if (frc && !quiet) cli_warn("%s", err[0] ? err : tpf_strerror(frc));
    return frc;
}

static int report_cmd(int argc, char **argv, const char **dirs);

int cmd_report(int argc, char **argv)
{
    /* as many run directories as the job has nodes */
    const char **dirs = malloc((size_t)(argc > 1 ? argc : 1) * sizeof(*dirs));
    if (!dirs) {
        cli_error("report: out of memory");
        return CLI_FAIL;
    }
    int rc = report_cmd(argc, argv, dirs);
    free(dirs);
    return rc;
}

static int report_cmd(int argc, char **argv, const char **dirs)
{
    const char *dir = NULL, *out = NULL;
    int ndirs = 0;
    int fmt = REPORT_TEXT, force_color = 0, flags = 0;
    int k;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            report_usage(stdout);
            return CLI_OK;
        } else if ((k = cli_output_opt(argc, argv, &i, &fmt, &out)) != 0) {
            if (k < 0) return CLI_USAGE;
        } else if (strcmp(a, "--color") == 0) {
            force_color = 1;
        } else if (strcmp(a, "--job") == 0) {
            flags |= REPORT_AS_JOB;
        } else if (strcmp(a, "--all-ranks") == 0) {
            flags |= REPORT_ALL_RANKS;
        } else if (a[0] == '-' && a[1]) {
            cli_error("report: unknown option '%s' (see `trainperf report --help`)", a);
            return CLI_USAGE;
        } else { /* several: the run directories of one job's nodes */
            dirs[ndirs++] = a;
            dir = dirs[0];
        }
    }
    if (!dir) {
        report_usage(stderr);
        return CLI_USAGE;
    }
    int color = 0;
    if (fmt == REPORT_TEXT && !out) {
        color = cli_color(stdout);
        if (force_color) {
            const char *nc = getenv("NO_COLOR");
            color = !(nc && *nc);
        }
    }
    char err[512] = "";
    /* A run whose collector was killed is finished here first. */
    for (int i = 0; i < ndirs; i++) {
        rec_recovery rv;
        int rrc = rec_recover(dirs[i], &rv, err, sizeof(err));
        if (rrc < 0) {
            cli_error("recovering %s: %s", dirs[i], err[0] ? err : tpf_strerror(rrc));
            return CLI_FAIL;
        }
        if (rrc == 1) cli_finish_recovered(dirs[i], &rv, 0);
        err[0] = 0;
        /* RUN/stacks.speedscope.json: the sampled stacks for speedscope and
         * Perfetto; a run directory that cannot take it (read-only, a copy)
         * is still reported */
        if (rrc != 1 && flame_write_speedscope(dirs[i], err, sizeof(err)) < 0)
            cli_warn("%s (the report goes on)", err);
        err[0] = 0;
    }
    buf b;
    buf_init(&b, 0);
    int rc = report_build_job(dirs, ndirs, flags, (report_format)fmt, color, &b, err, sizeof(err));
    /* text on a terminal: wrapped to its width */
    int cols = !rc && fmt == REPORT_TEXT && !out ? cli_term_cols(STDOUT_FILENO) : 0;
    if (cols && b.len) {
        buf w;
        buf_init(&w, 0);
        cli_wrap(b.data, b.len, cols, &w);
        if (!w.err) {
            buf_free(&b);
            b = w;
        } else {
            buf_free(&w);
        }
    }
    return cli_put_doc(rc, &b, err, out);
}
