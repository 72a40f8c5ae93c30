/* A stand-in for libcupti's Activity API on a machine with no GPU: what the
 * CUDA driver and CUPTI would report is told to it by the test program
 * (fake_cupti_add), and it hands the records to the registered callbacks in
 * buffers laid out as CUPTI lays them out (Kernel10, Memcpy5, Memset4,
 * Synchronization: the offsets of docs/gpu.md), from its own flush thread as
 * CUPTI's worker does.
 *
 * FAKE_CUPTI_NO_TS=1: no cuptiActivityRegisterTimestampCallback (an old
 * CUPTI): records carry CLOCK_REALTIME, as CUPTI's default clock does. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef void (*req_fn)(uint8_t **buf, size_t *size, size_t *max_records);
typedef void (*done_fn)(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid);

#define API __attribute__((visibility("default")))
#define MAXQ 65536

typedef struct fq {
    int kind; /* 1 memcpy, 2 memset, 10 kernel, 38 sync */
    uint64_t start, end, bytes;
    int copy, src, dst;
} fq;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_enabled; /* the kinds enabled: records of others are not made */
static fq q[MAXQ];
static int nq;
static req_fn g_req;
static done_fn g_done;
static uint64_t (*g_ts)(void);
static int g_period_ms;
static pthread_t g_th;
static const char *const g_kernel_name = "_Z10fake_kernelPfi";

static uint64_t clk(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* a CLOCK_MONOTONIC time in the clock the records carry */
static uint64_t to_cupti(uint64_t mono)
{
    if (g_ts) return mono; /* the registered callback is the probe's: CLOCK_MONOTONIC */
    return mono + (clk(CLOCK_REALTIME) - clk(CLOCK_MONOTONIC));
}

API void fake_cupti_add(int kind, uint64_t start_mono, uint64_t end_mono, uint64_t bytes, int copy,
                        int src, int dst);
API void fake_cupti_add(int kind, uint64_t start_mono, uint64_t end_mono, uint64_t bytes, int copy,
                        int src, int dst)
{
    pthread_mutex_lock(&mu);
    if (nq < MAXQ && kind < 64 && (g_enabled >> kind & 1))
        q[nq++] = (fq){kind, to_cupti(start_mono), to_cupti(end_mono), bytes, copy, src, dst};
    pthread_mutex_unlock(&mu);
}

static size_t rec_size(int kind)
{
    return kind == 10 ? 216 : kind == 38 ? 40 : 88;
}

static void put64(uint8_t *p, size_t off, uint64_t v) { memcpy(p + off, &v, 8); }
static void put32(uint8_t *p, size_t off, uint32_t v) { memcpy(p + off, &v, 4); }

static void write_rec(uint8_t *p, const fq *r)
{
    memset(p, 0, rec_size(r->kind));
    put32(p, 0, (uint32_t)r->kind);
    switch (r->kind) {
    case 10:
        put64(p, 16, r->start);
        put64(p, 24, r->end);
        put32(p, 40, 0);  /* device */
        put32(p, 48, 7);  /* stream */
        memcpy(p + 104, &g_kernel_name, sizeof(g_kernel_name));
        break;
    case 1:
        p[4] = (uint8_t)r->copy;
        p[5] = (uint8_t)r->src;
        p[6] = (uint8_t)r->dst;
        put64(p, 8, r->bytes);
        put64(p, 16, r->start);
        put64(p, 24, r->end);
        break;
    case 2:
        put64(p, 8, r->bytes);
        put64(p, 16, r->start);
        put64(p, 24, r->end);
        break;
    case 38:
        put32(p, 4, 3); /* stream synchronize */
        put64(p, 8, r->start);
        put64(p, 16, r->end);
        put32(p, 32, 7);
        break;
    }
}

static void deliver(void)
{
    pthread_mutex_lock(&mu);
    while (nq > 0 && g_req && g_done) {
        uint8_t *buf = NULL;
        size_t size = 0, maxr = 0, used = 0;
        g_req(&buf, &size, &maxr);
        if (!buf) break;
        int i = 0;
        for (; i < nq && used + rec_size(q[i].kind) <= size; i++) {
            write_rec(buf + used, &q[i]);
            used += rec_size(q[i].kind);
        }
        memmove(q, q + i, (size_t)(nq - i) * sizeof(q[0]));
        nq -= i;
        pthread_mutex_unlock(&mu);
        g_done(NULL, 0, buf, size, used);
        pthread_mutex_lock(&mu);
    }
    pthread_mutex_unlock(&mu);
}

static void *flusher(void *arg)
{
    for (;;) {
        usleep((useconds_t)g_period_ms * 1000u);
        deliver();
    }
    return arg;
}

static int g_registrations, g_forced_flushes, g_switches;

/* how often the callbacks were registered (0), a forced flush asked for (1:
 * the hand-over to a script's profiler and back), a kind disabled (2) */
API int fake_cupti_calls(int which);
API int fake_cupti_calls(int which) { return which == 2 ? g_switches : which ? g_forced_flushes : g_registrations; }

API int cuptiActivityRegisterCallbacks(req_fn req, done_fn done);
API int cuptiActivityRegisterCallbacks(req_fn req, done_fn done)
{
    g_registrations++;
    g_req = req;
    g_done = done;
    return 0;
}

API int cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **rec);
API int cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **rec)
{
    uint8_t *p = *rec;
    if (p) {
        uint32_t kind;
        memcpy(&kind, p, 4);
        p += rec_size((int)kind);
    } else {
        p = buf;
    }
    if (p >= buf + valid) return 12; /* MAX_LIMIT_REACHED */
    *rec = p;
    return 0;
}

API int cuptiActivityEnable(int kind);
API int cuptiActivityEnable(int kind)
{
    if (!(kind == 1 || kind == 2 || kind == 10 || kind == 38)) return 1;
    g_enabled |= 1ull << kind;
    return 0;
}

/* FAKE_CUPTI_NO_DISABLE=1: no cuptiActivityDisable (played by failing) */
API int cuptiActivityDisable(int kind);
API int cuptiActivityDisable(int kind)
{
    const char *no = getenv("FAKE_CUPTI_NO_DISABLE");
    if (no && *no == '1') return 1;
    if (!(kind == 1 || kind == 2 || kind == 10 || kind == 38)) return 1;
    pthread_mutex_lock(&mu);
    g_enabled &= ~(1ull << kind);
    g_switches++;
    pthread_mutex_unlock(&mu);
    return 0;
}

API int cuptiActivityFlushAll(uint32_t flag);
API int cuptiActivityFlushAll(uint32_t flag)
{
    if (flag & 1) g_forced_flushes++;
    deliver();
    return 0;
}

API int cuptiActivityFlushPeriod(uint32_t ms);
API int cuptiActivityFlushPeriod(uint32_t ms)
{
    if (g_period_ms || ms == 0) return 0;
    g_period_ms = (int)ms;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_create(&g_th, &a, flusher, NULL);
    pthread_attr_destroy(&a);
    return 0;
}

API int cuptiGetTimestamp(uint64_t *ns);
API int cuptiGetTimestamp(uint64_t *ns)
{
    *ns = g_ts ? g_ts() : clk(CLOCK_REALTIME);
    return 0;
}

API int cuptiActivityRegisterTimestampCallback(uint64_t (*fn)(void));
API int cuptiActivityRegisterTimestampCallback(uint64_t (*fn)(void))
{
    const char *no = getenv("FAKE_CUPTI_NO_TS");
    if (no && *no == '1') return 1; /* NOT_SUPPORTED-like: the caller measures an offset */
    g_ts = fn;
    return 0;
}

API int cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *n);
API int cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *n)
{
    *n = 0;
    return 0;
}

API int cuptiGetVersion(uint32_t *v);
API int cuptiGetVersion(uint32_t *v)
{
    *v = 27;
    return 0;
}
