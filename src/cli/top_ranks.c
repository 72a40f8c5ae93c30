/* Per-rank rows of `trainperf top` (see top_ranks.h). Reads only the last
 * TOP_STEPS_TAIL bytes of steps.csv, so a long run costs the same. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/top_ranks.h"
#include "util/afile.h"

#define TOP_STEPS_TAIL (512 * 1024)
#define TOP_MAX_RANKS 64       /* rows shown; more: the slowest, said in one line */
#define TOP_RECENT 64          /* steps per rank the recent figures cover */

typedef struct rank_row {
    int rank;                  /* -1: none (then pid) */
    long pid;
    unsigned long long steps;  /* last step index + 1 */
    double last_end_s;         /* run time the last step ended */
    double iv_ms[TOP_RECENT];  /* recent step intervals, ring */
    double data_ms[TOP_RECENT];
    double samples[TOP_RECENT];
    int n, head;
    double med;                /* median of the recent intervals */
} rank_row;

/* slowest first (by the median of recent steps) */
static int cmp_slow(const void *a, const void *b)
{
    const rank_row *x = a, *y = b;
    return (x->med < y->med) - (x->med > y->med);
}

static int cmp_rank(const void *a, const void *b)
{
    const rank_row *x = a, *y = b;
    if ((x->rank < 0) != (y->rank < 0)) return x->rank < 0 ? 1 : -1;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Column index of name in a header line, -1 when absent. */
static int col_of(const char *hdr, const char *name)
{
    int i = 0;
    size_t n = strlen(name);
    for (const char *p = hdr; p && *p; i++) {
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\n' || p[n] == '\r' || !p[n])) return i;
        p = strchr(p, ',');
        if (p) p++;
    }
    return -1;
}

/* The cells of one CSV line (no quoting in steps.csv), in place. */
static int cells(char *s, char **c, int max)
{
    int n = 0;
    while (n < max) {
        c[n++] = s;
        char *e = strchr(s, ',');
        if (!e) break;
        *e = 0;
        s = e + 1;
    }
    return n;
}

static double median(double *v, int n)
{
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_dbl);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* pid's rank into p (the last row of a pid wins) */
static void note_pid(top_pids *p, long pid, int rank)
{
    int i = 0;
    while (i < p->n && p->pid[i] != pid)
        i++;
    if (i == p->n) {
        if (p->n == TOP_PIDS_MAX) return;
        p->n++;
    }
    p->pid[i] = pid;
    p->rank[i] = rank;
}

static void print_rows(rank_row *rows, int nrows, double *all, double now_t, int color);

void top_ranks_print(const char *dir, double now_t, int color, top_pids *pids)
{
    if (pids) pids->n = 0;
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/steps.csv", dir) >= (int)sizeof(path)) return;
    FILE *f = afile_fopen_read(path);
    if (!f) return;
    char hdr[1024];
    if (!fgets(hdr, sizeof(hdr), f)) {
        fclose(f);
        return;
    }
    int c_rank = col_of(hdr, "rank"), c_pid = col_of(hdr, "pid"), c_step = col_of(hdr, "step"),
        c_start = col_of(hdr, "start_s"), c_dur = col_of(hdr, "duration_ns"),
        c_iv = col_of(hdr, "interval_ns"), c_data = col_of(hdr, "data_ns"),
        c_samples = col_of(hdr, "samples");
    char *tail = c_rank < 0 || c_pid < 0 || c_step < 0 || c_iv < 0 || c_start < 0 || c_dur < 0
                     ? NULL
                     : cli_csv_tail(f, hdr, TOP_STEPS_TAIL);
    fclose(f);
    if (!tail) return;
    /* every rank in the tail (bounded by TOP_STEPS_TAIL: a row is one step) */
    rank_row *rows = NULL;
    int nrows = 0, cap = 0;
    char *p = tail;
    while (*p) {
        char *nl = strchr(p, '\n');
        if (!nl) break; /* a row still being written */
        *nl = 0;
        char *c[32];
        int n = cells(p, c, 32);
        p = nl + 1;
        if (n <= c_iv || n <= c_rank || n <= c_pid || n <= c_step) continue;
        int rank = c[c_rank][0] ? (int)strtol(c[c_rank], NULL, 10) : -1;
        long pid = strtol(c[c_pid], NULL, 10);
        if (pids && pid > 0) note_pid(pids, pid, rank);
        int i;
        for (i = 0; i < nrows; i++)
            if (rows[i].rank == rank && (rank >= 0 || rows[i].pid == pid)) break;
        if (i == nrows) {
            if (nrows == cap) {
                int nc = cap ? cap * 2 : 16;
                rank_row *nr = realloc(rows, (size_t)nc * sizeof(*nr));
                if (!nr) continue;
                rows = nr;
                cap = nc;
            }
            memset(&rows[nrows], 0, sizeof(rows[0]));
            rows[nrows].rank = rank;
            rows[nrows].pid = pid;
            nrows++;
        }
        rank_row *r = &rows[i];
        r->steps = strtoull(c[c_step], NULL, 10) + 1;
        r->last_end_s = strtod(c[c_start], NULL) + strtod(c[c_dur], NULL) / 1e9;
        r->iv_ms[r->head] = strtod(c[c_iv], NULL) / 1e6;
        r->data_ms[r->head] = c_data >= 0 && c_data < n ? strtod(c[c_data], NULL) / 1e6 : NAN;
        r->samples[r->head] = c_samples >= 0 && c_samples < n ? strtod(c[c_samples], NULL) : NAN;
        r->head = (r->head + 1) % TOP_RECENT;
        if (r->n < TOP_RECENT) r->n++;
    }
    free(tail);
    double *all = nrows ? malloc((size_t)nrows * sizeof(*all)) : NULL;
    if (all) print_rows(rows, nrows, all, now_t, color);
    free(all);
    free(rows);
}

static void print_rows(rank_row *rows, int nrows, double *all, double now_t, int color)
{
    unsigned long long lead = 0;
    for (int i = 0; i < nrows; i++) {
        if (rows[i].steps > lead) lead = rows[i].steps;
        double tmp[TOP_RECENT];
        memcpy(tmp, rows[i].iv_ms, sizeof(double) * (size_t)rows[i].n);
        all[i] = rows[i].med = median(tmp, rows[i].n);
    }
    double job_med = median(all, nrows);
    /* more ranks than rows: the slowest shown (the ones to look at) */
    int shown = nrows;
    if (nrows > TOP_MAX_RANKS) {
        qsort(rows, (size_t)nrows, sizeof(rows[0]), cmp_slow);
        shown = TOP_MAX_RANKS;
    }
    qsort(rows, (size_t)shown, sizeof(rows[0]), cmp_rank);
    const char *b = color ? CLI_BOLD : "", *z = color ? CLI_RESET : "", *y = color ? CLI_YELLOW : "";
    printf("  %s%-10s %9s %9s %9s %7s %11s %7s %8s%s\n", b, "rank", "steps", "behind", "step ms",
           "p50 ms", "samples/s", "data %", "last s", z);
    for (int i = 0; i < shown; i++) {
        rank_row *r = &rows[i];
        double sum_iv = 0, sum_data = 0, sum_s = 0;
        int have_data = 0, have_s = 0;
        for (int k = 0; k < r->n; k++) {
            sum_iv += r->iv_ms[k];
            if (isfinite(r->data_ms[k])) {
                sum_data += r->data_ms[k];
                have_data = 1;
            }
            if (isfinite(r->samples[k]) && r->samples[k] > 0) {
                sum_s += r->samples[k];
                have_s = 1;
            }
        }
        char who[24], sps[24], dw[16], age[16];
        if (r->rank >= 0)
            snprintf(who, sizeof(who), "rank %d", r->rank);
        else
            snprintf(who, sizeof(who), "pid %ld", r->pid);
        snprintf(sps, sizeof(sps), have_s && sum_iv > 0 ? "%.1f" : "?", sum_s / (sum_iv / 1e3));
        snprintf(dw, sizeof(dw), have_data && sum_iv > 0 ? "%.0f" : "?", 100 * sum_data / sum_iv);
        /* A step that ended after now_t (the clocks of run.json's start and
         * of the steps differ by a little) ended just now, never -0.2 s ago. */
        double ago = now_t - r->last_end_s;
        snprintf(age, sizeof(age), isfinite(ago) ? "%.1f" : "?", ago > 0 ? ago : 0.0);
        /* A rank whose steps take 20% more than the job's median: a straggler
         * (in synchronous training the others wait for it). */
        int slow = nrows > 1 && isfinite(job_med) && r->med > 1.2 * job_med;
        printf("  %-10s %9llu %9llu %9.2f %7.2f %11s %7s %8s%s%s%s\n", who, r->steps, lead - r->steps,
               r->n ? sum_iv / r->n : NAN, r->med, sps, dw, age, slow ? y : "", slow ? "  slow" : "",
               slow ? z : "");
    }
    if (shown < nrows)
        printf("  (%d ranks: the %d slowest by p50 shown, %d not; job p50 %.2f ms)\n", nrows, shown,
               nrows - shown, job_med);
}
