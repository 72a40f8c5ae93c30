/* A fake libnvidia-ml.so.1 for machines without an NVIDIA driver.
 *
 * It exports the NVML C symbols trainperf uses and plays a scenario read, at
 * the first nvmlInit (and again after the last nvmlShutdown), from the file
 * named by env TRAINPERF_FAKE_NVML. Unset: one default GPU. Built twice:
 * BUILD/fakes/libnvidia-ml.so.1 exports the versioned names too (_v2, _v3,
 * ClocksEventReasons, FieldValues...); with -DFAKE_NVML_LEGACY,
 * BUILD/fakes/legacy/libnvidia-ml.so.1 exports only the old unversioned ones,
 * so dlsym really fails for the new names.
 *
 * Scenario format: one statement per line, '#' starts a comment.
 *
 *   gpus N                     device count (default 1)
 *   driver 550.54.15           nvmlSystemGetDriverVersion
 *   nvml 12.550.54.15          nvmlSystemGetNVMLVersion
 *   cuda 12040                 nvmlSystemGetCudaDriverVersion
 *   err FN CODE [from N] [to M]       global function FN (e.g. Init,
 *                                     DeviceGetCount) returns CODE on calls N..M
 *   dev I name TEXT...         (rest of the line)
 *   dev I uuid GPU-...
 *   dev I KEY SEQ              a value per call: the k-th read of KEY gets the
 *                              k-th element, the last one repeats. SEQ is
 *                              comma separated: 42, 0x4, 7*3 (7 three times),
 *                              !3 (that call returns NVML error 3). A KEY
 *                              never given is NOT_SUPPORTED.
 *       keys: util mem_util (%), mem_total mem_used mem_reserved (bytes),
 *             temp (C), power_mw, energy_mj (cumulative), sm_mhz, mem_mhz,
 *             reasons (clock-event mask), pcie_tx_kbps pcie_rx_kbps
 *             (nvmlDeviceGetPcieThroughput, which sleeps pcie_block_ms, default
 *             20), pcie_tx_bytes pcie_rx_bytes (fields 197/198, cumulative),
 *             nvlink_links (field 91), nvlink_tx_kib nvlink_rx_kib (fields
 *             138/139, cumulative KiB)
 *   dev I field_dt_us N        field value timestamps advance N us per
 *                              nvmlDeviceGetFieldValues call (default 1000000)
 *   dev I procs SETS           compute processes per call: SETS is ';'
 *                              separated, a set is pid:mem_bytes,... or '-'
 *                              (none); mem "na" = NVML_VALUE_NOT_AVAILABLE;
 *                              a pid written pidfile=PATH is read from that
 *                              file at each call (for processes started
 *                              after the scenario, e.g. under `trainperf run`;
 *                              left out while the file holds no pid)
 *   dev I gprocs SETS          graphics processes, same syntax
 *   dev I putil SETS           process utilisation samples, pid:sm_pct,...
 *                              (never given: NOT_SUPPORTED; procs/gprocs
 *                              never given: no processes);
 *                              each call's samples carry a newer timestamp;
 *                              samples not newer than lastSeen are not
 *                              returned (NOT_FOUND when none are left)
 *   dev I proc_stride 16|24|32 layout the _v3 process calls write (default
 *                              24; _v2 writes 24, the unversioned one 16)
 *   dev I mig MIG-uuid,...     MIG instances (GetMaxMigDeviceCount/...ByIndex)
 *   dev I err FN CODE [from N] [to M]   device function FN (name without the
 *                              "nvml" prefix, e.g. DeviceGetPowerUsage, or *
 *                              for every device function) returns CODE on its
 *                              calls N..M (1-based, counted per device and
 *                              function)
 *   dev I lost_at N            every device function returns 15
 *                              (GPU_IS_LOST) from its N-th call on
 *
 * Test hooks (exported, not NVML): fake_nvml_calls(dev, "DeviceGetX")
 * returns how often a function was called, fake_nvml_last_tid(dev, fn) the
 * thread id of its last caller. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

#define MAXDEV 16
#define MAXSEQ 64
#define MAXSET 16
#define MAXPROC 32
#define MAXERR 64
#define MAXMIG 8

enum {
    K_UTIL,
    K_MEM_UTIL,
    K_MEM_TOTAL,
    K_MEM_USED,
    K_MEM_RESERVED,
    K_TEMP,
    K_POWER,
    K_ENERGY,
    K_SM_MHZ,
    K_MEM_MHZ,
    K_REASONS,
    K_PCIE_TX_KBPS,
    K_PCIE_RX_KBPS,
    K_PCIE_TX_BYTES,
    K_PCIE_RX_BYTES,
    K_NVL_LINKS,
    K_NVL_TX,
    K_NVL_RX,
    K_N
};
static const char *const key_names[K_N] = {
    "util",         "mem_util",      "mem_total",     "mem_used",      "mem_reserved",
    "temp",         "power_mw",      "energy_mj",     "sm_mhz",        "mem_mhz",
    "reasons",      "pcie_tx_kbps",  "pcie_rx_kbps",  "pcie_tx_bytes", "pcie_rx_bytes",
    "nvlink_links", "nvlink_tx_kib", "nvlink_rx_kib",
};

typedef struct seq {
    int n;
    unsigned long long v[MAXSEQ];
    int code[MAXSEQ];
} seq;

typedef struct pset {
    int n;
    unsigned pid[MAXPROC];
    unsigned long long val[MAXPROC];
} pset;

typedef struct psets {
    int n;
    pset s[MAXSET];
} psets;

typedef struct fdev {
    int self; /* index; a handle is a pointer to this */
    char name[96], uuid[96];
    seq key[K_N];
    unsigned key_reads[K_N];
    psets procs, gprocs, putil;
    unsigned procs_calls, gprocs_calls, putil_calls, field_calls;
    int stride;
    long long field_dt_us;
    long pcie_block_ms;
    int nmig;
    char mig[MAXMIG][96];
    struct fdev *mig_dev; /* MIG handles point into mig_handles */
} fdev;

typedef struct ferr {
    int dev; /* -1: global */
    char fn[64];
    int code;
    unsigned from, to;
} ferr;

typedef struct fcount {
    int dev;
    char fn[64];
    unsigned n;
    long tid;
} fcount;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int refcount;
static int ngpus = 1;
static char driver[96] = "999.99.99-fake";
static char nvml_ver[96] = "99.999.99-fake";
static int cuda_ver = 12040;
static fdev devs[MAXDEV];
static fdev mig_handles[MAXDEV][MAXMIG];
static ferr errs[MAXERR];
static int nerr;
static fcount counts[512];
static int ncount;
/* pids given as pidfile=PATH: the set holds PIDFILE_TAG | index here */
#define PIDFILE_TAG 0x80000000u
#define MAXPIDFILE 16
static char pidfiles[MAXPIDFILE][256];
static int npidfile;

/* ---- scenario parsing -------------------------------------------------- */

static unsigned long long parse_num(const char *s, char **end)
{
    return strtoull(s, end, 0);
}

static void parse_seq(seq *q, char *s)
{
    char *save = NULL;
    q->n = 0;
    for (char *t = strtok_r(s, ",", &save); t && q->n < MAXSEQ; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        int code = 0;
        unsigned long long v = 0, rep = 1;
        char *end = t;
        if (*t == '!')
            code = (int)strtol(t + 1, &end, 10);
        else
            v = parse_num(t, &end);
        if (*end == '*') rep = strtoull(end + 1, NULL, 10);
        for (unsigned long long r = 0; r < rep && q->n < MAXSEQ; r++) {
            q->v[q->n] = v;
            q->code[q->n] = code;
            q->n++;
        }
    }
}

static void parse_sets(psets *ps, char *s)
{
    char *save = NULL;
    ps->n = 0;
    for (char *t = strtok_r(s, ";", &save); t && ps->n < MAXSET; t = strtok_r(NULL, ";", &save)) {
        pset *p = &ps->s[ps->n++];
        p->n = 0;
        char *save2 = NULL;
        for (char *e = strtok_r(t, ",", &save2); e && p->n < MAXPROC;
             e = strtok_r(NULL, ",", &save2)) {
            while (*e == ' ')
                e++;
            if (*e == '-' || *e == '\0' || *e == '\n') continue;
            char *colon = strchr(e, ':');
            if (strncmp(e, "pidfile=", 8) == 0) {
                if (npidfile >= MAXPIDFILE) continue;
                size_t len = colon ? (size_t)(colon - e - 8) : strlen(e + 8);
                if (len >= sizeof(pidfiles[0])) len = sizeof(pidfiles[0]) - 1;
                memcpy(pidfiles[npidfile], e + 8, len);
                pidfiles[npidfile][len] = '\0';
                p->pid[p->n] = PIDFILE_TAG | (unsigned)npidfile++;
            } else {
                p->pid[p->n] = (unsigned)strtoul(e, NULL, 10);
            }
            if (colon && strncmp(colon + 1, "na", 2) == 0)
                p->val[p->n] = ULLONG_MAX;
            else
                p->val[p->n] = colon ? parse_num(colon + 1, NULL) : 0;
            p->n++;
        }
    }
}

static void parse_err(int dev, char *rest)
{
    if (nerr >= MAXERR) return;
    ferr *e = &errs[nerr];
    char fn[64];
    int code;
    unsigned a = 1, b = UINT_MAX;
    char w1[16] = "", w2[16] = "";
    unsigned v1 = 0, v2 = 0;
    int got = sscanf(rest, "%63s %d %15s %u %15s %u", fn, &code, w1, &v1, w2, &v2);
    if (got < 2) return;
    if (got >= 4 && strcmp(w1, "from") == 0) a = v1;
    if (got >= 4 && strcmp(w1, "to") == 0) b = v1;
    if (got >= 6 && strcmp(w2, "to") == 0) b = v2;
    e->dev = dev;
    snprintf(e->fn, sizeof(e->fn), "%s", fn);
    e->code = code;
    e->from = a;
    e->to = b;
    nerr++;
}

static void reset_device(int i)
{
    fdev *d = &devs[i];
    memset(d, 0, sizeof(*d));
    d->self = i;
    snprintf(d->name, sizeof(d->name), "Fake GPU %d", i);
    snprintf(d->uuid, sizeof(d->uuid), "GPU-fa4e0000-0000-4000-8000-%012d", i);
    d->stride = 24;
    d->field_dt_us = 1000000;
    d->pcie_block_ms = 20;
}

static void parse_line(char *l)
{
    char *hash = strchr(l, '#');
    if (hash) *hash = '\0';
    size_t len = strlen(l);
    while (len && (l[len - 1] == '\n' || l[len - 1] == ' ' || l[len - 1] == '\r'))
        l[--len] = '\0';
    while (*l == ' ' || *l == '\t')
        l++;
    if (!*l) return;
    char word[32];
    int off = 0;
    if (sscanf(l, "%31s %n", word, &off) < 1) return;
    char *rest = l + off;
    if (strcmp(word, "gpus") == 0) {
        ngpus = (int)strtol(rest, NULL, 10);
        if (ngpus < 0) ngpus = 0;
        if (ngpus > MAXDEV) ngpus = MAXDEV;
    } else if (strcmp(word, "driver") == 0) {
        snprintf(driver, sizeof(driver), "%s", rest);
    } else if (strcmp(word, "nvml") == 0) {
        snprintf(nvml_ver, sizeof(nvml_ver), "%s", rest);
    } else if (strcmp(word, "cuda") == 0) {
        cuda_ver = (int)strtol(rest, NULL, 10);
    } else if (strcmp(word, "err") == 0) {
        parse_err(-1, rest);
    } else if (strcmp(word, "dev") == 0) {
        int i = -1, off2 = 0;
        char key[32];
        if (sscanf(rest, "%d %31s %n", &i, key, &off2) < 2 || i < 0 || i >= MAXDEV) return;
        fdev *d = &devs[i];
        char *val = rest + off2;
        if (strcmp(key, "name") == 0)
            snprintf(d->name, sizeof(d->name), "%s", val);
        else if (strcmp(key, "uuid") == 0)
            snprintf(d->uuid, sizeof(d->uuid), "%s", val);
        else if (strcmp(key, "procs") == 0)
            parse_sets(&d->procs, val);
        else if (strcmp(key, "gprocs") == 0)
            parse_sets(&d->gprocs, val);
        else if (strcmp(key, "putil") == 0)
            parse_sets(&d->putil, val);
        else if (strcmp(key, "proc_stride") == 0)
            d->stride = (int)strtol(val, NULL, 10);
        else if (strcmp(key, "field_dt_us") == 0)
            d->field_dt_us = strtoll(val, NULL, 10);
        else if (strcmp(key, "pcie_block_ms") == 0)
            d->pcie_block_ms = strtol(val, NULL, 10);
        else if (strcmp(key, "err") == 0)
            parse_err(i, val);
        else if (strcmp(key, "lost_at") == 0) {
            char buf[64];
            snprintf(buf, sizeof(buf), "* 15 from %ld", strtol(val, NULL, 10));
            parse_err(i, buf);
        } else if (strcmp(key, "mig") == 0) {
            char *save = NULL;
            d->nmig = 0;
            for (char *t = strtok_r(val, ",", &save); t && d->nmig < MAXMIG;
                 t = strtok_r(NULL, ",", &save))
                snprintf(d->mig[d->nmig++], 96, "%s", t);
        } else {
            for (int k = 0; k < K_N; k++)
                if (strcmp(key, key_names[k]) == 0) parse_seq(&d->key[k], val);
        }
    }
}

static const char default_scenario[] =
    "gpus 1\n"
    "dev 0 name Fake GPU 0\n"
    "dev 0 util 50\ndev 0 mem_util 20\ndev 0 mem_total 17179869184\n"
    "dev 0 mem_used 1073741824\ndev 0 temp 45\ndev 0 power_mw 100000\n"
    "dev 0 energy_mj 0,100000\ndev 0 sm_mhz 1500\ndev 0 mem_mhz 5000\ndev 0 reasons 0\n";

/* Returns 0, or an NVML error when the scenario cannot be read. */
static int load_scenario(void)
{
    ngpus = 1;
    snprintf(driver, sizeof(driver), "999.99.99-fake");
    snprintf(nvml_ver, sizeof(nvml_ver), "99.999.99-fake");
    cuda_ver = 12040;
    nerr = 0;
    ncount = 0;
    npidfile = 0;
    for (int i = 0; i < MAXDEV; i++)
        reset_device(i);
    const char *path = getenv("TRAINPERF_FAKE_NVML");
    char line[4096];
    if (!path || !*path) {
        char tmp[sizeof(default_scenario)];
        memcpy(tmp, default_scenario, sizeof(tmp));
        char *save = NULL;
        for (char *l = strtok_r(tmp, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
            snprintf(line, sizeof(line), "%s", l);
            parse_line(line);
        }
        return 0;
    }
    FILE *f = fopen(path, "r");
    if (!f) return 999;
    while (fgets(line, sizeof(line), f))
        parse_line(line);
    fclose(f);
    return 0;
}

/* ---- call accounting --------------------------------------------------- */

static fcount *count_slot(int dev, const char *fn)
{
    for (int i = 0; i < ncount; i++)
        if (counts[i].dev == dev && strcmp(counts[i].fn, fn) == 0) return &counts[i];
    if (ncount >= (int)(sizeof(counts) / sizeof(counts[0]))) return NULL;
    fcount *c = &counts[ncount++];
    c->dev = dev;
    snprintf(c->fn, sizeof(c->fn), "%s", fn);
    c->n = 0;
    return c;
}

/* Count this call; return the scripted error for it, or 0. */
static int enter(int dev, const char *fn)
{
    fcount *c = count_slot(dev, fn);
    unsigned n = 0;
    if (c) {
        n = ++c->n;
        c->tid = (long)syscall(SYS_gettid);
    }
    for (int i = 0; i < nerr; i++) {
        const ferr *e = &errs[i];
        if (e->dev != dev) continue;
        if (strcmp(e->fn, fn) != 0 && !(dev >= 0 && strcmp(e->fn, "*") == 0)) continue;
        if (n >= e->from && n <= e->to) return e->code;
    }
    return 0;
}

/* The next value of a key: 0 with *v set, or an error code. */
static int next_val(fdev *d, int k, unsigned long long *v)
{
    seq *q = &d->key[k];
    if (q->n == 0) return 3; /* NOT_SUPPORTED */
    unsigned i = d->key_reads[k]++;
    if (i >= (unsigned)q->n) i = (unsigned)q->n - 1;
    *v = q->v[i];
    return q->code[i];
}

static fdev *dev_of(nvmlDevice_t h)
{
    fdev *d = (fdev *)h;
    for (int i = 0; i < MAXDEV; i++) {
        if (d == &devs[i]) return i < ngpus ? d : NULL;
        for (int m = 0; m < MAXMIG; m++)
            if (d == &mig_handles[i][m]) return d;
    }
    return NULL;
}

#define FN_NAME (__func__ + 4) /* without "nvml" */

/* Lock, check init and handle, count the call, apply scripted errors. */
#define DEV_ENTER(h, d)                                                                            \
    pthread_mutex_lock(&mu);                                                                       \
    fdev *d = refcount > 0 ? dev_of(h) : NULL;                                                     \
    if (refcount == 0) {                                                                           \
        pthread_mutex_unlock(&mu);                                                                 \
        return 1;                                                                                  \
    }                                                                                              \
    if (!d) {                                                                                      \
        pthread_mutex_unlock(&mu);                                                                 \
        return 2;                                                                                  \
    }                                                                                              \
    do {                                                                                           \
        int e_ = enter(d->self, FN_NAME);                                                          \
        if (e_) {                                                                                  \
            pthread_mutex_unlock(&mu);                                                             \
            return e_;                                                                             \
        }                                                                                          \
    } while (0)
#define LEAVE(rc)                                                                                  \
    do {                                                                                           \
        int r_ = (rc);                                                                             \
        pthread_mutex_unlock(&mu);                                                                 \
        return r_;                                                                                 \
    } while (0)

/* ---- test hooks -------------------------------------------------------- */

EXPORT unsigned fake_nvml_calls(int dev, const char *fn);
EXPORT unsigned fake_nvml_calls(int dev, const char *fn)
{
    pthread_mutex_lock(&mu);
    unsigned n = 0;
    for (int i = 0; i < ncount; i++)
        if (counts[i].dev == dev && strcmp(counts[i].fn, fn) == 0) n = counts[i].n;
    pthread_mutex_unlock(&mu);
    return n;
}

EXPORT long fake_nvml_last_tid(int dev, const char *fn);
EXPORT long fake_nvml_last_tid(int dev, const char *fn)
{
    pthread_mutex_lock(&mu);
    long t = 0;
    for (int i = 0; i < ncount; i++)
        if (counts[i].dev == dev && strcmp(counts[i].fn, fn) == 0) t = counts[i].tid;
    pthread_mutex_unlock(&mu);
    return t;
}

/* ---- init and system --------------------------------------------------- */

static nvmlReturn_t do_init(void)
{
    pthread_mutex_lock(&mu);
    if (refcount == 0) {
        int r = load_scenario();
        if (r) LEAVE(r);
    }
    int e = enter(-1, "Init");
    if (e) LEAVE(e);
    refcount++;
    LEAVE(0);
}

#ifndef FAKE_NVML_LEGACY
EXPORT nvmlReturn_t nvmlInit_v2(void);
EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return do_init();
}
#endif
EXPORT nvmlReturn_t nvmlInit(void);
EXPORT nvmlReturn_t nvmlInit(void)
{
    return do_init();
}

EXPORT nvmlReturn_t nvmlShutdown(void);
EXPORT nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&mu);
    if (refcount == 0) LEAVE(1);
    refcount--;
    LEAVE(0);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r);
EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case 999: return "Unknown Error (fake: scenario file unreadable)";
    }
    return "Unknown Error";
}

static nvmlReturn_t do_count(unsigned *n)
{
    pthread_mutex_lock(&mu);
    if (refcount == 0) LEAVE(1);
    int e = enter(-1, "DeviceGetCount");
    if (e) LEAVE(e);
    *n = (unsigned)ngpus;
    LEAVE(0);
}

static nvmlReturn_t do_handle(unsigned i, nvmlDevice_t *h)
{
    pthread_mutex_lock(&mu);
    if (refcount == 0) LEAVE(1);
    if (i >= (unsigned)ngpus) LEAVE(2);
    int e = enter((int)i, "DeviceGetHandleByIndex");
    if (e) LEAVE(e);
    *h = (nvmlDevice_t)&devs[i];
    LEAVE(0);
}

#ifndef FAKE_NVML_LEGACY
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n);
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n)
{
    return do_count(n);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *h);
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *h)
{
    return do_handle(i, h);
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned *n);
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned *n)
{
    return do_count(n);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *h);
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *h)
{
    return do_handle(i, h);
}

static nvmlReturn_t sys_str(const char *fn, const char *src, char *buf, unsigned len)
{
    pthread_mutex_lock(&mu);
    if (refcount == 0) LEAVE(1);
    int e = enter(-1, fn);
    if (e) LEAVE(e);
    if (strlen(src) + 1 > len) LEAVE(7);
    memcpy(buf, src, strlen(src) + 1);
    LEAVE(0);
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *b, unsigned n);
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *b, unsigned n)
{
    return sys_str("SystemGetDriverVersion", driver, b, n);
}
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *b, unsigned n);
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *b, unsigned n)
{
    return sys_str("SystemGetNVMLVersion", nvml_ver, b, n);
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v);
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    pthread_mutex_lock(&mu);
    if (refcount == 0) LEAVE(1);
    int e = enter(-1, "SystemGetCudaDriverVersion");
    if (e) LEAVE(e);
    *v = cuda_ver;
    LEAVE(0);
}

/* ---- device: identity and simple readings ------------------------------ */

static int copy_str(const char *src, char *buf, unsigned len)
{
    if (strlen(src) + 1 > len) return 7;
    memcpy(buf, src, strlen(src) + 1);
    return 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *b, unsigned n);
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *b, unsigned n)
{
    DEV_ENTER(h, d);
    LEAVE(copy_str(d->name, b, n));
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *b, unsigned n);
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *b, unsigned n)
{
    DEV_ENTER(h, d);
    LEAVE(copy_str(d->uuid, b, n));
}

typedef struct {
    unsigned gpu, memory;
} f_util;
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, f_util *u);
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, f_util *u)
{
    DEV_ENTER(h, d);
    unsigned long long g, m;
    int r = next_val(d, K_UTIL, &g);
    if (r) LEAVE(r);
    r = next_val(d, K_MEM_UTIL, &m);
    if (r) LEAVE(r);
    u->gpu = (unsigned)g;
    u->memory = (unsigned)m;
    LEAVE(0);
}

typedef struct {
    unsigned long long total, free, used;
} f_mem1;
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} f_mem2;

static int read_mem(fdev *d, unsigned long long *t, unsigned long long *u, unsigned long long *res)
{
    int r = next_val(d, K_MEM_TOTAL, t);
    if (r) return r;
    if ((r = next_val(d, K_MEM_USED, u))) return r;
    if (next_val(d, K_MEM_RESERVED, res)) *res = 0;
    return 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, f_mem1 *m);
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, f_mem1 *m)
{
    DEV_ENTER(h, d);
    unsigned long long t, u, res;
    int r = read_mem(d, &t, &u, &res);
    if (r) LEAVE(r);
    /* v1 "used" includes the driver's reserved memory. */
    m->total = t;
    m->used = u + res;
    m->free = t > u + res ? t - u - res : 0;
    LEAVE(0);
}

#ifndef FAKE_NVML_LEGACY
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, f_mem2 *m);
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, f_mem2 *m)
{
    DEV_ENTER(h, d);
    /* The real library checks the version word: a bare 2 is refused. */
    if (m->version != (0x02000000u | (unsigned)sizeof(f_mem2))) LEAVE(25);
    unsigned long long t, u, res;
    int r = read_mem(d, &t, &u, &res);
    if (r) LEAVE(r);
    m->total = t;
    m->reserved = res;
    m->used = u;
    m->free = t > u + res ? t - u - res : 0;
    LEAVE(0);
}
#endif

static nvmlReturn_t simple_u(nvmlDevice_t h, int k, unsigned *out, const char *fn)
{
    pthread_mutex_lock(&mu);
    fdev *d = refcount > 0 ? dev_of(h) : NULL;
    if (refcount == 0) LEAVE(1);
    if (!d) LEAVE(2);
    int e = enter(d->self, fn);
    if (e) LEAVE(e);
    unsigned long long v;
    int r = next_val(d, k, &v);
    if (r) LEAVE(r);
    *out = (unsigned)v;
    LEAVE(0);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned *c);
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned *c)
{
    if (sensor != 0) return 2;
    return simple_u(h, K_TEMP, c, "DeviceGetTemperature");
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned *mw);
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned *mw)
{
    return simple_u(h, K_POWER, mw, "DeviceGetPowerUsage");
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned *mhz);
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned *mhz)
{
    if (type == 1) return simple_u(h, K_SM_MHZ, mhz, "DeviceGetClockInfo");
    if (type == 2) return simple_u(h, K_MEM_MHZ, mhz, "DeviceGetClockInfo");
    return 3;
}

static nvmlReturn_t simple_ull(nvmlDevice_t h, int k, unsigned long long *out, const char *fn)
{
    pthread_mutex_lock(&mu);
    fdev *d = refcount > 0 ? dev_of(h) : NULL;
    if (refcount == 0) LEAVE(1);
    if (!d) LEAVE(2);
    int e = enter(d->self, fn);
    if (e) LEAVE(e);
    int r = next_val(d, k, out);
    LEAVE(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t h, unsigned long long *mj);
EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t h, unsigned long long *mj)
{
    return simple_ull(h, K_ENERGY, mj, "DeviceGetTotalEnergyConsumption");
}

#ifndef FAKE_NVML_LEGACY
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *m);
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *m)
{
    return simple_ull(h, K_REASONS, m, "DeviceGetCurrentClocksEventReasons");
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h,
                                                              unsigned long long *m);
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h, unsigned long long *m)
{
    return simple_ull(h, K_REASONS, m, "DeviceGetCurrentClocksThrottleReasons");
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t h, int counter, unsigned *kbps);
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t h, int counter, unsigned *kbps)
{
    long ms;
    pthread_mutex_lock(&mu);
    fdev *d = refcount > 0 ? dev_of(h) : NULL;
    ms = d ? d->pcie_block_ms : 0;
    pthread_mutex_unlock(&mu);
    /* The real call measures over a 20 ms window; block like it, unlocked. */
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    return simple_u(h, counter == 0 ? K_PCIE_TX_KBPS : K_PCIE_RX_KBPS, kbps,
                    "DeviceGetPcieThroughput");
}

/* ---- field values ------------------------------------------------------ */

#ifndef FAKE_NVML_LEGACY
typedef struct {
    unsigned field, scope;
    long long ts_us, latency_us;
    int vtype;
    nvmlReturn_t ret;
    union {
        double d;
        unsigned u;
        unsigned long long ull;
    } v;
} f_field;

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t h, int n, f_field *v);
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t h, int n, f_field *v)
{
    DEV_ENTER(h, d);
    if (n < 0 || (n > 0 && !v)) LEAVE(2);
    unsigned call = ++d->field_calls;
    for (int i = 0; i < n; i++) {
        int k = v[i].field == 91    ? K_NVL_LINKS
                : v[i].field == 138 ? K_NVL_TX
                : v[i].field == 139 ? K_NVL_RX
                : v[i].field == 197 ? K_PCIE_TX_BYTES
                : v[i].field == 198 ? K_PCIE_RX_BYTES
                                    : -1;
        v[i].ts_us = 1700000000000000LL + (long long)call * d->field_dt_us;
        v[i].latency_us = 1;
        if (k < 0) {
            v[i].ret = 3;
            continue;
        }
        unsigned long long x = 0;
        v[i].ret = next_val(d, k, &x);
        v[i].vtype = k == K_NVL_LINKS ? 1 : 3;
        if (k == K_NVL_LINKS)
            v[i].v.u = (unsigned)x;
        else
            v[i].v.ull = x;
    }
    LEAVE(0);
}
#endif

/* ---- processes --------------------------------------------------------- */

/* The pid of a set entry: literal, or read from its pidfile (0: none yet). */
static unsigned entry_pid(unsigned v)
{
    if (!(v & PIDFILE_TAG)) return v;
    FILE *f = fopen(pidfiles[v & ~PIDFILE_TAG], "r");
    if (!f) return 0;
    unsigned long pid = 0;
    if (fscanf(f, "%lu", &pid) != 1) pid = 0;
    fclose(f);
    return (unsigned)pid;
}

static const pset *next_set(psets *ps, unsigned *calls)
{
    static const pset empty;
    if (ps->n == 0) return &empty;
    unsigned i = (*calls)++;
    if (i >= (unsigned)ps->n) i = (unsigned)ps->n - 1;
    return &ps->s[i];
}

/* Write the set in the layout of `stride` bytes per entry: pid u32@0,
 * usedGpuMemory u64@8, then (24, 32) gpuInstanceId/computeInstanceId u32@16/20,
 * then (32) usedGpuCcProtectedMemory u64@24. */
static nvmlReturn_t write_procs(fdev *d, int graphics, unsigned *count, void *infos, int stride)
{
    psets *ps = graphics ? &d->gprocs : &d->procs;
    unsigned *calls = graphics ? &d->gprocs_calls : &d->procs_calls;
    unsigned peek = *calls;
    const pset *s = next_set(ps, &peek);
    if ((unsigned)s->n > *count || (s->n > 0 && !infos)) {
        *count = (unsigned)s->n;
        return 7; /* INSUFFICIENT_SIZE: the caller retries, same set */
    }
    *calls = peek;
    unsigned char *b = infos;
    int w = 0;
    for (int i = 0; i < s->n; i++) {
        unsigned pid = entry_pid(s->pid[i]);
        if (pid == 0) continue;
        unsigned char *e = b + (size_t)w++ * (size_t)stride;
        memcpy(e, &pid, 4);
        memset(e + 4, 0, 4);
        memcpy(e + 8, &s->val[i], 8);
        if (stride >= 24) {
            unsigned none = 0xFFFFFFFFu; /* no MIG instance */
            memcpy(e + 16, &none, 4);
            memcpy(e + 20, &none, 4);
        }
        if (stride >= 32) memset(e + 24, 0, 8);
    }
    *count = (unsigned)w;
    return 0;
}

#define PROC_FN(sym, graphics, stride_expr)                                                        \
    EXPORT nvmlReturn_t sym(nvmlDevice_t h, unsigned *count, void *infos);                         \
    EXPORT nvmlReturn_t sym(nvmlDevice_t h, unsigned *count, void *infos)                          \
    {                                                                                              \
        DEV_ENTER(h, d);                                                                           \
        if (!count) LEAVE(2);                                                                      \
        LEAVE(write_procs(d, graphics, count, infos, (stride_expr)));                              \
    }

#ifndef FAKE_NVML_LEGACY
PROC_FN(nvmlDeviceGetComputeRunningProcesses_v3, 0, d->stride)
PROC_FN(nvmlDeviceGetComputeRunningProcesses_v2, 0, 24)
PROC_FN(nvmlDeviceGetGraphicsRunningProcesses_v3, 1, d->stride)
PROC_FN(nvmlDeviceGetGraphicsRunningProcesses_v2, 1, 24)
#endif
PROC_FN(nvmlDeviceGetComputeRunningProcesses, 0, 16)
PROC_FN(nvmlDeviceGetGraphicsRunningProcesses, 1, 16)

typedef struct {
    unsigned pid;
    unsigned long long ts;
    unsigned sm, mem, enc, dec;
} f_putil;

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, f_putil *buf, unsigned *count,
                                                    unsigned long long last_seen);
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, f_putil *buf, unsigned *count,
                                                    unsigned long long last_seen)
{
    DEV_ENTER(h, d);
    if (!count) LEAVE(2);
    if (d->putil.n == 0) LEAVE(3); /* not in the scenario: NOT_SUPPORTED */
    /* Each call's set is the driver's newest batch, stamped call * 1 s. */
    unsigned call = d->putil_calls;
    const pset *s = next_set(&d->putil, &call);
    unsigned long long ts = (unsigned long long)call * 1000000ULL;
    if (ts <= last_seen || s->n == 0) {
        d->putil_calls = call;
        LEAVE(6); /* NOT_FOUND: no sample newer than last_seen */
    }
    if (!buf || (unsigned)s->n > *count) {
        *count = (unsigned)s->n;
        LEAVE(7);
    }
    d->putil_calls = call;
    unsigned w = 0;
    for (int i = 0; i < s->n; i++) {
        unsigned pid = entry_pid(s->pid[i]);
        if (pid) buf[w++] = (f_putil){pid, ts, (unsigned)s->val[i], 0, 0, 0};
    }
    *count = w;
    LEAVE(0);
}

/* ---- MIG --------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned *n);
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned *n)
{
    DEV_ENTER(h, d);
    *n = (unsigned)d->nmig;
    LEAVE(0);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned i,
                                                        nvmlDevice_t *mh);
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned i,
                                                        nvmlDevice_t *mh)
{
    DEV_ENTER(h, d);
    if (i >= (unsigned)d->nmig || d->self >= MAXDEV) LEAVE(6);
    fdev *m = &mig_handles[d->self][i];
    memset(m, 0, sizeof(*m));
    m->self = d->self;
    snprintf(m->name, sizeof(m->name), "%.80s MIG %u", d->name, i);
    snprintf(m->uuid, sizeof(m->uuid), "%s", d->mig[i]);
    *mh = (nvmlDevice_t)m;
    LEAVE(0);
}
