/* trainperf analyze TRACE... : torch.profiler trace analysis (src/trace/trace.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"
#include "trace/trace_cpath.h"
#include "trace/trace_diff.h"
#include "cli/cli.h"
#include "trainperf.h"

static void analyze_usage(FILE *f)
{
    fprintf(f,
            "usage: trainperf analyze TRACE... [--json] [--rank N] [--steps A:B] [--compat hta] [--top K]\n"
            "       trainperf analyze --diff BASELINE TEST [--json] [--top K] ...\n"
            "       trainperf analyze --critical-path TRACE [--steps N | --cp-range NAME[#K]] [--compat hta] [--overlay OUT.json]\n\n"
            "Analyse torch.profiler (Kineto/Chrome) traces, .json or .json.gz, one file per rank:\n"
            "GPU time breakdown, kernel types and overlaps, top kernels, idle time per stream,\n"
            "communication/computation overlap, launch delays, top CPU operators, per-step\n"
            "times and stragglers across ranks, GPU time per record_function range, frequent\n"
            "kernel sequences, queue length per stream, memory-copy bandwidth, and the memory\n"
            "timeline of profile_memory traces.\n\n"
            "  --json         machine-readable output (times in integer nanoseconds)\n"
            "  --rank N       only the trace of rank N\n"
            "  --steps A:B    only ProfilerStep#A..#B (inclusive; A: or :B leave a side open)\n"
            "  --compat hta   reproduce HolisticTraceAnalysis 0.5's numbers (hta-0.6: its\n"
            "                 successor traceinsight; see docs/analyze.md)\n"
            "  --top K        rows in the top tables (default 10)\n"
            "  --diff         compare two traces (files, or directories of per-rank files):\n"
            "                 operators and kernels added, removed, slower, faster\n"
            "  --critical-path  critical path of one iteration of one trace: ProfilerStep#N of\n"
            "                 --steps N (default: the last step but one), or --cp-range NAME[#K],\n"
            "                 the K-th (from 0) range of record_function NAME\n"
            "  --overlay F    with --critical-path: write the trace plus the path to F (Perfetto)\n"
            "  --jobs N       files analysed at once (default: one per CPU)\n"
            "  --seq-len N    length of the frequent kernel sequences (2..8, default 3)\n"
            "  --bins N       bins of the time series over each file (1..1000, default 40)\n"
            "  --counters F   one trace: write it to F with its queue length and copy bandwidth\n"
            "                 as counter events (HTA's generate_trace_with_counters; Perfetto)\n");
}

static int parse_steps(const char *s, long *lo, long *hi)
{
    const char *colon = strchr(s, ':');
    if (!colon) {
        if (cli_parse_long(s, lo) || *lo < 0) return -1;
        *hi = *lo;
        return 0;
    }
    char a[64];
    size_t n = (size_t)(colon - s);
    if (n >= sizeof(a)) return -1;
    memcpy(a, s, n);
    a[n] = '\0';
    *lo = 0;
    *hi = 0x7fffffffL;
    if (n && (cli_parse_long(a, lo) || *lo < 0)) return -1;
    if (colon[1] && (cli_parse_long(colon + 1, hi) || *hi < *lo)) return -1;
    return 0;
}

/* --critical-path: one trace, one window. */
/* Print a formatted result (we: the formatter's error) and free it: the
 * exit status of every form of analyze. */
static int emit(buf *b, int we)
{
    int rc = CLI_OK;
    if (we) {
        cli_error("cannot format the result: %s", tpf_strerror(we));
        rc = CLI_FAIL;
    } else if (fwrite(b->data, 1, b->len, stdout) != b->len || fflush(stdout) != 0) {
        cli_error("cannot write the output");
        rc = CLI_FAIL;
    }
    buf_free(b);
    return rc;
}

static int analyze_cpath(const char **paths, int np, const trace_opts *o, int json, const char *range,
                         const char *overlay)
{
    char err[1024];
    char **files = NULL;
    int nf = 0;
    int e = trace_expand_args(paths, np, &files, &nf, err, sizeof(err));
    if (e) {
        cli_error("%s", err);
        return CLI_USAGE;
    }
    if (nf != 1) {
        cli_error("--critical-path takes one trace (one rank), not %d files", nf);
        trace_paths_free(files, nf);
        return CLI_USAGE;
    }
    if (o->has_steps && o->step_lo != o->step_hi) {
        cli_error("--critical-path takes one step (--steps N), not a range");
        trace_paths_free(files, nf);
        return CLI_USAGE;
    }
    /* NAME#K: the K-th range (from 0) of NAME; a name may itself hold '#' */
    char name[1024];
    long idx = 0;
    if (range) {
        snprintf(name, sizeof(name), "%s", range);
        char *h = strrchr(name, '#');
        long v;
        if (h && h[1] && cli_parse_long(h + 1, &v) == 0) {
            idx = v;
            *h = '\0';
        }
        if (!name[0]) {
            cli_error("--cp-range needs a record_function name, not '%s'", range);
            trace_paths_free(files, nf);
            return CLI_USAGE;
        }
    }
    trace_cpath *c = NULL;
    e = trace_cpath_run(files[0], o->has_steps, o->step_lo, range ? name : NULL, idx, o->top_k, o->compat_hta != 0,
                        &c, err, sizeof(err));
    trace_paths_free(files, nf);
    if (e) {
        cli_error("%s", err);
        return (e == TPF_ENOMEM || e == TPF_ETOOBIG) ? CLI_FAIL : CLI_USAGE;
    }
    if (overlay && (e = trace_cpath_overlay(c, overlay, err, sizeof(err)))) {
        cli_error("%s", err);
        trace_cpath_free(c);
        return CLI_USAGE;
    }
    buf b;
    buf_init(&b, 0);
    int we = json ? trace_cpath_json(c, &b) : trace_cpath_text(c, &b, cli_color(stdout));
    if (!json && overlay && !we) buf_printf(&b, "\noverlay written to %s (open it in ui.perfetto.dev)\n", overlay);
    trace_cpath_free(c);
    return emit(&b, we);
}

/* --diff BASELINE TEST: each a file or a directory of per-rank files. */
static int analyze_diff(const char **paths, int np, const trace_opts *o, int json)
{
    if (np != 2) {
        cli_error("--diff takes two traces (or directories), baseline then test, not %d", np);
        return CLI_USAGE;
    }
    char err[1024];
    char **fa = NULL, **fb = NULL;
    int na = 0, nb = 0;
    trace_diff_result *d = NULL;
    int e = trace_expand_args(&paths[0], 1, &fa, &na, err, sizeof(err));
    if (!e) e = trace_expand_args(&paths[1], 1, &fb, &nb, err, sizeof(err));
    if (!e) e = trace_diff((const char *const *)fa, na, (const char *const *)fb, nb, o, &d, err, sizeof(err));
    trace_paths_free(fa, na);
    trace_paths_free(fb, nb);
    if (e) {
        cli_error("%s", err);
        return (e == TPF_ENOMEM || e == TPF_ETOOBIG) ? CLI_FAIL : CLI_USAGE;
    }
    buf b;
    buf_init(&b, 0);
    int we = json ? trace_diff_json(d, &b) : trace_diff_text(d, &b, cli_color(stdout));
    trace_diff_free(d);
    return emit(&b, we);
}

int cmd_analyze(int argc, char **argv)
{
    trace_opts o;
    memset(&o, 0, sizeof(o));
    int json = 0, diff = 0, cpath = 0;
    const char *overlay = NULL, *cp_range = NULL, *counters = NULL;
    const char **paths = calloc((size_t)argc, sizeof(*paths));
    int np = 0;
    if (!paths) {
        cli_error("out of memory");
        return CLI_FAIL;
    }
    int rc = CLI_USAGE;
    char opt[64]; /* "--name" of a "--name=value" argument */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            analyze_usage(stdout);
            rc = CLI_OK;
            goto out;
        }
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (strcmp(a, "--diff") == 0) {
            diff = 1;
            continue;
        }
        if (strcmp(a, "--critical-path") == 0) {
            cpath = 1;
            continue;
        }
        if (strcmp(a, "--rank") == 0 || strcmp(a, "--steps") == 0 || strcmp(a, "--compat") == 0 ||
            strcmp(a, "--top") == 0 || strcmp(a, "--jobs") == 0 || strcmp(a, "--seq-len") == 0 || strcmp(a, "--bins") == 0 || strcmp(a, "--counters") == 0 ||
            strcmp(a, "--overlay") == 0 || strcmp(a, "--cp-range") == 0) {
            if (i + 1 >= argc) {
                cli_error("%s needs a value (see `trainperf analyze --help`)", a);
                goto out;
            }
            val = argv[++i];
        } else if (strncmp(a, "--", 2) == 0 && a[2]) {
            const char *eq = strchr(a, '=');
            if (!eq) {
                cli_error("unknown option '%s' (see `trainperf analyze --help`)", a);
                goto out;
            }
            size_t n = (size_t)(eq - a);
            if (n >= sizeof(opt)) n = sizeof(opt) - 1;
            memcpy(opt, a, n);
            opt[n] = '\0';
            a = opt;
            val = eq + 1;
        } else {
            paths[np++] = a;
            continue;
        }
        long v;
        if (strcmp(a, "--rank") == 0) {
            if (cli_parse_long(val, &v) || v < 0) {
                cli_error("--rank needs a non-negative integer, not '%s'", val);
                goto out;
            }
            o.has_rank = 1;
            o.rank = v;
        } else if (strcmp(a, "--steps") == 0) {
            if (parse_steps(val, &o.step_lo, &o.step_hi)) {
                cli_error("--steps needs A:B with step numbers A <= B, not '%s'", val);
                goto out;
            }
            o.has_steps = 1;
        } else if (strcmp(a, "--compat") == 0) {
            if (strcmp(val, "hta") == 0 || strcmp(val, "hta-0.5") == 0) {
                o.compat_hta = 1;
            } else if (strcmp(val, "hta-0.6") == 0) {
                o.compat_hta = 2;
            } else {
                cli_error("--compat takes 'hta' (= hta-0.5) or 'hta-0.6', not '%s'", val);
                goto out;
            }
        } else if (strcmp(a, "--overlay") == 0) {
            overlay = val;
        } else if (strcmp(a, "--cp-range") == 0) {
            cp_range = val;
        } else if (strcmp(a, "--counters") == 0) {
            counters = val;
        } else if (strcmp(a, "--bins") == 0) {
            if (cli_parse_long(val, &v) || v < 1 || v > 1000) {
                cli_error("--bins needs a count between 1 and 1000, not '%s'", val);
                goto out;
            }
            o.bins = (int)v;
        } else if (strcmp(a, "--seq-len") == 0) {
            if (cli_parse_long(val, &v) || v < 2 || v > 8) {
                cli_error("--seq-len needs a length between 2 and 8, not '%s'", val);
                goto out;
            }
            o.seq_len = (int)v;
        } else if (strcmp(a, "--jobs") == 0) {
            if (cli_parse_long(val, &v) || v < 1 || v > TRACE_MAX_JOBS) {
                cli_error("--jobs needs a count between 1 and %d, not '%s'", TRACE_MAX_JOBS, val);
                goto out;
            }
            o.jobs = (int)v;
        } else if (strcmp(a, "--top") == 0) {
            if (cli_parse_long(val, &v) || v < 1 || v > 100000) {
                cli_error("--top needs a count between 1 and 100000, not '%s'", val);
                goto out;
            }
            o.top_k = (int)v;
        } else {
            cli_error("unknown option '%s' (see `trainperf analyze --help`)", a);
            goto out;
        }
    }
    if (!np) {
        cli_error("no trace files given (see `trainperf analyze --help`)");
        goto out;
    }
    if ((overlay || cp_range) && !cpath) {
        cli_error("%s goes with --critical-path", overlay ? "--overlay" : "--cp-range");
        goto out;
    }
    if (diff && cpath) {
        cli_error("--diff and --critical-path are separate analyses: run them one at a time");
        goto out;
    }
    if (counters && (diff || cpath)) {
        cli_error("--counters goes with the plain analysis of one trace, not with %s",
                  diff ? "--diff" : "--critical-path");
        goto out;
    }
    if (diff) {
        rc = analyze_diff(paths, np, &o, json);
        goto out;
    }
    if (cpath) {
        rc = analyze_cpath(paths, np, &o, json, cp_range, overlay);
        goto out;
    }
    trace_result *r = NULL;
    char err[1024];
    char **files = NULL;
    int nf = 0;
    int e = trace_expand_args(paths, np, &files, &nf, err, sizeof(err));
    if (!e && counters && nf != 1) {
        trace_paths_free(files, nf);
        cli_error("--counters writes one trace: give one file, not %d", nf);
        goto out;
    }
    if (!e && counters) e = trace_write_counters(files[0], &o, counters, err, sizeof(err));
    if (!e) e = trace_analyze((const char *const *)files, nf, &o, &r, err, sizeof(err));
    trace_paths_free(files, nf);
    if (e) {
        cli_error("%s", err);
        /* Unreadable or invalid input is a usage-class error (exit 2). */
        rc = (e == TPF_ENOMEM || e == TPF_ETOOBIG) ? CLI_FAIL : CLI_USAGE;
        goto out;
    }
    const char *const *warns;
    size_t nw = trace_result_warnings(r, &warns);
    for (size_t i = 0; i < nw; i++) cli_warn("%s", warns[i]);
    buf b;
    buf_init(&b, 0);
    int we = json ? trace_result_json(r, &b) : trace_result_text(r, &b, cli_color(stdout));
    if (!json && counters && !we)
        buf_printf(&b, "\ntrace with counters written to %s (open it in ui.perfetto.dev)\n", counters);
    trace_result_free(r);
    rc = emit(&b, we);
out:
    free(paths);
    return rc;
}
