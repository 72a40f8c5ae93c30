/* The streaming trace reader and the analyses on small hand-made traces whose
 * answers follow from their definitions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "trace/trace.h"
#include "trace/trace_extra.h"
#include "trace/trace_int.h"
#include "trace/trace_json.h"
#include "trainperf.h"
#include "tt.h"

TT_TEST(parse_us_is_exact_fixed_point)
{
    int64_t ns;
    int frac;
    TT_EQ_INT(trace_parse_us("1", 1, &ns, &frac), 0);
    TT_EQ_INT(ns, 1000);
    TT_EQ_INT(frac, 0);
    TT_EQ_INT(trace_parse_us("4458676522690.655", 17, &ns, &frac), 0);
    TT_EQ_INT(ns, 4458676522690655LL);
    TT_EQ_INT(frac, 1);
    /* 0.1 + 0.2 style values stay exact: no double in between. */
    TT_EQ_INT(trace_parse_us("0.001", 5, &ns, NULL), 0);
    TT_EQ_INT(ns, 1);
    TT_EQ_INT(trace_parse_us("1.5e3", 5, &ns, NULL), 0);
    TT_EQ_INT(ns, 1500000);
    TT_EQ_INT(trace_parse_us("-2.25", 5, &ns, NULL), 0);
    TT_EQ_INT(ns, -2250);
    /* below 1 ns: rounded half away from zero */
    TT_EQ_INT(trace_parse_us("0.0005", 6, &ns, NULL), 0);
    TT_EQ_INT(ns, 1);
    TT_EQ_INT(trace_parse_us("0.0004", 6, &ns, NULL), 0);
    TT_EQ_INT(ns, 0);
    TT_EQ_INT(trace_parse_us("68.0", 4, &ns, NULL), 0);
    TT_EQ_INT(ns, 68000);
    TT_EQ_INT(trace_parse_us("1e30", 4, &ns, NULL), TPF_ETOOBIG);
    TT_EQ_INT(trace_parse_us("01", 2, &ns, NULL), TPF_EFORMAT);
    TT_EQ_INT(trace_parse_us("1.", 2, &ns, NULL), TPF_EFORMAT);
    TT_EQ_INT(trace_parse_us("", 0, &ns, NULL), TPF_EFORMAT);
    TT_EQ_INT(trace_parse_us("1e", 2, &ns, NULL), TPF_EFORMAT);
}

typedef struct collect {
    int n;
    int64_t ts[8], dur[8], stream[8], corr[8];
    char name[8][32];
    char ph[8];
} collect;

static int on_ev(void *ud, const trace_ev *ev)
{
    collect *c = ud;
    if (c->n >= 8) return 0;
    c->ts[c->n] = (ev->has & TEV_TS) ? ev->ts_ns : -1;
    c->dur[c->n] = (ev->has & TEV_DUR) ? ev->dur_ns : -1;
    c->stream[c->n] = ev->stream;
    c->corr[c->n] = ev->corr;
    c->ph[c->n] = ev->ph;
    snprintf(c->name[c->n], sizeof(c->name[0]), "%s", ev->name);
    c->n++;
    return 0;
}

static int read_str(const char *s, collect *c, trace_meta *m, char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    return trace_read_mem(s, strlen(s), on_ev, c, 0, m, err, errlen);
}

TT_TEST(object_form_with_escapes_and_args)
{
    collect c;
    trace_meta m;
    char err[256];
    const char *s = "{\"schemaVersion\":1,\"distributedInfo\":{\"rank\":3,\"x\":[1,2]},"
                    "\"traceEvents\":[{\"ph\":\"X\",\"name\":\"a\\\"b\\u00e9\",\"ts\":10.5,"
                    "\"dur\":2,\"args\":{\"stream\":7,\"correlation\":42,\"Input Dims\":[[1,2],[]]}},"
                    "{\"ph\":\"M\",\"name\":\"process_name\"}],\"extra\":{\"a\":null}}";
    TT_EQ_INT(read_str(s, &c, &m, err, sizeof(err)), 0);
    TT_EQ_INT(c.n, 2);
    TT_EQ_INT(m.has_rank, 1);
    TT_EQ_INT(m.rank, 3);
    TT_EQ_STR(c.name[0], "a\"b\xc3\xa9");
    TT_EQ_INT(c.ts[0], 10500);
    TT_EQ_INT(c.dur[0], 2000);
    TT_EQ_INT(c.stream[0], 7);
    TT_EQ_INT(c.corr[0], 42);
    TT_EQ_INT(c.ts[1], -1);
    TT_EQ_INT(m.array_form, 0);
}

TT_TEST(array_form_without_closing_bracket_loads)
{
    collect c;
    trace_meta m;
    char err[256];
    TT_EQ_INT(read_str("[{\"ph\":\"X\",\"ts\":1,\"dur\":1},\n{\"ph\":\"X\",\"ts\":2,\"dur\":1},\n", &c, &m,
                       err, sizeof(err)), 0);
    TT_EQ_INT(c.n, 2);
    TT_EQ_INT(m.array_form, 1);
    TT_EQ_INT(m.unterminated, 1);
    TT_EQ_INT(read_str("[{\"ph\":\"X\",\"ts\":1,\"dur\":1}", &c, &m, err, sizeof(err)), 0);
    TT_EQ_INT(c.n, 1);
    TT_EQ_INT(read_str("[{\"ph\":\"X\",\"ts\":1}]", &c, &m, err, sizeof(err)), 0);
    TT_EQ_INT(m.unterminated, 0);
}

TT_TEST(invalid_json_names_the_byte_offset)
{
    collect c;
    trace_meta m;
    char err[256];
    /* the stray 'x' is at byte 27 */
    TT_EQ_INT(read_str("{\"traceEvents\":[{\"ts\":1,\"x}", &c, &m, err, sizeof(err)), TPF_EFORMAT);
    TT_ASSERT(strstr(err, "end of input") != NULL);
    TT_EQ_INT(read_str("{\"traceEvents\":[{\"ts\":1 x}]}", &c, &m, err, sizeof(err)), TPF_EFORMAT);
    TT_ASSERT(strstr(err, "byte 24") != NULL);
    /* the object form must be complete */
    TT_EQ_INT(read_str("{\"traceEvents\":[{\"ts\":1}", &c, &m, err, sizeof(err)), TPF_EFORMAT);
    TT_ASSERT(strstr(err, "truncated") != NULL);
    TT_EQ_INT(read_str("", &c, &m, err, sizeof(err)), TPF_EFORMAT);
    TT_ASSERT(strstr(err, "empty") != NULL);
    TT_EQ_INT(read_str("{\"a\":1} 2", &c, &m, err, sizeof(err)), TPF_EFORMAT);
    TT_EQ_INT(read_str("{\"a\":01}", &c, &m, err, sizeof(err)), TPF_EFORMAT);
    TT_EQ_INT(read_str("{\"a\":tru}", &c, &m, err, sizeof(err)), TPF_EFORMAT);
    TT_EQ_INT(read_str("{\"a\":\"\\q\"}", &c, &m, err, sizeof(err)), TPF_EFORMAT);
}

TT_TEST(deep_nesting_is_an_error_not_a_crash)
{
    size_t n = 200000;
    char *s = malloc(n * 2 + 32);
    TT_ASSERT(s != NULL);
    memcpy(s, "{\"a\":", 5);
    size_t k = 5;
    for (size_t i = 0; i < n; i++) s[k++] = '[';
    s[k] = '\0';
    collect c;
    trace_meta m;
    char err[256];
    TT_EQ_INT(read_str(s, &c, &m, err, sizeof(err)), TPF_EFORMAT);
    TT_ASSERT(strstr(err, "nesting") != NULL);
    free(s);
}

/* Write s to a temporary file (gzip when gz); the caller unlinks path. */
static void write_tmp(char *path, size_t n, const char *s, int gz)
{
    snprintf(path, n, "/tmp/tpf-test-trace-%d-XXXXXX", (int)getpid());
    int fd = mkstemp(path);
    if (fd < 0) return;
    if (gz) {
        gzFile g = gzdopen(fd, "wb");
        gzwrite(g, s, (unsigned)strlen(s));
        gzclose(g);
    } else {
        if (write(fd, s, strlen(s)) < 0) {}
        close(fd);
    }
}

/* Two streams; kernel A [0,10) compute on s7, B [5,20) nccl on s8, C [30,40)
 * compute on s7 launched at 25 (host wait 20 us on s7: 30 - 10). */
static const char *small_trace =
    "{\"distributedInfo\":{\"rank\":1},\"traceEvents\":["
    "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#4\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":50},"
    "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::mm\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":8},"
    "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":2,\"args\":{\"correlation\":1}},"
    "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":1,\"ts\":4,\"dur\":1,\"args\":{\"correlation\":2}},"
    "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":1,\"ts\":25,\"dur\":3,\"args\":{\"correlation\":3}},"
    "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"gemm\",\"pid\":0,\"tid\":7,\"ts\":30,\"dur\":10,\"args\":{\"stream\":7,\"correlation\":3}},"
    "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"gemm\",\"pid\":0,\"tid\":7,\"ts\":5,\"dur\":5,\"args\":{\"stream\":7,\"correlation\":1}},"
    "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"ncclDevKernel_AllReduce\",\"pid\":0,\"tid\":8,\"ts\":5,\"dur\":15,\"args\":{\"stream\":8,\"correlation\":2}}"
    "]}";

TT_TEST(analyses_on_a_small_trace)
{
    char path[256];
    write_tmp(path, sizeof(path), small_trace, 1);
    const char *paths[] = {path};
    trace_opts o;
    memset(&o, 0, sizeof(o));
    trace_result *r = NULL;
    char err[256];
    int rc = trace_analyze(paths, 1, &o, &r, err, sizeof(err));
    unlink(path);
    TT_EQ_INT(rc, 0);
    TT_EQ_INT(r->nranks, 1);
    const tr_rank *k = &r->ranks[0];
    TT_EQ_INT(k->rank, 1);
    TT_EQ_INT(k->gpu_events, 3);
    /* GPU window [5, 40): busy [5,20) + [30,40) = 25 us, idle 10 us */
    TT_EQ_INT(k->kernel_time, 35000);
    TT_EQ_INT(k->idle, 10000);
    TT_EQ_INT(k->compute, 15000);
    TT_EQ_INT(k->non_compute, 10000);
    TT_EQ_INT(k->comm_total, 15000);
    TT_EQ_INT(k->overlap, 5000);     /* [5,10) */
    TT_EQ_INT(k->label_time[KT_COMP], 10000);
    TT_EQ_INT(k->label_time[KT_COMM], 10000);
    TT_EQ_INT(k->label_time[KT_COMP | KT_COMM], 5000);
    /* stream 7: gap 10 -> 30, launched at 25 > 10: host wait */
    TT_EQ_INT(k->nstreams, 2);
    TT_EQ_INT(k->streams[0].stream, 7);
    TT_EQ_INT(k->streams[0].host_wait, 20000);
    /* launches: delays 5-3=2, 5-5=0, 30-28=2 us */
    TT_EQ_INT(k->launch.count, 3);
    TT_EQ_INT(k->launch.delay_sum, 4000);
    TT_EQ_INT(k->launch.cpu_sum, 6000);
    /* CPU ops: aten::mm [0,8) holds two launches (3 us): self 5 us */
    int found = 0;
    for (size_t i = 0; i < k->nops_self; i++)
        if (strcmp(k->ops_self[i].name, "aten::mm") == 0) {
            found = 1;
            TT_EQ_INT(k->ops_self[i].self, 5000);
            TT_EQ_INT(k->ops_self[i].total, 8000);
        }
    TT_ASSERT(found);
    TT_EQ_INT(k->nsteps, 1);
    TT_EQ_INT(k->steps[0].num, 4);
    TT_EQ_INT(k->steps[0].kernels, 3); /* every launch lies inside [0, 50) */
    trace_result_free(r);
}

TT_TEST(corrupt_gzip_is_a_format_error)
{
    char path[256];
    write_tmp(path, sizeof(path), small_trace, 1);
    /* flip bytes in the middle of the deflate stream */
    FILE *f = fopen(path, "r+b");
    TT_ASSERT(f != NULL);
    fseek(f, 40, SEEK_SET);
    fputs("\xff\x00\xff\x13garbage", f);
    fclose(f);
    const char *paths[] = {path};
    trace_opts o;
    memset(&o, 0, sizeof(o));
    trace_result *r = NULL;
    char err[256];
    int rc = trace_analyze(paths, 1, &o, &r, err, sizeof(err));
    unlink(path);
    TT_EQ_INT(rc, TPF_EFORMAT);
    TT_ASSERT(r == NULL);
    TT_ASSERT(strstr(err, path) != NULL);
}

TT_TEST(missing_file_is_noent)
{
    const char *paths[] = {"/nonexistent/trace.json"};
    trace_opts o;
    memset(&o, 0, sizeof(o));
    trace_result *r = NULL;
    char err[256];
    TT_EQ_INT(trace_analyze(paths, 1, &o, &r, err, sizeof(err)), TPF_ENOENT);
    TT_ASSERT(strstr(err, "/nonexistent/trace.json") != NULL);
}

TT_TEST(directory_listing_and_argument_expansion)
{
    char dir[] = "/tmp/tpf-test-dir-XXXXXX";
    TT_ASSERT(mkdtemp(dir) != NULL);
    const char *names[] = {"b_rank-1.json.gz", "a_rank-0.json", "skip.txt", ".hidden.json"};
    for (int i = 0; i < 4; i++) {
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        FILE *f = fopen(p, "w");
        TT_ASSERT(f != NULL);
        fclose(f);
    }
    char **v = NULL;
    int n = 0;
    TT_EQ_INT(trace_list_dir(dir, &v, &n), 0);
    TT_EQ_INT(n, 2);
    TT_ASSERT(strstr(v[0], "/a_rank-0.json") != NULL);
    TT_ASSERT(strstr(v[1], "/b_rank-1.json.gz") != NULL);
    trace_paths_free(v, n);
    const char *args[] = {"x.json", dir};
    char err[256];
    TT_EQ_INT(trace_expand_args(args, 2, &v, &n, err, sizeof(err)), 0);
    TT_EQ_INT(n, 3);
    TT_EQ_STR(v[0], "x.json");
    trace_paths_free(v, n);
    for (int i = 0; i < 4; i++) {
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        unlink(p);
    }
    TT_EQ_INT(trace_expand_args(args + 1, 1, &v, &n, err, sizeof(err)), TPF_ENOENT);
    TT_ASSERT(strstr(err, "no .json") != NULL);
    rmdir(dir);
    TT_EQ_INT(trace_list_dir(dir, &v, &n), TPF_ENOENT);
}

TT_TEST(rank_from_file_name)
{
    TT_EQ_INT(trace_rank_from_name("/x/trace_filter_sampled_rank-12.json.gz"), 12);
    TT_EQ_INT(trace_rank_from_name("rank_3.json"), 3);
    TT_EQ_INT(trace_rank_from_name("/rank-9/trace.json"), -1);
    TT_EQ_INT(trace_rank_from_name("worker0.pt.trace.json"), -1);
}

TT_TEST(markdown_for_report)
{
    char path[256];
    write_tmp(path, sizeof(path), small_trace, 0);
    const char *paths[] = {path};
    trace_opts o;
    memset(&o, 0, sizeof(o));
    trace_result *r = NULL;
    char err[256];
    int rc = trace_analyze(paths, 1, &o, &r, err, sizeof(err));
    unlink(path);
    TT_EQ_INT(rc, 0);
    buf b;
    buf_init(&b, 0);
    TT_EQ_INT(trace_result_markdown(r, &b), 0);
    trace_result_free(r);
    TT_ASSERT(strstr(b.data, "## Profiler traces") != NULL);
    TT_ASSERT(strstr(b.data, "| ---: |") != NULL);
    TT_ASSERT(strstr(b.data, "ncclDevKernel\\_AllReduce") != NULL /* names escaped as Markdown text */);
    buf_free(&b);
}

/* The same kernel names classified three ways (docs/analyze.md, item 3). */
TT_TEST(kernel_classification_per_mode)
{
    static const char *t =
        "{\"traceEvents\":["
        "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"ncclDevKernel_AllReduce_Sum_f32\",\"ts\":0,\"dur\":1,\"args\":{\"stream\":7,\"correlation\":1}},"
        "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"hipKernelX\",\"ts\":10,\"dur\":2,\"args\":{\"stream\":7,\"correlation\":2}},"
        "{\"ph\":\"X\",\"cat\":\"gpu_memcpy\",\"name\":\"hipMemcpyDtoH\",\"ts\":20,\"dur\":4,\"args\":{\"stream\":7,\"correlation\":3}},"
        "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"gemm_dma_tile\",\"ts\":30,\"dur\":8,\"args\":{\"stream\":7,\"correlation\":4}}"
        "]}";
    char path[256];
    write_tmp(path, sizeof(path), t, 0);
    const char *paths[] = {path};
    /* expected us per label (COMP, COMM, MEM) in default, hta-0.5, hta-0.6 */
    static const int want[3][3] = {{2 + 8, 1, 4}, {2 + 8, 1, 0}, {0, 1 + 2 + 4, 0}};
    for (int mode = 0; mode < 3; mode++) {
        trace_opts o;
        memset(&o, 0, sizeof(o));
        o.compat_hta = mode;
        trace_result *r = NULL;
        char err[256];
        TT_EQ_INT(trace_analyze(paths, 1, &o, &r, err, sizeof(err)), 0);
        TT_EQ_INT(r->ranks[0].label_time[KT_COMP], want[mode][0] * 1000);
        TT_EQ_INT(r->ranks[0].label_time[KT_COMM], want[mode][1] * 1000);
        TT_EQ_INT(r->ranks[0].label_time[KT_MEM], want[mode][2] * 1000);
        trace_result_free(r);
    }
    unlink(path);
}

/* 300k runtime calls whose GPU work never appears (the map must shed them),
 * then one launch and its kernel: still joined. */
TT_TEST(pending_launch_map_stays_bounded)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/tpf-test-trace-%d-XXXXXX", (int)getpid());
    int fd = mkstemp(path);
    TT_ASSERT(fd >= 0);
    FILE *f = fdopen(fd, "w");
    TT_ASSERT(f != NULL);
    fputs("{\"traceEvents\":[", f);
    int n = 300000;
    for (int i = 0; i < n; i++)
        fprintf(f, "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaStreamSynchronize\",\"pid\":1,"
                   "\"tid\":1,\"ts\":%d,\"dur\":1,\"args\":{\"correlation\":%d}},", i * 10, i + 1);
    fprintf(f, "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":1,"
               "\"ts\":%d,\"dur\":4,\"args\":{\"correlation\":%d}},", n * 10, n + 1);
    fprintf(f, "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,\"ts\":%d,\"dur\":3,"
               "\"args\":{\"stream\":7,\"correlation\":%d}}]}", n * 10 + 9, n + 1);
    fclose(f);
    const char *paths[] = {path};
    trace_opts o;
    memset(&o, 0, sizeof(o));
    trace_result *r = NULL;
    char err[256];
    int rc = trace_analyze(paths, 1, &o, &r, err, sizeof(err));
    unlink(path);
    TT_EQ_INT(rc, 0);
    TT_EQ_INT(r->ranks[0].records, n + 2);
    TT_EQ_INT(r->ranks[0].unmatched, 0);
    TT_EQ_INT(r->ranks[0].launch.count, 1);
    TT_EQ_INT(r->ranks[0].launch.delay_sum, 5000); /* 9 - (0 + 4) us */
    trace_result_free(r);
}

/* Out-of-range times are flagged (the analyser counts them), doubles come
 * from the literal as Python reads it, memory args are read. */
typedef struct flags {
    int n;
    unsigned has[4];
    double ts_us[4];
    int64_t bytes[4], alloc[4], dev[4], devtype[4];
} flags;

static int on_flags(void *ud, const trace_ev *ev)
{
    flags *f = ud;
    if (f->n >= 4) return 0;
    f->has[f->n] = ev->has;
    f->ts_us[f->n] = ev->ts_us;
    f->bytes[f->n] = ev->bytes;
    f->alloc[f->n] = ev->mem_alloc;
    f->dev[f->n] = ev->dev;
    f->devtype[f->n] = ev->devtype;
    f->n++;
    return 0;
}

TT_TEST(out_of_range_doubles_and_memory_args)
{
    const char *s = "{\"traceEvents\":[{\"ph\":\"X\",\"ts\":1e999,\"dur\":1},"
                    "{\"ph\":\"X\",\"ts\":1712195498512345.123,\"dur\":1.5},"
                    "{\"ph\":\"i\",\"name\":\"[memory]\",\"ts\":5,\"args\":{\"Addr\":1,\"Bytes\":-512,"
                    "\"Total Allocated\":4096,\"Total Reserved\":8192,\"Device Id\":0,\"Device Type\":1}},"
                    "{\"ph\":\"X\",\"ts\":123456789012345678901234567890123,\"dur\":1}]}";
    flags f;
    memset(&f, 0, sizeof(f));
    char err[256];
    TT_EQ_INT(trace_read_mem(s, strlen(s), on_flags, &f, TRACE_DOUBLE, NULL, err, sizeof(err)), 0);
    TT_EQ_INT(f.n, 4);
    TT_ASSERT(f.has[0] & TEV_BADNUM);
    TT_ASSERT(!(f.has[0] & TEV_TS));
    TT_ASSERT(!(f.has[1] & TEV_BADNUM));
    TT_ASSERT(f.ts_us[1] == 1712195498512345.123); /* the same double Python's float() gives */
    TT_ASSERT(f.has[2] & TEV_MEM);
    TT_EQ_INT(f.bytes[2], -512);
    TT_EQ_INT(f.alloc[2], 4096);
    TT_EQ_INT(f.dev[2], 0);
    TT_EQ_INT(f.devtype[2], 1);
    TT_ASSERT(f.has[3] & TEV_BADNUM);
}

/* Bins of 10 ns from 0, the last cut at 95: a value held over [5, 87)
 * fills bins 1..7 whole and 0 and 8 in part; a counter holds each sample
 * until the next, the last until the end, and has no value before its
 * first sample. Expected values follow from those definitions. */
TT_TEST(time_series_bins_means_and_maxima)
{
    tsset t;
    memset(&t, 0, sizeof(t));
    t.bins = (tsbins){0, 95, 10, 10};
    tseries *q = ts_get(&t, TS_QUEUE, 7, 0);
    tseries *c = ts_get(&t, TS_COUNTER, 1, 3);
    TT_ASSERT(q && c && q != c && ts_get(&t, TS_QUEUE, 7, 0) == q);
    TT_EQ_INT(ts_segment(&t, q, 5, 87, 2.0, 1), 0);
    ts_point(&t, q, 5, 2.0);
    TT_EQ_INT(ts_sample(&t, c, 10, 3.0), 0);
    TT_EQ_INT(ts_sample(&t, c, 50, 1.0), 0);
    TT_EQ_INT(ts_finish(&t), 0);
    TT_ASSERT(fabs(ts_mean(&t, q, 0) - 2.0 * 5 / 10) < 1e-12);
    for (int i = 1; i <= 7; i++) TT_ASSERT(fabs(ts_mean(&t, q, i) - 2.0) < 1e-12);
    TT_ASSERT(fabs(ts_mean(&t, q, 8) - 2.0 * 7 / 10) < 1e-12);
    TT_ASSERT(ts_mean(&t, q, 9) == 0.0);
    for (int i = 0; i <= 8; i++) TT_ASSERT(ts_max(&t, q, i) == 2.0);
    TT_ASSERT(ts_max(&t, q, 9) == 0.0);
    TT_ASSERT(isnan(ts_mean(&t, c, 0)) && isnan(ts_max(&t, c, 0)));
    for (int i = 1; i <= 4; i++) TT_ASSERT(ts_mean(&t, c, i) == 3.0 && ts_max(&t, c, i) == 3.0);
    for (int i = 5; i <= 9; i++) TT_ASSERT(ts_mean(&t, c, i) == 1.0 && ts_max(&t, c, i) == 1.0);
    ts_free(&t);
}

/* Copies of one kind add up while they overlap: the maximum of a bin is the
 * sum in flight, its mean the GB moved in it over its width. */
TT_TEST(time_series_copies_in_flight_add_up)
{
    tsset t;
    memset(&t, 0, sizeof(t));
    t.bins = (tsbins){0, 100, 50, 2};
    tseries *b = ts_get(&t, TS_BW, 0, 1);
    TT_EQ_INT(ts_copy(&t, b, 10, 30, 4.0), 0);
    TT_EQ_INT(ts_copy(&t, b, 20, 60, 1.0), 0);  /* overlaps the first: 5 GB/s */
    TT_EQ_INT(ts_copy(&t, b, 40, 45, 2.0), 0);  /* the first is over: 3 */
    TT_EQ_INT(ts_finish(&t), 0);
    TT_ASSERT(ts_max(&t, b, 0) == 5.0);
    TT_ASSERT(ts_max(&t, b, 1) == 1.0);         /* the second, still running at 50 */
    TT_ASSERT(fabs(ts_mean(&t, b, 0) - (4.0 * 20 + 1.0 * 30 + 2.0 * 5) / 50) < 1e-12);
    TT_ASSERT(fabs(ts_mean(&t, b, 1) - 1.0 * 10 / 50) < 1e-12);
    ts_free(&t);
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
