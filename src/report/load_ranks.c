/* The files of a run directory about its ranks, read into the run: the
 * FLOP counts (flops/), the communication log (comm/), the job's step
 * count. A loader below the report's writers and its rank tables
 * (report_ranks.c): report_load.c calls it while loading a run. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/load_ranks.h"
#include "util/csvr.h"
#include "util/jsonr.h"

#define RR_MAX_FLOPS_FILE ((size_t)16 << 20) /* a FLOP table of a very large model */

/* The interval of each counted step of run_dir's ranks (steps.csv). */
static void counted_step_times(diag_run *r, const char *run_dir)
{
    int want = 0;
    for (int i = 0; i < r->nranks; i++)
        if (r->ranks[i].node == r->cur_node && r->ranks[i].flops_at > 0) want++;
    if (!want) return;
    char path[1200];
    csvr c;
    char e[200];
    snprintf(path, sizeof(path), "%.1000s/steps.csv", run_dir);
    if (csvr_open(&c, path, e, sizeof(e)) != 0) return;
    int c_rank = csvr_col(&c, "rank"), c_step = csvr_col(&c, "step");
    int c_iv = csvr_col(&c, "interval_ns");
    while (want > 0 && c_step >= 0 && c_iv >= 0 && csvr_next(&c) == 1) {
        double rk = -1, st, iv;
        if (!csvr_num(&c, c_step, &st) || !csvr_num(&c, c_iv, &iv)) continue;
        if (!csvr_num(&c, c_rank, &rk)) rk = -1;
        for (int i = 0; i < r->nranks; i++) {
            drank *k = &r->ranks[i];
            if (k->node == r->cur_node && k->rank == (int)rk && k->flops_at == st &&
                k->flops_at_ns == 0) {
                k->flops_at_ns = iv;
                want--;
            }
        }
    }
    csvr_close(&c);
}

/* ---- model FLOPs and the job's figures -------------------------------------- */

static void load_flops_file(diag_run *r, const char *path)
{
    jr_doc d;
    char e[200];
    if (jr_load_file(&d, path, RR_MAX_FLOPS_FILE, e, sizeof(e)) != 0) return;
    double rank = jr_num(jr_get(d.root, "rank")), fl = jr_num(jr_get(d.root, "total_flops"));
    double peak = jr_num(jr_get(d.root, "peak_flops_per_s"));
    double step = jr_num(jr_get(d.root, "step"));
    const char *method = jr_str(jr_get(d.root, "method"));
    const char *psrc = jr_str(jr_get(d.root, "peak_source"));
    if (!psrc) psrc = jr_str(jr_get(d.root, "mfu_reason")); /* files older than the peak keys */
    int declared = method && strcmp(method, "declared") == 0;
    drank *k = NULL;
    for (int i = 0; isfinite(rank) && i < r->nranks; i++)
        if (r->ranks[i].rank == (int)rank) k = &r->ranks[i];
    /* a run of one process without a rank: its file says rank 0 */
    if (!k && r->nranks == 1 && r->ranks[0].rank < 0 && rank == 0) k = &r->ranks[0];
    if (k && isfinite(fl) && fl > 0) {
        int better = !(k->flops_step > 0) || (declared && k->flops_at >= 0) ||
                     (!declared && k->flops_at >= 0 && isfinite(step) && step > k->flops_at);
        if (better) {
            k->flops_step = fl;
            k->flops_at = declared ? -1 : (isfinite(step) ? step : 0);
            k->flops_at_ns = 0;
            k->peak_flops = isfinite(peak) && peak > 0 ? peak : 0;
            snprintf(k->flops_src, sizeof(k->flops_src), "%s", declared ? "declared" : "counted");
            snprintf(k->peak_src, sizeof(k->peak_src), "%s", psrc ? psrc : "");
        }
    }
    jr_free(&d);
}

void rr_load_flops(diag_run *r, const char *run_dir)
{
    char path[1200];
    snprintf(path, sizeof(path), "%.1000s/flops", run_dir);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d)) != NULL && files < 4096) {
        size_t l = strlen(de->d_name);
        if (strncmp(de->d_name, "flops-rank", 10) != 0 || l < 15 ||
            strcmp(de->d_name + l - 5, ".json") != 0)
            continue;
        snprintf(path, sizeof(path), "%.1000s/flops/%.150s", run_dir, de->d_name);
        load_flops_file(r, path);
        files++;
    }
    closedir(d);
    counted_step_times(r, run_dir);
}

static dcommop *commop(diag_run *r, const char *op)
{
    for (int i = 0; i < r->ncommops; i++)
        if (strcmp(r->commops[i].op, op) == 0) return &r->commops[i];
    if (r->ncommops >= DIAG_MAX_COMM_OPS) return NULL;
    dcommop *o = &r->commops[r->ncommops++];
    memset(o, 0, sizeof(*o));
    snprintf(o->op, sizeof(o->op), "%s", op);
    return o;
}

static drank *rank_of(diag_run *r, int rank)
{
    for (int i = 0; i < r->nranks; i++)
        if (r->ranks[i].rank == rank) return &r->ranks[i];
    return NULL;
}

/* One comm/ops-*.csv: totals per op kind, per rank bytes and bus bandwidth,
 * the rank's most frequent op. */
static void load_ops_file(diag_run *r, const char *path)
{
    csvr c;
    char e[200];
    if (csvr_open(&c, path, e, sizeof(e)) != 0) return;
    int c_rank = csvr_col(&c, "rank"), c_op = csvr_col(&c, "op"), c_bytes = csvr_col(&c, "bytes");
    int c_dur = csvr_col(&c, "duration_ns"), c_wait = csvr_col(&c, "wait_ns");
    int c_bus = csvr_col(&c, "busbw_bps");
    int c_is = csvr_col(&c, "issue_mono_ns"), c_end = csvr_col(&c, "end_mono_ns");
    int c_step = csvr_col(&c, "step");
    double last_end = 0;
    if (c_op < 0 || c_dur < 0) {
        csvr_close(&c);
        return;
    }
    char names[DIAG_MAX_COMM_OPS][32];
    double counts[DIAG_MAX_COMM_OPS];
    int nn = 0;
    drank *k = NULL;
    int rc;
    while ((rc = csvr_next(&c)) == 1) {
        const char *op = csvr_str(&c, c_op);
        if (!op[0]) continue;
        double v, rank = -1;
        if (!k && csvr_num(&c, c_rank, &rank)) k = rank_of(r, (int)rank);
        dcommop *o = commop(r, op);
        double bytes = 0, bus;
        csvr_num(&c, c_bytes, &bytes);
        if (!o) r->commops_dropped++;
        if (o) {
            o->n++;
            o->bytes += bytes;
            if (csvr_num(&c, c_dur, &v)) o->dur_ns += v;
            if (csvr_num(&c, c_wait, &v)) o->wait_ns += v;
        }
        int have_bus = csvr_num(&c, c_bus, &bus);
        if (o && have_bus) {
            o->busbw_sum += bus;
            o->busbw_n++;
        }
        double is, en, stepno = -1;
        csvr_num(&c, c_step, &stepno);
        /* the warm-up step is left out, as in the per-rank step figures */
        if (k && stepno != 0 && csvr_num(&c, c_is, &is) && csvr_num(&c, c_end, &en)) {
            /* rows come in completion order: the union of [issue, end] */
            double from = is > last_end ? is : last_end;
            if (en > from) k->comm_busy_ns += en - from;
            if (en > last_end) last_end = en;
        }
        if (k) {
            k->comm_ops++;
            k->comm_bytes += bytes;
            if (have_bus) {
                k->comm_busbw_sum += bus;
                k->comm_busbw_n++;
            }
        }
        int i;
        for (i = 0; i < nn; i++)
            if (strcmp(names[i], op) == 0) break;
        if (i == nn && nn < DIAG_MAX_COMM_OPS) {
            snprintf(names[nn], sizeof(names[nn]), "%.31s", op);
            counts[nn++] = 0;
        }
        if (i < nn) counts[i]++;
    }
    csvr_close(&c);
    r->have_comm = 1;
    if (k && nn) {
        int best = 0;
        for (int i = 1; i < nn; i++)
            if (counts[i] > counts[best]) best = i;
        snprintf(k->top_op, sizeof(k->top_op), "%.31s", names[best]);
    }
}

int rr_is_ops_name(const char *n)
{
    size_t l = strlen(n);
    return strncmp(n, "ops-", 4) == 0 && l > 8 && strcmp(n + l - 4, ".csv") == 0;
}

void rr_load_comm(diag_run *r, const char *run_dir)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/comm", run_dir);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d)) != NULL && files < 4096) {
        if (!rr_is_ops_name(de->d_name)) continue;
        snprintf(path, sizeof(path), "%s/comm/%s", run_dir, de->d_name);
        load_ops_file(r, path);
        files++;
    }
    closedir(d);
}

double rr_global_steps(const diag_run *r)
{
    return r->sf.count ? (double)figs_global_steps(&r->sf) : r->steps;
}
