/* Trace analysis engine (see trace.h).
 *
 * Pass A streams the file and turns each complete event into a 40-byte
 * record; records go into a fixed-size chunk that is sorted and spilled to an
 * unlinked temporary file when full. Pass B merges the sorted runs back in
 * time order (k-way heap), so every analysis is a sweep with O(1) state per
 * stream/thread/type: unions of intervals, per-stream gaps, the CPU call
 * stack per thread. Kineto files are not in time order (kernels trail their
 * launches by up to the whole trace), which is why the spill exists. Only the
 * name table, the step list, the correlation map and the per-stream/thread
 * states stay in memory; all have caps. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "trace/trace_extra.h"
#include "trace/trace_int.h"
#include "trace/trace_json.h"
#include "trainperf.h"
#include "util/afile.h"

#define CHUNK_RECS 65536                 /* records sorted in memory per run */
#define MERGE_RECS 65536                 /* read buffers of all runs together */
#define MAX_NAMES (4u << 20)
#define MAX_NAME_BYTES ((size_t)512 << 20)
#define MAX_STEPS (1u << 20)
#define MAX_THREADS 65536
#define MAX_STACK 1024
#define MAX_STREAMS 4096
#define CORR_CAP (1u << 18)              /* pending launches kept for joining */
#define HTA_KERNEL_WAIT_NS 30000         /* HTA's consecutive_kernel_delay, 30 us */
#define LAUNCH_CPU_CUTOFF_NS 50000       /* HTA runtime_cutoff */
#define LAUNCH_DELAY_CUTOFF_NS 100000    /* HTA launch_delay_cutoff */

enum {
    C_OTHER = 0, C_CPU_OP, C_USER_ANN, C_RUNTIME, C_DRIVER, C_KERNEL, C_MEMCPY, C_MEMSET,
    C_GPU_ANN, C_PYTHON, C_MTIA, C_SYNC,
    C_MEMEV, /* a "[memory]" instant event of profile_memory (no dur; made a record) */
    C_COUNTER, /* one series of a counter event (ph "C"): thread = series, corr = value bits */
    C_COPYBW /* a memory copy's bandwidth, beside its own record: name = kind, thread = GB/s as float bits */
};

/* F_SU32: the stream was above INT32_MAX and fits 32 bits unsigned (CUPTI
 * writes "Context Sync" on stream 4294967295, -1 as uint32; HTA keeps it). */
enum { F_TSFRAC = 1, F_STEP = 2, F_SU32 = 4 };

typedef struct trec {
    int64_t ts, dur, corr;
    uint32_t name, thread;
    int32_t stream;
    uint8_t cat, flags;
    int16_t rdelta;         /* --compat hta: HTA's rounded duration minus dur */
} trec;

static inline int64_t rec_stream(const trec *t)
{
    return (t->flags & F_SU32) ? (int64_t)(uint32_t)t->stream : (int64_t)t->stream;
}

/* Per distinct name. */
typedef struct nstat {
    uint32_t off, len, hash;
    int8_t ktype;           /* -1 = not classified yet */
    uint8_t launch;         /* a launch API (default / HTA sets) */
    int8_t sync;            /* "Event Sync"/"Context Sync"; -1 = not looked at */
    uint64_t kcount;
    int64_t ksum, kmin, kmax;
    double kmean, km2;      /* Welford, for the standard deviation */
    uint64_t ccount;
    int64_t ctotal, cself;
    uint8_t is_ann;         /* seen as a user_annotation */
    int8_t qlaunch;         /* enqueues work for the queue length; -1 = not looked at */
    uint64_t akern, gann_n; /* kernels launched under it; gpu_user_annotation ranges */
    int64_t agpu, gann;
    uint64_t mcount;        /* memory copies/sets with a byte count */
    int64_t mbytes, mtime;
    double mpeak;           /* GB/s (bytes per ns) of the fastest */
} nstat;

typedef struct strtab {
    buf arena;
    nstat *v;
    uint32_t n, vcap;
    uint32_t *slots;        /* id+1, 0 = empty */
    uint32_t nslots;
} strtab;

typedef struct tstep {
    long num;
    int64_t ts, dur;
    uint32_t name;
    int32_t rdelta;
} tstep;

typedef struct thread_key {
    int64_t pid, tid;
} thread_key;

typedef struct frame {
    int64_t ts, end, dur, child;
    uint32_t name, nchild;
    /* A first child of the same name waits here: torch's key_averages()
     * drops an only child named like its parent (_remove_dup_nodes). */
    int pend;
    int64_t pend_dur, pend_child;
    uint8_t cat;
} frame;

typedef struct tstack {
    frame *f;
    uint32_t n, cap;
} tstack;

/* --compat hta's label sweep: HTA sums +type at each merged interval's start
 * and -type at its end and labels the time by the bits of the running sum.
 * A merged interval that ends before it starts (HTA's rounding turns a
 * sub-microsecond kernel into dur = -1) subtracts its type over [end, start),
 * which shows as e.g. "COMPUTATION overlapping COMMUNICATION" under a memory
 * copy. Such a region lies just behind the sweep's frontier, so the last
 * slices are kept to be relabelled. */
#define HIST_N 32
typedef struct hslice {
    int64_t a, b;
    int r;                  /* running sum over [a, b) */
} hslice;

typedef struct sweep_hist {
    hslice s[HIST_N];
    unsigned head, n;       /* ring: newest at head - 1 */
    int64_t th[8];          /* time per running sum 1..7 (HTA's labels) */
} sweep_hist;

/* Union/overlap sweep over intervals arriving sorted by start, with HTA's
 * merge rule (a new group starts when ts > running max end). */
typedef struct sweep {
    sweep_hist *h;          /* only for --compat hta's whole-trace sweep */
    int any;
    int64_t first, last_end;
    int has[4];
    int64_t s[4], e[4];
    int64_t msum[4];        /* merged length per type */
    int all_has;
    int64_t all_s, all_e, all_sum;
    int64_t frontier;
    int64_t t[16];          /* time per active-type mask */
} sweep;

typedef struct corr_ent {
    int64_t corr;           /* -1 = empty */
    int64_t ts, dur;
    uint32_t name;
    int32_t step;
    uint8_t kept, used;
    uint8_t call;           /* a runtime/driver call (not a cuda_sync row of the same id) */
    uint32_t ann;           /* innermost user annotation at the launch: name id + 1 */
} corr_ent;

typedef struct stream_st {
    int64_t stream;
    int used, has_prev;
    int64_t prev_end;
    uint64_t kernels;
    int64_t host, kwait, other;
    seq_ring ring;
    queue_st q;
} stream_st;

typedef struct run_rd {
    long off;               /* next record's file offset (records) */
    long left;              /* records left in the run on disk */
    trec *b;
    size_t n, i, cap;
} run_rd;

typedef struct rankst {
    const char *path;
    trace_meta meta;
    strtab names;
    thread_key *threads;
    uint32_t nthreads;
    uint32_t *tslots;
    uint32_t ntslots;
    tstep *steps;
    uint32_t nsteps, stepcap;
    trec *chunk;
    size_t nchunk;
    FILE *spill;
    long *runs;             /* run lengths in records */
    size_t nruns, runcap;
    uint64_t nrec;
    int any_tsfrac;
    int compat;             /* opts->compat_hta */
    mem_st mem;             /* profile_memory: per device */
    uint64_t badnum;        /* events dropped for a time out of range */
    uint64_t negdur;        /* complete events with a negative duration (kept) */
    tsset ts;               /* time series: the bins are set when pass A is done */
    int has_span;
    int64_t tmin, tmax;     /* first start, last end of the records */
    uint64_t counter_events, counter_recs;
    struct rankst *dsink;   /* --counters: the queue/bandwidth changes go here */
    int has_gpu_thread;
    uint32_t gpu_thread;    /* (pid, tid) of the first device event: bandwidth counters' pid */
    char last_cat[64];
    size_t last_cat_len;
    int last_code;
    int rc;
    char *err;
    size_t errlen;
} rankst;

/* Sums saturate: hostile traces must not overflow (UB) the accumulators. */
static inline int64_t sadd(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* Times we accept: 2^61 ns is 73 years past the epoch, 2^44 ns 4.9 hours for
 * one event. Beyond that an event is garbage and is skipped, so interval
 * arithmetic (ts + dur, gaps) cannot overflow. */
#define TS_LIMIT ((int64_t)1 << 61)
#define DUR_LIMIT ((int64_t)1 << 44)

/* ---- small tables ------------------------------------------------------ */

static uint32_t fnv1a(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static const char *st_str(const strtab *t, uint32_t id) { return t->arena.data + t->v[id].off; }

static int st_grow_slots(strtab *t)
{
    uint32_t ns = t->nslots ? t->nslots * 2 : 4096;
    uint32_t *sl = calloc(ns, sizeof(*sl));
    if (!sl) return TPF_ENOMEM;
    for (uint32_t i = 0; i < t->n; i++) {
        uint32_t j = t->v[i].hash & (ns - 1);
        while (sl[j]) j = (j + 1) & (ns - 1);
        sl[j] = i + 1;
    }
    free(t->slots);
    t->slots = sl;
    t->nslots = ns;
    return 0;
}

static int st_intern(strtab *t, const char *s, size_t n, uint32_t *id)
{
    if ((t->n + 1) * 2 > t->nslots) {
        int rc = st_grow_slots(t);
        if (rc) return rc;
    }
    uint32_t h = fnv1a(s, n);
    uint32_t j = h & (t->nslots - 1);
    while (t->slots[j]) {
        nstat *e = &t->v[t->slots[j] - 1];
        if (e->hash == h && e->len == n && memcmp(t->arena.data + e->off, s, n) == 0) {
            *id = t->slots[j] - 1;
            return 0;
        }
        j = (j + 1) & (t->nslots - 1);
    }
    if (t->n >= MAX_NAMES || t->arena.len + n + 1 > MAX_NAME_BYTES) return TPF_ETOOBIG;
    if (t->n == t->vcap) {
        uint32_t nc = t->vcap ? t->vcap * 2 : 1024;
        nstat *nv = realloc(t->v, (size_t)nc * sizeof(*nv));
        if (!nv) return TPF_ENOMEM;
        t->v = nv;
        t->vcap = nc;
    }
    size_t off = t->arena.len;
    if (buf_append(&t->arena, s, n) || buf_putc(&t->arena, '\0')) return t->arena.err;
    nstat *e = &t->v[t->n];
    memset(e, 0, sizeof(*e));
    e->off = (uint32_t)off;
    e->len = (uint32_t)n;
    e->hash = h;
    e->ktype = -1;
    e->sync = -1;
    e->qlaunch = -1;
    e->kmin = INT64_MAX;
    e->kmax = INT64_MIN;
    t->slots[j] = t->n + 1;
    *id = t->n++;
    return 0;
}

static void st_free(strtab *t)
{
    buf_free(&t->arena);
    free(t->v);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

static int thread_intern(rankst *r, int64_t pid, int64_t tid, uint32_t *id)
{
    if ((r->nthreads + 1) * 2 > r->ntslots) {
        uint32_t ns = r->ntslots ? r->ntslots * 2 : 64;
        uint32_t *sl = calloc(ns, sizeof(*sl));
        thread_key *nk = realloc(r->threads, (size_t)(ns / 2) * sizeof(*nk));
        if (!sl || !nk) {
            free(sl);
            if (nk) r->threads = nk;
            return TPF_ENOMEM;
        }
        r->threads = nk;
        for (uint32_t i = 0; i < r->nthreads; i++) {
            uint32_t h = fnv1a((const char *)&r->threads[i], sizeof(thread_key)) & (ns - 1);
            while (sl[h]) h = (h + 1) & (ns - 1);
            sl[h] = i + 1;
        }
        free(r->tslots);
        r->tslots = sl;
        r->ntslots = ns;
    }
    thread_key k = {pid, tid};
    uint32_t h = fnv1a((const char *)&k, sizeof(k)) & (r->ntslots - 1);
    while (r->tslots[h]) {
        thread_key *e = &r->threads[r->tslots[h] - 1];
        if (e->pid == pid && e->tid == tid) {
            *id = r->tslots[h] - 1;
            return 0;
        }
        h = (h + 1) & (r->ntslots - 1);
    }
    if (r->nthreads >= MAX_THREADS) return TPF_ETOOBIG;
    r->threads[r->nthreads] = k;
    r->tslots[h] = r->nthreads + 1;
    *id = r->nthreads++;
    return 0;
}

/* ---- classification ---------------------------------------------------- */

static int has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static int cat_code(const char *c)
{
    static const struct { const char *s; int code; } tab[] = {
        {"cpu_op", C_CPU_OP}, {"user_annotation", C_USER_ANN}, {"cuda_runtime", C_RUNTIME},
        {"cuda_driver", C_DRIVER}, {"kernel", C_KERNEL}, {"Kernel", C_KERNEL},
        {"gpu_memcpy", C_MEMCPY}, {"Memcpy", C_MEMCPY}, {"gpu_memset", C_MEMSET},
        {"Memset", C_MEMSET}, {"gpu_user_annotation", C_GPU_ANN}, {"python_function", C_PYTHON},
        {"mtia_ccp_events", C_MTIA}, {"cuda_sync", C_SYNC},
    };
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
        if (strcmp(c, tab[i].s) == 0) return tab[i].code;
    return C_OTHER;
}

/* "^nccl.*Kernel" */
static int nccl_kernel_re(const char *n) { return has_prefix(n, "nccl") && strstr(n + 4, "Kernel"); }

/* HTA 0.5.0's get_kernel_type (utils.py), regex by regex. */
static int ktype_hta(const char *n)
{
    if (nccl_kernel_re(n)) return KT_COMM;
    if (has_prefix(n, "Memcpy") || has_prefix(n, "Memset") || has_prefix(n, "dma")) return KT_MEM;
    if (!(strstr(n, "Memcpy") || has_prefix(n, "Memset") || strstr(n, "Sync"))) return KT_COMP;
    return KT_OTHER;
}

static int contains_any(const char *n, const char *const *subs, size_t k)
{
    for (size_t i = 0; i < k; i++)
        if (strstr(n, subs[i])) return 1;
    return 0;
}

static int prefix_any(const char *n, const char *const *pre, size_t k)
{
    for (size_t i = 0; i < k; i++)
        if (has_prefix(n, pre[i])) return 1;
    return 0;
}

/* HTA 0.6 (traceinsight, hta/common/types.py): communication is checked
 * first and takes every ^hip name (so hipMemcpy counts as communication). */
static int ktype_hta06(const char *n)
{
    static const char *const comm_pre[] = {"nccl", "hip", "hccl"};
    static const char *const mem_pre[] = {"Memcpy", "hipMemcpy", "Memset", "hipMemset", "dma"};
    static const char *const notcomp_pre[] = {
        "nccl", "Stream Wait Event", "runFunction", "hip", "job_exe", "packet", "pe_exe",
        "cpum_exe_subgraph", "hccl", "collective_subgraph_execution",
    };
    static const char *const notcomp_sub[] = {"Memcpy", "Memset", "dma", "Sync"};
    if (prefix_any(n, comm_pre, 3) || strstr(n, "ncclKernel")) return KT_COMM;
    if (prefix_any(n, mem_pre, 5)) return KT_MEM;
    int launch = has_prefix(n, "cuda") && strstr(n + 4, "LaunchKernel"); /* ^cuda.*LaunchKernel */
    if (!prefix_any(n, notcomp_pre, sizeof(notcomp_pre) / sizeof(notcomp_pre[0])) &&
        !contains_any(n, notcomp_sub, 4) && !launch)
        return KT_COMP;
    return KT_OTHER;
}

/* Default: current NCCL/RCCL names, memory by category as well as name. */
static int ktype_default(const char *n, int cat)
{
    if (cat == C_MEMCPY || cat == C_MEMSET || has_prefix(n, "Memcpy") || has_prefix(n, "Memset") ||
        has_prefix(n, "dma"))
        return KT_MEM;
    if (has_prefix(n, "nccl") || has_prefix(n, "rccl") || has_prefix(n, "hccl") ||
        strstr(n, "ncclKernel") || strstr(n, "ncclDevKernel"))
        return KT_COMM;
    if (cat == C_KERNEL || cat == C_MTIA) return KT_COMP;
    return KT_OTHER;
}

static int is_launch_name(const char *n, int hta)
{
    static const char *const hta_names[] = {
        "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync",
        "runFunction - job_prep_and_submit_for_execution",
    };
    for (size_t i = 0; i < sizeof(hta_names) / sizeof(hta_names[0]); i++)
        if (strcmp(n, hta_names[i]) == 0) return 1;
    if (hta) return 0;
    return has_prefix(n, "cuLaunchKernel") || has_prefix(n, "cudaLaunchKernel") ||
           has_prefix(n, "cudaLaunchCooperativeKernel") || has_prefix(n, "hipLaunchKernel") ||
           has_prefix(n, "hipExtLaunchKernel") || has_prefix(n, "hipModuleLaunchKernel") ||
           has_prefix(n, "hipExtModuleLaunchKernel") || strcmp(n, "hipMemcpyAsync") == 0 ||
           strcmp(n, "hipMemsetAsync") == 0 || strcmp(n, "cudaMemcpy") == 0 ||
           strcmp(n, "cudaMemset") == 0 || has_prefix(n, "cuMemcpy") || has_prefix(n, "cuMemset");
}

/* Runtime calls that never put work on the device (no CUPTI activity
 * carries their correlation): not worth remembering for the join. */
static int no_device_work(const char *n)
{
    static const char *const pre[] = {
        "cudaOccupancy", "cudaFuncSetAttribute", "cudaFuncGetAttributes", "cudaEventQuery",
        "cudaEventRecord", "cudaEventCreate", "cudaEventDestroy", "cudaEventElapsedTime",
        "cudaStreamGetCaptureInfo", "cudaStreamIsCapturing", "cudaStreamGetPriority",
        "cudaDeviceGetStreamPriorityRange", "cudaPeekAtLastError", "cudaGetLastError",
        "cudaPointerGetAttributes", "cudaDeviceGetAttribute", "cudaGetDevice", "cudaSetDevice",
        "cudaStreamQuery", "cudaThreadExchangeStreamCaptureMode", "cudaGetFuncBySymbol",
        "cudaGetDriverEntryPoint", "INVALID",
    };
    return prefix_any(n, pre, sizeof(pre) / sizeof(pre[0]));
}

/* "ProfilerStep#12" (HTA: ProfilerStep\s*#\s*(\d+)) */
static int step_number(const char *n, long *num)
{
    const char *p = strstr(n, "ProfilerStep");
    if (!p) return 0;
    p += 12;
    while (*p == ' ' || *p == '\t') p++;
    if (*p != '#') return 0;
    p++;
    while (*p == ' ' || *p == '\t') p++;
    if (*p < '0' || *p > '9') return 0;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno) return 0;
    *num = v;
    return 1;
}

long trace_rank_from_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (const char *p = base; (p = strstr(p, "rank")) != NULL; p += 4) {
        const char *q = p + 4;
        if (*q == '-' || *q == '_') q++;
        if (*q >= '0' && *q <= '9') {
            long v = strtol(q, NULL, 10);
            if (v >= 0 && v < (1L << 30)) return v;
        }
    }
    return -1;
}

/* ---- pass A: parse and spill -------------------------------------------- */

static int rec_cmp(const void *a, const void *b)
{
    const trec *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->dur != y->dur) return x->dur > y->dur ? -1 : 1; /* parents first */
    return 0;
}

static int spill_chunk(rankst *r)
{
    if (!r->nchunk) return 0;
    qsort(r->chunk, r->nchunk, sizeof(trec), rec_cmp);
    if (!r->spill) {
        const char *dir = getenv("TMPDIR");
        char tmpl[4096];
        snprintf(tmpl, sizeof(tmpl), "%s/trainperf-spill-XXXXXX", dir && *dir ? dir : "/tmp");
        int fd = mkstemp(tmpl);
        if (fd < 0) return TPF_EIO;
        unlink(tmpl); /* gone when closed, whatever happens */
        r->spill = fdopen(fd, "w+b");
        if (!r->spill) {
            close(fd);
            return TPF_EIO;
        }
    }
    if (fwrite(r->chunk, sizeof(trec), r->nchunk, r->spill) != r->nchunk) return TPF_EIO;
    if (r->nruns == r->runcap) {
        size_t nc = r->runcap ? r->runcap * 2 : 64;
        long *nr = realloc(r->runs, nc * sizeof(*nr));
        if (!nr) return TPF_ENOMEM;
        r->runs = nr;
        r->runcap = nc;
    }
    r->runs[r->nruns++] = (long)r->nchunk;
    r->nchunk = 0;
    return 0;
}

static inline void span_add(rankst *r, int64_t a, int64_t e)
{
    if (e < a) e = a;
    if (!r->has_span || a < r->tmin) r->tmin = a;
    if (!r->has_span || e > r->tmax) r->tmax = e;
    r->has_span = 1;
}

static int push_rec(rankst *r, const trec *t)
{
    r->chunk[r->nchunk++] = *t;
    r->nrec++;
    if (r->nchunk == CHUNK_RECS) return spill_chunk(r);
    return 0;
}

/* A counter event (ph "C"): each numeric arg is a sample of one series,
 * named "name", "name (id N)", and ": key" when the key is not the name,
 * per pid (Chrome keys a counter track by pid, name and id). */
static int on_counter(rankst *r, const trace_ev *ev)
{
    if (!(ev->has & TEV_TS) || !ev->ncargs) return 0;
    if (ev->ts_ns > TS_LIMIT || ev->ts_ns < -TS_LIMIT) {
        r->badnum++;
        return 0;
    }
    r->counter_events++;
    span_add(r, ev->ts_ns, ev->ts_ns);
    const char *nm = (ev->has & TEV_NAME) ? ev->name : "";
    int64_t pid = (ev->has & TEV_PID) ? ev->pid : -1;
    for (int i = 0; i < ev->ncargs; i++) {
        char label[512];
        int n = snprintf(label, sizeof(label), "%.200s", nm);
        if (ev->has & TEV_ID) n += snprintf(label + n, sizeof(label) - (size_t)n, " (id %lld)", (long long)ev->id);
        if (strcmp(ev->cargs[i].key, nm) != 0)
            n += snprintf(label + n, sizeof(label) - (size_t)n, "%s%s", nm[0] ? ": " : "", ev->cargs[i].key);
        trec t;
        memset(&t, 0, sizeof(t));
        int rc = st_intern(&r->names, label, strlen(label), &t.name);
        if (rc) return rc;
        tseries *se = ts_get(&r->ts, TS_COUNTER, pid, t.name);
        if (!se) {
            r->ts.dropped++;
            continue;
        }
        t.ts = ev->ts_ns;
        /* samples of one time keep the file's order (the sort puts the
         * longer first): the last one written is the value that holds */
        t.dur = -(int64_t)++r->counter_recs;
        t.stream = -1;
        t.cat = C_COUNTER;
        t.thread = (uint32_t)(se - r->ts.v);
        memcpy(&t.corr, &ev->cargs[i].v, sizeof(double));
        if ((rc = push_rec(r, &t))) return rc;
    }
    return 0;
}

/* HTA's kind of a memory copy (get_memory_kernel_type): "Memset", the first
 * 11 characters of a Memcpy ("Memcpy HtoD"), else "Memcpy Unknown". */
static int copy_kind(rankst *r, const char *n, uint32_t *id)
{
    if (strncmp(n, "Memset", 6) == 0) return st_intern(&r->names, "Memset", 6, id);
    if (strncmp(n, "Memcpy", 6) != 0) return st_intern(&r->names, "Memcpy Unknown", 14, id);
    size_t l = strlen(n);
    return st_intern(&r->names, n, l < 11 ? l : 11, id);
}

/* A "[memory]" event: remembered for the timeline as a zero-length record
 * (corr = bytes, rdelta = device), so the sweep sees it in time order. */
static int on_memory(rankst *r, const trace_ev *ev)
{
    if (ev->ts_ns > TS_LIMIT || ev->ts_ns < -TS_LIMIT) {
        r->badnum++;
        return 0;
    }
    int64_t type = ev->devtype, id = (ev->has & TEV_DEV) ? ev->dev : -1;
    if (type < 0 || type > 127 || id < -1 || id > 254) type = 127, id = -1;
    int64_t key = (type << 8) | (id + 1);
    int64_t bytes = (ev->has & TEV_BYTES) ? ev->bytes : 0;
    mem_seen(&r->mem, key, ev->ts_ns, bytes, ev->mem_alloc, ev->mem_reserved);
    span_add(r, ev->ts_ns, ev->ts_ns);
    trec t;
    memset(&t, 0, sizeof(t));
    t.ts = ev->ts_ns;
    t.corr = bytes;
    t.stream = -1;
    t.cat = C_MEMEV;
    t.rdelta = (int16_t)key;
    int rc = st_intern(&r->names, "[memory]", 8, &t.name);
    if (!rc)
        rc = thread_intern(r, (ev->has & TEV_PID) ? ev->pid : -1, (ev->has & TEV_TID) ? ev->tid : -1, &t.thread);
    if (rc) return rc;
    r->chunk[r->nchunk++] = t;
    r->nrec++;
    if (r->nchunk == CHUNK_RECS) return spill_chunk(r);
    return 0;
}

static int on_event(void *ud, const trace_ev *ev)
{
    rankst *r = ud;
    int rc;
    if (!(ev->has & TEV_TS) || (ev->has & TEV_TS_FRAC)) r->any_tsfrac = 1;
    /* HTA keeps rows that have both dur and cat, minus cat "Trace"; so do we. */
    if (ev->has & TEV_BADNUM) {
        r->badnum++; /* said in the result: a vanished event is never silent */
        return 0;
    }
    if (ev->ph == 'C') return on_counter(r, ev);
    if ((ev->has & TEV_MEM) && (ev->has & TEV_TS) && (ev->has & TEV_NAME) && strcmp(ev->name, "[memory]") == 0)
        return on_memory(r, ev);
    if (!(ev->has & TEV_DUR) || !(ev->has & TEV_CAT) || !(ev->has & TEV_TS)) return 0;
    if (ev->ts_ns > TS_LIMIT || ev->ts_ns < -TS_LIMIT || ev->dur_ns > DUR_LIMIT || ev->dur_ns < -DUR_LIMIT) {
        r->badnum++;
        return 0;
    }
    /* Categories repeat: remember the last one instead of comparing names. */
    if (ev->cat_len != r->last_cat_len || memcmp(ev->cat, r->last_cat, ev->cat_len) != 0) {
        if (ev->cat_len < sizeof(r->last_cat)) {
            memcpy(r->last_cat, ev->cat, ev->cat_len);
            r->last_cat_len = ev->cat_len;
        } else {
            r->last_cat_len = (size_t)-1;
        }
        r->last_code = strcmp(ev->cat, "Trace") == 0 ? -1 : cat_code(ev->cat);
    }
    if (r->last_code < 0) return 0;
    trec t;
    memset(&t, 0, sizeof(t));
    t.ts = ev->ts_ns;
    t.dur = ev->dur_ns;
    if (t.dur < 0) r->negdur++; /* kept; said in a warning */
    t.corr = (ev->has & TEV_CORR) ? ev->corr : -1;
    t.stream = -1;
    if ((ev->has & TEV_STREAM) && ev->stream >= INT32_MIN && ev->stream <= INT32_MAX) {
        t.stream = (int32_t)ev->stream;
    } else if ((ev->has & TEV_STREAM) && ev->stream > INT32_MAX && ev->stream <= (int64_t)UINT32_MAX) {
        t.stream = (int32_t)(uint32_t)ev->stream;
        t.flags |= F_SU32;
    }
    if (r->compat) {
        /* HTA's rounding, from the literals as pandas holds them (one
         * rounding, not ns -> double -> us): ts = ceil(ts), end = floor(ts +
         * dur). A fractional ts means the whole file is rounded, so the
         * rounded ts can stand; an integer ts is exact either way, and only
         * the duration differs, kept as a delta for when the file is. */
        double c = ceil(ev->ts_us), f = floor(ev->ts_us + ev->dur_us);
        if (fabs(c) < 9e15 && fabs(f) < 9e15) {
            int64_t rts = (int64_t)c * 1000, rend = (int64_t)f * 1000;
            if (ev->has & TEV_TS_FRAC) {
                t.ts = rts;
                t.dur = rend - rts;
            } else {
                int64_t d = rend - rts - t.dur;
                t.rdelta = (int16_t)(d < -32768 ? -32768 : d > 32767 ? 32767 : d);
            }
        }
    }
    t.cat = (uint8_t)r->last_code;
    if (ev->has & TEV_TS_FRAC) t.flags |= F_TSFRAC;
    const char *nm = (ev->has & TEV_NAME) ? ev->name : "";
    size_t nl = (ev->has & TEV_NAME) ? ev->name_len : 0;
    if ((rc = st_intern(&r->names, nm, nl, &t.name))) return rc;
    span_add(r, t.ts, t.ts + t.dur);
    trec bw;
    bw.cat = 0;
    if ((t.cat == C_MEMCPY || t.cat == C_MEMSET) &&
        ((ev->has & TEV_MEMBW) || ((ev->has & TEV_BYTES) && ev->bytes >= 0 && t.dur > 0))) {
        /* Bandwidth over time, from a record of its own that the sweep sees
         * in time order: Kineto's figure (from the exact duration) when it
         * wrote one, else bytes / dur. A copy of 0 us lasts 1 us (HTA). */
        float gbs = (float)((ev->has & TEV_MEMBW) ? ev->mem_bw : (double)ev->bytes / (double)t.dur);
        memset(&bw, 0, sizeof(bw));
        bw.ts = t.ts;
        bw.dur = t.dur > 0 ? t.dur : 1000;
        bw.corr = t.corr;
        bw.stream = -1;
        bw.cat = C_COPYBW;
        memcpy(&bw.thread, &gbs, sizeof(gbs));
        if ((rc = copy_kind(r, nm, &bw.name))) return rc;
    }
    if ((ev->has & TEV_BYTES) && (t.cat == C_MEMCPY || t.cat == C_MEMSET) && ev->bytes >= 0) {
        /* Bandwidth per kind of copy, over the whole file. */
        nstat *e = &r->names.v[t.name];
        e->mcount++;
        e->mbytes = sadd(e->mbytes, ev->bytes);
        e->mtime = sadd(e->mtime, t.dur > 0 ? t.dur : 0);
        if (t.dur > 0 && (double)ev->bytes / (double)t.dur > e->mpeak) e->mpeak = (double)ev->bytes / (double)t.dur;
    }
    if ((rc = thread_intern(r, (ev->has & TEV_PID) ? ev->pid : -1, (ev->has & TEV_TID) ? ev->tid : -1,
                            &t.thread)))
        return rc;
    if (!r->has_gpu_thread && rec_stream(&t) >= 0 &&
        (t.cat == C_KERNEL || t.cat == C_MEMCPY || t.cat == C_MEMSET || t.cat == C_MTIA)) {
        r->has_gpu_thread = 1;
        r->gpu_thread = t.thread;
    }
    long num;
    /* a step is a CPU range: the GPU's copy of it (gpu_user_annotation,
     * without a stream in ROCm traces) is not a second step */
    if (rec_stream(&t) < 0 && t.cat != C_GPU_ANN && step_number(nm, &num)) {
        if (r->nsteps >= MAX_STEPS) return TPF_ETOOBIG;
        if (r->nsteps == r->stepcap) {
            uint32_t nc = r->stepcap ? r->stepcap * 2 : 64;
            tstep *ns = realloc(r->steps, (size_t)nc * sizeof(*ns));
            if (!ns) return TPF_ENOMEM;
            r->steps = ns;
            r->stepcap = nc;
        }
        r->steps[r->nsteps++] = (tstep){num, t.ts, t.dur, t.name, t.rdelta};
        t.flags |= F_STEP;
    }
    if (bw.cat == C_COPYBW && (rc = push_rec(r, &bw))) return rc;
    return push_rec(r, &t);
}

static void rank_free(rankst *r)
{
    mem_free_st(&r->mem);
    ts_free(&r->ts);
    st_free(&r->names);
    free(r->threads);
    free(r->tslots);
    free(r->steps);
    free(r->chunk);
    free(r->runs);
    if (r->spill) fclose(r->spill);
    memset(r, 0, sizeof(*r));
}

static int pass_a(rankst *r, const char *path, int compat, char *err, size_t errlen)
{
    r->path = path;
    r->compat = compat;
    buf_init(&r->names.arena, MAX_NAME_BYTES);
    r->chunk = malloc(CHUNK_RECS * sizeof(trec));
    if (!r->chunk) return TPF_ENOMEM;
    char e2[256];
    int rc = trace_read(path, on_event, r, r->compat ? TRACE_DOUBLE : 0, &r->meta, e2, sizeof(e2));
    if (rc == TPF_ETOOBIG && !e2[0])
        snprintf(e2, sizeof(e2), "too many distinct names, threads or steps");
    if (rc == TPF_EIO && !e2[0]) snprintf(e2, sizeof(e2), "cannot write the spill file: %s", strerror(errno));
    if (rc) {
        if (strncmp(e2, "cannot open", 11) == 0 || strncmp(e2, "cannot read", 11) == 0)
            snprintf(err, errlen, "%s", e2);
        else
            snprintf(err, errlen, "%s: %s", path, e2[0] ? e2 : tpf_strerror(rc));
        return rc;
    }
    if (!r->meta.has_events) {
        snprintf(err, errlen, "%s: not a Chrome/Kineto trace: no \"traceEvents\" array", path);
        return TPF_EFORMAT;
    }
    /* The last chunk stays in memory when nothing was spilled. */
    if (r->spill && (rc = spill_chunk(r))) {
        snprintf(err, errlen, "%s: cannot write the spill file", path);
        return rc;
    }
    if (!r->spill) qsort(r->chunk, r->nchunk, sizeof(trec), rec_cmp);
    return 0;
}

/* ---- pass B: merged, time-ordered sweep ---------------------------------- */

typedef struct merger {
    rankst *r;
    run_rd *rd;
    size_t nrd;
    size_t *heap;           /* run indexes, min-heap by head record */
    size_t nheap;
    size_t mem_i;           /* in-memory mode: next record */
} merger;

static int rd_fill(merger *m, run_rd *d)
{
    d->i = 0;
    d->n = 0;
    if (d->left <= 0) return 0;
    size_t want = d->cap < (size_t)d->left ? d->cap : (size_t)d->left;
    if (fseek(m->r->spill, d->off * (long)sizeof(trec), SEEK_SET)) return TPF_EIO;
    size_t got = fread(d->b, sizeof(trec), want, m->r->spill);
    if (got != want) return TPF_EIO;
    d->n = got;
    d->off += (long)got;
    d->left -= (long)got;
    return 0;
}

static int heap_less(merger *m, size_t a, size_t b)
{
    const run_rd *x = &m->rd[a], *y = &m->rd[b];
    return rec_cmp(&x->b[x->i], &y->b[y->i]) < 0;
}

static void heap_down(merger *m, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, s = i;
        if (l < m->nheap && heap_less(m, m->heap[l], m->heap[s])) s = l;
        if (l + 1 < m->nheap && heap_less(m, m->heap[l + 1], m->heap[s])) s = l + 1;
        if (s == i) return;
        size_t t = m->heap[i];
        m->heap[i] = m->heap[s];
        m->heap[s] = t;
        i = s;
    }
}

static int merger_open(merger *m, rankst *r)
{
    memset(m, 0, sizeof(*m));
    m->r = r;
    if (!r->spill) return 0;
    m->nrd = r->nruns;
    m->rd = calloc(m->nrd, sizeof(*m->rd));
    m->heap = calloc(m->nrd, sizeof(*m->heap));
    if (!m->rd || !m->heap) return TPF_ENOMEM;
    size_t per = MERGE_RECS / m->nrd;
    if (per < 64) per = 64;
    long off = 0;
    for (size_t i = 0; i < m->nrd; i++) {
        run_rd *d = &m->rd[i];
        d->off = off;
        d->left = r->runs[i];
        off += r->runs[i];
        d->cap = per;
        d->b = malloc(per * sizeof(trec));
        if (!d->b) return TPF_ENOMEM;
        int rc = rd_fill(m, d);
        if (rc) return rc;
        if (d->n) m->heap[m->nheap++] = i;
    }
    for (size_t i = m->nheap; i-- > 0;) heap_down(m, i);
    return 0;
}

/* Next record in time order: 1, 0 at the end, <0 on error. */
static int merger_next(merger *m, trec *out)
{
    if (!m->r->spill) {
        if (m->mem_i >= m->r->nchunk) return 0;
        *out = m->r->chunk[m->mem_i++];
        return 1;
    }
    if (!m->nheap) return 0;
    run_rd *d = &m->rd[m->heap[0]];
    *out = d->b[d->i++];
    if (d->i == d->n) {
        int rc = rd_fill(m, d);
        if (rc) return rc;
        if (!d->n) m->heap[0] = m->heap[--m->nheap];
    }
    if (m->nheap) heap_down(m, 0);
    return 1;
}

static void merger_close(merger *m)
{
    for (size_t i = 0; i < m->nrd; i++) free(m->rd[i].b);
    free(m->rd);
    free(m->heap);
}

static int type_index(int t) { return t == KT_COMP ? 0 : t == KT_COMM ? 1 : t == KT_MEM ? 2 : 3; }

static void sweep_advance(sweep *w, int64_t to)
{
    while (w->frontier < to) {
        int mask = 0;
        int64_t next = to;
        for (int k = 0; k < 4; k++) {
            if (!w->has[k]) continue;
            if (w->s[k] > w->frontier) {
                if (w->s[k] < next) next = w->s[k];
            } else if (w->e[k] > w->frontier) {
                mask |= 1 << k;
                if (w->e[k] < next) next = w->e[k];
            }
        }
        w->t[mask] += next - w->frontier;
        if (w->h && next > w->frontier) {
            sweep_hist *h = w->h;
            int r = mask & 7;
            if (r) h->th[r] += next - w->frontier;
            h->s[h->head] = (hslice){w->frontier, next, r};
            h->head = (h->head + 1) % HIST_N;
            if (h->n < HIST_N) h->n++;
        }
        w->frontier = next;
    }
}

/* HTA: a merged interval [s, e) with e < s takes its type off [e, s). */
static void sweep_negative(sweep *w, int k, int64_t e, int64_t s)
{
    sweep_hist *h = w->h;
    if (k > 2) return; /* OTHER is not in HTA's label sweep */
    for (unsigned i = 0; i < h->n; i++) {
        hslice *x = &h->s[(h->head + HIST_N - 1 - i) % HIST_N];
        if (x->b <= e) break;
        int64_t lo = x->a > e ? x->a : e, hi = x->b < s ? x->b : s;
        if (hi <= lo) continue;
        int r2 = x->r - (1 << k);
        if (x->r > 0) h->th[x->r] -= hi - lo;
        if (r2 > 0 && r2 < 8) h->th[r2] += hi - lo;
        if (lo == x->a && hi == x->b) x->r = r2; /* slices are whole microseconds here */
    }
}

static void sweep_add(sweep *w, int type, int64_t s, int64_t e)
{
    int k = type_index(type);
    if (!w->any) {
        w->any = 1;
        w->first = s;
        w->frontier = s;
    }
    sweep_advance(w, s);
    if (w->h && e < s && !(w->has[k] && s <= w->e[k])) sweep_negative(w, k, e, s);
    if (w->has[k] && s <= w->e[k]) {
        if (e > w->e[k]) w->e[k] = e;
    } else {
        if (w->has[k]) w->msum[k] += w->e[k] - w->s[k];
        w->has[k] = 1;
        w->s[k] = s;
        w->e[k] = e;
    }
    if (w->all_has && s <= w->all_e) {
        if (e > w->all_e) w->all_e = e;
    } else {
        if (w->all_has) w->all_sum += w->all_e - w->all_s;
        w->all_has = 1;
        w->all_s = s;
        w->all_e = e;
    }
    w->last_end = w->all_e;
}

static void sweep_finish(sweep *w)
{
    if (!w->any) return;
    int64_t end = w->frontier;
    for (int k = 0; k < 4; k++)
        if (w->has[k] && w->e[k] > end) end = w->e[k];
    sweep_advance(w, end);
    for (int k = 0; k < 4; k++)
        if (w->has[k]) w->msum[k] += w->e[k] - w->s[k];
    if (w->all_has) w->all_sum += w->all_e - w->all_s;
    w->last_end = w->all_e;
    memset(w->has, 0, sizeof(w->has));
    w->all_has = 0;
}

/* Label time (mask over COMP|COMM|MEM) from the per-mask times. */
static int64_t sweep_overlap(const sweep *w, int bits)
{
    int64_t v = 0;
    for (int m = 0; m < 16; m++) {
        int mm = (m & 1 ? KT_COMP : 0) | (m & 2 ? KT_COMM : 0) | (m & 4 ? KT_MEM : 0);
        if ((mm & bits) == bits) v += w->t[m];
    }
    return v;
}

typedef struct bstate {
    rankst *r;
    const trace_opts *o;
    int hta;
    int trim;
    int64_t cutoff;
    tstep *ssorted;         /* steps by start */
    uint32_t sp;            /* steps starting at or before now */
    sweep all;
    sweep *ssw;             /* per step (by index in ssorted) */
    uint64_t *skern;
    tr_launch *slaunch;
    corr_ent *cmap;
    uint32_t ccount, ccap;
    int64_t now;
    stream_st *streams;
    uint32_t nstreams_used;
    tstack *stacks;
    tr_launch launch;
    uint64_t gpu_events, unmatched;
    uint64_t dups, collide; /* duplicate records; launches sharing a correlation id */
    seqtab seq;
} bstate;

static int step_cmp(const void *a, const void *b)
{
    const tstep *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->num < y->num ? -1 : x->num > y->num;
}

/* Index (in ssorted) of the step containing t, or -1. */
static int32_t step_of(bstate *b, int64_t t)
{
    while (b->sp < b->r->nsteps && b->ssorted[b->sp].ts <= t) b->sp++;
    for (uint32_t i = b->sp, k = 0; i-- > 0 && k < 16; k++) {
        const tstep *s = &b->ssorted[i];
        if (s->ts <= t && t < s->ts + s->dur) return (int32_t)i;
    }
    return -1;
}

static uint32_t corr_hash(int64_t c) { return (uint32_t)(((uint64_t)c * 0x9E3779B97F4A7C15ull) >> 40); }

static void corr_put_raw(corr_ent *map, uint32_t cap, const corr_ent *e)
{
    uint32_t j = corr_hash(e->corr) & (cap - 1);
    while (map[j].corr != -1 && map[j].corr != e->corr) j = (j + 1) & (cap - 1);
    map[j] = *e;
}

/* Rebuild the map at ncap slots keeping entries with ts >= horizon. */
static int corr_rebuild(bstate *b, uint32_t ncap, int64_t horizon)
{
    corr_ent *nm = malloc((size_t)ncap * sizeof(*nm));
    if (!nm) return TPF_ENOMEM;
    for (uint32_t i = 0; i < ncap; i++) nm[i].corr = -1;
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->ccap; i++) {
        if (b->cmap[i].corr == -1 || b->cmap[i].ts < horizon) continue;
        corr_put_raw(nm, ncap, &b->cmap[i]);
        n++;
    }
    free(b->cmap);
    b->cmap = nm;
    b->ccap = ncap;
    b->ccount = n;
    return 0;
}

/* When the map fills: first forget launches already joined more than a
 * second ago (a CUDA graph's kernels follow their launch closely), then
 * double up to CORR_CAP; past that, drop the oldest pending launches,
 * keeping at most a quarter of the slots. */
static int corr_make_room(bstate *b)
{
    corr_ent *nm = NULL;
    uint32_t live = 0;
    for (uint32_t i = 0; i < b->ccap; i++)
        if (b->cmap[i].corr != -1 && !(b->cmap[i].used && b->cmap[i].ts < b->now - 1000000000))
            live++;
    if (live <= b->ccap / 2) {
        nm = malloc((size_t)b->ccap * sizeof(*nm));
        if (!nm) return TPF_ENOMEM;
        for (uint32_t i = 0; i < b->ccap; i++) nm[i].corr = -1;
        for (uint32_t i = 0; i < b->ccap; i++)
            if (b->cmap[i].corr != -1 && !(b->cmap[i].used && b->cmap[i].ts < b->now - 1000000000))
                corr_put_raw(nm, b->ccap, &b->cmap[i]);
        free(b->cmap);
        b->cmap = nm;
        b->ccount = live;
        return 0;
    }
    if (b->ccap < CORR_CAP) return corr_rebuild(b, b->ccap * 2, INT64_MIN);
    int64_t horizon = INT64_MIN;
    for (int64_t span = (int64_t)60 * 1000000000; span >= 1000; span /= 4) {
        uint32_t keep = 0;
        for (uint32_t i = 0; i < b->ccap; i++)
            if (b->cmap[i].corr != -1 && b->cmap[i].ts >= b->now - span) keep++;
        horizon = b->now - span;
        if (keep <= CORR_CAP / 4) break;
    }
    int rc = corr_rebuild(b, b->ccap, horizon);
    /* Pathological (a quarter million launches within 1 us): start empty
     * rather than probe a full table. */
    if (!rc && b->ccount >= b->ccap / 4 * 3) rc = corr_rebuild(b, b->ccap, INT64_MAX);
    return rc;
}

static int corr_put(bstate *b, const corr_ent *e)
{
    if (b->ccount >= b->ccap / 4 * 3) {
        int rc = corr_make_room(b);
        if (rc) return rc;
    }
    uint32_t j = corr_hash(e->corr) & (b->ccap - 1);
    while (b->cmap[j].corr != -1 && b->cmap[j].corr != e->corr) j = (j + 1) & (b->ccap - 1);
    if (b->cmap[j].corr == -1) b->ccount++;
    b->cmap[j] = *e;
    return 0;
}

static corr_ent *corr_get(bstate *b, int64_t c)
{
    uint32_t j = corr_hash(c) & (b->ccap - 1);
    while (b->cmap[j].corr != -1) {
        if (b->cmap[j].corr == c) return &b->cmap[j];
        j = (j + 1) & (b->ccap - 1);
    }
    return NULL;
}

static stream_st *stream_get(bstate *b, int64_t s)
{
    uint32_t j = corr_hash(s) & (MAX_STREAMS - 1);
    for (uint32_t k = 0; k < MAX_STREAMS; k++, j = (j + 1) & (MAX_STREAMS - 1)) {
        if (!b->streams[j].used) {
            b->streams[j].used = 1;
            b->streams[j].stream = s;
            b->nstreams_used++;
            return &b->streams[j];
        }
        if (b->streams[j].stream == s) return &b->streams[j];
    }
    return NULL;
}

static void op_account(bstate *b, uint32_t name, int64_t dur, int64_t child)
{
    nstat *ns = &b->r->names.v[name];
    ns->ccount++;
    ns->ctotal = sadd(ns->ctotal, dur);
    ns->cself = sadd(ns->cself, dur - child);
}

static void stack_pop(bstate *b, tstack *st)
{
    frame *f = &st->f[--st->n];
    if (f->pend) {
        if (f->nchild == 1) f->child = f->pend_child; /* the duplicate goes */
        else op_account(b, f->name, f->pend_dur, f->pend_child);
        f->pend = 0;
    }
    if (!st->n) {
        op_account(b, f->name, f->dur, f->child);
        return;
    }
    frame *p = &st->f[st->n - 1];
    if (p->pend) { /* a second child: the first was no duplicate */
        op_account(b, p->name, p->pend_dur, p->pend_child);
        p->pend = 0;
    }
    p->nchild++;
    p->child = sadd(p->child, f->dur);
    if (p->nchild == 1 && p->name == f->name) {
        p->pend = 1;
        p->pend_dur = f->dur;
        p->pend_child = f->child;
    } else {
        op_account(b, f->name, f->dur, f->child);
    }
}

static int cpu_nest(bstate *b, const trec *t)
{
    tstack *st = &b->stacks[t->thread];
    int64_t end = t->ts + t->dur;
    while (st->n && st->f[st->n - 1].end <= t->ts) stack_pop(b, st);
    /* Partial overlap is not nesting: close frames that end before t does. */
    while (st->n && st->f[st->n - 1].end < end) stack_pop(b, st);
    if (st->n == st->cap) {
        if (st->cap >= MAX_STACK) {
            stack_pop(b, st); /* keep the depth bounded; the deepest frame closes early */
        } else {
            uint32_t nc = st->cap ? st->cap * 2 : 16;
            frame *nf = realloc(st->f, (size_t)nc * sizeof(*nf));
            if (!nf) return TPF_ENOMEM;
            st->f = nf;
            st->cap = nc;
        }
    }
    st->f[st->n++] = (frame){t->ts, end, t->dur, 0, t->name, 0, 0, 0, 0, t->cat};
    return 0;
}

static void launch_add(tr_launch *l, int64_t cpu_dur, int64_t gpu_dur, int64_t delay)
{
    l->count++;
    l->cpu_sum = sadd(l->cpu_sum, cpu_dur);
    l->gpu_sum = sadd(l->gpu_sum, gpu_dur);
    l->delay_sum = sadd(l->delay_sum, delay);
    if (cpu_dur > l->cpu_max) l->cpu_max = cpu_dur;
    if (delay > l->delay_max) l->delay_max = delay;
    if (cpu_dur > LAUNCH_CPU_CUTOFF_NS) l->cpu_outliers++;
    if (delay > LAUNCH_DELAY_CUTOFF_NS) l->delay_outliers++;
    if (cpu_dur <= LAUNCH_CPU_CUTOFF_NS && gpu_dur < cpu_dur) l->short_kernels++;
}

static int in_steps(const bstate *b, int32_t si)
{
    if (!b->o->has_steps) return 1;
    if (si < 0) return 0;
    long n = b->ssorted[si].num;
    return n >= b->o->step_lo && n <= b->o->step_hi;
}

/* The innermost user annotation (record_function range, not ProfilerStep)
 * around ts on a thread, or with any_op the outermost operator when there
 * is none: name id + 1, 0 for none. Frames that ended are skipped, not
 * popped (the caller's own event may still nest there). */
static uint32_t scope_of(bstate *b, uint32_t thread, int64_t ts, int any_op)
{
    const tstack *st = &b->stacks[thread];
    uint32_t outer = 0;
    for (uint32_t i = st->n; i-- > 0;) {
        const frame *f = &st->f[i];
        if (f->end <= ts || f->ts > ts) continue;
        if (f->cat == C_USER_ANN && strncmp(st_str(&b->r->names, f->name), "ProfilerStep", 12) != 0)
            return f->name + 1;
        if (f->cat == C_CPU_OP) outer = f->name + 1;
    }
    return any_op ? outer : 0;
}

/* Calls that enqueue work, for the queue length: HTA's list (its
 * runtime-launch query) under --compat hta, the default launch set else. */
int hta_queue_name(const char *n)
{
    static const char *const hta[] = {
        "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
        "runFunction - job_prep_and_submit_for_execution", "hipLaunchKernel", "hipExtModuleLaunchKernel",
        "hipMemsetAsync", "hipMemcpyAsync", "hipMemcpyWithStream",
    };
    for (size_t i = 0; i < sizeof(hta) / sizeof(hta[0]); i++)
        if (strcmp(n, hta[i]) == 0) return 1;
    return 0;
}

static int queue_launch(bstate *b, uint32_t name)
{
    nstat *e = &b->r->names.v[name];
    if (e->qlaunch < 0) {
        const char *n = st_str(&b->r->names, name);
        int q = 0;
        if (b->hta) {
            q = hta_queue_name(n);
        } else {
            q = is_launch_name(n, 0) || strcmp(n, "hipMemcpyWithStream") == 0;
        }
        e->qlaunch = (int8_t)q;
    }
    return e->qlaunch;
}

static int is_device_cat(int cat) { return cat == C_KERNEL || cat == C_MEMCPY || cat == C_MEMSET || cat == C_MTIA; }

/* Idle time per stream (HTA's kernel categories only): the gap before each
 * kernel is host wait when its launch began after the previous kernel ended,
 * else kernel wait under 30 us, else other. HTA takes the gap from the
 * previous kernel's end as is, negative when work overlaps on the stream
 * (DMA engines); by default overlapping work is merged, so no gap is
 * negative. ce: the launch, or NULL. */
static int idle_account(bstate *b, int64_t stream, int64_t ts, int64_t end, const corr_ent *ce)
{
    stream_st *s = stream_get(b, stream);
    if (!s) return TPF_ETOOBIG;
    s->kernels++;
    if (s->has_prev) {
        int64_t gap = ts - s->prev_end;
        if (!b->hta && gap < 0) gap = 0;
        if (ce && ce->ts > s->prev_end) s->host = sadd(s->host, gap);
        else if (gap < HTA_KERNEL_WAIT_NS) s->kwait = sadd(s->kwait, gap);
        else s->other = sadd(s->other, gap);
    }
    if (b->hta || !s->has_prev || end > s->prev_end) s->prev_end = end;
    s->has_prev = 1;
    return 0;
}

/* --counters: one change of a series (v added at ts), kept in time order by
 * the same spill and merge as the events; increments sort first at one time
 * (the launch before the start, as HTA's counter). */
static int delta_add(rankst *r, int64_t ts, double v, const tseries *s, uint32_t thread)
{
    trec d;
    memset(&d, 0, sizeof(d));
    d.ts = ts;
    d.dur = v > 0 ? 1 : -1;
    memcpy(&d.corr, &v, sizeof(v));
    d.name = (uint32_t)(s - r->ts.v);
    d.thread = thread;
    d.stream = -1;
    return push_rec(r->dsink, &d);
}

static int process(bstate *b, trec *t)
{
    const int64_t stream = rec_stream(t);
    rankst *r = b->r;
    if (t->cat == C_MEMEV) /* profile_memory: allocation (+) or free (-) */
        return mem_event(&r->mem, t->rdelta, t->ts, t->corr, scope_of(b, t->thread, t->ts, 1));
    if (t->cat == C_COUNTER) {
        double v;
        memcpy(&v, &t->corr, sizeof(v));
        return ts_sample(&r->ts, &r->ts.v[t->thread], t->ts, v);
    }
    if (t->cat == C_COPYBW) {
        /* the copy's launch decides, as for the copy itself (trim, --steps):
         * HTA's trim keeps only device work whose launch it kept, so a copy
         * without a launch in the trace goes too */
        float v;
        memcpy(&v, &t->thread, sizeof(v));
        corr_ent *ce = t->corr != -1 ? corr_get(b, t->corr) : NULL;
        if (b->trim && !(ce && ce->kept)) return 0;
        if (!in_steps(b, ce ? ce->step : -1)) return 0;
        tseries *s = ts_get(&r->ts, TS_BW, 0, t->name);
        if (!s) {
            r->ts.dropped++;
            return 0;
        }
        int rc = ts_copy(&r->ts, s, t->ts, t->ts + t->dur, (double)v);
        if (!rc && r->dsink && v > 0 && (rc = delta_add(r, t->ts, v, s, r->gpu_thread)) == 0)
            rc = delta_add(r, t->ts + t->dur, -(double)v, s, r->gpu_thread);
        return rc;
    }
    nstat *ns = &r->names.v[t->name];
    const char *name = st_str(&r->names, t->name);
    /* HTA rounds when any ts of the file is fractional (pass A kept the
     * rounded duration as a delta). */
    if (b->hta && r->any_tsfrac) t->dur += t->rdelta;
    b->now = t->ts;
    if (ns->sync < 0) ns->sync = strcmp(name, "Event Sync") == 0 || strcmp(name, "Context Sync") == 0;
    int hta_gpu = (stream >= 0 && t->corr >= 0) || ns->sync;
    int gpu = b->hta ? hta_gpu
                     : stream >= 0 && is_device_cat(t->cat);
    if (!gpu) {
        int32_t si = step_of(b, t->ts);
        int kept = b->trim ? t->ts < b->cutoff : 1;
        if (ns->launch == 0) ns->launch = is_launch_name(name, b->hta) ? 1 : no_device_work(name) ? 3 : 2;
        if (t->cat == C_GPU_ANN) {
            ns->gann_n++;
            ns->gann = sadd(ns->gann, t->dur);
        }
        if (t->cat == C_USER_ANN) ns->is_ann = 1;
        if (t->corr != -1 && (!b->hta || !hta_gpu) && ns->launch != 3) {
            int call = t->cat == C_RUNTIME || t->cat == C_DRIVER;
            corr_ent e = {t->corr, t->ts, t->dur, t->name, si, (uint8_t)kept, 0, (uint8_t)call,
                          scope_of(b, t->thread, t->ts, 0)};
            /* a second launch of one id: its device work joins the later one */
            corr_ent *had = call ? corr_get(b, t->corr) : NULL;
            if (had && had->call) b->collide++;
            int rc = corr_put(b, &e);
            if (rc) return rc;
        }
        if (!kept || !in_steps(b, si)) return 0;
        if (b->hta && stream != -1) {
            /* HTA puts any kept row with a stream into the GPU set (triton),
             * and device rows with no correlation (MTIA DMA) into the idle
             * analysis too, with no launch to join. */
            if (ns->ktype < 0) ns->ktype = (int8_t)(b->hta == 2 ? ktype_hta06(name) : ktype_hta(name));
            sweep_add(&b->all, ns->ktype, t->ts, t->ts + t->dur);
            if (is_device_cat(t->cat)) {
                int rc = idle_account(b, stream, t->ts, t->ts + t->dur, NULL);
                if (rc) return rc;
            }
        }
        if (t->cat == C_CPU_OP || t->cat == C_USER_ANN || t->cat == C_RUNTIME || t->cat == C_DRIVER)
            return cpu_nest(b, t);
        return 0;
    }
    /* GPU side: the launch decides step and (under HTA trimming) presence. */
    corr_ent *ce = t->corr != -1 ? corr_get(b, t->corr) : NULL;
    if (ce) ce->used = 1;
    int32_t si = ce ? ce->step : -1;
    if (b->trim && !(ce && ce->kept)) return 0;
    if (!in_steps(b, si)) return 0;
    if (!ce) b->unmatched++;
    if (stream == -1) return 0; /* device-wide sync rows: not on a stream */
    b->gpu_events++;
    if (ns->ktype < 0)
        ns->ktype = (int8_t)(b->hta == 2 ? ktype_hta06(name)
                             : b->hta ? ktype_hta(name) : ktype_default(name, t->cat));
    int64_t end = t->ts + t->dur;
    sweep_add(&b->all, ns->ktype, t->ts, end);
    ns->kcount++;
    ns->ksum = sadd(ns->ksum, t->dur);
    if (t->dur < ns->kmin) ns->kmin = t->dur;
    if (t->dur > ns->kmax) ns->kmax = t->dur;
    double d = (double)t->dur - ns->kmean;
    ns->kmean += d / (double)ns->kcount;
    ns->km2 += d * ((double)t->dur - ns->kmean);
    if (si >= 0) {
        sweep_add(&b->ssw[si], ns->ktype, t->ts, end);
        b->skern[si]++;
    }
    if (is_device_cat(t->cat)) {
        int rc = idle_account(b, stream, t->ts, end, ce);
        if (rc) return rc;
        stream_st *s = stream_get(b, stream);
        if (s && ns->ktype == KT_COMP && (rc = seq_add(&b->seq, &s->ring, t->name, t->dur))) return rc;
        if (s && ce && queue_launch(b, ce->name)) {
            if ((rc = queue_add(&s->q, ce->ts, t->ts))) return rc;
            /* over time: +1 from the launch call to the start, and the
             * queue just after the launch as the maximum candidate */
            tseries *qs = ts_get(&r->ts, TS_QUEUE, stream, 0);
            if (!qs) {
                r->ts.dropped++;
            } else {
                if ((rc = ts_segment(&r->ts, qs, ce->ts, t->ts > ce->ts ? t->ts : ce->ts, 1.0, 1))) return rc;
                ts_point(&r->ts, qs, ce->ts, (double)s->q.n);
                if (r->dsink && ((rc = delta_add(r, ce->ts, 1.0, qs, t->thread)) ||
                                 (rc = delta_add(r, t->ts > ce->ts ? t->ts : ce->ts, -1.0, qs, t->thread))))
                    return rc;
            }
        }
    }
    if (ce && ce->ann) {
        nstat *an = &r->names.v[ce->ann - 1];
        an->akern++;
        an->agpu = sadd(an->agpu, t->dur);
    }
    if (ce) {
        nstat *ln = &r->names.v[ce->name];
        if (ln->launch == 1) {
            int64_t delay = t->ts - (ce->ts + ce->dur);
            if (delay < 0) delay = 0;
            launch_add(&b->launch, ce->dur, t->dur, delay);
            if (si >= 0) launch_add(&b->slaunch[si], ce->dur, t->dur, delay);
        }
    }
    return 0;
}

/* Top k of n entries by key (descending), as indexes. */
typedef struct keyidx {
    int64_t key;
    uint32_t id;
} keyidx;

static int keyidx_cmp(const void *a, const void *b)
{
    const keyidx *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static char *dupstr(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p) memcpy(p, s, n + 1);
    return p;
}

static int collect_tops(rankst *r, tr_rank *out, int k)
{
    strtab *t = &r->names;
    keyidx *ki = malloc((size_t)(t->n ? t->n : 1) * sizeof(*ki));
    if (!ki) return TPF_ENOMEM;
    /* kernels by total time */
    size_t n = 0;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->v[i].kcount) ki[n++] = (keyidx){t->v[i].ksum, i};
    qsort(ki, n, sizeof(*ki), keyidx_cmp);
    size_t m = n < (size_t)k ? n : (size_t)k;
    out->kernels = calloc(m ? m : 1, sizeof(tr_kernel));
    if (!out->kernels) goto nomem;
    for (size_t i = 0; i < m; i++) {
        nstat *e = &t->v[ki[i].id];
        tr_kernel *o = &out->kernels[i];
        if (!(o->name = dupstr(st_str(t, ki[i].id)))) goto nomem;
        o->type = e->ktype;
        o->count = e->kcount;
        o->sum = e->ksum;
        o->min = e->kmin;
        o->max = e->kmax;
        o->std = e->kcount > 1 ? sqrt(e->km2 / (double)(e->kcount - 1)) : 0.0;
        out->nkernels = i + 1;
    }
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (uint32_t i = 0; i < t->n; i++)
            if (t->v[i].ccount) ki[n++] = (keyidx){pass ? t->v[i].ctotal : t->v[i].cself, i};
        qsort(ki, n, sizeof(*ki), keyidx_cmp);
        m = n < (size_t)k ? n : (size_t)k;
        tr_op *ops = calloc(m ? m : 1, sizeof(tr_op));
        if (!ops) goto nomem;
        if (pass) out->ops_total = ops; else out->ops_self = ops;
        for (size_t i = 0; i < m; i++) {
            nstat *e = &t->v[ki[i].id];
            if (!(ops[i].name = dupstr(st_str(t, ki[i].id)))) goto nomem;
            ops[i].count = e->ccount;
            ops[i].self = e->cself;
            ops[i].total = e->ctotal;
            if (pass) out->nops_total = i + 1; else out->nops_self = i + 1;
        }
    }
    free(ki);
    return 0;
nomem:
    free(ki);
    return TPF_ENOMEM;
}

static int seq_cmp(const void *a, const void *b)
{
    const seq_ent *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    if (x->total != y->total) return x->total > y->total ? -1 : 1;
    return memcmp(x->ids, y->ids, sizeof(x->ids));
}

static int queue_cmp(const void *a, const void *b)
{
    const tr_queue *x = a, *y = b;
    return x->stream < y->stream ? -1 : x->stream > y->stream;
}

static int memcat_cmp(const void *a, const void *b)
{
    const tr_memcat *x = a, *y = b;
    if (x->dev != y->dev) return x->dev - y->dev;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The tables of trace_extra.h for one rank, top k rows each. */
static int collect_extras(bstate *b, tr_rank *out, int k)
{
    rankst *r = b->r;
    strtab *t = &r->names;
    keyidx *ki = malloc((size_t)(t->n ? t->n : 1) * sizeof(*ki));
    if (!ki) return TPF_ENOMEM;
    int rc = TPF_ENOMEM;
    /* annotations by GPU kernel time, then by GPU range time */
    size_t n = 0;
    for (uint32_t i = 0; i < t->n; i++)
        if ((t->v[i].is_ann || t->v[i].gann_n) && strncmp(st_str(t, i), "ProfilerStep", 12) != 0)
            ki[n++] = (keyidx){t->v[i].agpu ? t->v[i].agpu : t->v[i].gann, i};
    qsort(ki, n, sizeof(*ki), keyidx_cmp);
    size_t m = n < (size_t)k ? n : (size_t)k;
    out->anns = calloc(m ? m : 1, sizeof(tr_ann));
    if (!out->anns) goto done;
    for (size_t i = 0; i < m; i++) {
        const nstat *e = &t->v[ki[i].id];
        tr_ann *a = &out->anns[i];
        if (!(a->name = dupstr(st_str(t, ki[i].id)))) goto done;
        a->ranges = e->ccount ? e->ccount : e->gann_n;
        a->cpu = e->ctotal;
        a->kernels = e->akern;
        a->gpu = e->agpu;
        a->gpu_ann = e->gann;
        out->nanns = i + 1;
    }
    /* memory copies by bytes */
    n = 0;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->v[i].mcount) ki[n++] = (keyidx){t->v[i].mbytes, i};
    qsort(ki, n, sizeof(*ki), keyidx_cmp);
    m = n < (size_t)k ? n : (size_t)k;
    out->bws = calloc(m ? m : 1, sizeof(tr_bw));
    if (!out->bws) goto done;
    for (size_t i = 0; i < m; i++) {
        const nstat *e = &t->v[ki[i].id];
        tr_bw *w = &out->bws[i];
        if (!(w->name = dupstr(st_str(t, ki[i].id)))) goto done;
        w->count = e->mcount;
        w->bytes = e->mbytes;
        w->time = e->mtime;
        w->peak = e->mpeak;
        out->nbws = i + 1;
    }
    /* kernel sequences by count */
    out->seq_len = b->seq.len;
    out->seq_dropped = b->seq.dropped;
    qsort(b->seq.v, b->seq.n, sizeof(seq_ent), seq_cmp);
    m = b->seq.n < (uint32_t)k ? b->seq.n : (size_t)k;
    out->seqs = calloc(m ? m : 1, sizeof(tr_seq));
    if (!out->seqs) goto done;
    for (size_t i = 0; i < m; i++) {
        const seq_ent *e = &b->seq.v[i];
        if (e->count < 2) break; /* once is not a pattern */
        tr_seq *q = &out->seqs[i];
        out->nseqs = i + 1;
        q->count = e->count;
        q->total = e->total;
        for (int j = 0; j < b->seq.len; j++)
            if (!(q->names[j] = dupstr(st_str(t, e->ids[j])))) goto done;
    }
    /* queue length per stream */
    out->queues = calloc(b->nstreams_used ? b->nstreams_used : 1, sizeof(tr_queue));
    if (!out->queues) goto done;
    for (uint32_t i = 0; i < MAX_STREAMS; i++) {
        const stream_st *s = &b->streams[i];
        if (!s->used || !s->q.max) continue;
        tr_queue *q = &out->queues[out->nqueues++];
        q->stream = s->stream;
        q->kernels = s->kernels;
        q->max = s->q.max;
        q->mean = s->q.last > s->q.first ? (double)s->q.area / (double)(s->q.last - s->q.first) : 0.0;
    }
    qsort(out->queues, out->nqueues, sizeof(tr_queue), queue_cmp);
    /* memory timeline */
    mem_st *ms = &r->mem;
    out->mem = calloc(ms->ndev ? (size_t)ms->ndev : 1, sizeof(tr_memdev));
    out->memcats = calloc(ms->ncats ? ms->ncats : 1, sizeof(tr_memcat));
    if (!out->mem || !out->memcats) goto done;
    for (int i = 0; i < ms->ndev; i++) {
        const mem_dev *d = &ms->dev[i];
        tr_memdev *o = &out->mem[out->nmem++];
        o->key = d->key;
        o->peak = d->peak;
        o->peak_ts = d->peak_ts;
        o->reserved_peak = d->reserved_peak;
        o->allocs = d->allocs;
        o->frees = d->frees;
        o->alloc_bytes = d->alloc_bytes;
        o->free_bytes = d->free_bytes;
        if (d->peak_cat && !(o->peak_cat = dupstr(st_str(t, d->peak_cat - 1)))) goto done;
    }
    for (uint32_t i = 0; i < ms->ncats; i++) {
        tr_memcat *c = &out->memcats[out->nmemcats];
        if (!(c->name = dupstr(st_str(t, ms->cats[i].cat - 1)))) goto done;
        c->dev = ms->cats[i].dev;
        c->bytes = ms->cats[i].bytes;
        c->count = ms->cats[i].count;
        out->nmemcats++;
    }
    qsort(out->memcats, out->nmemcats, sizeof(tr_memcat), memcat_cmp);
    { /* top k per device */
        size_t w = 0;
        for (size_t i = 0, run = 0; i < out->nmemcats; i++) {
            run = (i && out->memcats[i].dev == out->memcats[i - 1].dev) ? run + 1 : 0;
            if (run < (size_t)k) out->memcats[w++] = out->memcats[i];
            else free(out->memcats[i].name);
        }
        out->nmemcats = w;
    }
    rc = 0;
done:
    free(ki);
    return rc;
}

static int series_cmp(const void *a, const void *b)
{
    const tr_series *x = a, *y = b;
    if (x->kind != y->kind) return x->kind - y->kind;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The time series of the rank, per bin (queue length per stream, copy
 * bandwidth per kind, the trace's counter tracks), in that order. */
static int collect_series(rankst *r, tr_rank *out)
{
    const tsset *t = &r->ts;
    out->ts_t0 = t->bins.t0;
    out->ts_t1 = t->bins.t1;
    out->ts_w = t->bins.w;
    out->ts_bins = t->bins.n;
    out->counter_events = r->counter_events;
    out->series_dropped = t->dropped;
    out->series = calloc(t->n ? t->n : 1, sizeof(tr_series));
    if (!out->series) return TPF_ENOMEM;
    for (uint32_t k = 0; k < t->n; k++) {
        const tseries *s = &t->v[k];
        if (!s->area) continue;
        tr_series *o = &out->series[out->nseries];
        o->kind = s->kind;
        o->key = s->key;
        o->samples = s->samples;
        o->vmax = s->vmax;
        o->lost = s->lost;
        if (s->kind == TS_QUEUE) {
            char nb[64];
            snprintf(nb, sizeof(nb), "stream %lld", (long long)s->key);
            o->name = dupstr(nb);
        } else {
            o->name = dupstr(st_str(&r->names, s->name));
        }
        o->mean = malloc(2 * (size_t)t->bins.n * sizeof(double));
        if (!o->name || !o->mean) {
            free(o->name);
            free(o->mean);
            return TPF_ENOMEM;
        }
        o->max = o->mean + t->bins.n;
        double area = 0, cov = 0;
        for (int i = 0; i < t->bins.n; i++) {
            o->mean[i] = ts_mean(t, s, i);
            o->max[i] = ts_max(t, s, i);
            area += s->area[i];
            cov += s->kind == TS_COUNTER ? s->cov[i] : 0;
        }
        /* time-weighted mean over the file (counters: from their first sample) */
        o->overall = s->kind == TS_COUNTER ? (cov > 0 ? area / cov : s->last_v)
                                           : area / (double)(t->bins.t1 - t->bins.t0);
        out->nseries++;
    }
    qsort(out->series, out->nseries, sizeof(tr_series), series_cmp);
    return 0;
}

static int stream_cmp(const void *a, const void *b)
{
    const tr_stream *x = a, *y = b;
    return x->stream < y->stream ? -1 : x->stream > y->stream;
}

static int pass_b(rankst *r, const trace_opts *o, int trim, tr_rank *out, char *err, size_t errlen)
{
    bstate b;
    memset(&b, 0, sizeof(b));
    b.r = r;
    b.o = o;
    b.hta = o->compat_hta;
    int rc = 0;
    merger m;
    memset(&m, 0, sizeof(m));
    uint32_t ns = r->nsteps;
    b.ssorted = malloc((ns ? ns : 1) * sizeof(tstep));
    b.ssw = calloc(ns ? ns : 1, sizeof(sweep));
    b.skern = calloc(ns ? ns : 1, sizeof(uint64_t));
    b.slaunch = calloc(ns ? ns : 1, sizeof(tr_launch));
    sweep_hist hist;
    memset(&hist, 0, sizeof(hist));
    if (b.hta) b.all.h = &hist;
    b.ccap = 1024;
    b.cmap = malloc(b.ccap * sizeof(corr_ent));
    b.streams = calloc(MAX_STREAMS, sizeof(stream_st));
    b.stacks = calloc(r->nthreads ? r->nthreads : 1, sizeof(tstack));
    if (!b.ssorted || !b.ssw || !b.skern || !b.slaunch || !b.cmap || !b.streams || !b.stacks) {
        rc = TPF_ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < b.ccap; i++) b.cmap[i].corr = -1;
    if ((rc = seq_init(&b.seq, o->seq_len > 0 ? o->seq_len : 3))) goto out;
    if (ns) memcpy(b.ssorted, r->steps, ns * sizeof(tstep));
    if (b.hta && r->any_tsfrac)
        for (uint32_t i = 0; i < ns; i++) b.ssorted[i].dur += b.ssorted[i].rdelta;
    qsort(b.ssorted, ns, sizeof(tstep), step_cmp);
    if (trim && ns) {
        b.trim = 1;
        b.cutoff = b.ssorted[ns - 1].ts;
        for (uint32_t i = 0; i < ns; i++)
            if (b.ssorted[i].ts > b.cutoff) b.cutoff = b.ssorted[i].ts;
    }
    { /* the bins of the time series: the whole file */
        tsbins *tb = &r->ts.bins;
        tb->n = o->bins > 0 ? (o->bins > TS_MAX_BINS ? TS_MAX_BINS : o->bins) : TS_DEF_BINS;
        tb->t0 = r->has_span ? r->tmin : 0;
        tb->t1 = r->has_span ? r->tmax : 0;
        int64_t span = tb->t1 - tb->t0;
        tb->w = span > 0 ? (span + tb->n - 1) / tb->n : 1;
        tb->n = span > 0 ? (int)((span + tb->w - 1) / tb->w) : 1; /* no bin past the end */
        if (tb->t1 <= tb->t0) tb->t1 = tb->t0 + 1;
    }
    if ((rc = merger_open(&m, r))) goto out;
    trec t, same[8]; /* records of the current (ts, dur), for duplicates */
    int nsame = 0;
    while ((rc = merger_next(&m, &t)) > 0) {
        /* only records with a correlation id: a CPU operator nested in
         * one of its own name (aten::zeros in aten::zeros) has the same
         * name, thread and times as its parent, and is no duplicate */
        if (t.cat < C_MEMEV && t.corr >= 0) {
            if (nsame && (same[0].ts != t.ts || same[0].dur != t.dur)) nsame = 0;
            int dup = 0;
            for (int k = 0; k < nsame && !dup; k++) dup = memcmp(&same[k], &t, sizeof(t)) == 0;
            if (dup) b.dups++;
            else if (nsame < 8) same[nsame++] = t;
        }
        if ((rc = process(&b, &t))) break;
    }
    if (rc < 0) goto out;
    rc = 0;
    ts_finish(&r->ts);
    for (uint32_t i = 0; i < r->nthreads; i++)
        while (b.stacks[i].n) stack_pop(&b, &b.stacks[i]);
    sweep_finish(&b.all);

    out->gpu_events = b.gpu_events;
    out->unmatched = b.unmatched;
    out->dups = b.dups;
    out->collide = b.collide;
    out->trimmed = b.trim;
    out->ts_rounded = b.hta && r->any_tsfrac;
    if (b.all.any) {
        out->kernel_time = b.all.last_end - b.all.first;
        out->busy = b.all.all_sum;
        out->idle = out->kernel_time - out->busy;
        out->compute = b.all.msum[0];
        out->non_compute = out->kernel_time - out->compute - out->idle;
        out->comm_total = b.all.msum[1];
        out->overlap = sweep_overlap(&b.all, KT_COMP | KT_COMM);
        for (int mk = 1; mk < 8; mk++) {
            /* exact label: the COMP/COMM/MEM bits are these and no others */
            int64_t v = 0;
            for (int q = 0; q < 16; q++) {
                int mm = (q & 1 ? KT_COMP : 0) | (q & 2 ? KT_COMM : 0) | (q & 4 ? KT_MEM : 0);
                if (mm == mk) v += b.all.t[q];
            }
            out->label_time[mk] = b.hta ? hist.th[mk] : v;
        }
    }
    out->launch = b.launch;
    /* streams */
    out->streams = calloc(b.nstreams_used ? b.nstreams_used : 1, sizeof(tr_stream));
    if (!out->streams) { rc = TPF_ENOMEM; goto out; }
    for (uint32_t i = 0; i < MAX_STREAMS; i++) {
        stream_st *s = &b.streams[i];
        if (!s->used) continue;
        out->streams[out->nstreams++] = (tr_stream){s->stream, s->kernels, s->host, s->kwait, s->other};
    }
    qsort(out->streams, out->nstreams, sizeof(tr_stream), stream_cmp);
    /* steps */
    out->steps = calloc(ns ? ns : 1, sizeof(tr_step));
    if (!out->steps) { rc = TPF_ENOMEM; goto out; }
    for (uint32_t i = 0; i < ns; i++) {
        const tstep *s = &b.ssorted[i];
        if (o->has_steps && (s->num < o->step_lo || s->num > o->step_hi)) continue;
        sweep *w = &b.ssw[i];
        sweep_finish(w);
        tr_step *d = &out->steps[out->nsteps++];
        d->num = s->num;
        d->ts = s->ts;
        d->dur = s->dur;
        d->kernels = b.skern[i];
        if (w->any) {
            d->span = w->last_end - w->first;
            d->busy = w->all_sum;
            d->compute = w->msum[0];
            d->comm = w->msum[1];
            d->overlap = sweep_overlap(w, KT_COMP | KT_COMM);
        }
        d->launch = b.slaunch[i];
    }
    rc = collect_tops(r, out, o->top_k > 0 ? o->top_k : 10);
    if (!rc) rc = collect_extras(&b, out, o->top_k > 0 ? o->top_k : 10);
    if (!rc) rc = collect_series(r, out);
out:
    if (rc == TPF_EIO) snprintf(err, errlen, "%s: cannot read back the spill file", r->path);
    else if (rc == TPF_ETOOBIG) snprintf(err, errlen, "%s: more than %d GPU streams", r->path, MAX_STREAMS);
    else if (rc == TPF_ENOMEM) snprintf(err, errlen, "%s: out of memory", r->path);
    merger_close(&m);
    if (b.stacks)
        for (uint32_t i = 0; i < r->nthreads; i++) free(b.stacks[i].f);
    free(b.stacks);
    if (b.streams)
        for (uint32_t i = 0; i < MAX_STREAMS; i++) queue_free(&b.streams[i].q);
    free(b.streams);
    seq_free(&b.seq);
    free(b.cmap);
    free(b.slaunch);
    free(b.skern);
    free(b.ssw);
    free(b.ssorted);
    return rc;
}

/* ---- across ranks ------------------------------------------------------- */

static int i64_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* A rank is a straggler in a step when its step takes 10% longer than the
 * median over ranks (and at least 100 us longer: noise on tiny steps). */
static int find_stragglers(trace_result *res)
{
    if (res->nranks < 2) return 0;
    size_t cap = 0;
    int64_t *d = malloc((size_t)res->nranks * sizeof(*d));
    if (!d) return TPF_ENOMEM;
    const tr_rank *r0 = &res->ranks[0];
    for (size_t si = 0; si < r0->nsteps; si++) {
        long num = r0->steps[si].num;
        int nd = 0;
        for (int k = 0; k < res->nranks; k++)
            for (size_t j = 0; j < res->ranks[k].nsteps; j++)
                if (res->ranks[k].steps[j].num == num) { d[nd++] = res->ranks[k].steps[j].dur; break; }
        if (nd < 2) continue;
        qsort(d, (size_t)nd, sizeof(*d), i64_cmp);
        int64_t med = nd % 2 ? d[nd / 2] : (d[nd / 2 - 1] + d[nd / 2]) / 2;
        for (int k = 0; k < res->nranks; k++) {
            for (size_t j = 0; j < res->ranks[k].nsteps; j++) {
                const tr_step *s = &res->ranks[k].steps[j];
                if (s->num != num) continue;
                if (s->dur > med + med / 10 && s->dur - med >= 100000) {
                    if (res->nstragglers == cap) {
                        size_t nc = cap ? cap * 2 : 16;
                        if (nc > 100000) break;
                        tr_straggler *ns = realloc(res->stragglers, nc * sizeof(*ns));
                        if (!ns) { free(d); return TPF_ENOMEM; }
                        res->stragglers = ns;
                        cap = nc;
                    }
                    res->stragglers[res->nstragglers++] =
                        (tr_straggler){res->ranks[k].rank, num, s->dur, med};
                }
                break;
            }
        }
    }
    free(d);
    return 0;
}

static void rank_out_free(tr_rank *k)
{
    free(k->path);
    for (size_t j = 0; j < k->nkernels; j++) free(k->kernels[j].name);
    for (size_t j = 0; j < k->nops_self; j++) free(k->ops_self[j].name);
    for (size_t j = 0; j < k->nops_total; j++) free(k->ops_total[j].name);
    free(k->kernels);
    free(k->ops_self);
    free(k->ops_total);
    free(k->streams);
    free(k->steps);
    trace_extra_rank_free(k);
}

void trace_result_free(trace_result *r)
{
    if (!r) return;
    for (int i = 0; i < r->nranks; i++) {
        rank_out_free(&r->ranks[i]);
    }
    free(r->ranks);
    free(r->stragglers);
    for (size_t i = 0; i < r->nwarnings; i++) free(r->warnings[i]);
    free(r->warnings);
    free(r);
}

/* ---- ranks in parallel ---------------------------------------------------- */

/* Ranks are independent: pass A over all files, then (after HTA's trim
 * decision, which needs every file's steps) pass B, each on a pool of
 * threads taking the next file; every rank's state is its own. */
typedef struct pool {
    rankst *rs;
    const char *const *paths;
    const trace_opts *o;
    tr_rank *outs;
    int *sel, *rcs;
    char (*errs)[512];
    int n, trim, phase, next;
} pool;

static void *pool_main(void *arg)
{
    pool *p = arg;
    for (;;) {
        int i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        if (i >= p->n) return NULL;
        if (p->phase == 0) {
            p->rcs[i] = pass_a(&p->rs[i], p->paths[i], p->o->compat_hta, p->errs[i], sizeof(p->errs[i]));
        } else if (p->sel[i]) {
            p->rcs[i] = pass_b(&p->rs[i], p->o, p->trim, &p->outs[i], p->errs[i], sizeof(p->errs[i]));
            rank_free(&p->rs[i]); /* what stays is the summary */
        }
    }
}

int trace_jobs(const trace_opts *o, int n)
{
    long j = o->jobs;
    if (j <= 0) j = sysconf(_SC_NPROCESSORS_ONLN);
    if (j < 1) j = 1;
    if (j > TRACE_MAX_JOBS) j = TRACE_MAX_JOBS;
    if (j > n) j = n;
    return (int)j;
}

/* Run one phase over all files; the first failing file's error (by file
 * order, so the message does not depend on scheduling) is returned. */
static int pool_run(pool *p, int phase, int jobs, char *err, size_t errlen)
{
    pthread_t th[TRACE_MAX_JOBS];
    int started = 0;
    p->phase = phase;
    p->next = 0;
    for (int k = 1; k < jobs; k++)
        if (pthread_create(&th[started], NULL, pool_main, p) == 0) started++;
    pool_main(p); /* the caller works too; with no thread it does it all */
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    for (int i = 0; i < p->n; i++)
        if (p->rcs[i]) {
            snprintf(err, errlen, "%s", p->errs[i]);
            return p->rcs[i];
        }
    return 0;
}

static int rank_cmp(const void *a, const void *b)
{
    const tr_rank *x = a, *y = b;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

int trace_analyze(const char *const *paths, int n, const trace_opts *opts, trace_result **out,
                  char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!paths || n <= 0 || !out || !opts) {
        snprintf(err, errlen, "no trace files given");
        return TPF_EINVAL;
    }
    *out = NULL;
    trace_result *res = calloc(1, sizeof(*res));
    rankst *rs = calloc((size_t)n, sizeof(*rs));
    if (!res || !rs) {
        free(res);
        free(rs);
        snprintf(err, errlen, "out of memory");
        return TPF_ENOMEM;
    }
    res->opts = *opts;
    res->ranks = calloc((size_t)n, sizeof(tr_rank));
    pool pl = {.rs = rs, .paths = paths, .o = opts, .n = n, .sel = calloc((size_t)n, sizeof(int)),
               .rcs = calloc((size_t)n, sizeof(int))};
    pl.errs = calloc((size_t)n, sizeof(*pl.errs));
    int rc = res->ranks && pl.sel && pl.rcs && pl.errs ? 0 : TPF_ENOMEM;
    int jobs = trace_jobs(opts, n);
    /* Pass A over every file first: HTA trims the last step only when the
     * traces together name at least two distinct ProfilerSteps. */
    if (!rc) rc = pool_run(&pl, 0, jobs, err, errlen);
    int trim = 0;
    if (!rc && opts->compat_hta) {
        long first = 0;
        int have = 0;
        for (int i = 0; i < n && trim == 0; i++)
            for (uint32_t j = 0; j < rs[i].nsteps; j++) {
                if (!have) { first = rs[i].steps[j].num; have = 1; }
                else if (rs[i].steps[j].num != first) { trim = 1; break; }
            }
    }
    long step_min = 0, step_max = 0;
    int have_steps = 0, steps_in_range = 0;
    for (int i = 0; i < n && !rc; i++) {
        tr_rank *k = &res->ranks[i];
        long rank = rs[i].meta.has_rank ? rs[i].meta.rank : trace_rank_from_name(paths[i]);
        k->rank_from = rs[i].meta.has_rank ? "distributedInfo" : rank >= 0 ? "file name" : "order";
        if (rank < 0) rank = i;
        if (opts->has_rank && rank != opts->rank) {
            rank_free(&rs[i]);
            continue;
        }
        pl.sel[i] = 1;
        k->rank = rank;
        k->path = dupstr(paths[i]);
        if (!k->path) rc = TPF_ENOMEM;
        k->bytes = rs[i].meta.bytes;
        k->events = rs[i].meta.events;
        k->records = rs[i].nrec;
        k->array_form = rs[i].meta.array_form;
        k->unterminated = rs[i].meta.unterminated;
        k->bad_numbers = rs[i].badnum;
        k->nonfinite = rs[i].meta.nonfinite;
        k->trailing = rs[i].meta.trailing;
        k->negdur = rs[i].negdur;
        for (uint32_t j = 0; j < rs[i].nsteps; j++) {
            long sn = rs[i].steps[j].num;
            if (!have_steps || sn < step_min) step_min = sn;
            if (!have_steps || sn > step_max) step_max = sn;
            have_steps = 1;
            if (sn >= opts->step_lo && sn <= opts->step_hi) steps_in_range = 1;
        }
    }
    pl.trim = trim;
    pl.outs = res->ranks;
    if (!rc) rc = pool_run(&pl, 1, jobs, err, errlen);
    /* Keep the selected ranks, in file order (sorted by rank below). */
    for (int i = 0; res->ranks && i < n; i++) {
        if (pl.sel[i]) res->ranks[res->nranks++] = res->ranks[i];
        else free(res->ranks[i].path);
    }
    free(pl.sel);
    free(pl.rcs);
    free(pl.errs);
    for (int i = 0; i < n; i++) rank_free(&rs[i]);
    free(rs);
    if (!rc && opts->has_rank && res->nranks == 0) {
        snprintf(err, errlen, "no trace of rank %ld among the %d file(s)", opts->rank, n);
        rc = TPF_EINVAL;
    }
    if (!rc && opts->has_steps && !steps_in_range) {
        /* Say what the traces have, not "no GPU activity". */
        if (have_steps)
            snprintf(err, errlen, "no steps in that range: --steps %ld:%ld, the trace%s%ld..%ld",
                     opts->step_lo, opts->step_hi, n > 1 ? "s have ProfilerStep#" : " has ProfilerStep#",
                     step_min, step_max);
        else
            snprintf(err, errlen, "no steps in that range: --steps %ld:%ld, the trace%s no ProfilerStep#N",
                     opts->step_lo, opts->step_hi, n > 1 ? "s name" : " names");
        rc = TPF_EINVAL;
    }
    if (!rc) {
        qsort(res->ranks, (size_t)res->nranks, sizeof(tr_rank), rank_cmp);
        rc = find_stragglers(res);
    }
    /* Two files that claim one rank: usually a directory holding two runs. */
    for (int i = 1; !rc && i < res->nranks; i++)
        if (res->ranks[i].rank == res->ranks[i - 1].rank)
            rc = trace_warn(res, "rank %ld claimed by two files (%s from %s, %s from %s): analysed both as rank %ld",
                            res->ranks[i].rank, res->ranks[i - 1].path, res->ranks[i - 1].rank_from,
                            res->ranks[i].path, res->ranks[i].rank_from, res->ranks[i].rank);
    for (int i = 0; !rc && i < res->nranks; i++) {
        const tr_rank *k = &res->ranks[i];
        if (k->bad_numbers)
            rc = trace_warn(res, "%s: %llu event(s) skipped: a ts or dur out of range (such as 1e999)",
                            k->path, (unsigned long long)k->bad_numbers);
        if (!rc && k->nonfinite)
            rc = trace_warn(res, "%s: %llu NaN/Infinity value(s) (not JSON; Python's json reads them): "
                                 "read as not a number", k->path, (unsigned long long)k->nonfinite);
        if (!rc && k->trailing)
            rc = trace_warn(res, "%s: %llu byte(s) after the end of the gzip data: ignored", k->path,
                            (unsigned long long)k->trailing);
        if (!rc && k->negdur)
            rc = trace_warn(res, "%s: %llu event(s) with a negative duration", k->path,
                            (unsigned long long)k->negdur);
        if (!rc && k->dups)
            rc = trace_warn(res, "%s: %llu duplicate event(s) (same name, category, thread, times and "
                                 "correlation id as another): counted twice, as HTA does", k->path,
                            (unsigned long long)k->dups);
        if (!rc && k->collide)
            rc = trace_warn(res, "%s: %llu launch call(s) reuse a correlation id still in use: their device "
                                 "work is joined to the later call", k->path, (unsigned long long)k->collide);
    }
    if (rc) {
        if (err && errlen && !err[0]) snprintf(err, errlen, "%s", tpf_strerror(rc));
        trace_result_free(res);
        return rc;
    }
    *out = res;
    return 0;
}

size_t trace_result_warnings(const trace_result *r, const char *const **lines)
{
    *lines = (const char *const *)r->warnings;
    return r->nwarnings;
}

int trace_warn(trace_result *r, const char *fmt, ...)
{
    if (r->nwarnings >= 64) return 0;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    char **nw = realloc(r->warnings, (r->nwarnings + 1) * sizeof(*nw));
    if (!nw) return TPF_ENOMEM;
    r->warnings = nw;
    if (!(nw[r->nwarnings] = dupstr(line))) return TPF_ENOMEM;
    r->nwarnings++;
    return 0;
}

/* ---- one window's events (critical path) --------------------------------- */

static int tw_kind(int cat)
{
    switch (cat) {
    case C_CPU_OP: return TW_CPU; /* user annotations are ranges, not work (as HTA) */
    case C_RUNTIME: case C_DRIVER: return TW_RUNTIME;
    case C_KERNEL: case C_MTIA: return TW_KERNEL;
    case C_MEMCPY: return TW_MEMCPY;
    case C_MEMSET: return TW_MEMSET;
    case C_SYNC: return TW_SYNC;
    default: return TW_OTHER;
    }
}

void trace_window_free(tr_window *w)
{
    free(w->ev);
    free(w->arena);
    free(w->noff);
    free(w->threads);
    memset(w, 0, sizeof(*w));
}

/* Correlation ids launched inside the window (open addressing, grows). */
typedef struct cset {
    int64_t *v;
    size_t n, cap;
} cset;

static int cset_add(cset *s, int64_t c)
{
    if ((s->n + 1) * 2 > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 1024;
        int64_t *nv = malloc(nc * sizeof(*nv));
        if (!nv) return TPF_ENOMEM;
        for (size_t i = 0; i < nc; i++) nv[i] = -1;
        for (size_t i = 0; i < s->cap; i++) {
            if (s->v[i] == -1) continue;
            size_t j = corr_hash(s->v[i]) & (nc - 1);
            while (nv[j] != -1) j = (j + 1) & (nc - 1);
            nv[j] = s->v[i];
        }
        free(s->v);
        s->v = nv;
        s->cap = nc;
    }
    size_t j = corr_hash(c) & (s->cap - 1);
    while (s->v[j] != -1) {
        if (s->v[j] == c) return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->v[j] = c;
    s->n++;
    return 0;
}

/* Forget c (backward-shift deletion: no tombstones). */
static void cset_del(cset *s, int64_t c)
{
    if (!s->cap) return;
    size_t mask = s->cap - 1, i = corr_hash(c) & mask;
    while (s->v[i] != c) {
        if (s->v[i] == -1) return;
        i = (i + 1) & mask;
    }
    s->n--;
    for (size_t k = i;;) {
        s->v[i] = -1;
        for (;;) {
            k = (k + 1) & mask;
            if (s->v[k] == -1) return;
            size_t h = corr_hash(s->v[k]) & mask;
            /* v[k] stays where it is when its home lies cyclically in (i, k] */
            if (i <= k ? (i < h && h <= k) : (i < h || h <= k)) continue;
            s->v[i] = s->v[k];
            i = k;
            break;
        }
    }
}

static int cset_has(const cset *s, int64_t c)
{
    if (!s->cap) return 0;
    size_t j = corr_hash(c) & (s->cap - 1);
    while (s->v[j] != -1) {
        if (s->v[j] == c) return 1;
        j = (j + 1) & (s->cap - 1);
    }
    return 0;
}

/* The latest end of device work per stream, over the whole trace: whether a
 * stream was still busy when a window's kernel was launched, with work
 * launched before the window (open addressing; at most MAX_STREAMS). */
typedef struct send_ent {
    int64_t stream, end;
    int used;
} send_ent;

static send_ent *send_get(send_ent *v, int64_t s)
{
    uint32_t j = corr_hash(s) & (MAX_STREAMS - 1);
    for (uint32_t k = 0; k < MAX_STREAMS; k++, j = (j + 1) & (MAX_STREAMS - 1)) {
        if (!v[j].used) {
            v[j] = (send_ent){s, INT64_MIN, 1};
            return &v[j];
        }
        if (v[j].stream == s) return &v[j];
    }
    return NULL;
}

int trace_window(const char *path, const tw_select *sel, tr_window *w, char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    rankst r;
    memset(&r, 0, sizeof(r));
    merger m;
    memset(&m, 0, sizeof(m));
    cset cs = {0}, joined = {0}, queued = {0};
    send_ent *sends = calloc(MAX_STREAMS, sizeof(*sends));
    if (!sends) return TPF_ENOMEM;
    int rc = pass_a(&r, path, sel->hta, err, errlen); /* hta: HTA's microseconds */
    if (rc) goto out;
    trec t;
    int found = 0;
    if (sel->ann) {
        /* the index-th range of that annotation, in time order; a name that
         * no range has exactly matches as a part of names (HTA:
         * "ProfilerStep" stands for every ProfilerStep#N) */
        long k = 0;
        int exact = 0;
        for (uint32_t i = 0; i < r.names.n && !exact; i++) exact = strcmp(st_str(&r.names, i), sel->ann) == 0;
        if ((rc = merger_open(&m, &r))) goto io;
        while ((rc = merger_next(&m, &t)) > 0) {
            if (t.cat != C_USER_ANN) continue;
            const char *an = st_str(&r.names, t.name);
            if (exact ? strcmp(an, sel->ann) != 0 : !strstr(an, sel->ann)) continue;
            if (k++ == sel->ann_index) {
                w->lo = t.ts;
                w->hi = t.ts + t.dur;
                found = 1;
                break;
            }
        }
        merger_close(&m);
        memset(&m, 0, sizeof(m));
        if (rc < 0) goto io;
        if (!found) {
            snprintf(err, errlen, "%s: no range #%ld of annotation '%s' (it occurs %ld time%s)", path,
                     sel->ann_index, sel->ann, k, k == 1 ? "" : "s");
            rc = TPF_EINVAL;
            goto out;
        }
        snprintf(w->what, sizeof(w->what), "%.200s #%ld", sel->ann, sel->ann_index);
    } else if (r.nsteps) {
        tstep *s = NULL;
        qsort(r.steps, r.nsteps, sizeof(tstep), step_cmp);
        if (sel->has_step) {
            for (uint32_t i = 0; i < r.nsteps; i++)
                if (r.steps[i].num == sel->step) s = &r.steps[i];
            if (!s) {
                snprintf(err, errlen, "no steps in that range: %s has ProfilerStep#%ld..%ld, not #%ld", path,
                         r.steps[0].num, r.steps[r.nsteps - 1].num, sel->step);
                rc = TPF_EINVAL;
                goto out;
            }
        } else {
            s = &r.steps[r.nsteps >= 2 ? r.nsteps - 2 : 0];
        }
        w->lo = s->ts;
        w->hi = s->ts + s->dur;
        snprintf(w->what, sizeof(w->what), "ProfilerStep#%ld", s->num);
    } else if (sel->has_step) {
        snprintf(err, errlen, "no steps in that range: %s names no ProfilerStep#N", path);
        rc = TPF_EINVAL;
        goto out;
    } else {
        w->lo = INT64_MIN;
        w->hi = INT64_MAX;
        snprintf(w->what, sizeof(w->what), "the whole trace");
    }
    /* Collect: CPU events inside the window, then the device work whose
     * launch is among them (it may run after the window ends). */
    size_t cap = 0;
    if ((rc = merger_open(&m, &r))) goto io;
    while ((rc = merger_next(&m, &t)) > 0) {
        if (sel->hta && r.any_tsfrac) t.dur += t.rdelta;
        int kind = tw_kind(t.cat);
        int64_t stream = rec_stream(&t);
        int device = (kind == TW_KERNEL || kind == TW_MEMCPY || kind == TW_MEMSET) && stream >= 0;
        if (t.cat == C_MEMEV || kind == TW_OTHER) continue;
        /* device kinds without a stream are not device work: CPU side, ignored */
        if (!device && kind != TW_SYNC && kind != TW_CPU && kind != TW_RUNTIME) continue;
        int64_t prev_end = INT64_MIN;
        /* HTA's queue holds only work whose launch call (its list) is in
         * the trace: the launches not yet joined (bounded: orphans stop
         * being added past 1M) */
        if (sel->hta && kind == TW_RUNTIME && t.corr >= 0 && queued.n < (1u << 20) &&
            hta_queue_name(st_str(&r.names, t.name)) && (rc = cset_add(&queued, t.corr)))
            goto out;
        int counts = device && (!sel->hta || cset_has(&queued, t.corr));
        if (device && sel->hta) cset_del(&queued, t.corr);
        if (counts) {
            send_ent *se = send_get(sends, stream);
            if (se) {
                prev_end = se->end;
                if (t.ts + t.dur > se->end) se->end = t.ts + t.dur;
            }
        }
        if (device || kind == TW_SYNC) {
            if (t.corr < 0 || !cset_has(&cs, t.corr)) continue;
            /* HTA joins a launch to one device row: of a CUDA graph's
             * kernels (one correlation) it keeps the first */
            if (device && sel->hta) {
                if (cset_has(&joined, t.corr)) continue;
                if ((rc = cset_add(&joined, t.corr))) goto out;
            }
        } else {
            /* HTA: what starts in the window and lasts (a 0 us event
             * breaks its call stacks); default: what lies inside it */
            if (t.ts < w->lo || (sel->hta ? t.ts > w->hi || t.dur <= 0 : t.ts + t.dur > w->hi)) continue;
            if (kind == TW_RUNTIME && t.corr >= 0 && (rc = cset_add(&cs, t.corr))) goto out;
        }
        if (w->n >= TW_MAX_EVENTS) {
            snprintf(err, errlen, "%s: %s has more than %u events: choose a shorter range", path, w->what,
                     TW_MAX_EVENTS);
            rc = TPF_ETOOBIG;
            goto out;
        }
        if (w->n == cap) {
            size_t nc = cap ? cap * 2 : 4096;
            tw_ev *nv = realloc(w->ev, nc * sizeof(*nv));
            if (!nv) { rc = TPF_ENOMEM; goto out; }
            w->ev = nv;
            cap = nc;
        }
        w->ev[w->n++] = (tw_ev){t.ts, t.dur, t.corr, stream, prev_end, t.name, t.thread, (uint8_t)kind};
    }
    if (rc < 0) goto io;
    rc = 0;
    /* names and threads outlive the rank state */
    w->nnames = r.names.n;
    w->noff = malloc((r.names.n ? r.names.n : 1) * sizeof(uint32_t));
    w->arena = malloc(r.names.arena.len ? r.names.arena.len : 1);
    w->nthreads = r.nthreads;
    w->threads = malloc((r.nthreads ? r.nthreads : 1) * sizeof(*w->threads));
    if (!w->noff || !w->arena || !w->threads) { rc = TPF_ENOMEM; goto out; }
    if (r.names.arena.len) memcpy(w->arena, r.names.arena.data, r.names.arena.len); /* empty: data is NULL */
    for (uint32_t i = 0; i < r.names.n; i++) w->noff[i] = r.names.v[i].off;
    for (uint32_t i = 0; i < r.nthreads; i++) {
        w->threads[i][0] = r.threads[i].pid;
        w->threads[i][1] = r.threads[i].tid;
    }
    goto out;
io:
    if (rc < 0 && !err[0]) snprintf(err, errlen, "%s: cannot read back the spill file", path);
out:
    if (rc && rc != TPF_EINVAL && !err[0]) snprintf(err, errlen, "%s: %s", path, tpf_strerror(rc));
    merger_close(&m);
    free(cs.v);
    free(joined.v);
    free(queued.v);
    free(sends);
    rank_free(&r);
    if (rc) trace_window_free(w);
    return rc;
}

/* ---- --counters: the trace plus its time series as counter events -------- */

typedef struct cw_st {
    FILE *f;
    int first;
} cw_st;

static int cw_copy(void *ud, const trace_ev *ev)
{
    cw_st *s = ud;
    if (!s->first && fputs(",\n", s->f) == EOF) return TPF_EIO;
    s->first = 0;
    if (fwrite(ev->raw, 1, ev->raw_len, s->f) != ev->raw_len) return TPF_EIO;
    return 0;
}

static void cw_us(char *b, size_t n, int64_t ns)
{
    int64_t a = ns < 0 ? -ns : ns;
    snprintf(b, n, "%s%lld.%03lld", ns < 0 ? "-" : "", (long long)(a / 1000), (long long)(a % 1000));
}

int trace_write_counters(const char *path, const trace_opts *opts, const char *out_path, char *err,
                         size_t errlen)
{
    rankst r, d;
    memset(&r, 0, sizeof(r));
    memset(&d, 0, sizeof(d));
    tr_rank out;
    memset(&out, 0, sizeof(out));
    merger m;
    memset(&m, 0, sizeof(m));
    FILE *f = NULL;
    afile_out o;
    o.f = NULL;
    double *val = NULL;
    int rc = pass_a(&r, path, opts->compat_hta, err, errlen);
    if (rc) goto out;
    int trim = 0;
    for (uint32_t j = 1; opts->compat_hta && j < r.nsteps && !trim; j++) trim = r.steps[j].num != r.steps[0].num;
    buf_init(&d.names.arena, 1);
    d.chunk = malloc(CHUNK_RECS * sizeof(trec));
    val = calloc(TS_MAX_SERIES, sizeof(double));
    if (!d.chunk || !val) { rc = TPF_ENOMEM; goto nomem; }
    r.dsink = &d;
    if ((rc = pass_b(&r, opts, trim, &out, err, errlen))) goto out;
    if (d.spill) {
        if ((rc = spill_chunk(&d))) goto io;
    } else {
        qsort(d.chunk, d.nchunk, sizeof(trec), rec_cmp);
    }
    if ((rc = afile_out_open(&o, out_path, err, errlen))) goto out;
    f = o.f;
    fputs("{", f);
    if (r.meta.has_rank) fprintf(f, "\"distributedInfo\": {\"rank\": %ld},\n", r.meta.rank);
    if (r.meta.has_base) fprintf(f, "\"baseTimeNanoseconds\": %lld,\n", (long long)r.meta.base_ns);
    fputs("\"traceEvents\": [\n", f);
    cw_st cs = {f, 1};
    char e2[512];
    e2[0] = '\0';
    if ((rc = trace_read(path, cw_copy, &cs, TRACE_RAW, NULL, e2, sizeof(e2)))) {
        snprintf(err, errlen, "%s", e2[0] ? e2 : tpf_strerror(rc));
        goto out;
    }
    /* the changes in time order, each series' running value after each */
    if ((rc = merger_open(&m, &d))) goto io;
    trec t;
    while ((rc = merger_next(&m, &t)) > 0) {
        const tseries *s = &r.ts.v[t.name];
        double v;
        memcpy(&v, &t.corr, sizeof(v));
        val[t.name] += v;
        if (fabs(val[t.name]) < 1e-9) val[t.name] = 0; /* what the sums leave of a copy that ended */
        char ts[64];
        cw_us(ts, sizeof(ts), t.ts);
        long long pid = t.thread < r.nthreads ? (long long)r.threads[t.thread].pid : -1;
        if (s->kind == TS_QUEUE)
            fprintf(f, ",\n{\"ph\": \"C\", \"name\": \"Queue Length\", \"pid\": %lld, \"id\": %lld, \"ts\": %s, "
                       "\"args\": {\"Queue Length\": %.0f}}",
                    pid, (long long)s->key, ts, val[t.name]);
        else {
            jw j;
            buf nb;
            buf_init(&nb, 1 << 16);
            jw_init(&j, &nb, 0);
            jw_str(&j, st_str(&r.names, s->name));
            fprintf(f, ",\n{\"ph\": \"C\", \"name\": %.*s, \"pid\": %lld, \"ts\": %s, \"args\": {\"Memcpy BW\": %.9g}}",
                    (int)nb.len, nb.data ? nb.data : "\"\"", pid, ts, val[t.name]);
            buf_free(&nb);
        }
    }
    if (rc < 0) goto io;
    rc = 0;
    fputs("\n]}\n", f);
    rc = afile_out_commit(&o, err, errlen);
    goto out;
io:
    snprintf(err, errlen, "%s: cannot write or read back the spill file", path);
    goto out;
nomem:
    snprintf(err, errlen, "%s: out of memory", path);
out:
    merger_close(&m);
    if (o.f) rc = afile_out_fail(&o, rc, err, errlen);
    free(val);
    rank_out_free(&out);
    r.dsink = NULL;
    rank_free(&d);
    rank_free(&r);
    return rc;
}
