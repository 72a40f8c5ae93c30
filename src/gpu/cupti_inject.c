/* libtrainperf-cupti.so: GPU records for any CUDA program, with no code
 * change and no synchronisation added.
 *
 * `trainperf run` names this library in CUDA_INJECTION64_PATH; the CUDA
 * driver loads it when the program initialises CUDA and calls
 * InitializeInjection once. It loads CUPTI with dlopen (never linked: the
 * project builds with no NVIDIA software), asks for kernel, copy, memset and
 * synchronisation activity records, and hands each one to the collector as
 * a SEG_EV_GPU_* record in this process's second segment
 * (seg-<pid>.gpu.tpf), from CUPTI's own buffer thread. Timestamps are put on
 * CLOCK_MONOTONIC, the probe's clock, by CUPTI's timestamp callback where
 * CUPTI has one, else by an offset measured against cuptiGetTimestamp.
 *
 * Whatever fails (no CUPTI, an old one, a profiler holding it) leaves the
 * program alone: a mark in the segment says why, and the run goes on without
 * GPU records. Only the Activity API is used (no cuptiSubscribe), so a
 * script's own torch.profiler still works; while it runs it takes CUPTI's
 * callbacks over and our records pause (docs/gpu.md).
 *
 * The library's copy of the probe is its own (static, hidden): it never
 * shares state with a libtrainperf or a Python extension in the same
 * process, and exports only InitializeInjection (version script). */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collect/cupti_rec.h"
#include "collect/gpuwin.h"
#include "probe/clock.h"
#include "probe/probe.h"
#include "probe/reader.h"
#include "trainperf.h"

typedef int cures; /* CUptiResult: 0 success */
typedef void (*req_fn)(uint8_t **buf, size_t *size, size_t *max_records);
typedef void (*done_fn)(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid);

static struct {
    void *lib;
    cures (*register_callbacks)(req_fn, done_fn);
    cures (*get_next)(uint8_t *buf, size_t valid, void **rec);
    cures (*enable)(int kind);
    cures (*disable)(int kind);
    cures (*flush_all)(uint32_t flag);
    cures (*flush_period)(uint32_t ms);
    cures (*get_timestamp)(uint64_t *ns);
    cures (*register_ts)(uint64_t (*)(void));
    cures (*dropped)(void *ctx, uint32_t stream, size_t *n);
    cures (*get_version)(uint32_t *v);
    cures (*result_string)(cures, const char **);
} g_cu;

static _Atomic int64_t g_ts_offset; /* mono = cupti - offset (0 with our timestamp callback) */
static int g_own_clock;
static FILE *g_dump;                /* TRAINPERF_CUPTI_DUMP: raw records, for tests */
static pthread_mutex_t g_dump_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t g_dropped;

#define BUF_SIZE (2u << 20)
#define NAME_SLOTS 4096

/* Kernel names: CUPTI's pointer for a function stays the same, so the name
 * is registered once per pointer. Buffers are completed on CUPTI's worker
 * thread, and at exit on the thread that flushes: a lock, never contended
 * on the training thread (which never comes here). */
static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const char *p;
    tpf_name id;
} g_names[NAME_SLOTS];

static tpf_name kernel_name(const char *p)
{
    if (!p) return 0;
    uintptr_t h = ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull;
    tpf_name id = 0;
    pthread_mutex_lock(&g_names_lock);
    for (unsigned i = 0; i < NAME_SLOTS; i++) {
        unsigned k = (unsigned)((h + i) % NAME_SLOTS);
        if (g_names[k].p == p) {
            id = g_names[k].id;
            break;
        }
        if (!g_names[k].p) {
            g_names[k].p = p;
            id = g_names[k].id = tpf_name_register(p);
            break;
        }
    }
    pthread_mutex_unlock(&g_names_lock);
    return id;
}

static void mark(const char *what)
{
    tpf_name n = tpf_name_register(what);
    if (n) tpf_mark(n);
}

static uint64_t mono_clock(void) { return clk_mono_ns(); }

static void measure_offset(void)
{
    uint64_t c = 0;
    if (g_own_clock || !g_cu.get_timestamp) return;
    uint64_t m0 = clk_mono_ns();
    if (g_cu.get_timestamp(&c) != 0) return;
    uint64_t m1 = clk_mono_ns();
    atomic_store(&g_ts_offset, (int64_t)(c - (m0 + (m1 - m0) / 2)));
}

/* Which clock a buffer's records carry, from the records themselves: they
 * completed within the last flush periods, so on the right clock the first
 * one ended a little before now. Our timestamp callback (CLOCK_MONOTONIC),
 * CUPTI's default (CLOCK_REALTIME), or whatever cuptiGetTimestamp reads (a
 * profiler in the process may have registered its own clock, e.g. Kineto's
 * TSC): the first candidate that puts the record in the last minute wins;
 * none does, the offset stays and the records are counted as off-clock. */
static _Atomic uint64_t g_offclock;

static void pick_clock(uint64_t end)
{
    uint64_t mono = clk_mono_ns();
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    uint64_t real = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    int64_t cand[3] = {0, (int64_t)(real - mono), atomic_load(&g_ts_offset)};
    uint64_t c = 0;
    if (g_cu.get_timestamp && g_cu.get_timestamp(&c) == 0) cand[2] = (int64_t)(c - mono);
    for (int i = 0; i < 3; i++) {
        uint64_t m = end - (uint64_t)cand[i];
        if (m <= mono + 1000000000ull && m + 60000000000ull >= mono) {
            atomic_store(&g_ts_offset, cand[i]);
            return;
        }
    }
    atomic_fetch_add(&g_offclock, 1);
}

static uint64_t to_mono(uint64_t t)
{
    return t - (uint64_t)atomic_load_explicit(&g_ts_offset, memory_order_relaxed);
}

static void on_request(uint8_t **buf, size_t *size, size_t *max_records)
{
    void *p = NULL;
    if (posix_memalign(&p, 8, BUF_SIZE) != 0) p = NULL;
    *buf = p;
    *size = p ? BUF_SIZE : 0;
    *max_records = 0;
}

static void dump_record(const uint8_t *rec, size_t len)
{
    pthread_mutex_lock(&g_dump_lock);
    uint32_t n = (uint32_t)len;
    fwrite(&n, sizeof(n), 1, g_dump);
    fwrite(rec, 1, len, g_dump);
    pthread_mutex_unlock(&g_dump_lock);
}

static void on_complete(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
    void *rec = NULL;
    uint8_t *end = buf + valid;
    int picked = 0;
    while (buf && g_cu.get_next(buf, valid, &rec) == 0 && rec) {
        const uint8_t *p = rec;
        cupti_rec r;
        /* the record's length is not given: what is left of the buffer bounds it */
        size_t len = (size_t)(end - p);
        /* TRAINPERF_CUPTI_DUMP: the record's first 256 bytes (every kind
         * read here is shorter), for tests of the decoding on real records */
        if (g_dump) dump_record(p, len < 256 ? len : 256);
        if (!cupti_rec_decode(p, len, &r)) continue;
        if (!picked) {
            pick_clock(r.end);
            picked = 1;
        }
        uint32_t name = r.ev == SEG_EV_GPU_KERNEL ? kernel_name(r.name) : r.aux;
        probe_emit_record(to_mono(r.start), r.ev, name, to_mono(r.end), r.b);
    }
    uint64_t off = atomic_load(&g_offclock);
    static uint64_t off_told;
    if (off != off_told) { /* buffers whose clock could not be told: said in the trace */
        static tpf_name on;
        if (!on) on = tpf_name_register("gpu.cupti_offclock_buffers");
        tpf_counter(on, (double)off);
        off_told = off;
    }
    size_t dropped = 0;
    if (g_cu.dropped && g_cu.dropped(ctx, stream, &dropped) == 0 && dropped) {
        uint64_t total = atomic_fetch_add(&g_dropped, dropped) + dropped;
        static tpf_name dn;
        if (!dn) dn = tpf_name_register("gpu.cupti_dropped");
        tpf_counter(dn, (double)total);
    }
    free(buf);
}

static struct {
    void *lib;
    int (*ctx_current)(void **ctx);
    int (*create)(void **ev, unsigned flags);
    int (*record)(void *ev, void *stream);
    int (*query)(void *ev);
    int (*elapsed)(float *ms, void *a, void *b);
    int state; /* 0 not tried, 1 ready, -1 none (no driver, no context) */
    int tries;
} g_cuda;

#define NEV 64u /* events in flight: a GPU this many boundaries behind skips some */
static struct {
    void *ev;
    uint64_t host_ns;
    int end;      /* a step's end (its begin is the slot before, if begin_ok) */
    int begin_ok; /* the step's begin event is the previous slot */
} g_evs[NEV];
static uint64_t g_ev_head, g_ev_tail; /* recorded, read back */
static uint64_t g_step_begin_ns, g_last_span_ns, g_last_span_host_ns;
static int g_began; /* the last boundary recorded was a begin, in slot g_ev_head - 1 */
static pthread_mutex_t g_step_lock = PTHREAD_MUTEX_INITIALIZER;

static void events_read(void);

static void at_exit(void)
{
    /* the last steps' events, where the GPU has reached them (a query:
     * never a wait; a driver already torn down answers an error) */
    if (g_cuda.state > 0 && pthread_mutex_trylock(&g_step_lock) == 0) {
        events_read();
        pthread_mutex_unlock(&g_step_lock);
    }
    if (g_cu.flush_all) g_cu.flush_all(1); /* forced: records still open too */
    if (g_dump) {
        pthread_mutex_lock(&g_dump_lock);
        fclose(g_dump);
        g_dump = NULL;
        pthread_mutex_unlock(&g_dump_lock);
    }
}

/* Directories of the objects already loaded (libcudart, libtorch_cuda...):
 * a pip-installed CUDA keeps libcupti beside them or in a sibling package. */
typedef struct find_ctx {
    char path[PATH_MAX];
    int found;
} find_ctx;

static int try_open(const char *path)
{
    if (access(path, R_OK) != 0) return 0;
    g_cu.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return g_cu.lib != NULL;
}

static const char *const cupti_names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so.11",
                                          "libcupti.so"};
#define NCUPTI (sizeof(cupti_names) / sizeof(cupti_names[0]))

static int try_dir(const char *dir, find_ctx *f)
{
    static const char *const rel[] = {"", "/../../cuda_cupti/lib", "/../cuda_cupti/lib",
                                      "/../extras/CUPTI/lib64"};
    for (size_t r = 0; r < sizeof(rel) / sizeof(rel[0]); r++)
        for (size_t i = 0; i < NCUPTI; i++) {
            if ((size_t)snprintf(f->path, sizeof(f->path), "%s%s/%s", dir, rel[r], cupti_names[i]) >=
                sizeof(f->path))
                continue;
            if (try_open(f->path)) return 1;
        }
    return 0;
}

static int each_object(struct dl_phdr_info *info, size_t sz, void *arg)
{
    find_ctx *f = arg;
    const char *n = info->dlpi_name;
    if (!n || !*n || f->found) return f->found;
    const char *slash = strrchr(n, '/');
    if (!slash || !(strstr(n, "cuda") || strstr(n, "torch") || strstr(n, "nvidia"))) return 0;
    char dir[PATH_MAX];
    size_t dl = (size_t)(slash - n);
    if (dl >= sizeof(dir)) return 0;
    memcpy(dir, n, dl);
    dir[dl] = 0;
    f->found = try_dir(dir, f);
    return f->found;
}

static const char *load_cupti(void)
{
    const char *want = getenv("TRAINPERF_CUPTI_LIB");
    if (want && *want) return try_open(want) ? NULL : "TRAINPERF_CUPTI_LIB cannot be loaded";
    for (size_t i = 0; i < NCUPTI && !g_cu.lib; i++) g_cu.lib = dlopen(cupti_names[i], RTLD_NOW | RTLD_LOCAL);
    find_ctx f = {.found = 0};
    if (!g_cu.lib) dl_iterate_phdr(each_object, &f);
    const char *home = getenv("CUDA_HOME");
    if (!g_cu.lib && home && *home) {
        char d[PATH_MAX];
        if ((size_t)snprintf(d, sizeof(d), "%s/lib64", home) < sizeof(d)) try_dir(d, &f);
    }
    if (!g_cu.lib) try_dir("/usr/local/cuda/lib64", &f);
    return g_cu.lib ? NULL : "libcupti not found (set TRAINPERF_CUPTI_LIB)";
}

#define SYM(field, name) (*(void **)&g_cu.field = dlsym(g_cu.lib, name))

static const char *take_cupti(void);

/* CONCURRENT_KERNEL, not KERNEL: KERNEL serialises the kernels.
 * TRAINPERF_CUPTI_KINDS (kernel,memcpy,memset,sync): fewer kinds */
static const struct {
    int kind;
    const char *name;
} kinds[] = {{CUPTI_KIND_CONCURRENT_KERNEL, "kernel"},
             {CUPTI_KIND_MEMCPY, "memcpy"},
             {CUPTI_KIND_MEMSET, "memset"},
             {CUPTI_KIND_SYNCHRONIZATION, "sync"}};

/* `--gpu-trace windows` (TRAINPERF_GPU_TRACE_MODE, set by `trainperf run`;
 * anything but "full" is windows): the kinds on only in the schedule's
 * windows (collect/gpuwin.h), driven by the probe's step hook below */
static int g_windows;
static gw g_win;

/* The kinds on (1) or off (0); how many calls CUPTI took. */
static int kinds_set(int on)
{
    const char *only = getenv("TRAINPERF_CUPTI_KINDS");
    int n = 0;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (only && *only && !strstr(only, kinds[i].name)) continue;
        if (on)
            n += g_cu.enable(kinds[i].kind) == 0;
        else if (g_cu.disable)
            n += g_cu.disable(kinds[i].kind) == 0;
    }
    return n;
}

static const char *start(void)
{
    const char *why = load_cupti();
    if (why) return why;
    if (!SYM(register_callbacks, "cuptiActivityRegisterCallbacks") ||
        !SYM(get_next, "cuptiActivityGetNextRecord") || !SYM(enable, "cuptiActivityEnable") ||
        !SYM(flush_all, "cuptiActivityFlushAll"))
        return "libcupti lacks the activity API";
    SYM(disable, "cuptiActivityDisable");
    SYM(flush_period, "cuptiActivityFlushPeriod");
    SYM(get_timestamp, "cuptiGetTimestamp");
    SYM(register_ts, "cuptiActivityRegisterTimestampCallback");
    SYM(dropped, "cuptiActivityGetNumDroppedRecords");
    SYM(get_version, "cuptiGetVersion");
    SYM(result_string, "cuptiGetResultString");
    return take_cupti();
}

/* The callbacks, our clock and our kinds: at the start, and again after a
 * script's torch.profiler window (Kineto registers its own callbacks and,
 * at the window's end, disables the kinds or tears CUPTI down). */
static const char *take_cupti(void)
{
    /* our clock before any kind is enabled (CUPTI's rule);
     * TRAINPERF_CUPTI_CLOCK=offset: CUPTI's own, put on ours by an offset
     * (what each costs a launch is measured by the GPU check) */
    const char *ck = getenv("TRAINPERF_CUPTI_CLOCK");
    int want_own = !(ck && strcmp(ck, "offset") == 0);
    g_own_clock = want_own && g_cu.register_ts && g_cu.register_ts(mono_clock) == 0;
    measure_offset();
    cures rc = g_cu.register_callbacks(on_request, on_complete);
    if (rc != 0) return "cuptiActivityRegisterCallbacks failed";
    /* windows: the kinds are on only in the schedule's windows; a resume
     * after a profiler's window finds them as the schedule left them */
    if (g_windows && !g_win.open) {
        kinds_set(0); /* as a profiler may have left them on */
        return NULL;
    }
    if (!kinds_set(1)) return "no CUPTI activity kind could be enabled";
    /* records reach the collector within a flush period */
    if (g_cu.flush_period) g_cu.flush_period(200);
    return NULL;
}

/* A script's torch.profiler is about to take CUPTI (the hook calls this
 * through ctypes, python/trainperf/_cuda.py): our buffers, full or not, come
 * to us now, not to the profiler's callbacks; the records of the window are
 * the profiler's. */
__attribute__((visibility("default"))) void trainperf_cupti_pause(void);
__attribute__((visibility("default"))) void trainperf_cupti_resume(void);

static _Atomic int g_state; /* 0 not started, 1 ours, 2 paused for a profiler */

void trainperf_cupti_pause(void)
{
    int ours = 1;
    if (!atomic_compare_exchange_strong(&g_state, &ours, 2)) return;
    g_cu.flush_all(1);
    mark("gpu.cupti paused: the script's torch.profiler records the GPU");
    tpf_mark(SEG_NAME_GPU_PAUSED); /* for the join, after what the flush gave us */
}

/* ... and has let it go: ours again. */
void trainperf_cupti_resume(void)
{
    int paused = 2;
    if (!atomic_compare_exchange_strong(&g_state, &paused, 1)) return;
    pthread_mutex_lock(&g_step_lock); /* the schedule's state, as the step hook leaves it */
    const char *why = take_cupti();
    pthread_mutex_unlock(&g_step_lock);
    char msg[120];
    snprintf(msg, sizeof(msg), "gpu.cupti resumed%s%s", why ? ": " : "", why ? why : "");
    mark(msg);
    tpf_mark(SEG_NAME_GPU_RESUMED);
}

/* ---- step boundaries: CUDA events, and the kernel-detail windows ----
 *
 * The probe (libtrainperf or the Python extension in this process) calls
 * trainperf_gpu_step at each step's begin and end, on the training thread,
 * once it found this library (probe.c). Each call records one CUDA event on
 * the NULL stream (never a synchronisation: cuEventRecord only queues it;
 * on the legacy NULL stream it completes once the work of every blocking
 * stream queued before it ran) and reads back, with cuEventQuery, the
 * events the GPU has reached since: a step whose begin and end events both
 * completed gets its GPU time (cuEventElapsedTime) as a SEG_EV_GPU_STEP
 * record. The driver is reached with dlsym at run time, never linked. At
 * each step end the window schedule says whether to switch the kinds. */
#define CUSYM(field, name) (*(void **)&g_cuda.field = dlsym(g_cuda.lib, name))

/* The driver's event calls, and NEV events, on the first boundary with a
 * current context (a step before CUDA started has none: tried again, up to
 * 1000 boundaries). TRAINPERF_CUDA_LIB: another driver library (tests). */
static int cuda_ready(void)
{
    if (g_cuda.state) return g_cuda.state > 0;
    const char *off = getenv("TRAINPERF_GPU_EVENTS"); /* 0: no events (an escape hatch) */
    if (off && strcmp(off, "0") == 0) {
        g_cuda.state = -1;
        return 0;
    }
    if (!g_cuda.lib) {
        const char *want = getenv("TRAINPERF_CUDA_LIB");
        g_cuda.lib = dlopen(want && *want ? want : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!g_cuda.lib || !CUSYM(ctx_current, "cuCtxGetCurrent") || !CUSYM(create, "cuEventCreate") ||
            !CUSYM(record, "cuEventRecord") || !CUSYM(query, "cuEventQuery") ||
            !(CUSYM(elapsed, "cuEventElapsedTime_v2") || CUSYM(elapsed, "cuEventElapsedTime"))) {
            g_cuda.state = -1;
            mark("gpu.events unavailable: no CUDA driver event calls");
            return 0;
        }
    }
    void *ctx = NULL;
    if (g_cuda.ctx_current(&ctx) != 0 || !ctx) {
        if (++g_cuda.tries >= 1000) g_cuda.state = -1;
        return 0;
    }
    for (unsigned i = 0; i < NEV; i++)
        if (g_cuda.create(&g_evs[i].ev, 0) != 0) { /* CU_EVENT_DEFAULT: timed */
            g_cuda.state = -1;
            mark("gpu.events unavailable: cuEventCreate failed");
            return 0;
        }
    g_cuda.state = 1;
    mark("gpu.events on");
    return 1;
}

/* The events the GPU has reached, in order; stops at the first it has not
 * (CUDA_ERROR_NOT_READY). A step's end with its begin: a GPU_STEP record. */
static void events_read(void)
{
    while (g_ev_tail < g_ev_head) {
        unsigned k = (unsigned)(g_ev_tail % NEV);
        if (g_cuda.query(g_evs[k].ev) != 0) return;
        if (g_evs[k].end && g_evs[k].begin_ok) {
            unsigned b = (unsigned)((g_ev_tail - 1) % NEV);
            float ms = 0;
            if (g_cuda.elapsed(&ms, g_evs[b].ev, g_evs[k].ev) == 0 && ms >= 0) {
                uint64_t ns = (uint64_t)((double)ms * 1e6);
                probe_emit_record(g_evs[b].host_ns, SEG_EV_GPU_STEP, 0, g_evs[k].host_ns, ns);
                g_last_span_ns = ns;
                g_last_span_host_ns = g_evs[k].host_ns - g_evs[b].host_ns;
            }
        }
        g_ev_tail++;
    }
}

/* One boundary's event: none when NEV are still in flight. */
static void events_record(int end, uint64_t now)
{
    events_read();
    /* NEV - 1: the slot before the oldest unread one may be the begin its end needs */
    if (g_ev_head - g_ev_tail >= NEV - 1 || (end && !g_began)) {
        g_began = 0;
        return;
    }
    unsigned k = (unsigned)(g_ev_head % NEV);
    if (g_cuda.record(g_evs[k].ev, NULL) != 0) {
        g_began = 0;
        return;
    }
    g_evs[k].host_ns = now;
    g_evs[k].end = end;
    g_evs[k].begin_ok = end && g_began;
    g_ev_head++;
    g_began = !end;
}

/* The schedule at a step's end: the kinds switched, and the switch marked
 * for the join (its time: after the switch on, before the switch off, so
 * that a step inside a window had the kinds on all through). */
static void window_step(uint64_t now)
{
    uint64_t step = g_step_begin_ns && now > g_step_begin_ns ? now - g_step_begin_ns : 0;
    double share = g_last_span_host_ns ? (double)g_last_span_ns / (double)g_last_span_host_ns : -1;
    int a = gw_step(&g_win, now, step, share);
    if (a == GW_NONE) return;
    /* while a script's profiler holds CUPTI the kinds are its own: the
     * resume sets ours as the schedule says then (take_cupti) */
    int ours = atomic_load(&g_state) == 1;
    if (a == GW_CLOSE && ours && !kinds_set(0)) {
        /* CUPTI would not disable them: the window stays open, the run is traced in full */
        g_windows = 0;
        mark("gpu.cupti: the kinds cannot be disabled; full trace");
        return;
    }
    if (a == GW_CLOSE) tpf_mark(SEG_NAME_GPU_DETAIL_OFF);
    if (a == GW_OPEN && ours) kinds_set(1);
    if (a == GW_OPEN) tpf_mark(SEG_NAME_GPU_DETAIL_ON);
}

__attribute__((visibility("default"))) void trainperf_gpu_step(int end);

void trainperf_gpu_step(int end)
{
    /* never waits: a second training thread's boundary is skipped */
    if (pthread_mutex_trylock(&g_step_lock) != 0) return;
    uint64_t now = clk_mono_ns();
    if (cuda_ready()) events_record(end, now);
    if (end && g_windows) window_step(now);
    if (!end) g_step_begin_ns = now;
    pthread_mutex_unlock(&g_step_lock);
}

/* Called by the CUDA driver, once, at the program's CUDA initialisation. */
__attribute__((visibility("default"))) int InitializeInjection(void);

int InitializeInjection(void)
{
    const char *rd = getenv("TRAINPERF_RUN_DIR");
    if (!rd || !*rd) return 1; /* not under trainperf: nothing to do */
    clk_prefer_mono();
    probe_set_seg_tag("gpu");
    const char *dump = getenv("TRAINPERF_CUPTI_DUMP");
    if (dump && *dump) g_dump = fopen(dump, "we");
    const char *mode = getenv("TRAINPERF_GPU_TRACE_MODE");
    g_windows = !(mode && strcmp(mode, "full") == 0);
    gw_init(&g_win, NULL);
    const char *why = start();
    atexit(at_exit); /* the last events; CUPTI's last records */
    if (!why && g_windows && !g_cu.disable) g_windows = 0; /* an old CUPTI: no windows, full */
    char msg[120];
    uint32_t v = 0;
    if (!why && g_cu.get_version) g_cu.get_version(&v);
    if (why)
        snprintf(msg, sizeof(msg), "gpu.cupti unavailable: %s", why);
    else
        snprintf(msg, sizeof(msg), "gpu.cupti on: api %u%s, %s", v, g_own_clock ? "" : ", clock offset",
                 g_windows ? "windows" : "full");
    if (!why) atomic_store(&g_state, 1);
    mark(msg);
    if (!why && g_windows) tpf_mark(SEG_NAME_GPU_DETAIL_ON); /* the first window, open from here */
    if (why) { /* no kernel detail at all: the events' rows only, never a row of zeros */
        g_windows = 0;
        tpf_mark(SEG_NAME_GPU_DETAIL_OFF);
    }
    return 1;
}
