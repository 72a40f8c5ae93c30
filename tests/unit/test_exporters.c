/* Exporter encodings: CRC-32C and its TFRecord mask, Event framing, the
 * --prometheus address grammar. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/figs.h"
#include "core/sink.h"

#include "record/exporter.h"
#include "record/tfevents.h"
#include "trainperf.h"
#include "tt.h"

TT_TEST(crc32c_vector)
{
    /* The check value of CRC-32C, and its mask as TFRecord stores it. */
    TT_ASSERT(tfev_crc32c("123456789", 9) == 0xE3069283u);
    TT_ASSERT(tfev_masked_crc("123456789", 9) == 0xC78AB0E5u);
    TT_ASSERT(tfev_crc32c("", 0) == 0);
}

TT_TEST(event_framing)
{
    buf b;
    buf_init(&b, 1 << 16);
    tfev_value v[2] = {{"a/b", 1.5, NULL}, {"t", 0, "hello"}};
    TT_EQ_INT(tfev_event(&b, 1700000000.25, 42, NULL, v, 2), 0);
    TT_ASSERT(b.len > 16);
    const unsigned char *p = (const unsigned char *)b.data;
    uint64_t len = 0;
    for (int i = 0; i < 8; i++) len |= (uint64_t)p[i] << (8 * i);
    TT_ASSERT(len + 16 == b.len);
    uint32_t c = 0;
    for (int i = 0; i < 4; i++) c |= (uint32_t)p[8 + i] << (8 * i);
    TT_ASSERT(c == tfev_masked_crc(p, 8));
    for (int i = 0; i < 4; i++) c = (c & ~(0xFFu << (8 * i))) | (uint32_t)p[12 + len + i] << (8 * i);
    TT_ASSERT(c == tfev_masked_crc(p + 12, len));
    /* Event: wall_time (tag 0x09, 8 bytes), then step (0x10, varint 42). */
    TT_ASSERT(p[12] == 0x09);
    TT_ASSERT(p[21] == 0x10 && p[22] == 42);
    buf_free(&b);
}

TT_TEST(event_too_big)
{
    static char big[70000];
    memset(big, 'x', sizeof(big) - 1);
    buf b;
    buf_init(&b, 1 << 20);
    tfev_value v = {big, 1, NULL};
    TT_ASSERT(tfev_event(&b, 1, 1, NULL, &v, 1) == TPF_ETOOBIG);
    buf_free(&b);
}

TT_TEST(prom_addr)
{
    char host[256], err[128];
    int port = -1;
    TT_EQ_INT(prom_parse_addr("9400", host, sizeof(host), &port, err, sizeof(err)), 0);
    TT_EQ_STR(host, "127.0.0.1");
    TT_EQ_INT(port, 9400);
    TT_EQ_INT(prom_parse_addr("0.0.0.0:0", host, sizeof(host), &port, err, sizeof(err)), 0);
    TT_EQ_STR(host, "0.0.0.0");
    TT_EQ_INT(port, 0);
    TT_EQ_INT(prom_parse_addr("[::1]:80", host, sizeof(host), &port, err, sizeof(err)), 0);
    TT_EQ_STR(host, "::1");
    TT_ASSERT(prom_parse_addr("", host, sizeof(host), &port, err, sizeof(err)) == TPF_EINVAL);
    TT_ASSERT(prom_parse_addr("host:", host, sizeof(host), &port, err, sizeof(err)) == TPF_EINVAL);
    TT_ASSERT(prom_parse_addr("65536", host, sizeof(host), &port, err, sizeof(err)) == TPF_EINVAL);
    TT_ASSERT(prom_parse_addr("::1:80", host, sizeof(host), &port, err, sizeof(err)) == TPF_EINVAL);
    TT_ASSERT(prom_parse_addr("x:12ab", host, sizeof(host), &port, err, sizeof(err)) == TPF_EINVAL);
    TT_ASSERT(strstr(err, "12ab") != NULL);
}

/* GET path from 127.0.0.1:port into out (NUL-terminated); returns bytes. */
static size_t http_get(int port, const char *path, char *out, size_t n)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size_t got = 0;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        char req[128];
        int l = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
        if (write(fd, req, (size_t)l) == l) {
            ssize_t r;
            while (got + 1 < n && (r = read(fd, out + got, n - 1 - got)) > 0) got += (size_t)r;
        }
    }
    if (fd >= 0) close(fd);
    out[got] = 0;
    return got;
}

TT_TEST(prom_page_unknown_left_out_labels_escaped)
{
    char err[128];
    int port = 0;
    int fd = prom_listen("127.0.0.1", 0, &port, err, sizeof(err));
    TT_ASSERT(fd >= 0 && port > 0);
    static const char *rules[] = {"data_wait: data_wait.share > 0.3 for 60s", "gpu_hot: off"};
    run_meta meta = {"run", NULL, "/", "node\"1", "6.1", 2, 1e9, 1, 1, 2, rules, NULL};
    rec_export_config cfg = {fd, 0, NULL};
    sink_ctx ctx = {"/nonexistent", 0, 1.7e9, 1.0, 0, &meta, &cfg, NULL, NULL, NULL};
    void *st = NULL;
    TT_EQ_INT(rec_sink_prometheus.init(&st, &ctx), 0);
    static char page[1 << 16];
    /* Before the first sample: 503, never an empty page taken for zeros. */
    http_get(port, "/metrics", page, sizeof(page));
    TT_ASSERT(strstr(page, "HTTP/1.1 503") == page);

    static coll_frame f;
    memset(&f, 0, sizeof(f));
    f.t = 2;
    fv_set(&f.mem_total_bytes, 1e9);  /* known */
    f.cpu_pct.ok = 0;                 /* unknown */
    f.ngpu = 1;
    f.gpu[0].index = 3;
    snprintf(f.gpu[0].name, sizeof(f.gpu[0].name), "GPU \"X\"");
    fv_set(&f.gpu[0].util_pct, 7);
    figs fs;
    figs_init(&fs);
    agg_step s;
    memset(&s, 0, sizeof(s));
    s.rank = 1;
    s.pid = 42;
    s.interval_ns = s.duration_ns = 5000000;
    figs_add(&fs, &s);
    sink_tally tally = {0}; /* every field, whatever fields the struct gains */
    sink_run run;
    memset(&run, 0, sizeof(run));
    run.frame = &f;
    run.steps = &fs;
    run.tally = &tally;
    rec_sink_prometheus.on_sample(st, &f, &run);
    http_get(port, "/metrics", page, sizeof(page));
    TT_ASSERT(strstr(page, "HTTP/1.1 200 OK") == page);
    TT_ASSERT(strstr(page, "Content-Type: text/plain; version=0.0.4") != NULL);
    TT_ASSERT(strstr(page, "trainperf_host_memory_total_bytes{node=\"node\\\"1\"} 1000000000\n") != NULL);
    TT_ASSERT(strstr(page, "# TYPE trainperf_host_cpu_busy_ratio gauge") != NULL);
    TT_ASSERT(strstr(page, "trainperf_host_cpu_busy_ratio{") == NULL); /* unknown: no sample */
    TT_ASSERT(strstr(page, "modelName=\"GPU \\\"X\\\"\"") != NULL);
    TT_ASSERT(strstr(page, "trainperf_steps_total{node=\"node\\\"1\",rank=\"1\"} 1\n") != NULL);
    TT_ASSERT(strstr(page, "trainperf_samples_total") == NULL); /* never reported: unknown */
    TT_ASSERT(strstr(page, "rule=\"data_wait\",severity=\"unknown\"} 0\n") != NULL);
    TT_ASSERT(strstr(page, "rule=\"gpu_hot\"") == NULL); /* turned off */
    alert_event e;
    memset(&e, 0, sizeof(e));
    e.rule = "data_wait";
    e.fired = 1;
    e.severity = ALERT_WARNING;
    rec_sink_prometheus.on_alert(st, &e);
    rec_sink_prometheus.on_sample(st, &f, &run);
    http_get(port, "/metrics", page, sizeof(page));
    TT_ASSERT(strstr(page, "rule=\"data_wait\",severity=\"warning\"} 1\n") != NULL);
    TT_ASSERT(strstr(page, "trainperf_alerts_fired_total{node=\"node\\\"1\"} 1\n") != NULL);
    http_get(port, "/nope", page, sizeof(page));
    TT_ASSERT(strstr(page, "HTTP/1.1 404") == page);
    rec_sink_prometheus.close(st, &run);
    figs_free(&fs);
    /* Closed: nothing listens any more. */
    TT_ASSERT(http_get(port, "/metrics", page, sizeof(page)) == 0);
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
