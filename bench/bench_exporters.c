/* bench_exporters — what the live exporters cost the collector.
 *
 * The exporters are sinks (record/exporter.h): they run on the collector
 * thread once per sample (none has an on_step: their cost does not grow with
 * the step rate), and the Prometheus server thread once per scrape. The
 * training process pays nothing: it is another process (`trainperf run`).
 *
 * A frame of a busy node (8 GPUs, 8 ranks with steps, 64 cores, 32 tree
 * processes) is handed to each sink the way the collector does, in
 * interleaved chunks, against the baseline of the same run: the metrics.csv
 * sink (one CSV row per sample, which every run writes).
 *
 * (a) CPU per sample of the Prometheus sink (renders the page, swaps it in),
 *     of the TensorBoard sink (encodes ~150 scalars, hands them to its writer
 *     thread) and of metrics.csv; ratio to metrics.csv; % of one core at the
 *     default 1 s interval.
 * (b) Per scrape: a client on loopback GETs /metrics N times: wall time per
 *     scrape and the server thread's CPU per scrape (process CPU minus the
 *     client thread's and the idle server's). Meanwhile samples keep coming:
 *     updates lost to a scrape copying the page are counted.
 *
 *   bench_exporters [--samples N] [--scrapes N]
 *
 * Target (exit 1 when missed): each exporter under 0.1% of one core at a
 * 1 s interval (1 ms of CPU per sample), and a scrape under 1 ms of server
 * CPU. Ratios to metrics.csv are reported, not judged. */
#include <arpa/inet.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/figs.h"
#include "core/sink.h"
#include "record/exporter.h"
#include "record/sinks.h"
#include "trainperf.h"

static double cpu_now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fill_frame(coll_frame *f, double t)
{
    memset(f, 0, sizeof(*f));
    f->t = t;
    f->mono_ns = (uint64_t)(t * 1e9) + 1000000000ull;
    f->dt = 1;
    f->ncpu = 64;
    fv_set(&f->cpu_pct, 55);
    fv_set(&f->cpu_iowait_pct, 1);
    for (int i = 0; i < 64; i++) fv_set(&f->cpu_core_pct[i], 40 + i % 50);
    fv_set(&f->mem_total_bytes, 1e12);
    fv_set(&f->mem_used_bytes, 4e11);
    fv_set(&f->mem_available_bytes, 6e11);
    fv_set(&f->swap_used_bytes, 0);
    fv_set(&f->psi_cpu_some_pct, 3);
    fv_set(&f->psi_mem_some_pct, 0);
    fv_set(&f->psi_mem_full_pct, 0);
    fv_set(&f->psi_io_some_pct, 1);
    fv_set(&f->psi_io_full_pct, 0.5);
    fv_set(&f->disk_read_bps, 2e8);
    fv_set(&f->disk_write_bps, 1e7);
    fv_set(&f->net_rx_bps, 5e9);
    fv_set(&f->net_tx_bps, 5e9);
    fv_set(&f->tree_procs, 32);
    fv_set(&f->tree_threads, 700);
    fv_set(&f->tree_cpu_pct, 1900);
    fv_set(&f->tree_rss_bytes, 9e10);
    fv_set(&f->tree_read_bps, 2e8);
    fv_set(&f->tree_write_bps, 1e6);
    fv_set(&f->main_cpu_pct, 110);
    fv_set(&f->steps, t * 8);
    fv_set(&f->step_rate, 2.5);
    fv_set(&f->sample_rate, 640);
    fv_set(&f->token_rate, 1.3e6);
    fv_set(&f->data_wait_share, 0.04);
    fv_set(&f->step_time_ms, 400);
    fv_set(&f->step_time_median_ms, 398);
    fv_set(&f->since_last_step_s, 0.1);
    f->ngpu = 8;
    for (int g = 0; g < 8; g++) {
        gpu_frame *gf = &f->gpu[g];
        gf->index = g;
        snprintf(gf->name, sizeof(gf->name), "NVIDIA H100 80GB HBM3");
        snprintf(gf->uuid, sizeof(gf->uuid), "GPU-%08d-0000-0000-0000-000000000000", g);
        fv_set(&gf->util_pct, 97);
        fv_set(&gf->mem_util_pct, 40);
        fv_set(&gf->mem_used_bytes, 7e10);
        fv_set(&gf->mem_total_bytes, 8.5e10);
        fv_set(&gf->temp_c, 66);
        fv_set(&gf->power_w, 640);
        fv_set(&gf->energy_j, 640);
        fv_set(&gf->energy_total_j, 640 * t);
        fv_set(&gf->sm_mhz, 1980);
        fv_set(&gf->mem_mhz, 2619);
        fv_set(&gf->pcie_rx_bps, 1e9);
        fv_set(&gf->pcie_tx_bps, 1e9);
        fv_set(&gf->nvlink_rx_bps, 1e11);
        fv_set(&gf->nvlink_tx_bps, 1e11);
        fv_set(&gf->proc_mem_bytes, 6.9e10);
        fv_set(&gf->proc_sm_pct, 95);
        fv_set(&gf->throttle_mask, 0);
    }
}

static void add_steps(figs *fs, int nrank, uint64_t base)
{
    for (int r = 0; r < nrank; r++) {
        agg_step s;
        memset(&s, 0, sizeof(s));
        s.rank = r;
        s.pid = 1000 + r;
        s.tid = s.pid;
        s.step = base;
        s.interval_ns = s.duration_ns = 390000000ull + (uint64_t)(r * 1000000) + base % 7 * 3000000;
        s.phase_ns[0] = 16000000;
        s.phase_ns[1] = 120000000;
        s.phase_ns[2] = 240000000;
        s.samples = 32;
        s.tokens = 65536;
        figs_add(fs, &s);
    }
}

typedef struct sinkrun {
    const sink_ops *ops;
    void *st;
    double cpu;   /* seconds of this thread's CPU in on_sample + flush */
    uint64_t n;
} sinkrun;

static void one_sample(sinkrun *s, const coll_frame *f, const sink_run *run)
{
    double c0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
    if (s->ops->on_sample) s->ops->on_sample(s->st, f, run);
    if (s->ops->flush) s->ops->flush(s->st, run);
    s->cpu += cpu_now(CLOCK_THREAD_CPUTIME_ID) - c0;
    s->n++;
}

typedef struct scraper {
    int port, n;
    double wall, cpu;
    size_t bytes;
    int failed;
    int done;     /* atomic */
} scraper;

static int scrape_once(int port, size_t *bytes)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n";
    if (write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
        close(fd);
        return -1;
    }
    char buf[65536];
    ssize_t r;
    size_t total = 0;
    while ((r = read(fd, buf, sizeof(buf))) > 0) total += (size_t)r;
    close(fd);
    *bytes = total;
    return total > 0 ? 0 : -1;
}

static void *scrape_main(void *arg)
{
    scraper *s = arg;
    struct timespec t0, t1;
    double c0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < s->n; i++)
        if (scrape_once(s->port, &s->bytes) != 0) s->failed++;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s->cpu = cpu_now(CLOCK_THREAD_CPUTIME_ID) - c0;
    s->wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    __atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void note_err(void *arg, const char *what, int err)
{
    fprintf(stderr, "bench_exporters: %s: %s\n", what, tpf_strerror(err));
}

int main(int argc, char **argv)
{
    int nsamples = 2000, nscrapes = 500;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--samples") == 0) nsamples = (int)strtol(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--scrapes") == 0) nscrapes = (int)strtol(argv[i + 1], NULL, 10);
    }
    char dir[] = "/tmp/tpf-bench-exp-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    int port = 0;
    char err[256];
    int lfd = prom_listen("127.0.0.1", 0, &port, err, sizeof(err));
    if (lfd < 0) {
        fprintf(stderr, "bench_exporters: %s\n", err);
        return 2;
    }
    static const char *rules[] = {"data_wait: data_wait.share > 0.3 for 60s", "hang: step.stall_ratio > 50 for 10s",
                                  "gpu_underused: gpu.util < 30 for 60s"};
    run_meta meta = {"run", NULL, "/", "benchnode", "6.1", 64, 1e12, 1, 1, 3, rules, NULL};
    rec_export_config cfg = {lfd, 1, NULL};
    sink_ctx ctx = {dir, 1000000000ull, 1.7e9, 1.0, 0, &meta, &cfg, note_err, NULL, note_err};
    sinkrun s[3] = {{&rec_sink_metrics, NULL, 0, 0}, {&rec_sink_prometheus, NULL, 0, 0},
                    {&rec_sink_tensorboard, NULL, 0, 0}};
    for (int i = 0; i < 3; i++) {
        if (s[i].ops->init(&s[i].st, &ctx) != 0) {
            fprintf(stderr, "bench_exporters: %s did not start\n", s[i].ops->name);
            return 2;
        }
    }
    static coll_frame f;
    figs fs;
    figs_init(&fs);
    int gpu_cols[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    sink_tally tally = {0}; /* every field, whatever fields the struct gains */
    sink_run run;
    memset(&run, 0, sizeof(run));
    run.ncpu_cols = 64;
    run.ngpu_cols = 8;
    run.gpu_cols = gpu_cols;
    run.steps = &fs;
    run.tally = &tally;
    for (int k = 0; k < 8; k++) {
        sink_probe p = {SINK_PROCESS, 1000 + k, 1000 + k, k, NULL, NULL, 0, 0, NULL};
        s[1].ops->on_probe(s[1].st, &p);
        s[2].ops->on_probe(s[2].st, &p);
        sink_probe c = {SINK_COUNTER, 1000 + k, 1000 + k, -1, NULL, "flops", 0, 3.2e15, NULL};
        s[1].ops->on_probe(s[1].st, &c);
        s[2].ops->on_probe(s[2].st, &c);
    }

    /* (a) interleaved chunks of samples; median per-chunk cost per sink */
    enum { CHUNKS = 20 };
    double per[3][CHUNKS];
    int per_chunk = nsamples / CHUNKS > 0 ? nsamples / CHUNKS : 1;
    uint64_t step = 0;
    for (int c = 0; c < CHUNKS; c++) {
        for (int k = 0; k < 3; k++) {
            int i = (k + c) % 3; /* rotate who goes first */
            double before = s[i].cpu;
            for (int j = 0; j < per_chunk; j++) {
                add_steps(&fs, 8, step++);
                fill_frame(&f, (double)step);
                run.frame = &f;
                run.nsamples = step;
                one_sample(&s[i], &f, &run);
            }
            per[i][c] = (s[i].cpu - before) / per_chunk;
        }
    }
    double med[3];
    for (int i = 0; i < 3; i++) {
        qsort(per[i], CHUNKS, sizeof(double), cmp_dbl);
        med[i] = per[i][CHUNKS / 2];
    }

    /* (b) scrapes while samples keep coming */
    double idle0 = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
    usleep(200000);
    double idle = (cpu_now(CLOCK_PROCESS_CPUTIME_ID) - idle0) / 0.2; /* CPU/s of idle threads */
    scraper sc = {port, nscrapes, 0, 0, 0, 0, 0};
    pthread_t th;
    double p0 = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
    double main0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
    pthread_create(&th, NULL, scrape_main, &sc);
    /* the collector keeps sampling at 100 Hz meanwhile */
    int more = 1;
    while (more) {
        add_steps(&fs, 8, step++);
        fill_frame(&f, (double)step);
        one_sample(&s[1], &f, &run);
        usleep(10000);
        more = !__atomic_load_n(&sc.done, __ATOMIC_ACQUIRE);
    }
    pthread_join(th, NULL);
    double proc = cpu_now(CLOCK_PROCESS_CPUTIME_ID) - p0;
    double mainc = cpu_now(CLOCK_THREAD_CPUTIME_ID) - main0;
    double server = proc - mainc - sc.cpu - idle * sc.wall;
    if (server < 0) server = 0;
    uint64_t lost_before = tally.exporter_lost;
    for (int i = 0; i < 3; i++) s[i].ops->close(s[i].st, &run);
    uint64_t lost = tally.exporter_lost - lost_before;
    figs_free(&fs);

    const char *names[3] = {"metrics.csv (baseline)", "prometheus", "tensorboard"};
    printf("bench_exporters: a node of 8 GPUs, 8 ranks, 64 cores; %d samples per sink in %d interleaved "
           "chunks\n",
           per_chunk * CHUNKS, CHUNKS);
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        printf("  (a) %-24s %8.1f us CPU/sample  %6.3f%% of a core at 1 s  ratio to metrics.csv %.2f\n",
               names[i], med[i] * 1e6, med[i] * 100, med[i] / med[0]);
        if (i > 0 && med[i] > 1e-3) ok = 0;
    }
    double per_scrape = sc.n ? server / sc.n : NAN;
    printf("  (b) %d scrapes of %zu bytes: %.1f us wall each, server thread %.1f us CPU each "
           "(%d failed); page updates lost to scrapes: %llu of %llu samples\n",
           sc.n, sc.bytes, sc.wall / sc.n * 1e6, per_scrape * 1e6, sc.failed, (unsigned long long)lost,
           (unsigned long long)s[1].n);
    printf("  (c) per step: 0 (no exporter has an on_step; the collector cost follows the sample "
           "interval, not the step rate); per step of the trainee: 0 (another process)\n");
    if (sc.failed || !(per_scrape < 1e-3)) ok = 0;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_exporters: could not remove %s\n", dir);
    printf("  target: each exporter < 1 ms CPU per sample, < 1 ms server CPU per scrape: %s\n",
           ok ? "met" : "MISSED");
    return ok ? 0 : 1;
}
