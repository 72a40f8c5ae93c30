/* trainperf top: a live view of a run directory being written (by `trainperf
 * run` or embedded mode, here or on a shared file system). It reads the run
 * directory: run.json, the last row of metrics.csv, the tail of steps.csv
 * (per-rank rows, top_ranks.c) and alerts.jsonl; and, where this node has
 * NVML, its GPUs and their processes now (top_gpus.c). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/top_gpus.h"
#include "cli/top_ranks.h"
#include "record/rundir.h"
#include "util/afile.h"
#include "util/human.h"
#include "trainperf.h"
#include "util/buf.h"
#include "util/jsonr.h"

#define TOP_TAIL 65536       /* the last row of metrics.csv is in the last 64 KiB */
#define TOP_MAX_COLS 4096
#define TOP_MAX_ALERTS 32
#define TOP_GPUS_SHOWN 16

typedef struct top_row {
    char hdr[TOP_TAIL], row[TOP_TAIL];
    char *h[TOP_MAX_COLS], *c[TOP_MAX_COLS];
    int nh, nc;
} top_row;

typedef struct top_alerts {
    char rule[TOP_MAX_ALERTS][64];
    char msg[TOP_MAX_ALERTS][160];
    int n;
} top_alerts;

static void top_usage(FILE *f)
{
    fprintf(f, "usage: trainperf top [RUN_DIR] [--interval SECONDS] [--once]\n\n"
               "Live view of a run directory being written (default ./trainperf-runs/latest):\n"
               "throughput, CPU, memory, one row per rank, and on a node with NVML one row per\n"
               "GPU with its processes (pid, rank, memory, SM %%). Ends when the run ends;\n"
               "--once prints the current state and exits.\n");
}

/* Split a CSV record in place (quotes as RFC 4180). Returns the cell count. */
static int split_csv(char *s, char **cells, int max)
{
    int n = 0;
    char *w = s, *p = s;
    while (n < max) {
        cells[n++] = w;
        int q = 0;
        if (*p == '"') {
            q = 1;
            p++;
        }
        for (;;) {
            if (q && *p == '"' && p[1] == '"') {
                *w++ = '"';
                p += 2;
            } else if (q && *p == '"') {
                q = 0;
                p++;
            } else if (!q && (*p == ',' || *p == 0 || *p == '\n' || *p == '\r')) {
                break;
            } else if (*p == 0) {
                break;
            } else {
                *w++ = *p++;
            }
        }
        char end = *p;
        *w = 0;
        if (end != ',') break;
        p++;
        w = p;
    }
    return n;
}

/* The header and the last complete row of metrics.csv. 0, or -1 when absent. */
static int read_metrics(const char *dir, top_row *r)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/metrics.csv", dir) >= (int)sizeof(path)) return -1;
    FILE *f = afile_fopen_read(path);
    if (!f) return -1;
    r->nh = r->nc = 0;
    if (!fgets(r->hdr, sizeof(r->hdr), f) || !strchr(r->hdr, '\n')) {
        fclose(f);
        return -1;
    }
    size_t hlen = strlen(r->hdr);
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return -1;
    }
    long from = st.st_size > TOP_TAIL - 1 ? (long)(st.st_size - (TOP_TAIL - 1)) : (long)hlen;
    if (from < (long)hlen) from = (long)hlen;
    fseek(f, from, SEEK_SET);
    size_t n = fread(r->row, 1, sizeof(r->row) - 1, f);
    fclose(f);
    r->row[n] = 0;
    /* The last line ending in '\n' (a row still being written has none). */
    char *end = n ? r->row + n : NULL;
    while (end && end > r->row && end[-1] != '\n') end--;
    if (!end || end == r->row) return -1;
    end[-1] = 0;
    char *start = strrchr(r->row, '\n');
    start = start ? start + 1 : r->row;
    if (start == r->row && from > (long)hlen) return -1; /* a row longer than the tail */
    memmove(r->row, start, strlen(start) + 1);
    r->nh = split_csv(r->hdr, r->h, TOP_MAX_COLS);
    r->nc = split_csv(r->row, r->c, TOP_MAX_COLS);
    return 0;
}

/* The cell of column name as a number; NAN when unknown (empty) or absent. */
static double col(const top_row *r, const char *name)
{
    for (int i = 0; i < r->nh && i < r->nc; i++) {
        if (strcmp(r->h[i], name) != 0) continue;
        if (!r->c[i][0]) return NAN;
        char *e;
        double v = strtod(r->c[i], &e);
        return *e ? NAN : v;
    }
    return NAN;
}

/* The data-wait share of the last row, 0-1 (run directories written by
 * earlier builds have it as data_wait_pct, 0-100). */
static double col_data_wait(const top_row *r)
{
    double v = col(r, "data_wait_share");
    return isfinite(v) ? v : col(r, "data_wait_pct") / 100;
}

static const char *col_str(const top_row *r, const char *name)
{
    for (int i = 0; i < r->nh && i < r->nc; i++)
        if (strcmp(r->h[i], name) == 0) return r->c[i];
    return "";
}

/* Which alerts are active now: the last state of each rule in alerts.jsonl. */
static void read_alerts(const char *dir, top_alerts *a)
{
    a->n = 0;
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/alerts.jsonl", dir) >= (int)sizeof(path)) return;
    FILE *f = afile_fopen_read(path);
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        jr_doc d;
        char err[64];
        if (jr_parse(&d, line, strlen(line), 64, err, sizeof(err)) != 0) continue;
        const char *rule = jr_pstr(d.root, "rule"), *state = jr_pstr(d.root, "state");
        const char *msg = jr_pstr(d.root, "message");
        if (rule && state) {
            int i;
            for (i = 0; i < a->n; i++)
                if (strcmp(a->rule[i], rule) == 0) break;
            if (strcmp(state, "fired") == 0 && i == a->n && a->n < TOP_MAX_ALERTS) {
                snprintf(a->rule[a->n], sizeof(a->rule[0]), "%s", rule);
                snprintf(a->msg[a->n], sizeof(a->msg[0]), "%s", msg ? msg : "");
                a->n++;
            } else if (strcmp(state, "cleared") == 0 && i < a->n) {
                a->n--;
                memmove(a->rule[i], a->rule[a->n], sizeof(a->rule[0]));
                memmove(a->msg[i], a->msg[a->n], sizeof(a->msg[0]));
            }
        }
        jr_free(&d);
    }
    fclose(f);
}

/* "12.3" or "?" for unknown. */
static const char *num(char *out, size_t n, double v, int decimals)
{
    if (isfinite(v))
        snprintf(out, n, "%.*f", decimals, v);
    else
        snprintf(out, n, "?");
    return out;
}

/* The command in at most room columns: whole arguments while they fit, then
 * "..." when any is left out (never an argument cut in the middle). */
static void command_words(buf *b, const jr_node *cmd, size_t room)
{
    size_t used = 0;
    for (int i = 0; cmd && i < cmd->count; i++) {
        const char *s = jr_str(jr_at(cmd, i));
        size_t l = (s ? strlen(s) : 1) + (i ? 1 : 0);
        int last = i == cmd->count - 1;
        /* room for " ..." stays unless this is the last argument */
        if (used + l + (last ? 0 : 4) > room) {
            buf_puts(b, i ? " ..." : "...");
            return;
        }
        buf_printf(b, "%s%s", i ? " " : "", s ? s : "?");
        used += l;
    }
}

/* Seconds since the run started, by this machine's clock: NAN when the run
 * was made on another host (its clock may differ; the last sample's time is
 * shown then). */
static double run_age(const jr_node *run)
{
    char host[256];
    const char *rh = jr_pstr(run, "host");
    double start = jr_pnum(run, "start_unix_s");
    if (!rh || !isfinite(start) || gethostname(host, sizeof(host)) != 0) return NAN;
    host[sizeof(host) - 1] = 0;
    if (strcmp(host, rh) != 0) return NAN;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double age = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 - start;
    return age >= 0 ? age : 0;
}

static int render(const char *dir, top_row *r, int tty, int color, nvml_top *nv)
{
    jr_doc run;
    char err[256];
    char path[PATH_MAX];
    /* Asked before run.json is read: a collector that finishes meanwhile has
     * written its end there by the time its lock is gone. */
    int collector_gone = rec_rundir_in_use(dir) == 0;
    snprintf(path, sizeof(path), "%s/run.json", dir);
    if (jr_load_file(&run, path, 1u << 20, err, sizeof(err)) != 0) return -1;
    const jr_node *cmd = jr_get(run.root, "command");
    buf line;
    buf_init(&line, 1u << 16);
    /* the header "trainperf top DIR  (CMD)" on one row of a terminal; off one, 200 */
    size_t cols = (size_t)cli_term_cols(STDOUT_FILENO), head = strlen(dir) + 18;
    command_words(&line, cmd, cols ? (cols > head + 20 ? cols - head : 20) : 200);
    double dur = jr_pnum(run.root, "duration_s");
    const jr_node *ex = jr_get(run.root, "exit");
    int ended = isfinite(dur);
    /* No end recorded and no collector holding the directory: the run was
     * killed (SIGKILL, the OOM killer, a lost node). */
    int dead = !ended && collector_gone;
    int have = read_metrics(dir, r) == 0;
    top_alerts al;
    read_alerts(dir, &al);
    const char *b = color ? CLI_BOLD : "", *z = color ? CLI_RESET : "";
    char t1[32], t2[32], t3[32], t4[32];
    double t = have ? col(r, "t") : NAN;
    /* The run time "now" is for the steps' ages: a live run's clock (the
     * last sample can be a second old, its steps newer), an ended run's
     * end, a dead run's last sample. */
    double now = ended ? dur : t;
    if (!ended && !dead) {
        double age = run_age(run.root);
        if (isfinite(age) && !(age < now)) now = age;
    }
    if (tty) fputs("\033[H\033[J", stdout);
    printf("%strainperf top%s %s  (%s)\n", b, z, dir, line.data ? line.data : "");
    snprintf(path, sizeof(path), "%s/recovered.json", dir);
    int recovered = access(path, F_OK) == 0;
    if (ended) {
        double code = jr_pnum(ex, "code");
        printf("  ended after %.1f s, exit %s\n", dur, num(t1, sizeof(t1), code, 0));
    } else if (dead) {
        printf("  dead: the collector is gone and no end was recorded (killed?), last sample at "
               "%s s; %s\n",
               num(t1, sizeof(t1), t, 0),
               recovered ? "recovered (recovered.json)" : "`trainperf report` recovers it");
    } else {
        printf("  running, %s s\n", num(t1, sizeof(t1), now, 0));
    }
    /* A finished run: its summary, not the sample taken after the command
     * exited (which shows the tail, e.g. half the rate and unknown CPU). */
    jr_doc sum;
    int have_sum = 0;
    if (ended || dead) {
        snprintf(path, sizeof(path), "%s/summary.json", dir);
        have_sum = jr_load_file(&sum, path, 16u << 20, err, sizeof(err)) == 0;
    }
    if (have_sum) {
        const jr_node *st = jr_get(sum.root, "steps"), *res = jr_get(sum.root, "resources");
        double steps = jr_pnum(st, "count");
        if (isfinite(steps) && steps > 0)
            printf("  steps %s  %s steps/s  %s samples/s  data wait %s%%  (whole run)\n",
                   num(t1, sizeof(t1), steps, 0), num(t2, sizeof(t2), jr_pnum(st, "steps_per_s"), 2),
                   num(t3, sizeof(t3), jr_pnum(st, "samples_per_s"), 1),
                   num(t4, sizeof(t4), 100 * jr_pnum(st, "data_wait_share"), 0));
        else
            printf("  no steps recorded\n");
        human_bytes(t4, sizeof(t4), jr_pnum(jr_get(res, "tree_rss_bytes"), "max"));
        printf("  CPU system %s%%  tree %s%%  main %s%% (means)  peak RSS %s",
               num(t1, sizeof(t1), jr_pnum(jr_get(res, "cpu_pct"), "mean"), 0),
               num(t2, sizeof(t2), jr_pnum(jr_get(res, "tree_cpu_pct"), "mean"), 0),
               num(t3, sizeof(t3), jr_pnum(jr_get(res, "main_cpu_pct"), "mean"), 0), t4);
        printf("  processes %s (max)\n", num(t1, sizeof(t1), jr_pnum(res, "tree_procs_max"), 0));
        jr_free(&sum);
    }
    if (have) {
        double steps = col(r, "steps");
        if (have_sum)
            ; /* shown above from summary.json */
        else if (isfinite(steps) && steps > 0)
            printf("  steps %s  %s steps/s  %s samples/s  data wait %s%%\n",
                   num(t1, sizeof(t1), steps, 0), num(t2, sizeof(t2), col(r, "step_rate"), 2),
                   num(t3, sizeof(t3), col(r, "sample_rate"), 1),
                   num(t4, sizeof(t4), 100 * col_data_wait(r), 0));
        else
            printf("  no steps yet\n");
        if (!have_sum) {
            human_bytes(t4, sizeof(t4), col(r, "tree_rss_bytes"));
            printf("  CPU system %s%%  tree %s%%  main %s%%  RSS %s",
                   num(t1, sizeof(t1), col(r, "cpu_pct"), 0),
                   num(t2, sizeof(t2), col(r, "tree_cpu_pct"), 0),
                   num(t3, sizeof(t3), col(r, "main_cpu_pct"), 0), t4);
            printf("  processes %s\n", num(t1, sizeof(t1), col(r, "tree_procs"), 0));
        }
        static top_pids pids;
        top_ranks_print(dir, now, color, &pids);
        /* a running run on this node: its GPUs now, with every process on
         * them (NVML); else the run's GPUs as its last sample has them */
        int live = !ended && nv && top_gpus_print(nv, dir, &pids, color) > 0;
        for (int g = 0; g < TOP_GPUS_SHOWN && !live; g++) {
            char k[64];
            snprintf(k, sizeof(k), "gpu%d_util_pct", g);
            int present = 0;
            for (int i = 0; i < r->nh; i++)
                if (strcmp(r->h[i], k) == 0) present = 1;
            if (!present) break;
            char used[32], total[32];
            snprintf(k, sizeof(k), "gpu%d_mem_used_bytes", g);
            human_bytes(used, sizeof(used), col(r, k));
            snprintf(k, sizeof(k), "gpu%d_mem_total_bytes", g);
            human_bytes(total, sizeof(total), col(r, k));
            snprintf(k, sizeof(k), "gpu%d_util_pct", g);
            num(t1, sizeof(t1), col(r, k), 0);
            snprintf(k, sizeof(k), "gpu%d_power_w", g);
            num(t2, sizeof(t2), col(r, k), 0);
            snprintf(k, sizeof(k), "gpu%d_throttle", g);
            const char *thr = col_str(r, k);
            printf("  GPU%d util %s%%  memory %s / %s  %s W%s%s\n", g, t1, used, total, t2,
                   thr[0] ? "  throttle " : "", thr);
        }
    } else if (!have_sum) {
        printf("  no samples yet\n");
    }
    for (int i = 0; i < al.n; i++)
        printf("  %salert%s %s: %s\n", color ? CLI_YELLOW : "", z, al.rule[i], al.msg[i]);
    if (!tty) fputs("\n", stdout);
    fflush(stdout);
    buf_free(&line);
    jr_free(&run);
    return ended || dead;
}

int cmd_top(int argc, char **argv)
{
    const char *dir = NULL;
    double interval = 1.0;
    int once = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            top_usage(stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--once") == 0) {
            once = 1;
        } else if (strcmp(argv[i], "--interval") == 0) {
            if (i + 1 >= argc || cli_parse_double(argv[i + 1], &interval) || interval < 0.1) {
                cli_error("--interval needs seconds (at least 0.1)");
                return CLI_USAGE;
            }
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_error("unknown option '%s' for top (see `trainperf top --help`)", argv[i]);
            return CLI_USAGE;
        } else if (!dir) {
            dir = argv[i];
        } else {
            cli_error("top watches one run directory");
            return CLI_USAGE;
        }
    }
    if (!dir) dir = "trainperf-runs/latest";
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/run.json", dir) >= (int)sizeof(path) ||
        access(path, R_OK) != 0) {
        cli_error("%s: not a run directory (no readable run.json)", dir);
        return CLI_USAGE;
    }
    static top_row row;
    int tty = isatty(1), color = cli_color(stdout);
    /* NVML when this node has it: the GPUs' processes; without, the run's
     * GPU lines from metrics.csv */
    nvml_top *nv = NULL;
    char nerr[320];
    if (nvml_top_open(&nv, nerr, sizeof(nerr)) != 0) nv = NULL;
    for (;;) {
        int ended = render(dir, &row, tty && !once, color, nv);
        if (ended < 0) {
            cli_error("%s/run.json: unreadable or damaged", dir);
            nvml_top_close(nv);
            return CLI_USAGE;
        }
        if (ended || once) {
            nvml_top_close(nv);
            return CLI_OK;
        }
        struct timespec ts = {(time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}
