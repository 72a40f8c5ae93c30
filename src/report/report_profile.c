/* The zero-code Python profile in the HTML report: where the training
 * thread's time went by phase, the functions outside known phases, and the
 * heaviest sampled stacks (pyprof/stacks-*.folded, docs/run-format.md). */
#include <limits.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report_load.h"
#include "report/flame.h"
#include "report/report_fmt.h"
#include "report/report_profile.h"
#include "util/afile.h"

#define PROF_MAX_LINES 12 /* heaviest stacks shown, over all processes */

typedef struct pline {
    double n;
    char s[600];
} pline;

static void top_stacks(const diag_run *r, pline *top, int *ntop)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/pyprof", r->dir);
    DIR *d = opendir(path);
    *ntop = 0;
    if (!d) return;
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d)) && files < 64) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "stacks-", 7) != 0 || len < 7 ||
            strcmp(de->d_name + len - 7, ".folded") != 0)
            continue;
        files++;
        char f[PATH_MAX + 300];
        snprintf(f, sizeof(f), "%s/%s", path, de->d_name);
        FILE *fp = afile_fopen_read(f);
        if (!fp) continue;
        char line[4096];
        /* the writer sorts by count: the first lines are the heaviest */
        for (int k = 0; k < PROF_MAX_LINES && fgets(line, sizeof(line), fp); k++) {
            char *sp = strrchr(line, ' ');
            if (!sp) continue;
            double n = strtod(sp + 1, NULL);
            *sp = 0;
            int i;
            if (*ntop < PROF_MAX_LINES)
                i = (*ntop)++;
            else if (n > top[PROF_MAX_LINES - 1].n)
                i = PROF_MAX_LINES - 1;
            else
                continue;
            while (i > 0 && top[i - 1].n < n) {
                top[i] = top[i - 1];
                i--;
            }
            top[i].n = n;
            /* long stacks are cut: the table shows their outer frames */
            size_t l = strlen(line);
            if (l >= sizeof(top[i].s)) l = sizeof(top[i].s) - 1;
            memcpy(top[i].s, line, l);
            top[i].s[l] = 0;
        }
        fclose(fp);
    }
    closedir(d);
}

void report_html_profile(buf *b, const diag_run *r)
{
    const dcause *c = &r->cause;
    if (!c->have_pyprof || c->samples <= 0) return;
    double train = c->ph_train + c->ph_compile;
    buf_puts(b, "<h2>Where the training thread's time goes (sampled stacks)</h2>\n");
    buf_printf(b,
               "<p>%.0f samples of the training thread's Python stack at %.0f Hz (sampler cost "
               "%.2f s). Training samples: %.0f; before the first step: %.0f; evaluation and "
               "checkpoints: %.0f. The folded stacks are in <code>pyprof/</code> (flamegraph.pl, "
               "speedscope).</p>\n",
               c->samples, c->hz, c->sampler_cost_s, train, c->ph_startup, c->ph_eval);
    if (c->nfunc > 0 && train > 0) {
        buf_puts(b, "<table><tr><th>outside known phases</th><th>where</th><th>kind</th><th "
                    "class=\"n\">share of training</th></tr>\n");
        for (int i = 0; i < c->nfunc; i++) {
            char where[200];
            snprintf(where, sizeof(where), "%s:%d", c->funcs[i].file, c->funcs[i].line);
            buf_puts(b, "<tr><td>");
            report_html_esc(b, c->funcs[i].func);
            buf_puts(b, "</td><td>");
            report_html_esc(b, where);
            buf_puts(b, "</td><td>");
            report_html_esc(b, c->funcs[i].kind);
            buf_printf(b, "</td><td class=\"n\">%.1f%%</td></tr>\n",
                       100 * c->funcs[i].samples / train);
        }
        buf_puts(b, "</table>\n");
    }
    pline *top = calloc(PROF_MAX_LINES, sizeof(pline));
    if (!top) return;
    int n = 0;
    top_stacks(r, top, &n);
    if (n > 0) {
        double all = c->samples > 0 ? c->samples : 1;
        buf_puts(b, "<table><tr><th class=\"n\">samples</th><th>stack (phase; outermost "
                    "first)</th></tr>\n");
        for (int i = 0; i < n; i++) {
            buf_printf(b, "<tr><td class=\"n\">%.0f (%.0f%%)</td><td><code>", top[i].n,
                       100 * top[i].n / all);
            report_html_esc(b, top[i].s);
            buf_puts(b, "</code></td></tr>\n");
        }
        buf_puts(b, "</table>\n");
    }
    free(top);
    /* the flame graph of every node's stacks (one run directory, or a job's) */
    const char **dirs = malloc((size_t)(r->nnodes > 1 ? r->nnodes : 1) * sizeof(*dirs));
    if (!dirs) return;
    int nd = 0;
    for (int i = 0; i < r->nnodes; i++)
        dirs[nd++] = r->nodes[i].dir;
    if (nd == 0) dirs[nd++] = r->dir;
    flame_set fs;
    if (flame_load(&fs, dirs, nd) == 0) flame_html(&fs, b);
    flame_free(&fs);
    free(dirs);
}
