/* Prometheus exporter: /metrics in the text exposition format 0.0.4, served
 * by a thread of its own for as long as the run lasts (docs/exporters.md).
 *
 * The collector renders the page once per sample into a buffer of its own and
 * swaps it in with a trylock: a scrape copying the page at that instant costs
 * the collector one lost update (counted), never a wait. The server thread
 * serves up to PROM_MAX_CONNS connections side by side (poll), each with a
 * deadline, so a slow or stuck scraper delays nobody; the listening socket is
 * always drained, and with the table full the oldest connection still
 * waiting for its request makes room, so idle and slow-loris connections
 * never starve a scrape (issue 27). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/metrics.h"
#include "record/exp_counters.h"
#include "record/exporter.h"
#include "trainperf.h"
#include "util/buf.h"
#include "util/err.h"

#define PROM_PAGE_MAX (4u << 20)   /* one rendered page */
#define PROM_REQ_MAX 8192          /* request head */
#define PROM_IO_MS 10000           /* per connection, read + write (Prometheus' default scrape timeout) */
#define PROM_MAX_CONNS 256         /* connections served side by side */
#define PROM_ACCEPT_BURST 256      /* accepted per wake-up: the backlog never overflows */
#define PROM_POLL_MS 250
#define PROM_MAX_RULES 64


typedef struct prom_rank_prev {
    int rank;
    pid_t pid;
    uint64_t count;
    double t;
} prom_rank_prev;

typedef struct prom {
    exp_counters ctrs; /* first: on_probe is exp_counters_on_probe */
    int lfd;
    int wake[2];
    pthread_t th;
    int has_thread;
    char host[256];
    double start_unix_s;

    /* collector side */
    buf work;
    char rules[PROM_MAX_RULES][64];
    int rule_sev[PROM_MAX_RULES];
    int rule_on[PROM_MAX_RULES];
    int nrules;
    uint64_t alerts_fired;
    prom_rank_prev prev[AGG_MAX_GROUPS];
    int nprev;
    double last_t;

    /* shared: guarded by mu */
    pthread_mutex_t mu;
    buf page;
    int have_page;
    uint64_t lost;          /* atomic: renders that could not be swapped in */
    uint64_t scrapes, scrape_errors; /* atomic */
    int quit;
} prom;
_Static_assert(offsetof(prom, ctrs) == 0, "ctrs comes first");

/* ---- address and socket ---- */

int prom_parse_addr(const char *s, char *host, size_t hostlen, int *port, char *err, size_t errlen)
{
    const char *p = s, *colon;
    char h[256] = "127.0.0.1";
    if (!s || !*s) {
        snprintf(err, errlen, "expected [HOST:]PORT");
        return TPF_EINVAL;
    }
    if (*s == '[') {
        const char *e = strchr(s, ']');
        if (!e || e[1] != ':' || (size_t)(e - s - 1) >= sizeof(h) || e == s + 1) {
            snprintf(err, errlen, "expected [IPV6]:PORT");
            return TPF_EINVAL;
        }
        memcpy(h, s + 1, (size_t)(e - s - 1));
        h[e - s - 1] = 0;
        p = e + 2;
    } else if ((colon = strrchr(s, ':')) != NULL) {
        if (colon == s || (size_t)(colon - s) >= sizeof(h)) {
            snprintf(err, errlen, "expected HOST:PORT");
            return TPF_EINVAL;
        }
        if (memchr(s, ':', (size_t)(colon - s))) {
            snprintf(err, errlen, "an IPv6 address goes in brackets: [ADDR]:PORT");
            return TPF_EINVAL;
        }
        memcpy(h, s, (size_t)(colon - s));
        h[colon - s] = 0;
        p = colon + 1;
    }
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (!*p || *end || errno || v < 0 || v > 65535) {
        snprintf(err, errlen, "port '%s': expected a number from 0 to 65535", p);
        return TPF_EINVAL;
    }
    if (strlen(h) >= hostlen) {
        snprintf(err, errlen, "host name too long");
        return TPF_EINVAL;
    }
    memcpy(host, h, strlen(h) + 1);
    *port = (int)v;
    return 0;
}

int prom_listen(const char *host, int port, int *bound_port, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int gr = getaddrinfo(host, ps, &hints, &res);
    if (gr != 0 || !res) {
        snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(gr));
        return TPF_EINVAL;
    }
    int fd = -1, rc = TPF_EIO;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            rc = err_from_errno(errno);
            snprintf(err, errlen, "socket: %s", strerror(errno));
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        /* a deep backlog: a burst of idle connections must not leave the
         * scraper's SYN dropped (a 1 s retry) before we drain it */
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
            rc = 0;
            break;
        }
        int e = errno;
        rc = e == EADDRINUSE ? TPF_EBUSY : err_from_errno(e);
        snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port, strerror(e));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return rc < 0 ? rc : TPF_EIO;
    if (bound_port) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        *bound_port = port;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
            if (ss.ss_family == AF_INET) *bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
            if (ss.ss_family == AF_INET6)
                *bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    return fd;
}

/* ---- HTTP ---- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One client connection: reading its request, then writing its response.
 * Connections are served side by side (poll), each with its own deadline,
 * so a client that never sends or never reads delays nobody else. */
typedef struct prom_conn {
    int fd;                /* -1: free slot */
    int64_t deadline;
    uint64_t seq;          /* accept order: the oldest idle one goes first */
    char req[PROM_REQ_MAX + 1];
    size_t got;
    buf out;               /* the whole response */
    size_t sent;
    int writing;
} prom_conn;

static void conn_close(prom *p, prom_conn *c, int failed)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    buf_free(&c->out);
    if (failed) __atomic_add_fetch(&p->scrape_errors, 1, __ATOMIC_RELAXED);
}

static void respond(prom_conn *c, int code, const char *reason, const char *ctype, const char *body,
                    size_t blen, int head_only)
{
    buf_init(&c->out, PROM_PAGE_MAX + 512);
    buf_printf(&c->out,
               "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
               "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
               code, reason, ctype, blen);
    if (!head_only && blen) buf_append(&c->out, body, blen);
    c->sent = 0;
    c->writing = 1;
}

/* The request head is complete: build the response. */
static void route(prom *p, prom_conn *c)
{
    char method[8] = "", path[256] = "";
    if (sscanf(c->req, "%7s %255s", method, path) != 2) {
        respond(c, 400, "Bad Request", "text/plain", "bad request\n", 12, 0);
        return;
    }
    int head = strcmp(method, "HEAD") == 0;
    if (!head && strcmp(method, "GET") != 0) {
        respond(c, 405, "Method Not Allowed", "text/plain", "GET only\n", 9, 0);
        return;
    }
    char *q = strchr(path, '?');
    if (q) *q = 0;
    if (strcmp(path, "/metrics") == 0) {
        buf_init(&c->out, PROM_PAGE_MAX + 512);
        pthread_mutex_lock(&p->mu);
        int have = p->have_page;
        size_t blen = have ? p->page.len : 0;
        if (have) {
            /* The header, then the page copied under the lock (a memcpy:
             * the collector's trylock fails only for that long). */
            buf_printf(&c->out,
                       "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                       "Content-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
                       blen);
            if (!head) buf_append(&c->out, p->page.data, p->page.len);
        }
        pthread_mutex_unlock(&p->mu);
        __atomic_add_fetch(&p->scrapes, 1, __ATOMIC_RELAXED);
        c->sent = 0;
        c->writing = 1;
        if (!have || c->out.err) {
            buf_free(&c->out);
            respond(c, 503, "Service Unavailable", "text/plain", "no sample yet\n", 14, head);
        }
        return;
    }
    if (strcmp(path, "/") == 0) {
        static const char home[] = "<html><head><title>trainperf</title></head><body>"
                                   "<a href=\"/metrics\">/metrics</a></body></html>\n";
        respond(c, 200, "OK", "text/html; charset=utf-8", home, sizeof(home) - 1, head);
        return;
    }
    respond(c, 404, "Not Found", "text/plain", "not found: try /metrics\n", 24, head);
}

static void conn_read(prom *p, prom_conn *c)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->req + c->got, PROM_REQ_MAX - c->got, 0);
        if (r > 0) {
            c->got += (size_t)r;
            c->req[c->got] = 0;
            if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
                route(p, c);
                return;
            }
            if (c->got == PROM_REQ_MAX) {
                respond(c, 431, "Request Header Fields Too Large", "text/plain", "", 0, 0);
                __atomic_add_fetch(&p->scrape_errors, 1, __ATOMIC_RELAXED);
                return;
            }
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        conn_close(p, c, 1); /* gone before asking */
        return;
    }
}

static void conn_write(prom *p, prom_conn *c)
{
    while (c->sent < c->out.len) {
        ssize_t w = send(c->fd, c->out.data + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
        if (w > 0) {
            c->sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        conn_close(p, c, 1);
        return;
    }
    conn_close(p, c, 0);
}

/* A slot for a new connection: a free one, else the oldest still waiting
 * for its request (idle or slow-loris), closed and counted; NULL when every
 * slot is sending a response (those finish or time out on their own). */
static prom_conn *conn_slot(prom *p, prom_conn *conns)
{
    prom_conn *old = NULL;
    for (int i = 0; i < PROM_MAX_CONNS; i++) {
        prom_conn *c = &conns[i];
        if (c->fd < 0) return c;
        if (!c->writing && (!old || c->seq < old->seq)) old = c;
    }
    if (old) conn_close(p, old, 1); /* counted with the dropped ones */
    return old;
}

/* Everything waiting in the backlog, a burst at a time. */
static void accept_all(prom *p, prom_conn *conns, uint64_t *seq)
{
    for (int k = 0; k < PROM_ACCEPT_BURST; k++) {
        int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return;
        prom_conn *c = conn_slot(p, conns);
        if (!c) {
            close(fd);
            __atomic_add_fetch(&p->scrape_errors, 1, __ATOMIC_RELAXED);
            continue;
        }
        c->fd = fd;
        c->seq = ++*seq;
        c->got = 0;
        c->sent = 0;
        c->writing = 0;
        c->deadline = now_ms() + PROM_IO_MS;
        memset(&c->out, 0, sizeof(c->out));
        /* most requests are already there: serve them now, not a poll later */
        conn_read(p, c);
        if (c->fd >= 0 && c->writing) conn_write(p, c);
    }
}

static void *prom_main(void *arg)
{
    prom *p = arg;
    prom_conn *conns = calloc(PROM_MAX_CONNS, sizeof(*conns));
    if (!conns) return NULL;
    for (int i = 0; i < PROM_MAX_CONNS; i++) conns[i].fd = -1;
    struct pollfd pf[PROM_MAX_CONNS + 2];
    int slot[PROM_MAX_CONNS + 2];
    uint64_t seq = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int quit = p->quit;
        pthread_mutex_unlock(&p->mu);
        if (quit) break;
        int n = 0;
        int64_t now = now_ms(), wait = PROM_POLL_MS;
        for (int i = 0; i < PROM_MAX_CONNS; i++) {
            prom_conn *c = &conns[i];
            if (c->fd < 0) continue;
            if (now >= c->deadline) {
                conn_close(p, c, 1); /* too slow: dropped, counted */
                continue;
            }
            if (c->deadline - now < wait) wait = c->deadline - now;
            pf[n] = (struct pollfd){c->fd, (short)(c->writing ? POLLOUT : POLLIN), 0};
            slot[n++] = i;
        }
        int nconn = n;
        pf[n++] = (struct pollfd){p->wake[0], POLLIN, 0};
        /* always listening: a full table makes room (accept_all) */
        pf[n++] = (struct pollfd){p->lfd, POLLIN, 0};
        int r = poll(pf, (nfds_t)n, (int)wait);
        if (r <= 0) continue;
        if (pf[nconn].revents) break;
        for (int k = 0; k < nconn; k++) {
            if (!pf[k].revents) continue;
            prom_conn *c = &conns[slot[k]];
            if (!c->writing) conn_read(p, c);
            if (c->fd >= 0 && c->writing) conn_write(p, c);
        }
        if (pf[nconn + 1].revents & POLLIN) accept_all(p, conns, &seq);
    }
    for (int i = 0; i < PROM_MAX_CONNS; i++)
        if (conns[i].fd >= 0) conn_close(p, &conns[i], 0);
    free(conns);
    return NULL;
}

/* ---- rendering ---- */

/* A label value, escaped as the format requires. */
static void esc(buf *b, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '\\')
            buf_puts(b, "\\\\");
        else if (*s == '"')
            buf_puts(b, "\\\"");
        else if (*s == '\n')
            buf_puts(b, "\\n");
        else
            buf_putc(b, *s);
    }
}

static void family(buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP trainperf_%s %s\n# TYPE trainperf_%s %s\n", name, help, name, type);
}

static void num(buf *b, double v)
{
    if (isnan(v))
        buf_puts(b, "NaN");
    else if (isinf(v))
        buf_puts(b, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        buf_printf(b, "%.0f", v);
    else if (fabs(v) >= 1e6 && fabs(v) < 1e15)
        buf_printf(b, "%.3f", v); /* epoch seconds keep their milliseconds */
    else
        buf_printf(b, "%.9g", v);
}

/* `trainperf_NAME{node="..",EXTRA} V` */
static void sample(buf *b, const prom *p, const char *name, const char *extra, double v)
{
    buf_printf(b, "trainperf_%s{node=\"", name);
    esc(b, p->host);
    buf_putc(b, '"');
    if (extra && *extra) {
        buf_putc(b, ',');
        buf_puts(b, extra);
    }
    buf_puts(b, "} ");
    num(b, v);
    buf_putc(b, '\n');
}

/* The rank label of a group: rank="N", or pid="N" for a process without one. */
static void who(char *out, size_t n, int rank, pid_t pid)
{
    if (rank >= 0)
        snprintf(out, n, "rank=\"%d\"", rank);
    else
        snprintf(out, n, "pid=\"%d\"", (int)pid);
}

/* A frame figure: unknown values are left out, never written as 0. */
typedef struct prom_fig {
    const char *name, *type, *help;
    size_t off;
    double scale;
    const char *extra; /* labels beside node, e.g. resource="cpu" */
    int first;         /* first sample of its family: HELP/TYPE go here */
} prom_fig;

#define F(x) offsetof(coll_frame, x)
static const prom_fig host_figs[] = {
    {"host_cpu_busy_ratio", "gauge", "System CPU busy, share of all cores.", F(cpu_pct), 0.01, NULL, 1},
    {"host_cpu_iowait_ratio", "gauge", "System CPU iowait share.", F(cpu_iowait_pct), 0.01, NULL, 1},
    {"host_memory_total_bytes", "gauge", "Memory installed.", F(mem_total_bytes), 1, NULL, 1},
    {"host_memory_used_bytes", "gauge", "Memory used (total - available).", F(mem_used_bytes), 1, NULL, 1},
    {"host_memory_available_bytes", "gauge", "Memory available.", F(mem_available_bytes), 1, NULL, 1},
    {"host_swap_used_bytes", "gauge", "Swap used.", F(swap_used_bytes), 1, NULL, 1},
    {"host_pressure_ratio", "gauge", "Pressure stall information (PSI avg over the interval), 0-1.",
     F(psi_cpu_some_pct), 0.01, "resource=\"cpu\",kind=\"some\"", 1},
    {"host_pressure_ratio", NULL, NULL, F(psi_mem_some_pct), 0.01, "resource=\"memory\",kind=\"some\"", 0},
    {"host_pressure_ratio", NULL, NULL, F(psi_mem_full_pct), 0.01, "resource=\"memory\",kind=\"full\"", 0},
    {"host_pressure_ratio", NULL, NULL, F(psi_io_some_pct), 0.01, "resource=\"io\",kind=\"some\"", 0},
    {"host_pressure_ratio", NULL, NULL, F(psi_io_full_pct), 0.01, "resource=\"io\",kind=\"full\"", 0},
    {"host_disk_bytes_per_second", "gauge", "Disk traffic, all block devices.", F(disk_read_bps), 1,
     "direction=\"read\"", 1},
    {"host_disk_bytes_per_second", NULL, NULL, F(disk_write_bps), 1, "direction=\"write\"", 0},
    {"host_network_bytes_per_second", "gauge", "Network traffic (not loopback).", F(net_rx_bps), 1,
     "direction=\"receive\"", 1},
    {"host_network_bytes_per_second", NULL, NULL, F(net_tx_bps), 1, "direction=\"transmit\"", 0},
    {"tree_processes", "gauge", "Processes in the watched tree.", F(tree_procs), 1, NULL, 1},
    {"tree_threads", "gauge", "Threads in the watched tree.", F(tree_threads), 1, NULL, 1},
    {"tree_cpu_cores", "gauge", "CPU of the watched tree, in cores.", F(tree_cpu_pct), 0.01, NULL, 1},
    {"main_cpu_cores", "gauge", "CPU of the root process, in cores.", F(main_cpu_pct), 0.01, NULL, 1},
    {"tree_resident_memory_bytes", "gauge", "Resident memory of the watched tree.", F(tree_rss_bytes), 1,
     NULL, 1},
    {"tree_io_bytes_per_second", "gauge", "Storage traffic of the watched tree.", F(tree_read_bps), 1,
     "direction=\"read\"", 1},
    {"tree_io_bytes_per_second", NULL, NULL, F(tree_write_bps), 1, "direction=\"write\"", 0},
    {"steps_per_second", "gauge", "Steps per second per rank over the last interval.", F(step_rate), 1,
     NULL, 1},
    {"samples_per_second", "gauge", "Samples per second, all ranks, over the last interval.",
     F(sample_rate), 1, NULL, 1},
    {"tokens_per_second", "gauge", "Tokens per second, all ranks, over the last interval.", F(token_rate),
     1, NULL, 1},
    {"data_wait_ratio", "gauge", "Data-wait share of step time over the last interval.",
     F(data_wait_share), 1, NULL, 1},
    {"step_interval_mean_seconds", "gauge", "Mean step time over the last interval.", F(step_time_ms),
     0.001, NULL, 1},
    {"step_time_median_seconds", "gauge", "Running median step time over the run.",
     F(step_time_median_ms), 0.001, NULL, 1},
    {"seconds_since_last_step", "gauge", "Time since the last step ended (any rank).",
     F(since_last_step_s), 1, NULL, 1},
};
#undef F

static void render_frame(buf *b, const prom *p, const coll_frame *f)
{
    for (size_t i = 0; i < sizeof(host_figs) / sizeof(host_figs[0]); i++) {
        const prom_fig *g = &host_figs[i];
        if (g->first) family(b, g->name, g->type, g->help);
        const fval *v = (const fval *)((const char *)f + g->off);
        if (v->ok) sample(b, p, g->name, g->extra, v->v * g->scale);
    }
}

/* GPU figures, named after dcgm-exporter's fields (DCGM_FI_DEV_<X> becomes
 * trainperf_dcgm_<x>) with its units and its gpu/UUID/modelName labels, so a
 * dashboard over dcgm-exporter needs only the metric prefix changed. */
#define GF(x) offsetof(gpu_frame, x)
static const struct {
    const char *name, *type, *help;
    size_t off;
    double scale;
} gpu_figs[] = {
    {"dcgm_gpu_util", "gauge", "GPU utilization (in %), as DCGM_FI_DEV_GPU_UTIL.", GF(util_pct), 1},
    {"dcgm_mem_copy_util", "gauge", "Memory utilization (in %), as DCGM_FI_DEV_MEM_COPY_UTIL.",
     GF(mem_util_pct), 1},
    {"dcgm_fb_used", "gauge", "Framebuffer memory used (in MiB), as DCGM_FI_DEV_FB_USED.",
     GF(mem_used_bytes), 1.0 / 1048576},
    {"dcgm_gpu_temp", "gauge", "GPU temperature (in C), as DCGM_FI_DEV_GPU_TEMP.", GF(temp_c), 1},
    {"dcgm_power_usage", "gauge", "Power draw (in W), as DCGM_FI_DEV_POWER_USAGE.", GF(power_w), 1},
    {"dcgm_sm_clock", "gauge", "SM clock frequency (in MHz), as DCGM_FI_DEV_SM_CLOCK.", GF(sm_mhz), 1},
    {"dcgm_mem_clock", "gauge", "Memory clock frequency (in MHz), as DCGM_FI_DEV_MEM_CLOCK.", GF(mem_mhz),
     1},
    {"dcgm_total_energy_consumption", "counter",
     "Energy used since the run started (in mJ), as DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (which counts "
     "since driver load).",
     GF(energy_total_j), 1000},
    {"gpu_memory_total_bytes", "gauge", "Device memory.", GF(mem_total_bytes), 1},
    {"gpu_pcie_bytes_per_second_rx", "gauge", "PCIe received.", GF(pcie_rx_bps), 1},
    {"gpu_pcie_bytes_per_second_tx", "gauge", "PCIe sent.", GF(pcie_tx_bps), 1},
    {"gpu_nvlink_bytes_per_second_rx", "gauge", "NVLink received.", GF(nvlink_rx_bps), 1},
    {"gpu_nvlink_bytes_per_second_tx", "gauge", "NVLink sent.", GF(nvlink_tx_bps), 1},
    {"gpu_process_memory_bytes", "gauge", "Device memory of the watched tree.", GF(proc_mem_bytes), 1},
    {"gpu_process_sm_ratio", "gauge", "SM share of the watched tree, 0-1.", GF(proc_sm_pct), 0.01},
    {"gpu_clock_event_reasons", "gauge", "NVML clock-event (throttle) reasons bit mask; 0: none.",
     GF(throttle_mask), 1},
};
#undef GF

static void render_gpus(buf *b, const prom *p, const coll_frame *f)
{
    if (f->ngpu <= 0) return;
    char lab[512];
    for (size_t i = 0; i < sizeof(gpu_figs) / sizeof(gpu_figs[0]); i++) {
        family(b, gpu_figs[i].name, gpu_figs[i].type, gpu_figs[i].help);
        for (int g = 0; g < f->ngpu && g < FRAME_MAX_GPUS; g++) {
            const gpu_frame *gf = &f->gpu[g];
            const fval *v = (const fval *)((const char *)gf + gpu_figs[i].off);
            if (!v->ok || gf->lost) continue;
            buf lb;
            buf_init(&lb, sizeof(lab));
            buf_printf(&lb, "gpu=\"%d\",UUID=\"", gf->index);
            esc(&lb, gf->uuid);
            buf_puts(&lb, "\",modelName=\"");
            esc(&lb, gf->name);
            buf_putc(&lb, '"');
            if (!lb.err) sample(b, p, gpu_figs[i].name, lb.data, v->v * gpu_figs[i].scale);
            buf_free(&lb);
        }
    }
    /* The clock-slowdown reasons alerts.c's gpu.throttled counts: HW
     * slowdown, SW/HW thermal, power brake (PromQL has no bitwise and). */
    family(b, "gpu_throttled", "gauge", "1 while clocks are slowed (thermal, hardware, power brake).");
    for (int g = 0; g < f->ngpu && g < FRAME_MAX_GPUS; g++) {
        const gpu_frame *gf = &f->gpu[g];
        if (!gf->throttle_mask.ok || gf->lost) continue;
        snprintf(lab, sizeof(lab), "gpu=\"%d\"", gf->index);
        sample(b, p, "gpu_throttled", lab, ((unsigned long long)gf->throttle_mask.v & 0xE8u) ? 1 : 0);
    }
    family(b, "gpu_lost", "gauge", "1 when the GPU fell off the bus.");
    for (int g = 0; g < f->ngpu && g < FRAME_MAX_GPUS; g++) {
        snprintf(lab, sizeof(lab), "gpu=\"%d\"", f->gpu[g].index);
        sample(b, p, "gpu_lost", lab, f->gpu[g].lost ? 1 : 0);
    }
}

static const double quantiles[] = {0.5, 0.9, 0.95, 0.99};

static void summary_of(buf *b, const prom *p, const char *name, const char *lab, const sketch *s,
                       double sum_s, uint64_t count)
{
    char l[256];
    for (size_t i = 0; i < sizeof(quantiles) / sizeof(quantiles[0]); i++) {
        double q = count ? sketch_quantile(s, quantiles[i]) / 1e9 : NAN;
        if (isnan(q)) continue;
        snprintf(l, sizeof(l), "%s%squantile=\"%g\"", lab ? lab : "", lab && *lab ? "," : "", quantiles[i]);
        sample(b, p, name, l, q);
    }
    char nm[128];
    snprintf(nm, sizeof(nm), "%s_sum", name);
    sample(b, p, nm, lab, sum_s);
    snprintf(nm, sizeof(nm), "%s_count", name);
    sample(b, p, nm, lab, (double)count);
}

static prom_rank_prev *prev_of(prom *p, int rank, pid_t pid)
{
    for (int i = 0; i < p->nprev; i++) {
        prom_rank_prev *r = &p->prev[i];
        if (r->rank == rank && (rank >= 0 || r->pid == pid)) return r;
    }
    if (p->nprev == AGG_MAX_GROUPS) return NULL;
    prom_rank_prev *r = &p->prev[p->nprev++];
    memset(r, 0, sizeof(*r));
    r->rank = rank;
    r->pid = pid;
    return r;
}

static void render_steps(buf *b, prom *p, const figs *a, double t)
{
    char lab[64];
    family(b, "steps_total", "counter", "Steps completed, per rank.");
    for (int i = 0; i < a->ngroups; i++) {
        who(lab, sizeof(lab), a->groups[i]->rank, a->groups[i]->pid);
        sample(b, p, "steps_total", lab, (double)a->groups[i]->count);
    }
    /* Samples and tokens only once the steps report them: unknown is not 0. */
    if (a->samples) {
        family(b, "samples_total", "counter", "Samples processed, per rank (as the steps reported them).");
        for (int i = 0; i < a->ngroups; i++) {
            who(lab, sizeof(lab), a->groups[i]->rank, a->groups[i]->pid);
            sample(b, p, "samples_total", lab, (double)a->groups[i]->samples);
        }
    }
    if (a->tokens) {
        family(b, "tokens_total", "counter", "Tokens processed, per rank (as the steps reported them).");
        for (int i = 0; i < a->ngroups; i++) {
            who(lab, sizeof(lab), a->groups[i]->rank, a->groups[i]->pid);
            sample(b, p, "tokens_total", lab, (double)a->groups[i]->tokens);
        }
    }
    family(b, "step_seconds", "summary",
           "Step time (begin to next begin) per rank, whole run; quantiles within 1%.");
    for (int i = 0; i < a->ngroups; i++) {
        const agg_group *g = a->groups[i];
        who(lab, sizeof(lab), g->rank, g->pid);
        summary_of(b, p, "step_seconds", lab, &g->step_ns, (double)g->interval_ns / 1e9, g->count);
    }
    family(b, "data_wait_seconds", "summary", "Data-loader wait per step, all ranks, whole run.");
    summary_of(b, p, "data_wait_seconds", "", &a->data_ns, (double)a->phase_ns[0] / 1e9, a->count);

    family(b, "phase_seconds_total", "counter", "Time in each phase of the steps, all ranks.");
    for (int k = 0; k < AGG_NPHASES; k++) {
        snprintf(lab, sizeof(lab), "phase=\"%s\"", agg_phase_names[k]);
        sample(b, p, "phase_seconds_total", lab, (double)a->phase_ns[k] / 1e9);
    }
    sample(b, p, "phase_seconds_total", "phase=\"other\"", (double)a->other_ns / 1e9);
    if (a->interval_ns) {
        family(b, "phase_ratio", "gauge", "Share of step time in each phase, whole run, 0-1.");
        for (int k = 0; k < AGG_NPHASES; k++) {
            snprintf(lab, sizeof(lab), "phase=\"%s\"", agg_phase_names[k]);
            sample(b, p, "phase_ratio", lab, (double)a->phase_ns[k] / (double)a->interval_ns);
        }
        sample(b, p, "phase_ratio", "phase=\"other\"", (double)a->other_ns / (double)a->interval_ns);
    }

    /* GPU runs (kernel records joined to steps, collect/gpujoin.h): none on
     * a run without them, unknown is not 0 */
    const figs_gpu *gp = &a->gpu;
    if (gp->warm_steps && gp->interval_ns) {
        family(b, "gpu_busy_ratio", "gauge",
               "Share of step time with a kernel running, warm steps so far, 0-1.");
        sample(b, p, "gpu_busy_ratio", "", (double)gp->busy_ns / (double)gp->interval_ns);
        family(b, "gpu_sync_wait_ratio", "gauge",
               "Share of step time the host waited for the GPU, warm steps so far, 0-1.");
        sample(b, p, "gpu_sync_wait_ratio", "", (double)gp->sync_ns / (double)gp->interval_ns);
        family(b, "gpu_kernels_total", "counter", "Kernels run in the warm steps so far.");
        sample(b, p, "gpu_kernels_total", "", (double)gp->kernels);
        family(b, "gpu_pageable_copy_bytes_total", "counter",
               "Bytes copied between host and GPU from pageable host memory, warm steps.");
        sample(b, p, "gpu_pageable_copy_bytes_total", "",
               (double)(gp->h2d_pageable_bytes + gp->d2h_pageable_bytes));
    }

    /* Per-rank rate over the interval, and FLOP/s from the probe's counters
     * ("flops" per step, "mfu"), as torch_helpers records them. */
    family(b, "rank_steps_per_second", "gauge", "Steps per second of each rank over the last interval.");
    buf fl;
    buf_init(&fl, 1u << 16);
    for (int i = 0; i < a->ngroups; i++) {
        const agg_group *g = a->groups[i];
        prom_rank_prev *pr = prev_of(p, g->rank, g->pid);
        if (!pr) continue;
        who(lab, sizeof(lab), g->rank, g->pid);
        if (pr->t > 0 && t > pr->t) {
            double rate = (double)(g->count - pr->count) / (t - pr->t);
            sample(b, p, "rank_steps_per_second", lab, rate);
            const exp_counter *c = exp_counters_find(&p->ctrs, "flops", g->rank, g->pid);
            if (c) sample(&fl, p, "flops_per_second", lab, c->v * rate);
        }
        pr->count = g->count;
        pr->t = t;
    }
    if (fl.len) {
        family(b, "flops_per_second", "gauge", "Model FLOP/s of each rank (flops per step x step rate).");
        buf_append(b, fl.data, fl.len);
    }
    buf_free(&fl);
    int any = 0;
    for (int i = 0; i < p->ctrs.n; i++) {
        if (strcmp(p->ctrs.c[i].name, "mfu") != 0) continue;
        if (!any++) family(b, "mfu_ratio", "gauge", "Model FLOPs utilisation of each rank, 0-1.");
        who(lab, sizeof(lab), p->ctrs.c[i].rank, p->ctrs.c[i].pid);
        sample(b, p, "mfu_ratio", lab, p->ctrs.c[i].v);
    }
    any = 0;
    for (int i = 0; i < p->ctrs.n; i++) {
        if (!strcmp(p->ctrs.c[i].name, "mfu") || !strcmp(p->ctrs.c[i].name, "flops")) continue;
        if (!any++) family(b, "probe_value", "gauge", "Last value of each probe counter (tpf_counter).");
        buf l2;
        buf_init(&l2, 512);
        who(lab, sizeof(lab), p->ctrs.c[i].rank, p->ctrs.c[i].pid);
        buf_printf(&l2, "%s,name=\"", lab);
        esc(&l2, p->ctrs.c[i].name);
        buf_putc(&l2, '"');
        if (!l2.err) sample(b, p, "probe_value", l2.data, p->ctrs.c[i].v);
        buf_free(&l2);
    }
}

static const char *sev_name(int s)
{
    return s == ALERT_CRITICAL ? "critical" : s == ALERT_WARNING ? "warning" : "info";
}

static void render_alerts(buf *b, const prom *p)
{
    family(b, "alert_firing", "gauge", "1 while the alert rule is firing (trainperf's own rules).");
    char lab[256];
    for (int i = 0; i < p->nrules; i++) {
        buf lb;
        buf_init(&lb, sizeof(lab));
        buf_puts(&lb, "rule=\"");
        esc(&lb, p->rules[i]);
        buf_printf(&lb, "\",severity=\"%s\"", p->rule_sev[i] >= 0 ? sev_name(p->rule_sev[i]) : "unknown");
        if (!lb.err) sample(b, p, "alert_firing", lb.data, p->rule_on[i]);
        buf_free(&lb);
    }
    family(b, "alerts_fired_total", "counter", "Alerts fired since the run started.");
    sample(b, p, "alerts_fired_total", NULL, (double)p->alerts_fired);
}

static void render(prom *p, const coll_frame *f, const figs *steps, uint64_t lost, uint64_t scrapes,
                   uint64_t errs)
{
    buf *b = &p->work;
    buf_reset(b);
    family(b, "build_info", "gauge", "trainperf version; always 1.");
    sample(b, p, "build_info", "version=\"" TPF_VERSION_STRING "\"", 1);
    family(b, "start_time_seconds", "gauge", "Start of the run, seconds since the epoch.");
    sample(b, p, "start_time_seconds", NULL, p->start_unix_s);
    family(b, "run_seconds", "gauge", "Time since the run started.");
    sample(b, p, "run_seconds", NULL, f->t);
    if (steps) render_steps(b, p, steps, f->t);
    render_frame(b, p, f);
    render_gpus(b, p, f);
    render_alerts(b, p);
    family(b, "exporter_updates_lost_total", "counter",
           "Page updates not published because a scrape was copying the page at that instant.");
    sample(b, p, "exporter_updates_lost_total", "exporter=\"prometheus\"", (double)lost);
    family(b, "scrapes_total", "counter", "Scrapes of this endpoint served.");
    sample(b, p, "scrapes_total", NULL, (double)scrapes);
    family(b, "scrape_errors_total", "counter", "Connections dropped (bad request, too slow, gone).");
    sample(b, p, "scrape_errors_total", NULL, (double)errs);
}

/* ---- the sink ---- */

static void prom_close(void *st, const sink_run *run);

/* Embedded mode (no caller config): TRAINPERF_PROMETHEUS=[HOST:]PORT asks
 * for the endpoint; its URL goes to RUN/prometheus.url as with the CLI.
 * Returns the listening fd or -1 (not asked, or failed: ctx->error told). */
static int env_listen(const sink_ctx *ctx)
{
    const char *spec = getenv("TRAINPERF_PROMETHEUS");
    if (!spec || !*spec) return -1;
    char host[256], err[256];
    int port = 0, bound = 0;
    if (prom_parse_addr(spec, host, sizeof(host), &port, err, sizeof(err)) != 0) {
        if (ctx->error) ctx->error(ctx->error_arg, "TRAINPERF_PROMETHEUS", TPF_EINVAL);
        return -1;
    }
    int fd = prom_listen(host, port, &bound, err, sizeof(err));
    if (fd < 0) {
        if (ctx->error) ctx->error(ctx->error_arg, "prometheus endpoint", fd);
        return -1;
    }
    char path[PATH_MAX + 32], url[400];
    snprintf(path, sizeof(path), "%s/prometheus.url", ctx->run_dir);
    const char *shown = strcmp(host, "0.0.0.0") == 0 ? "127.0.0.1" : strcmp(host, "::") == 0 ? "::1" : host;
    int n = snprintf(url, sizeof(url), strchr(shown, ':') ? "http://[%s]:%d/metrics\n" : "http://%s:%d/metrics\n",
                     shown, bound);
    int uf = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (uf >= 0) {
        ssize_t w = n > 0 ? write(uf, url, (size_t)n) : 0;
        (void)w;
        close(uf);
    }
    return fd;
}

static int prom_init(void **st, const sink_ctx *ctx)
{
    const rec_export_config *cfg = ctx->config;
    int lfd = cfg ? cfg->prom_fd : env_listen(ctx);
    if (lfd < 0) return 1;
    prom *p = calloc(1, sizeof(*p));
    if (!p) {
        close(lfd);
        return 1; /* the run goes on without the endpoint */
    }
    p->lfd = lfd;
    p->wake[0] = p->wake[1] = -1;
    const char *host = ctx->meta && ctx->meta->host && *ctx->meta->host ? ctx->meta->host : "localhost";
    snprintf(p->host, sizeof(p->host), "%s", host);
    p->start_unix_s = ctx->start_unix_s;
    buf_init(&p->work, PROM_PAGE_MAX);
    buf_init(&p->page, PROM_PAGE_MAX);
    pthread_mutex_init(&p->mu, NULL);
    /* Every rule gets a firing gauge from the start (0), so an alerting rule
     * over it sees the series before it first fires. Texts are "name: expr". */
    for (int i = 0; ctx->meta && i < ctx->meta->nalert_rules && p->nrules < PROM_MAX_RULES; i++) {
        const char *t = ctx->meta->alert_rules[i];
        const char *c = t ? strstr(t, ": ") : NULL;
        if (!c || strcmp(c + 2, "off") == 0 || (size_t)(c - t) >= sizeof(p->rules[0])) continue;
        memcpy(p->rules[p->nrules], t, (size_t)(c - t));
        p->rules[p->nrules][c - t] = 0;
        p->rule_sev[p->nrules] = -1;
        p->nrules++;
    }
    int rc = 0;
    if (pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        rc = err_from_errno(errno);
    } else {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int e = pthread_create(&p->th, NULL, prom_main, p);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (e != 0)
            rc = err_from_errno(e);
        else
            p->has_thread = 1;
    }
    if (rc) {
        if (ctx->error) ctx->error(ctx->error_arg, "prometheus endpoint", rc);
        prom_close(p, NULL);
        return 1;
    }
    *st = p;
    return 0;
}

static void prom_sample(void *st, const coll_frame *f, const sink_run *run)
{
    prom *p = st;
    render(p, f, run ? run->steps : NULL, __atomic_load_n(&p->lost, __ATOMIC_RELAXED),
           __atomic_load_n(&p->scrapes, __ATOMIC_RELAXED),
           __atomic_load_n(&p->scrape_errors, __ATOMIC_RELAXED));
    if (p->work.err) {
        /* Past the page cap: keep serving the last good page. */
        __atomic_add_fetch(&p->lost, 1, __ATOMIC_RELAXED);
        return;
    }
    if (pthread_mutex_trylock(&p->mu) != 0) {
        /* A scrape is copying the page: this update is lost (counted), the
         * next sample publishes again. */
        __atomic_add_fetch(&p->lost, 1, __ATOMIC_RELAXED);
        return;
    }
    buf t = p->page;
    p->page = p->work;
    p->work = t;
    p->have_page = 1;
    pthread_mutex_unlock(&p->mu);
}

static void prom_alert(void *st, const alert_event *e)
{
    prom *p = st;
    if (e->fired) p->alerts_fired++;
    if (!e->rule) return;
    int i;
    for (i = 0; i < p->nrules; i++)
        if (strcmp(p->rules[i], e->rule) == 0) break;
    if (i == p->nrules) {
        if (p->nrules == PROM_MAX_RULES) return;
        snprintf(p->rules[i], sizeof(p->rules[0]), "%s", e->rule);
        p->nrules++;
    }
    p->rule_sev[i] = e->severity;
    p->rule_on[i] = e->fired ? 1 : 0;
}

static void prom_close(void *st, const sink_run *run)
{
    prom *p = st;
    if (!p) return;
    if (run && run->tally) run->tally->exporter_lost += __atomic_load_n(&p->lost, __ATOMIC_RELAXED);
    if (p->has_thread) {
        pthread_mutex_lock(&p->mu);
        p->quit = 1;
        pthread_mutex_unlock(&p->mu);
        ssize_t w = write(p->wake[1], "x", 1);
        (void)w;
        pthread_join(p->th, NULL);
    }
    if (p->lfd >= 0) close(p->lfd);
    if (p->wake[0] >= 0) close(p->wake[0]);
    if (p->wake[1] >= 0) close(p->wake[1]);
    buf_free(&p->work);
    buf_free(&p->page);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

const sink_ops rec_sink_prometheus = {
    .name = "prometheus",
    .init = prom_init,
    .on_sample = prom_sample,
    .on_probe = exp_counters_on_probe,
    .on_alert = prom_alert,
    .close = prom_close,
};
