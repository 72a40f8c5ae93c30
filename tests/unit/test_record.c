/* The run-directory writers against golden files (tests/data/golden/).
 * Fixed input frames, steps and alerts -> byte-exact expected files.
 * TPF_UPDATE_GOLDEN=1 rewrites the golden files (review the diff!). */
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collect/agg.h"
#include "core/metrics.h"
#include "record/trace.h"
#include "record/writers.h"
#include "trainperf.h"
#include "tt.h"

/* BUILD/tests/test_record -> ROOT/tests/data/golden */
static void golden_path(const char *name, char *out, size_t n)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[len > 0 ? len : 0] = 0;
    for (int i = 0; i < 3; i++) {
        char *s = strrchr(exe, '/');
        if (s) *s = 0;
    }
    snprintf(out, n, "%s/tests/data/golden/%s", exe, name);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    buf b;
    buf_init(&b, 0);
    char tmp[4096];
    size_t k;
    while ((k = fread(tmp, 1, sizeof(tmp), f)) > 0) buf_append(&b, tmp, k);
    fclose(f);
    *len = b.len;
    if (!b.data) return calloc(1, 1);
    return b.data; /* the caller frees it */
}

/* 0 when b equals the golden file (or it was rewritten on request). */
static int golden_check(const char *name, const char *data, size_t len)
{
    char path[PATH_MAX + 64];
    golden_path(name, path, sizeof(path));
    const char *upd = getenv("TPF_UPDATE_GOLDEN");
    if (upd && *upd == '1') {
        FILE *f = fopen(path, "wb");
        if (!f) return -1;
        fwrite(data, 1, len, f);
        fclose(f);
        return 0;
    }
    size_t glen = 0;
    char *g = slurp(path, &glen);
    if (!g) {
        fprintf(stderr, "golden file %s missing\n", path);
        return -1;
    }
    int same = glen == len && memcmp(g, data, len) == 0;
    if (!same) fprintf(stderr, "%s differs:\n--- got ---\n%.*s\n", path, (int)len, data);
    free(g);
    return same ? 0 : -1;
}

static void fill_frame(coll_frame *f, double t, int variant)
{
    memset(f, 0, sizeof(*f));
    f->t = t;
    f->dt = variant ? 1.0 : 0.0;
    f->ncpu = 2;
    fv_set(&f->mem_total_bytes, 16e9);
    fv_set(&f->mem_used_bytes, 4e9 + variant * 1e9);
    fv_set(&f->mem_available_bytes, 12e9 - variant * 1e9);
    fv_set(&f->swap_used_bytes, 0);
    fv_set(&f->tree_procs, 3);
    fv_set(&f->tree_threads, 9);
    fv_set(&f->tree_rss_bytes, 123456789);
    fv_set(&f->steps, 10 * variant);
    if (variant) {
        /* Rates exist from the second sample on. */
        fv_set(&f->cpu_pct, 55.125);
        fv_set(&f->cpu_iowait_pct, 1.5);
        fv_set(&f->cpu_core_pct[0], 60);
        fv_set(&f->cpu_core_pct[1], 50.25);
        fv_set(&f->tree_cpu_pct, 180.5);
        fv_set(&f->main_cpu_pct, 99.999);
        fv_set(&f->disk_read_bps, 1048576);
        fv_set(&f->step_rate, 10);
        fv_set(&f->sample_rate, 320);
        fv_set(&f->data_wait_share, 0.425);
    }
    f->ngpu = 1;
    gpu_frame *g = &f->gpu[0];
    g->index = 0;
    snprintf(g->name, sizeof(g->name), "NVIDIA H100 80GB HBM3");
    snprintf(g->uuid, sizeof(g->uuid), "GPU-0000");
    fv_set(&g->util_pct, variant ? 87 : 0);
    fv_set(&g->mem_used_bytes, 40e9);
    fv_set(&g->mem_total_bytes, 80e9);
    fv_set(&g->temp_c, 65);
    fv_set(&g->power_w, 250.5);
    if (variant) fv_set(&g->energy_j, 250.5);
    snprintf(g->throttle, sizeof(g->throttle), "%s", variant ? "sw_power_cap+hw_slowdown" : "");
}

TT_TEST(golden_metrics_csv)
{
    static coll_frame f;
    buf b;
    buf_init(&b, 0);
    rec_metrics_header(&b, 2, 1);
    fill_frame(&f, 0.0001, 0);
    rec_metrics_row(&b, &f, 2, 1, NULL);
    fill_frame(&f, 1.000002, 1);
    rec_metrics_row(&b, &f, 2, 1, NULL);
    f.gpu[0].lost = 1; /* a lost GPU: its cells are unknown */
    f.t = 2;
    rec_metrics_row(&b, &f, 2, 1, NULL);
    TT_EQ_INT(b.err, 0);
    int rc = golden_check("metrics.csv", b.data, b.len);
    buf_free(&b);
    TT_EQ_INT(rc, 0);
}

TT_TEST(golden_procs_and_steps_csv)
{
    buf b;
    buf_init(&b, 0);
    rec_procs_header(&b);
    frame_proc p;
    memset(&p, 0, sizeof(p));
    p.pid = 42;
    p.ppid = 1;
    memcpy(p.comm, "py,\"worker\"", 11);
    fv_set(&p.cpu_pct, 99.5);
    fv_set(&p.rss_bytes, 1 << 20);
    p.threads = 4;
    fv_set(&p.read_bytes, 4096);
    fv_set(&p.runq_pct, 12.5);
    rec_procs_row(&b, 1.25, &p);
    rec_steps_header(&b);
    agg_step s;
    memset(&s, 0, sizeof(s));
    s.rank = 1;
    s.local_rank = 0;
    s.pid = 42;
    s.tid = 43;
    s.step = 7;
    s.begin_ns = 1000000000ull + 1500000;
    s.end_ns = s.begin_ns + 9000000;
    s.duration_ns = 9000000;
    s.interval_ns = 12000000;
    s.phase_ns[0] = 3000000;
    s.phase_ns[1] = 4000000;
    s.other_ns = 5000000;
    s.samples = 32;
    rec_steps_row(&b, &s, 1000000000ull);
    s.rank = s.local_rank = -1;
    s.begin_ns = 999000000ull; /* before t = 0: negative start */
    rec_steps_row(&b, &s, 1000000000ull);
    int rc = golden_check("procs_steps.csv", b.data, b.len);
    buf_free(&b);
    TT_EQ_INT(rc, 0);
}

TT_TEST(golden_alerts_and_run_json)
{
    buf b;
    buf_init(&b, 0);
    alert_event e;
    memset(&e, 0, sizeof(e));
    e.t = 31;
    e.rule = "gpu_underused";
    e.expr = "gpu.util < 50 for 30s";
    e.fired = 1;
    e.severity = ALERT_WARNING;
    e.value = 12.5;
    snprintf(e.message, sizeof(e.message), "GPU 0 utilisation 12%% for 30 s");
    rec_alert_line(&b, &e);
    e.fired = 0;
    e.t = 40.5;
    rec_alert_line(&b, &e);

    static coll_frame f;
    fill_frame(&f, 0, 1);
    char *argv[] = {"python", "train.py", "--lr", "0.1", NULL};
    run_source src[2] = {{"procfs", "ok"}, {"nvml", "libnvidia-ml.so.1 not found"}};
    const char *rules[] = {"gpu_underused: gpu.util < 50 for 30s"};
    run_meta meta = {.mode = "run",
                     .argv = argv,
                     .cwd = "/home/me/project",
                     .host = "node17",
                     .kernel = "6.1.0",
                     .cpus = 16,
                     .mem_total_bytes = 6.7e10,
                     .root_pid = 4242,
                     .auto_hook = 1,
                     .nalert_rules = 1,
                     .alert_rules = rules};
    sink_ctx ctx = {.start_unix_s = 1763710000.123456,
                    .start_mono_ns = 123456789000ull,
                    .interval_s = 1,
                    .meta = &meta};
    sink_run ri;
    memset(&ri, 0, sizeof(ri));
    ri.ngpu_cols = 1;
    ri.gpus0 = f.gpu;
    ri.nsources = 2;
    ri.sources = src;
    rec_run_json(&b, &ctx, &ri); /* while running */
    ri.ended = 1;
    ri.end_unix_s = 1763710100.5;
    ri.duration_s = 100.376544;
    ri.exit = (run_exit){1, 143, 15};
    rec_run_json(&b, &ctx, &ri);
    TT_EQ_INT(b.err, 0);
    int rc = golden_check("alerts_run.json", b.data, b.len);
    buf_free(&b);
    TT_EQ_INT(rc, 0);
}

static seg_event ev(uint64_t ms, uint32_t kind, tpf_name name)
{
    seg_event e;
    memset(&e, 0, sizeof(e));
    e.ts_ns = ms * 1000000ull;
    e.kind = kind;
    e.name = name;
    e.tid = 7;
    if (kind == SEG_EV_STEP_END) e.samples = 8;
    return e;
}

TT_TEST(golden_summary_json)
{
    agg *a = NULL;
    agg_proc *p = NULL;
    TT_EQ_INT(agg_create(&a, NULL), 0);
    TT_EQ_INT(agg_proc_create(&p, 7, 0, 0), 0);
    /* Ten steps: 2 ms data between steps, 3 ms forward, 1 ms unphased. */
    uint64_t t = 1000;
    for (int i = 0; i < 10; i++) {
        seg_event e[] = {ev(t, SEG_EV_PUSH, TPF_PHASE_DATA), ev(t + 2 + i % 3, SEG_EV_POP, 0),
                         ev(t + 2 + i % 3, SEG_EV_STEP_BEGIN, 0),
                         ev(t + 2 + i % 3, SEG_EV_PUSH, TPF_PHASE_FORWARD),
                         ev(t + 5 + i % 3, SEG_EV_POP, 0), ev(t + 6 + i % 3, SEG_EV_STEP_END, 0)};
        for (size_t k = 0; k < sizeof(e) / sizeof(e[0]); k++) agg_event(a, p, &e[k]);
        t += 6 + i % 3;
    }
    static run_res res;
    static coll_frame f;
    run_res_init(&res);
    fill_frame(&f, 0, 0);
    run_res_add(&res, &f);
    fill_frame(&f, 1, 1);
    run_res_add(&res, &f);
    run_source src[2] = {{"procfs", "ok"}, {"nvml", "ok"}};
    run_alert note = {"data_wait", 12.5, "data wait 45% of step time for 60 s"};
    sink_tally tally = {.trace_written = 40};
    sink_run s;
    memset(&s, 0, sizeof(s));
    s.duration_s = 100.4;
    s.exit = (run_exit){1, 0, 0};
    s.steps = &a->f;
    s.events_dropped = 3;
    s.res = &res;
    s.nalerts = 1;
    s.alerts = &note;
    s.tally = &tally;
    s.nsources = 2;
    s.sources = src;
    buf b;
    buf_init(&b, 0);
    TT_EQ_INT(rec_summary_json(&b, &s, 999000000ull), 0);
    int rc = golden_check("summary.json", b.data, b.len);
    buf_free(&b);
    agg_proc_free(p);
    agg_free(a);
    TT_EQ_INT(rc, 0);
}

TT_TEST(golden_trace_json)
{
    char path[] = "/tmp/tpf-trace-XXXXXX";
    int fd = mkstemp(path);
    TT_ASSERT(fd >= 0);
    close(fd);
    rec_trace t;
    TT_EQ_INT(rec_trace_open(&t, path, 1000000000ull, 10), 0);
    rec_trace_process(&t, 0, -1);
    rec_trace_process(&t, 42, 1);
    rec_trace_process(&t, 43, -1);
    agg_step s;
    memset(&s, 0, sizeof(s));
    s.pid = 42;
    s.tid = 44;
    s.step = 3;
    s.begin_ns = 1002000000ull;
    s.duration_ns = 1500;
    s.samples = 32;
    rec_trace_step(&t, &s);
    agg_range r = {42, 44, TPF_PHASE_FORWARD, 1002000100ull, 1002000900ull, 0};
    rec_trace_range(&t, &r, "forward");
    r.name = 99;
    r.depth = 1;
    rec_trace_range(&t, &r, "my \"range\"");
    rec_trace_range(&t, &r, NULL);
    /* max 10, a tenth kept for steps: ranges stop at 9 events, steps at 10 */
    for (int i = 0; i < 8; i++) rec_trace_range(&t, &r, "more");
    TT_EQ_INT(t.written, 9);
    TT_EQ_INT(t.dropped, 3);
    s.step = 4;
    rec_trace_step(&t, &s);
    rec_trace_step(&t, &s);
    TT_EQ_INT(t.written, 10);
    TT_EQ_INT(t.dropped, 4);
    static coll_frame f;
    fill_frame(&f, 1.5, 1);
    rec_trace_frame(&t, &f, f.ngpu, NULL);
    rec_trace_counter(&t, 42, "loss", 1003000000ull, 0.25);
    rec_trace_mark(&t, 42, 44, "epoch", 1004000000ull);
    alert_event e;
    memset(&e, 0, sizeof(e));
    e.t = 2;
    e.rule = "hang";
    e.fired = 1;
    snprintf(e.message, sizeof(e.message), "no step for 60 s");
    rec_trace_alert(&t, &e);
    TT_EQ_INT(rec_trace_close(&t), 0);
    size_t len = 0;
    char *data = slurp(path, &len);
    unlink(path);
    TT_ASSERT(data != NULL);
    int rc = golden_check("trace.json", data, len);
    free(data);
    TT_EQ_INT(rc, 0);
}

TT_TEST(gpu_columns_follow_the_nvml_index)
{
    /* The run's GPUs narrowed from {0, 1, 2} to {2}: GPU 2 stays in gpu2_. */
    static coll_frame f;
    fill_frame(&f, 3, 1);
    f.gpu[0].index = 2;
    fv_set(&f.gpu[0].util_pct, 12);
    const int cols[3] = {0, 1, 2};
    buf b;
    buf_init(&b, 0);
    rec_metrics_header(&b, 2, 3);
    size_t hdr = b.len;
    rec_metrics_row(&b, &f, 2, 3, cols);
    TT_EQ_INT(b.err, 0);
    /* the row's cells, by header position */
    char *row = b.data + hdr, *cells[200];
    int n = 0;
    for (char *p = row; n < 200;) {
        cells[n++] = p;
        char *e = strpbrk(p, ",\n");
        if (!e || *e == '\n') {
            if (e) *e = 0;
            break;
        }
        *e = 0;
        p = e + 1;
    }
    int base = 1 + (int)metric_table_len + 2; /* t, table, two cores */
    int per = (int)metric_gpu_table_len;
    TT_EQ_INT(n, base + 3 * per);
    TT_EQ_STR(cells[base], "");              /* gpu0_util_pct: not the run's any more */
    TT_EQ_STR(cells[base + per], "");        /* gpu1_util_pct */
    TT_EQ_STR(cells[base + 2 * per], "12.00"); /* gpu2_util_pct */
    buf_free(&b);

    /* Summaries are per NVML index, whatever the frame position. */
    static run_res res;
    run_res_init(&res);
    fill_frame(&f, 0, 1);
    f.ngpu = 2;
    f.gpu[1] = f.gpu[0];
    f.gpu[0].index = 1;
    f.gpu[1].index = 0;
    run_res_add(&res, &f);
    f.ngpu = 1;
    f.gpu[0].index = 0;
    run_res_add(&res, &f);
    TT_EQ_INT(res.ngpu, 2);
    TT_EQ_INT(res.gpu[0].index, 1);
    TT_EQ_INT(res.gpu[0].samples, 1);
    TT_EQ_INT(res.gpu[1].index, 0);
    TT_EQ_INT(res.gpu[1].samples, 2);
}

TT_TEST(metric_table_names_unique_and_documented_order)
{
    /* The CSV header is the table: names are unique, `t` comes first. */
    for (size_t i = 0; i < metric_table_len; i++)
        for (size_t j = i + 1; j < metric_table_len; j++)
            TT_ASSERT(strcmp(metric_table[i].name, metric_table[j].name) != 0);
    TT_ASSERT(metric_table_len <= 64); /* run_res.m */
    TT_ASSERT(metric_find("tree_rss_bytes") != NULL);
    TT_ASSERT(metric_find("nope") == NULL);
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
