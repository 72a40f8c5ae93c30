/* Reports from a run directory: terminal text, Markdown, JSON (HTML in
 * report_html.c), and the end-of-run step that adds the diagnosis to
 * summary.json and writes report.md / report.html. */
#include "report/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report/diag.h"
#include "report/failures.h"
#include "report/flame.h"
#include "report/report_fmt.h"
#include "report/report_html.h"
#include "report/report_ranks.h"
#include "util/table.h"
#include "trace/trace.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/jsonr.h"
#include "util/jsonw.h"

#define REPORT_MAX ((size_t)64 << 20)

typedef struct sty {
    int color;
} sty;

static const char *c_(const sty *s, const char *code)
{
    return s->color ? code : "";
}
#define BOLD "\033[1m"
#define DIM "\033[2m"
#define RED "\033[31m"
#define GREEN "\033[32m"
#define YELLOW "\033[33m"
#define RESET "\033[0m"

static const char *severity_color(const char *id)
{
    if (strcmp(id, "compute-bound") == 0) return GREEN;
    if (strcmp(id, "insufficient-data") == 0) return YELLOW;
    if (strcmp(id, "memory-capacity") == 0 || strcmp(id, "unstable") == 0) return RED;
    return YELLOW;
}

/* ---- profiler traces -------------------------------------------------------
 * The torch.profiler traces that the Python helpers leave in RUN/profile/
 * (docs/run-format.md) are analysed once per report, since traces reach
 * gigabytes, and the one result is rendered in every format. A trace that
 * cannot be analysed is named with the reason and the others still are. */
#define PROF_DIR "profile"
#define PROF_MAX_BAD 8

typedef struct prof {
    int present;                 /* RUN/profile/ exists */
    int nfiles;                  /* trace files in it */
    int nbad;                    /* problems[] in use */
    char bad[PROF_MAX_BAD][400]; /* one line each: what could not be analysed, and why */
    trace_result *res;           /* NULL when nothing was analysed */
} prof;

static void prof_bad(prof *p, const char *run_dir, const char *msg)
{
    if (p->nbad >= PROF_MAX_BAD) return;
    /* the run directory's path says nothing the reader does not know */
    size_t n = strlen(run_dir);
    if (strncmp(msg, run_dir, n) == 0 && msg[n] == '/') msg += n + 1;
    snprintf(p->bad[p->nbad++], sizeof(p->bad[0]), "%s", msg);
}

static int is_trace_name(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    /* top-<pid>-<n>.json beside the traces are the helpers' top-k tables */
    return strncmp(b, "top-", 4) != 0;
}

static void prof_load(const char *run_dir, prof *p)
{
    memset(p, 0, sizeof(*p));
    char dir[PATH_MAX + 16], err[512];
    struct stat st;
    snprintf(dir, sizeof(dir), "%s/%s", run_dir, PROF_DIR);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return;
    p->present = 1;
    char **paths = NULL;
    int n = 0, rc = trace_list_dir(dir, &paths, &n);
    if (rc) {
        snprintf(err, sizeof(err), "%s/: %s", PROF_DIR, tpf_strerror(rc));
        prof_bad(p, run_dir, err);
        return;
    }
    const char **sel = calloc(n > 0 ? (size_t)n : 1, sizeof(*sel));
    if (!sel) {
        prof_bad(p, run_dir, "out of memory listing the traces");
        trace_paths_free(paths, n);
        return;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (is_trace_name(paths[i])) sel[k++] = paths[i];
    p->nfiles = k;
    trace_opts o;
    memset(&o, 0, sizeof(o));
    if (k > 0 && trace_analyze(sel, k, &o, &p->res, err, sizeof(err)) != 0) {
        /* find the traces that fail on their own and analyse the others */
        p->res = NULL;
        int good = 0;
        for (int i = 0; i < k; i++) {
            trace_result *one = NULL;
            char e[512];
            if (trace_analyze(&sel[i], 1, &o, &one, e, sizeof(e)) != 0)
                prof_bad(p, run_dir, e);
            else {
                sel[good++] = sel[i];
                trace_result_free(one);
            }
        }
        /* no single trace is to blame (e.g. a table cap over all of them) */
        if (good == k) prof_bad(p, run_dir, err);
        if (good > 0 && good < k && trace_analyze(sel, good, &o, &p->res, err, sizeof(err)) != 0) {
            p->res = NULL;
            prof_bad(p, run_dir, err);
        }
    }
    free(sel);
    trace_paths_free(paths, n);
}

static void prof_free(prof *p)
{
    trace_result_free(p->res);
    p->res = NULL;
}

static void md_esc(buf *b, const char *s);

/* The section in Markdown (also the HTML report's source): the trace
 * analyser's own Markdown, its headings one level down under ours. */
static void prof_markdown(const prof *p, buf *b)
{
    buf_puts(b, "\n## Profiler traces\n\n");
    if (!p->present) {
        buf_puts(b, "None in this run: torch.profiler traces in `" PROF_DIR "/` are analysed "
                    "here (`trainperf analyze TRACE...` analyses others).\n");
        return;
    }
    if (p->nfiles == 0 && p->nbad == 0) {
        buf_puts(b, "`" PROF_DIR "/` holds no trace files (*.json, *.json.gz).\n");
        return;
    }
    buf_printf(b, "%d trace file%s in `" PROF_DIR "/`", p->nfiles, p->nfiles == 1 ? "" : "s");
    buf_puts(b, p->res ? ".\n" : "; none could be analysed.\n");
    if (p->nbad) {
        buf_puts(b, "\n**Not analysed**\n\n");
        for (int i = 0; i < p->nbad; i++) {
            buf_puts(b, "- ");
            md_esc(b, p->bad[i]);
            buf_puts(b, "\n");
        }
    }
    if (!p->res) return;
    buf t;
    buf_init(&t, REPORT_MAX);
    if (trace_result_markdown(p->res, &t) != 0) {
        buf_printf(b, "\nThe analysis could not be shown: %s.\n", tpf_strerror(t.err));
        buf_free(&t);
        return;
    }
    const char *s = t.data ? t.data : "";
    const char *e = s + t.len;
    static const char own[] = "## Profiler traces\n";
    if ((size_t)(e - s) >= sizeof(own) - 1 && memcmp(s, own, sizeof(own) - 1) == 0)
        s += sizeof(own) - 1;
    while (s < e) {
        const char *nl = memchr(s, '\n', (size_t)(e - s));
        size_t n = nl ? (size_t)(nl - s) + 1 : (size_t)(e - s);
        if (*s == '#') buf_putc(b, '#');
        buf_append(b, s, n);
        s += n;
    }
    buf_free(&t);
}

static void prof_text(const prof *p, buf *b, int color)
{
    if (!p->present) {
        buf_puts(b, "  none in this run (torch.profiler traces in " PROF_DIR
                    "/ are analysed here; `trainperf analyze TRACE...` analyses others)\n");
        return;
    }
    if (p->nfiles == 0 && p->nbad == 0) {
        buf_puts(b, "  " PROF_DIR "/ holds no trace files (*.json, *.json.gz)\n");
        return;
    }
    buf_printf(b, "  %d trace file%s in " PROF_DIR "/%s\n", p->nfiles, p->nfiles == 1 ? "" : "s",
               p->res ? "" : "; none could be analysed");
    for (int i = 0; i < p->nbad; i++)
        buf_printf(b, "  not analysed: %s\n", p->bad[i]);
    if (p->res && trace_result_text(p->res, b, color) != 0) return;
}


/* "profiler": null without RUN/profile/, else the files, what could not be
 * analysed, and the analysis in `trainperf analyze --json`'s schema. */
static void prof_json(const prof *p, jw *w)
{
    jw_key(w, "profiler");
    if (!p->present) {
        jw_null(w);
        return;
    }
    jw_obj_begin(w);
    jw_kstr(w, "dir", PROF_DIR);
    jw_kint(w, "files", p->nfiles);
    jw_key(w, "not_analysed");
    jw_arr_begin(w);
    for (int i = 0; i < p->nbad; i++)
        jw_str(w, p->bad[i]);
    jw_arr_end(w);
    jw_key(w, "analysis");
    buf t;
    buf_init(&t, REPORT_MAX);
    jr_doc d;
    char err[160];
    if (p->res && trace_result_json(p->res, &t) == 0 &&
        jr_parse(&d, t.data, t.len, 0, err, sizeof(err)) == 0) {
        jr_write(w, d.root);
        jr_free(&d);
    } else {
        jw_null(w);
    }
    buf_free(&t);
    jw_obj_end(w);
}

/* ---- text --------------------------------------------------------------------- */

static void bar(buf *b, double share, int width)
{
    /* clamped before the conversion: a damaged file's share of 1e300 (or
     * one below 0) must not become a width of billions */
    double x = isfinite(share) ? share * width : 0;
    int n = !(x > 0) ? 0 : x >= width ? width : (int)lround(x);
    for (int i = 0; i < n; i++)
        buf_puts(b, "\u2588");
    for (int i = n; i < width; i++)
        buf_puts(b, " ");
}

static void text_finding_body(buf *b, const sty *s, const dfinding *d, int recs)
{
    if (d->nev) {
        buf_printf(b, "  %sevidence%s\n", c_(s, DIM), c_(s, RESET));
        for (int i = 0; i < d->nev; i++)
            buf_printf(b, "    - %s\n", d->ev[i].text);
    }
    if (recs && d->nrec) {
        buf_printf(b, "  %swhat to change, most effect first%s\n", c_(s, DIM), c_(s, RESET));
        for (int i = 0; i < d->nrec; i++)
            buf_printf(b, "    %d. %s\n", i + 1, d->rec[i]);
    }
}

static void text_report(const diag_run *r, const prof *pf, const sty *s, buf *b)
{
    dfig f;
    diag_figures(r, &f);
    char a[64], c[64], d[64], e[64];
    const diag_result *g = &r->diag;
    buf_printf(b, "%strainperf report: %s%s\n", c_(s, BOLD), r->name, c_(s, RESET));
    fail_headline(b, r->dir, FAIL_TEXT, s->color);
    if (r->command[0]) buf_printf(b, "  command   %s\n", r->command);
    buf_printf(b, "  duration  %s, exit %s", diag_fmt_dur(a, sizeof(a), f.duration_s),
               diag_fmt_exit(r, c, sizeof(c)));
    if (r->host[0] || r->cpus)
        buf_printf(b, ", host %s (%d CPUs", r->host[0] ? r->host : "?", r->cpus);
    if (r->host[0] || r->cpus) {
        if (r->ngpu) buf_printf(b, ", %d GPU%s", r->ngpu, r->ngpu == 1 ? "" : "s");
        buf_puts(b, ")");
    }
    buf_puts(b, "\n\n");

    const dfinding *p = &g->primary;
    buf_printf(b, "%sDIAGNOSIS%s  %s%s%s%s\n", c_(s, BOLD), c_(s, RESET), c_(s, BOLD),
               c_(s, severity_color(p->id)), p->title, c_(s, RESET));
    buf_printf(b, "  %s.\n", p->summary);
    text_finding_body(b, s, p, 1);
    if (g->nsec) {
        buf_printf(b, "  %salso found%s\n", c_(s, DIM), c_(s, RESET));
        for (int i = 0; i < g->nsec; i++) {
            buf_printf(b, "    * %s: %s\n", g->sec[i].title, g->sec[i].summary);
            for (int k = 0; k < g->sec[i].nrec && k < 2; k++)
                buf_printf(b, "      -> %s\n", g->sec[i].rec[k]);
        }
    }
    for (int i = 0; i < g->nnotes; i++)
        buf_printf(b, "  note: %s\n", g->notes[i]);

    buf_printf(b, "\n%sTHROUGHPUT%s\n", c_(s, BOLD), c_(s, RESET));
    buf_printf(b, "  steps        %s", diag_fmt_num(a, sizeof(a), "%.0f", f.steps));
    buf_printf(b, "   %s steps/s", diag_fmt_num(a, sizeof(a), "%.2f", f.steps_per_s));
    if (isfinite(f.samples_per_s))
        buf_printf(b, "   %s samples/s", diag_fmt_num(a, sizeof(a), "%.1f", f.samples_per_s));
    if (isfinite(f.tokens_per_s))
        buf_printf(b, "   %s tokens/s", diag_fmt_num(a, sizeof(a), "%.0f", f.tokens_per_s));
    buf_puts(b, "\n");
    report_quantiles(b, REPORT_TEXT, &f);
    if (r->have_steps && r->sum_interval_ns > 0) {
        buf_printf(b, "\n%sSTEP TIME BREAKDOWN%s\n", c_(s, BOLD), c_(s, RESET));
        for (int k = 0; k < PH_COUNT; k++) {
            if (!(f.share[k] > 0.0005)) continue;
            buf_printf(b, "  %-11s %5.1f%% ", diag_phase_names[k], 100 * f.share[k]);
            bar(b, f.share[k], 40);
            buf_puts(b, "\n");
        }
        if (r->gs.have) {
            /* the phases are host time; the GPU's own row, from its kernels */
            const dgpu_steps *gs = &r->gs;
            buf_printf(b, "  %-11s %5.1f%% ", "GPU busy", 100 * gs->busy_share);
            bar(b, gs->busy_share, 40);
            buf_printf(b, "\n              %.0f kernels/step (median %.1f us), host waits %.0f%%, "
                          "GPU idle after them %.0f%% of the step\n",
                       gs->kernels_per_step, gs->kernel_us_p50, 100 * gs->sync_share,
                       isfinite(gs->sync_idle_share) ? 100 * gs->sync_idle_share : 0.0);
            char note[200];
            if (*report_gpu_window_note(note, sizeof(note), gs))
                buf_printf(b, "              %s\n", note);
        }
    }
    rr_text(r, b, c_(s, BOLD), c_(s, RESET));

    buf_printf(b, "\n%sRESOURCES%s\n", c_(s, BOLD), c_(s, RESET));
    if (!r->have_metrics)
        buf_puts(b, "  no metrics.csv in this run\n");
    else {
        buf_printf(b, "  system CPU   mean %s%%  max %s%% (all cores)\n",
                   diag_fmt_num(a, sizeof(a), "%.0f", f.cpu_mean),
                   diag_fmt_num(c, sizeof(c), "%.0f", f.cpu_max));
        buf_printf(
            b, "  tree CPU     mean %s%%  max %s%% (100%% = one core), main process mean %s%%\n",
            diag_fmt_num(a, sizeof(a), "%.0f", f.tree_cpu_mean),
            diag_fmt_num(c, sizeof(c), "%.0f", f.tree_cpu_max),
            diag_fmt_num(d, sizeof(d), "%.0f", f.main_cpu_mean));
        buf_printf(b, "  processes    max %s in the tree\n",
                   diag_fmt_num(a, sizeof(a), "%.0f", f.procs_max));
        buf_printf(b, "  tree RSS     mean %s  max %s\n", human_bytes(a, sizeof(a), f.rss_mean),
                   human_bytes(c, sizeof(c), f.rss_max));
        buf_printf(b, "  host memory  available min %s of %s, swap max %s\n",
                   human_bytes(a, sizeof(a), f.mem_avail_min),
                   human_bytes(c, sizeof(c), f.mem_total),
                   human_bytes(d, sizeof(d), f.swap_max));
        buf_printf(b, "  I/O          iowait mean %s%%, PSI io %s%%, disk read %s/s, write %s/s\n",
                   diag_fmt_num(a, sizeof(a), "%.1f", f.iowait_mean),
                   diag_fmt_num(c, sizeof(c), "%.1f", f.psi_io),
                   human_bytes(d, sizeof(d), f.disk_read),
                   human_bytes(e, sizeof(e), f.disk_write));
        buf_printf(b, "  pressure     PSI cpu %s%%, memory %s%%\n",
                   diag_fmt_num(a, sizeof(a), "%.1f", f.psi_cpu),
                   diag_fmt_num(c, sizeof(c), "%.1f", f.psi_mem));
    }
    buf_printf(b, "\n%sGPU%s\n", c_(s, BOLD), c_(s, RESET));
    int shown = 0, listed = diag_gpus_listed(r);
    for (int i = 0; i < listed; i++) {
        const dgpu *gp = &r->gpus[i];
        buf_printf(b, "  GPU %d %s", gp->index, gp->name[0] ? gp->name : "");
        if (r->nnodes > 1) buf_printf(b, " (node %d)", gp->node);
        buf_puts(b, "\n");
        buf_printf(b, "    util mean %s%% (min %s%%, max %s%%)",
                   diag_fmt_num(a, sizeof(a), "%.0f", dstat_mean(&gp->util)),
                   diag_fmt_num(c, sizeof(c), "%.0f", gp->util.n ? gp->util.min : NAN),
                   diag_fmt_num(d, sizeof(d), "%.0f", gp->util.n ? gp->util.max : NAN));
        /* the diagnosis reads the training window's (start-up is not training) */
        if (gp->util_train.n >= 3 && gp->util_train.n < gp->util.n)
            buf_printf(b, ", %s%% while training",
                       diag_fmt_num(a, sizeof(a), "%.0f", dstat_mean(&gp->util_train)));
        buf_puts(b, "\n");
        buf_printf(b, "    memory max %s of %s, temp max %s C, power mean %s W\n",
                   human_bytes(a, sizeof(a), gp->mem_used.n ? gp->mem_used.max : NAN),
                   human_bytes(c, sizeof(c), gp->mem_total),
                   diag_fmt_num(d, sizeof(d), "%.0f", gp->temp.n ? gp->temp.max : NAN),
                   diag_fmt_num(e, sizeof(e), "%.0f", dstat_mean(&gp->power)));
        if (gp->throttle_words[0])
            buf_printf(b, "    clock events: %s (%.0f%% of samples)\n", gp->throttle_words,
                       gp->samples > 0 ? 100 * gp->throttle_samples / gp->samples : 0.0);
        shown++;
    }
    if (listed < r->ngpu)
        buf_printf(b, "  (%d more GPUs not listed: --all-ranks lists them, --format json has every GPU)\n",
                   r->ngpu - listed);
    if (!shown)
        buf_printf(b, "  none (%s)\n",
                   r->nvml_source[0] ? r->nvml_source : "no GPU metrics in this run");

    buf_printf(b, "\n%sALERTS%s", c_(s, BOLD), c_(s, RESET));
    if (!r->nalerts)
        buf_puts(b, "\n  none\n");
    else {
        buf_printf(b, " (%d fired)\n", r->nalerts_fired);
        for (int i = 0; i < r->nalerts; i++) {
            const dalert *al = &r->alerts[i];
            int crit = strcmp(al->severity, "critical") == 0;
            buf_printf(b, "  %8.1f s  %s%-8s%s %-7s %-18s %s\n", al->t,
                       c_(s, strcmp(al->state, "fired") == 0 ? (crit ? RED : YELLOW) : DIM),
                       al->severity, c_(s, RESET), al->state, al->rule, al->message);
        }
        if (r->nalerts_dropped)
            buf_printf(b, "  (%d more alert events not listed: at most %d are)\n",
                       r->nalerts_dropped, DIAG_MAX_ALERTS);
    }
    fail_sections(b, r->dir, FAIL_TEXT, s->color);
    buf_printf(b, "\n%sPROFILER TRACES%s\n", c_(s, BOLD), c_(s, RESET));
    prof_text(pf, b, s->color);
}

/* ---- Markdown ------------------------------------------------------------------ */

/* Markdown text: the table writer's escaping (util/table.h). */
static void md_esc(buf *b, const char *s) { tbl_esc(b, TBL_MD, s); }

static void md_finding(buf *b, const dfinding *d)
{
    if (d->nev) {
        buf_puts(b, "\n**Evidence**\n\n");
        for (int i = 0; i < d->nev; i++) {
            buf_puts(b, "- ");
            md_esc(b, d->ev[i].text);
            buf_puts(b, "\n");
        }
    }
    if (d->nrec) {
        buf_puts(b, "\n**What to change** (most effect first)\n\n");
        for (int i = 0; i < d->nrec; i++) {
            buf_printf(b, "%d. ", i + 1);
            md_esc(b, d->rec[i]);
            buf_puts(b, "\n");
        }
    }
}

static void md_report(const diag_run *r, const prof *pf, buf *b)
{
    dfig f;
    diag_figures(r, &f);
    char a[64], c[64], d[64], e[64];
    const diag_result *g = &r->diag;
    buf_puts(b, "# trainperf report: ");
    md_esc(b, r->name);
    buf_puts(b, "\n\n");
    fail_headline(b, r->dir, FAIL_MD, 0);
    buf_puts(b, "| | |\n|---|---|\n");
    buf_puts(b, "| command | ");
    md_esc(b, r->command[0] ? r->command : "?");
    buf_printf(b, " |\n| duration | %s |\n| exit | %s |\n",
               diag_fmt_dur(a, sizeof(a), f.duration_s), diag_fmt_exit(r, c, sizeof(c)));
    buf_puts(b, "| host | ");
    md_esc(b, r->host[0] ? r->host : "?");
    buf_printf(b, " (%d CPUs, %d GPU%s) |\n", r->cpus, r->ngpu, r->ngpu == 1 ? "" : "s");

    buf_puts(b, "\n## Diagnosis: ");
    md_esc(b, g->primary.title);
    buf_puts(b, "\n\n");
    md_esc(b, g->primary.summary);
    buf_puts(b, ".\n");
    md_finding(b, &g->primary);
    if (g->nsec) {
        buf_puts(b, "\n### Also found\n");
        for (int i = 0; i < g->nsec; i++) {
            buf_puts(b, "\n#### ");
            md_esc(b, g->sec[i].title);
            buf_puts(b, "\n\n");
            md_esc(b, g->sec[i].summary);
            buf_puts(b, ".\n");
            md_finding(b, &g->sec[i]);
        }
    }
    if (g->nnotes) {
        buf_puts(b, "\n**Notes**\n\n");
        for (int i = 0; i < g->nnotes; i++) {
            buf_puts(b, "- ");
            md_esc(b, g->notes[i]);
            buf_puts(b, "\n");
        }
    }

    buf_puts(b, "\n## Throughput\n\n| | value |\n|---|---|\n");
    buf_printf(b, "| steps | %s |\n", diag_fmt_num(a, sizeof(a), "%.0f", f.steps));
    buf_printf(b, "| steps/s | %s |\n", diag_fmt_num(a, sizeof(a), "%.2f", f.steps_per_s));
    /* as in text: a run that counts no samples or tokens has no such row */
    if (isfinite(f.samples_per_s))
        buf_printf(b, "| samples/s | %s |\n", diag_fmt_num(a, sizeof(a), "%.1f", f.samples_per_s));
    if (isfinite(f.tokens_per_s))
        buf_printf(b, "| tokens/s | %s |\n", diag_fmt_num(a, sizeof(a), "%.0f", f.tokens_per_s));
    report_quantiles(b, REPORT_MD, &f);
    if (r->have_steps && r->sum_interval_ns > 0) {
        buf_puts(b, "\n## Step time breakdown\n\n| phase | share of step time |\n|---|---|\n");
        for (int k = 0; k < PH_COUNT; k++)
            if (f.share[k] > 0.0005)
                buf_printf(b, "| %s | %.1f%% |\n", diag_phase_names[k], 100 * f.share[k]);
        report_gpu_breakdown_note(b, REPORT_MD, &r->gs);
    }
    rr_md(r, b);
    buf_puts(b, "\n## Resources\n\n");
    if (!r->have_metrics)
        buf_puts(b, "No metrics.csv in this run.\n");
    else {
        buf_puts(b, "| | mean | max |\n|---|---|---|\n");
        buf_printf(b, "| system CPU %% | %s | %s |\n",
                   diag_fmt_num(a, sizeof(a), "%.0f", f.cpu_mean),
                   diag_fmt_num(c, sizeof(c), "%.0f", f.cpu_max));
        buf_printf(b, "| tree CPU %% (of one core) | %s | %s |\n",
                   diag_fmt_num(a, sizeof(a), "%.0f", f.tree_cpu_mean),
                   diag_fmt_num(c, sizeof(c), "%.0f", f.tree_cpu_max));
        buf_printf(b, "| main process CPU %% | %s | %s |\n",
                   diag_fmt_num(a, sizeof(a), "%.0f", f.main_cpu_mean),
                   diag_fmt_num(c, sizeof(c), "%.0f", f.main_cpu_max));
        buf_printf(b, "| tree RSS | %s | %s |\n", human_bytes(a, sizeof(a), f.rss_mean),
                   human_bytes(c, sizeof(c), f.rss_max));
        buf_printf(b, "| iowait %% | %s | |\n", diag_fmt_num(a, sizeof(a), "%.1f", f.iowait_mean));
        buf_printf(b, "| PSI cpu / memory / io %% | %s / %s / %s | |\n",
                   diag_fmt_num(a, sizeof(a), "%.1f", f.psi_cpu),
                   diag_fmt_num(c, sizeof(c), "%.1f", f.psi_mem),
                   diag_fmt_num(d, sizeof(d), "%.1f", f.psi_io));
        buf_printf(b,
                   "\nHost memory available fell to %s of %s; swap peaked at %s; at most %s "
                   "processes in the tree.\n",
                   human_bytes(a, sizeof(a), f.mem_avail_min),
                   human_bytes(c, sizeof(c), f.mem_total),
                   human_bytes(d, sizeof(d), f.swap_max),
                   diag_fmt_num(e, sizeof(e), "%.0f", f.procs_max));
    }
    buf_puts(b, "\n## GPUs\n\n");
    if (!r->ngpu) {
        buf_puts(b, "None: ");
        md_esc(b, r->nvml_source[0] ? r->nvml_source : "no GPU metrics in this run");
        buf_puts(b, ".\n");
    } else {
        buf_puts(
            b,
            "| GPU | name | util mean % | memory max | temp max C | power mean W | clock events |\n"
            "|---|---|---|---|---|---|---|\n");
        int listed = diag_gpus_listed(r);
        for (int i = 0; i < listed; i++) {
            const dgpu *gp = &r->gpus[i];
            buf_printf(b, r->nnodes > 1 ? "| %d (node %d) | " : "| %d | ", gp->index, gp->node);
            md_esc(b, gp->name);
            buf_printf(b, " | %s | %s | %s | %s | ",
                       diag_fmt_num(a, sizeof(a), "%.0f", dstat_mean(&gp->util)),
                       human_bytes(c, sizeof(c), gp->mem_used.n ? gp->mem_used.max : NAN),
                       diag_fmt_num(d, sizeof(d), "%.0f", gp->temp.n ? gp->temp.max : NAN),
                       diag_fmt_num(e, sizeof(e), "%.0f", dstat_mean(&gp->power)));
            md_esc(b, gp->throttle_words[0] ? gp->throttle_words : "none");
            buf_puts(b, " |\n");
        }
        if (listed < r->ngpu)
            buf_printf(b, "\n%d more GPUs not listed (`--all-ranks` lists them; the JSON report has "
                          "every GPU).\n",
                       r->ngpu - listed);
    }
    buf_puts(b, "\n## Alerts\n\n");
    if (!r->nalerts)
        buf_puts(b, "None.\n");
    else {
        buf_puts(b, "| t (s) | state | severity | rule | message |\n|---|---|---|---|---|\n");
        for (int i = 0; i < r->nalerts; i++) {
            const dalert *al = &r->alerts[i];
            buf_printf(b, "| %.1f | %s | %s | ", al->t, al->state, al->severity);
            md_esc(b, al->rule);
            buf_puts(b, " | ");
            md_esc(b, al->message);
            buf_puts(b, " |\n");
        }
        if (r->nalerts_dropped)
            buf_printf(b, "\n%d more alert events not listed: at most %d are.\n",
                       r->nalerts_dropped, DIAG_MAX_ALERTS);
    }
    fail_sections(b, r->dir, FAIL_MD, 0);
    prof_markdown(pf, b);
}

/* ---- JSON ------------------------------------------------------------------------- */

static double rnd(double v, int digits)
{
    if (!isfinite(v)) return v;
    double m = pow(10, digits);
    return round(v * m) / m;
}

static void json_stat(jw *w, const char *k, double mean, double mx)
{
    jw_key(w, k);
    jw_obj_begin(w);
    jw_knum(w, "mean", rnd(mean, 3));
    jw_knum(w, "max", rnd(mx, 3));
    jw_obj_end(w);
}

static void json_report(const diag_run *r, const prof *pf, buf *b)
{
    dfig f;
    diag_figures(r, &f);
    jw w;
    jw_doc_begin(&w, b, "format_version", 1);
    jw_key(&w, "run");
    jw_obj_begin(&w);
    jw_kstr(&w, "name", r->name);
    jw_kstr(&w, "command", r->command[0] ? r->command : NULL);
    jw_kstr(&w, "host", r->host[0] ? r->host : NULL);
    jw_knum(&w, "cpus", r->cpus > 0 ? r->cpus : NAN);
    jw_knum(&w, "duration_s", rnd(f.duration_s, 3));
    jw_key(&w, "exit");
    if (!r->exit_known)
        jw_null(&w);
    else {
        jw_obj_begin(&w);
        jw_knum(&w, "code", r->exit_code >= 0 ? r->exit_code : NAN);
        jw_knum(&w, "signal", r->exit_signal > 0 ? r->exit_signal : NAN);
        jw_obj_end(&w);
    }
    jw_obj_end(&w);

    /* Step figures unrounded: the same values summary.json has. */
    jw_key(&w, "steps");
    jw_obj_begin(&w);
    jw_knum(&w, "count", f.steps);
    figs_view_json(&w, &f.v);
    if (r->gs.have) {
        /* the GPU's side of the steps (kernel records, summary steps.gpu) */
        const dgpu_steps *g = &r->gs;
        jw_key(&w, "gpu");
        jw_obj_begin(&w);
        jw_knum(&w, "busy_share", g->busy_share);
        jw_knum(&w, "busy_share_p10", g->busy_p10);
        jw_knum(&w, "kernels_per_step", g->kernels_per_step);
        jw_knum(&w, "kernel_us_p50", g->kernel_us_p50);
        jw_knum(&w, "sync_share", g->sync_share);
        jw_knum(&w, "sync_idle_share", g->sync_idle_share);
        jw_knum(&w, "h2d_pageable_bytes_per_step", g->h2d_pageable);
        jw_knum(&w, "d2h_pageable_bytes_per_step", g->d2h_pageable);
        jw_obj_end(&w);
    }
    jw_obj_end(&w);

    jw_key(&w, "resources");
    jw_obj_begin(&w);
    json_stat(&w, "cpu_pct", f.cpu_mean, f.cpu_max);
    json_stat(&w, "tree_cpu_pct", f.tree_cpu_mean, f.tree_cpu_max);
    json_stat(&w, "main_cpu_pct", f.main_cpu_mean, f.main_cpu_max);
    json_stat(&w, "tree_rss_bytes", f.rss_mean, f.rss_max);
    jw_knum(&w, "tree_procs_max", f.procs_max);
    jw_knum(&w, "mem_available_min_bytes", f.mem_avail_min);
    jw_knum(&w, "mem_total_bytes", f.mem_total);
    jw_knum(&w, "swap_used_max_bytes", f.swap_max);
    jw_knum(&w, "cpu_iowait_pct_mean", rnd(f.iowait_mean, 3));
    jw_knum(&w, "psi_cpu_some_pct_mean", rnd(f.psi_cpu, 3));
    jw_knum(&w, "psi_mem_some_pct_mean", rnd(f.psi_mem, 3));
    jw_knum(&w, "psi_io_some_pct_mean", rnd(f.psi_io, 3));
    jw_knum(&w, "disk_read_bps_mean", rnd(f.disk_read, 0));
    jw_knum(&w, "disk_write_bps_mean", rnd(f.disk_write, 0));
    jw_knum(&w, "worker_processes", r->have_procs ? r->nworkers : NAN);
    jw_knum(&w, "samples", r->msamples);
    jw_obj_end(&w);

    jw_key(&w, "gpus");
    jw_arr_begin(&w);
    for (int i = 0; i < r->ngpu; i++) {
        const dgpu *gp = &r->gpus[i];
        jw_obj_begin(&w);
        jw_kint(&w, "index", gp->index);
        jw_kstr(&w, "name", gp->name[0] ? gp->name : NULL);
        json_stat(&w, "util_pct", dstat_mean(&gp->util), gp->util.n ? gp->util.max : NAN);
        jw_knum(&w, "mem_used_max_bytes", gp->mem_used.n ? gp->mem_used.max : NAN);
        jw_knum(&w, "mem_total_bytes", gp->mem_total);
        jw_knum(&w, "temp_max_c", gp->temp.n ? gp->temp.max : NAN);
        jw_knum(&w, "power_mean_w", rnd(dstat_mean(&gp->power), 2));
        jw_knum(&w, "slowdown_share",
                gp->samples > 0 ? rnd(gp->slowdown_samples / gp->samples, 4) : NAN);
        jw_kstr(&w, "clock_events", gp->throttle_words);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);

    jw_key(&w, "alerts");
    jw_arr_begin(&w);
    for (int i = 0; i < r->nalerts; i++) {
        const dalert *al = &r->alerts[i];
        jw_obj_begin(&w);
        jw_knum(&w, "t", al->t);
        jw_kstr(&w, "rule", al->rule);
        jw_kstr(&w, "state", al->state);
        jw_kstr(&w, "severity", al->severity);
        jw_kstr(&w, "message", al->message);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    rr_json(r, &w);
    jw_key(&w, "diagnosis");
    diag_write_json(r, &w);
    fail_json(&w, r->dir);
    prof_json(pf, &w);
    jw_obj_end(&w);
    buf_putc(b, '\n');
}

/* ---- entry points -------------------------------------------------------------------- */

static int render(const diag_run *r, const prof *pf, report_format fmt, int color, buf *out)
{
    sty s = {color};
    buf md;
    switch (fmt) {
    case REPORT_TEXT: text_report(r, pf, &s, out); break;
    case REPORT_MD: md_report(r, pf, out); break;
    case REPORT_HTML:
        /* the HTML shows the profiler section from its Markdown */
        buf_init(&md, REPORT_MAX);
        prof_markdown(pf, &md);
        buf_putc(&md, '\0');
        report_html(r, md.err ? "" : md.data, out);
        buf_free(&md);
        break;
    case REPORT_JSON: json_report(r, pf, out); break;
    default: return TPF_EINVAL;
    }
    return out->err;
}

int report_build(const char *run_dir, report_format fmt, int color, buf *out, char *err,
                 size_t errlen)
{
    return report_build_job(&run_dir, 1, 0, fmt, color, out, err, errlen);
}

int report_build_job(const char *const *dirs, int ndirs, int flags, report_format fmt, int color,
                     buf *out, char *err, size_t errlen)
{
    diag_run *r;
    if (!out || ndirs < 1) return TPF_EINVAL;
    char **v;
    int n;
    int rc = rr_expand_dirs(dirs, ndirs, &v, &n, err, errlen);
    if (rc) return rc;
    rc = rr_load_job((const char *const *)v, n, flags & REPORT_AS_JOB, &r, err, errlen);
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
    if (rc) return rc;
    r->all_ranks = (flags & REPORT_ALL_RANKS) != 0;
    const char *run_dir = r->dir;
    diag_compute(r);
    if (!out->max) out->max = REPORT_MAX;
    prof pf;
    prof_load(run_dir, &pf);
    rc = render(r, &pf, fmt, color, out);
    prof_free(&pf);
    if (rc && err && errlen) snprintf(err, errlen, "building the report: %s", tpf_strerror(rc));
    diag_free(r);
    return rc;
}

static int write_file(const char *dir, const char *name, const buf *b, char *err, size_t errlen)
{
    /* Relative to the run directory's fd, no symlink followed, replaced
     * atomically (util/afile.h): a reader never sees half a file. */
    int dfd = afile_dir_open(dir);
    int rc = dfd < 0 ? dfd : afile_write_at(dfd, name, b->data ? b->data : "", b->len);
    if (dfd >= 0) close(dfd);
    if (rc) {
        if (err && errlen) snprintf(err, errlen, "%s/%s: %s", dir, name, tpf_strerror(rc));
        return rc;
    }
    return 0;
}

/* summary.json with "diagnosis" added or replaced; every other member is
 * copied byte for byte from the collector's file. Without a summary.json, a
 * minimal one is written from the report's figures. */
static int write_summary(diag_run *r, char *err, size_t errlen)
{
    buf b;
    buf_init(&b, REPORT_MAX);
    jw w;
    if (r->have_summary) {
        const jr_node *root = r->summary.root;
        buf_puts(&b, "{\n");
        int first = 1;
        for (const jr_node *c = root->child; c; c = c->next) {
            if (strcmp(c->key, "diagnosis") == 0 || strcmp(c->key, "model_flops") == 0) continue;
            if (!first) buf_puts(&b, ",\n");
            first = 0;
            buf_puts(&b, "  ");
            json_escape(&b, c->key, strlen(c->key));
            buf_puts(&b, ": ");
            buf_append(&b, r->summary.text + c->off, c->end - c->off);
        }
        if (!first) buf_puts(&b, ",\n");
        if (rr_summary_flops(r, &b)) buf_puts(&b, ",\n"); /* MFU: flops/ and steps.csv */
        buf_puts(&b, "  \"diagnosis\": ");
        jw_init(&w, &b, 0);
        diag_write_json(r, &w);
        buf_puts(&b, "\n}\n");
    } else {
        dfig f;
        diag_figures(r, &f);
        jw_doc_begin(&w, &b, "format_version", 1);
        jw_knum(&w, "duration_s", f.duration_s);
        jw_kstr(&w, "note", "written by the report: the collector left no summary.json");
        jw_key(&w, "steps");
        jw_obj_begin(&w);
        jw_knum(&w, "count", f.steps);
        jw_knum(&w, "steps_per_s", f.steps_per_s);
        jw_knum(&w, "samples_per_s", f.samples_per_s);
        jw_knum(&w, "data_wait_share", f.data_share);
        jw_obj_end(&w);
        jw_key(&w, "diagnosis");
        diag_write_json(r, &w);
        jw_obj_end(&w);
        buf_putc(&b, '\n');
    }
    int rc = b.err ? b.err : write_file(r->dir, "summary.json", &b, err, errlen);
    buf_free(&b);
    return rc;
}

int report_finish_run(const char *run_dir, int color, buf *terminal, char *err, size_t errlen)
{
    diag_run *r;
    int rc = diag_load(run_dir, &r, err, errlen);
    if (rc) return rc;
    diag_compute(r);
    int first_err = write_summary(r, err, errlen);
    prof pf;
    prof_load(run_dir, &pf);
    buf b;
    buf_init(&b, REPORT_MAX);
    rc = render(r, &pf, REPORT_MD, 0, &b);
    if (rc == 0) rc = write_file(r->dir, "report.md", &b, err, errlen);
    if (rc && !first_err) first_err = rc;
    buf_reset(&b);
    rc = render(r, &pf, REPORT_HTML, 0, &b);
    if (rc == 0) rc = write_file(r->dir, "report.html", &b, err, errlen);
    if (rc && !first_err) first_err = rc;
    buf_free(&b);
    /* the sampled stacks for speedscope and Perfetto (1: the run has none) */
    rc = flame_write_speedscope(run_dir, err, errlen);
    if (rc < 0 && !first_err) first_err = rc;
    if (terminal) {
        if (!terminal->max) terminal->max = REPORT_MAX;
        rc = render(r, &pf, REPORT_TEXT, color, terminal);
        if (rc && !first_err) first_err = rc;
    }
    prof_free(&pf);
    diag_free(r);
    return first_err;
}
