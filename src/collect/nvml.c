/* The nvml source: GPU telemetry from libnvidia-ml, loaded with dlopen.
 *
 * No nvml.h: the few types used are declared here (layouts from NVML 13, see
 * the reference sheet), every symbol is looked up at run time with the
 * versioned name first, and the project builds with no NVIDIA software.
 *
 * Per sample and device the source makes about a dozen cheap NVML calls from
 * the sampling thread. NVML's PCIe throughput call measures over a 20 ms
 * window and blocks that long, so PCIe comes from the cumulative byte counters
 * (field values 197/198, fetched in the same batched call as NVLink) when the
 * driver has them, and otherwise from a helper thread that calls the blocking
 * function once per interval; the sample only copies its latest result. */
#include "collect/nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collect/gpusel.h"
#include "trainperf.h"

/* ---- minimal NVML declarations ----------------------------------------- */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
    NV_SUCCESS = 0,
    NV_NOT_SUPPORTED = 3,
    NV_NOT_FOUND = 6,
    NV_INSUFFICIENT_SIZE = 7,
    NV_DRIVER_NOT_LOADED = 9,
    NV_FUNCTION_NOT_FOUND = 13,
    NV_GPU_IS_LOST = 15,
    NV_ARGUMENT_VERSION_MISMATCH = 25,
};

typedef struct {
    unsigned gpu, memory;
} nv_util;
typedef struct {
    unsigned long long total, free, used;
} nv_mem1;
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nv_mem2;
typedef struct {
    unsigned version;
    int sensor;
    int temperature;
} nv_temp;
typedef struct {
    unsigned pid;
    unsigned long long ts; /* CPU microseconds */
    unsigned sm, mem, enc, dec;
} nv_putil;
typedef struct {
    unsigned field, scope;
    long long ts_us, latency_us;
    int vtype;
    nvmlReturn_t ret;
    union {
        double d;
        unsigned u;
        unsigned long ul;
        unsigned long long ull;
        long long sll;
        int si;
        unsigned short us;
    } v;
} nv_field;

_Static_assert(sizeof(nv_mem2) == 40, "nvmlMemory_v2_t is 40 bytes");
_Static_assert(sizeof(nv_putil) == 32, "nvmlProcessUtilizationSample_t is 32 bytes");
_Static_assert(sizeof(nv_field) == 40, "nvmlFieldValue_t is 40 bytes");
_Static_assert(sizeof(nv_temp) == 12, "nvmlTemperature_t is 12 bytes");

/* NVML_STRUCT_VERSION(Memory, 2): size | version << 24. A bare 2 fails. */
#define NV_MEM2_VERSION (0x02000000u | (unsigned)sizeof(nv_mem2))
#define NV_TEMP_VERSION (0x01000000u | (unsigned)sizeof(nv_temp))
#define NV_VALUE_NOT_AVAILABLE ULLONG_MAX
#define NV_CLOCK_SM 1
#define NV_CLOCK_MEM 2
#define NV_PCIE_TX 0
#define NV_PCIE_RX 1

/* Field ids (nvml.h NVML_FI_DEV_*). */
#define FI_NVLINK_LINK_COUNT 91
#define FI_NVLINK_TX_KIB 138 /* THROUGHPUT_DATA_TX, cumulative KiB */
#define FI_NVLINK_RX_KIB 139
#define FI_PCIE_TX_BYTES 197 /* cumulative bytes */
#define FI_PCIE_RX_BYTES 198
#define FI_NVLINK5_TX_BYTES 202
#define FI_NVLINK5_RX_BYTES 204

typedef nvmlReturn_t (*nv_procs_fn)(nvmlDevice_t, unsigned *, void *);

struct nv_api {
    void *dl;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*get_count)(unsigned *);
    nvmlReturn_t (*get_handle)(unsigned, nvmlDevice_t *);
    nvmlReturn_t (*get_name)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*get_uuid)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*util)(nvmlDevice_t, nv_util *);
    nvmlReturn_t (*mem2)(nvmlDevice_t, nv_mem2 *);
    nvmlReturn_t (*mem1)(nvmlDevice_t, nv_mem1 *);
    nvmlReturn_t (*temp)(nvmlDevice_t, int, unsigned *);
    nvmlReturn_t (*temp_v)(nvmlDevice_t, nv_temp *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long *);
    nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned *);
    nvmlReturn_t (*reasons)(nvmlDevice_t, unsigned long long *);
    nvmlReturn_t (*pcie)(nvmlDevice_t, int, unsigned *);
    nvmlReturn_t (*fields)(nvmlDevice_t, int, nv_field *);
    nv_procs_fn procs[2][3]; /* [compute, graphics][v3, v2, v1] */
    nvmlReturn_t (*putil)(nvmlDevice_t, nv_putil *, unsigned *, unsigned long long);
    nvmlReturn_t (*driver_version)(char *, unsigned);
    nvmlReturn_t (*nvml_version)(char *, unsigned);
    nvmlReturn_t (*cuda_version)(int *);
    nvmlReturn_t (*mig_max)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*mig_handle)(nvmlDevice_t, unsigned, nvmlDevice_t *);
};

/* Each slot takes the first name the library exports: newest first. */
struct nv_sym {
    size_t off;
    int required;
    const char *names[3];
};

/* clang-format off */
#define SYM(field, req, ...) {offsetof(struct nv_api, field), req, {__VA_ARGS__}}
static const struct nv_sym nv_syms[] = {
    SYM(init, 1, "nvmlInit_v2", "nvmlInit"),
    SYM(shutdown, 1, "nvmlShutdown"),
    SYM(error_string, 0, "nvmlErrorString"),
    SYM(get_count, 1, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"),
    SYM(get_handle, 1, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"),
    SYM(get_name, 0, "nvmlDeviceGetName"),
    SYM(get_uuid, 0, "nvmlDeviceGetUUID"),
    SYM(util, 0, "nvmlDeviceGetUtilizationRates"),
    SYM(mem2, 0, "nvmlDeviceGetMemoryInfo_v2"),
    SYM(mem1, 0, "nvmlDeviceGetMemoryInfo"),
    SYM(temp, 0, "nvmlDeviceGetTemperature"),
    SYM(temp_v, 0, "nvmlDeviceGetTemperatureV"),
    SYM(power, 0, "nvmlDeviceGetPowerUsage"),
    SYM(energy, 0, "nvmlDeviceGetTotalEnergyConsumption"),
    SYM(clock, 0, "nvmlDeviceGetClockInfo"),
    SYM(reasons, 0, "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons"),
    SYM(pcie, 0, "nvmlDeviceGetPcieThroughput"),
    SYM(fields, 0, "nvmlDeviceGetFieldValues"),
    SYM(procs[0][0], 0, "nvmlDeviceGetComputeRunningProcesses_v3"),
    SYM(procs[0][1], 0, "nvmlDeviceGetComputeRunningProcesses_v2"),
    SYM(procs[0][2], 0, "nvmlDeviceGetComputeRunningProcesses"),
    SYM(procs[1][0], 0, "nvmlDeviceGetGraphicsRunningProcesses_v3"),
    SYM(procs[1][1], 0, "nvmlDeviceGetGraphicsRunningProcesses_v2"),
    SYM(procs[1][2], 0, "nvmlDeviceGetGraphicsRunningProcesses"),
    SYM(putil, 0, "nvmlDeviceGetProcessUtilization"),
    SYM(driver_version, 0, "nvmlSystemGetDriverVersion"),
    SYM(nvml_version, 0, "nvmlSystemGetNVMLVersion"),
    SYM(cuda_version, 0, "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
    SYM(mig_max, 0, "nvmlDeviceGetMaxMigDeviceCount"),
    SYM(mig_handle, 0, "nvmlDeviceGetMigDeviceHandleByIndex"),
};
#undef SYM
/* clang-format on */

/* clang-format off */
#define NV_CODES(X)                                                        \
    X(0, "SUCCESS") X(1, "UNINITIALIZED") X(2, "INVALID_ARGUMENT")         \
    X(3, "NOT_SUPPORTED") X(4, "NO_PERMISSION") X(5, "ALREADY_INITIALIZED") \
    X(6, "NOT_FOUND") X(7, "INSUFFICIENT_SIZE") X(8, "INSUFFICIENT_POWER") \
    X(9, "DRIVER_NOT_LOADED") X(10, "TIMEOUT") X(11, "IRQ_ISSUE")          \
    X(12, "LIBRARY_NOT_FOUND") X(13, "FUNCTION_NOT_FOUND")                 \
    X(14, "CORRUPTED_INFOROM") X(15, "GPU_IS_LOST") X(16, "RESET_REQUIRED") \
    X(17, "OPERATING_SYSTEM") X(18, "LIB_RM_VERSION_MISMATCH")             \
    X(19, "IN_USE") X(20, "MEMORY") X(21, "NO_DATA")                       \
    X(25, "ARGUMENT_VERSION_MISMATCH") X(26, "DEPRECATED")                 \
    X(27, "NOT_READY") X(28, "GPU_NOT_FOUND") X(29, "INVALID_STATE")       \
    X(999, "UNKNOWN")
/* clang-format on */

const char *nvml_code_name(int code)
{
    switch (code) {
#define NV_CASE_(c, s)                                                                             \
    case c: return s;
        NV_CODES(NV_CASE_)
#undef NV_CASE_
    }
    return "UNRECOGNISED";
}

/* ---- loading ----------------------------------------------------------- */

static const char *lib_path(void)
{
    const char *p = getenv("TRAINPERF_NVML_LIB");
    return p && *p ? p : NVML_LIB_DEFAULT;
}

static void api_unload(struct nv_api *a)
{
    if (a->dl) dlclose(a->dl);
    memset(a, 0, sizeof(*a));
}

/* dlopen NVML, resolve the table, nvmlInit. Returns 0 or an error with err
 * filled. On error nothing stays loaded. */
static int api_load(struct nv_api *a, char *err, size_t errn)
{
    const char *path = lib_path();
    memset(a, 0, sizeof(*a));
    a->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!a->dl) {
        if (strcmp(path, NVML_LIB_DEFAULT) == 0)
            snprintf(err, errn, "%s not found: no NVIDIA driver; GPU metrics off", path);
        else
            /* dlerror names the path; the lead stays readable when truncated. */
            snprintf(err, errn, "TRAINPERF_NVML_LIB not loadable, GPU metrics off: %s", dlerror());
        return TPF_EUNSUPPORTED;
    }
    for (size_t i = 0; i < sizeof(nv_syms) / sizeof(nv_syms[0]); i++) {
        void *p = NULL;
        for (int k = 0; k < 3 && nv_syms[i].names[k] && !p; k++)
            p = dlsym(a->dl, nv_syms[i].names[k]);
        if (!p && nv_syms[i].required) {
            snprintf(err, errn, "%s lacks %s: driver too old or not NVML; GPU metrics off", path,
                     nv_syms[i].names[0]);
            api_unload(a);
            return TPF_EUNSUPPORTED;
        }
        /* Function pointers stored through memcpy: the slot's type is known. */
        memcpy((char *)a + nv_syms[i].off, &p, sizeof(p));
    }
    nvmlReturn_t r = a->init();
    if (r != NV_SUCCESS) {
        snprintf(err, errn, "nvmlInit failed: %s (%s); GPU metrics off",
                 a->error_string ? a->error_string(r) : "error", nvml_code_name(r));
        api_unload(a);
        return r == NV_NOT_SUPPORTED || r == NV_DRIVER_NOT_LOADED ? TPF_EUNSUPPORTED : TPF_ESYS;
    }
    return 0;
}

/* ---- clock-event reasons ----------------------------------------------- */

static const struct {
    unsigned long long bit;
    const char *word;
} reason_words[] = {
    {0x2, "applications_clocks"}, {0x4, "sw_power_cap"},     {0x8, "hw_slowdown"},
    {0x10, "sync_boost"},         {0x20, "sw_thermal"},      {0x40, "hw_thermal"},
    {0x80, "hw_power_brake"},     {0x100, "display_clocks"},
};

int nvml_reasons_str(unsigned long long mask, char *out, size_t n)
{
    size_t len = 0;
    int words = 0;
    unsigned long long known = 0x1; /* gpu_idle: not a slowdown, left out */
    if (n == 0) return 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(reason_words) / sizeof(reason_words[0]); i++) {
        known |= reason_words[i].bit;
        if (!(mask & reason_words[i].bit)) continue;
        int w = snprintf(out + len, n - len, "%s%s", words ? "+" : "", reason_words[i].word);
        if (w < 0 || (size_t)w >= n - len) break;
        len += (size_t)w;
        words++;
    }
    if (mask & ~known) {
        int w = snprintf(out + len, n - len, "%sother", words ? "+" : "");
        if (w > 0 && (size_t)w < n - len) words++;
    }
    return words;
}

/* ---- source state ------------------------------------------------------ */

#define PROC_CAP 512 /* running processes read per device and call */
#define PROC_MAX_STRIDE 32
#define PUTIL_CAP 512
#define TREE_ID_CAP 4096 /* pids of the tree in every namespace */
#define PID_CACHE_CAP 1024
#define NS_DEPTH 4
#define PMEM_CAP 256 /* tree processes with GPU memory tracked per sample */

/* Fields of a device that answered NOT_SUPPORTED once: not asked again. */
enum {
    UNSUP_UTIL = 1u << 0,
    UNSUP_MEM = 1u << 1,
    UNSUP_TEMP = 1u << 2,
    UNSUP_POWER = 1u << 3,
    UNSUP_ENERGY = 1u << 4,
    UNSUP_SM = 1u << 5,
    UNSUP_MEMCLK = 1u << 6,
    UNSUP_REASONS = 1u << 7,
    UNSUP_PUTIL = 1u << 8,
};

enum { FK_NVL_TX, FK_NVL_RX, FK_PCIE_TX, FK_PCIE_RX, FK_N };

typedef struct ndev {
    nvmlDevice_t h;
    int index;
    char name[96], uuid[96];
    uint8_t lost, used;
    unsigned unsup;
    int mem_ver;      /* 2: try _v2; 1: v1 only */
    int proc_ver[2];  /* current version slot per kind; 3 = none left */
    int stride[2][3]; /* detected struct stride; 0 = not yet */
    /* energy */
    uint8_t energy_base_ok, power_prev_ok;
    unsigned long long energy_base, energy_prev;
    double energy_acc_j, power_prev_w;
    /* field values (NVLink, PCIe counters) */
    int nfield;
    unsigned field_id[FK_N], field_scope[FK_N];
    int field_kind[FK_N];
    double field_unit[FK_N]; /* bytes per counter unit */
    uint8_t field_prev_ok[FK_N];
    unsigned long long field_prev[FK_N];
    long long field_prev_ts[FK_N];
    uint8_t pcie_by_counter;
    uint8_t unattributed; /* this sample listed pids we cannot see */
    /* PCIe from the helper thread (guarded by nvml_state.mu) */
    uint8_t pcie_want, pcie_ok, pcie_lost;
    double pcie_tx_bps, pcie_rx_bps;
    unsigned long long putil_last_ts;
} ndev;

typedef struct pid_ids {
    pid_t pid;
    int n;
    pid_t ids[NS_DEPTH];
} pid_ids;

typedef struct nvml_state {
    struct nv_api api;
    int loaded;
    char err[320];
    int ndev;
    ndev dev[FRAME_MAX_GPUS];
    int nvisible;
    int visible[FRAME_MAX_GPUS];
    uint8_t cvd_resolved;
    uint8_t any_used;
    uint8_t child_pidns; /* we run in a container's PID namespace */
    uint8_t all_pids;    /* `trainperf top`: every process, not the tree's */
    pid_t root;
    /* per sample scratch */
    unsigned char procbuf[PROC_CAP * PROC_MAX_STRIDE];
    nv_putil putil[PUTIL_CAP];
    pid_t tree_ids[TREE_ID_CAP];
    pid_t tree_owner[TREE_ID_CAP]; /* the tree pid (as procfs sees it) of each id */
    int ntree_ids;
    /* GPU memory per tree process over all GPUs, as of the last sample */
    struct pmem {
        pid_t pid;
        double bytes;
        uint8_t ok;
    } pmem[PMEM_CAP];
    int npmem;
    uint8_t pmem_complete; /* every device's process lists were read */
    pid_ids cache[2][PID_CACHE_CAP];
    int ncache[2], cur_cache;
    /* PCIe helper thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thr;
    uint8_t thr_on, stop;
    double interval_s;
} nvml_state;

/* ---- CUDA_VISIBLE_DEVICES ---------------------------------------------- */

/* MIG instances of every device, for "MIG-<uuid>" entries. Returns count. */
static int list_migs(nvml_state *st, gpusel_mig *migs, char (*uuids)[96], int cap)
{
    struct nv_api *a = &st->api;
    int n = 0;
    if (!a->mig_max || !a->mig_handle || !a->get_uuid) return 0;
    for (int d = 0; d < st->ndev; d++) {
        unsigned max = 0;
        if (st->dev[d].lost || a->mig_max(st->dev[d].h, &max) != NV_SUCCESS) continue;
        for (unsigned i = 0; i < max && n < cap; i++) {
            nvmlDevice_t mh;
            if (a->mig_handle(st->dev[d].h, i, &mh) != NV_SUCCESS) continue;
            if (a->get_uuid(mh, uuids[n], 96) != NV_SUCCESS) continue;
            uuids[n][95] = '\0';
            migs[n].uuid = uuids[n];
            migs[n].parent = d;
            n++;
        }
    }
    return n;
}

/* Resolve the root's CUDA_VISIBLE_DEVICES. Until its environment can be read
 * (a child still inside execve reads empty) ours stands in, since the child
 * inherits it unless the command sets its own; it is retried each sample. */
static void resolve_visible(nvml_state *st)
{
    char cvd[1024];
    int r = gpusel_environ(st->root, "CUDA_VISIBLE_DEVICES", cvd, sizeof(cvd));
    if (r < 0) {
        const char *own = getenv("CUDA_VISIBLE_DEVICES");
        if (own) snprintf(cvd, sizeof(cvd), "%s", own);
    }
    int set = r == 1 || (r < 0 && getenv("CUDA_VISIBLE_DEVICES"));
    const char *uuids[FRAME_MAX_GPUS];
    for (int d = 0; d < st->ndev; d++)
        uuids[d] = st->dev[d].uuid;
    if (set && strstr(cvd, "MIG-")) {
        gpusel_mig migs[64];
        char mig_uuids[64][96];
        int nmig = list_migs(st, migs, mig_uuids, 64);
        st->nvisible =
            gpusel_visible(cvd, uuids, st->ndev, migs, nmig, st->visible, FRAME_MAX_GPUS);
    } else {
        st->nvisible =
            gpusel_visible(set ? cvd : NULL, uuids, st->ndev, NULL, 0, st->visible, FRAME_MAX_GPUS);
    }
    st->cvd_resolved = r >= 0;
}

/* ---- the watched tree's pids ------------------------------------------- */

/* Collect every pid of the tree in every PID namespace (NVML in a container
 * reports host pids; /proc/<pid>/status NSpid lists both). Cached per pid. */
static void build_tree_ids(nvml_state *st, const coll_frame *f)
{
    int old = st->cur_cache, nw = 1 - old;
    st->ncache[nw] = 0;
    st->ntree_ids = 0;
    for (int i = 0; i < f->ntree && f->tree_pids; i++) {
        pid_t p = f->tree_pids[i];
        const pid_ids *e = NULL;
        for (int k = 0; k < st->ncache[old]; k++)
            if (st->cache[old][k].pid == p) {
                e = &st->cache[old][k];
                break;
            }
        pid_ids fresh;
        if (!e) {
            fresh.pid = p;
            fresh.n = gpusel_nspids(p, fresh.ids, NS_DEPTH);
            if (fresh.n < 1) {
                fresh.n = 1;
                fresh.ids[0] = p;
            }
            e = &fresh;
        }
        if (st->ncache[nw] < PID_CACHE_CAP) st->cache[nw][st->ncache[nw]++] = *e;
        for (int k = 0; k < e->n && st->ntree_ids < TREE_ID_CAP; k++) {
            st->tree_owner[st->ntree_ids] = p;
            st->tree_ids[st->ntree_ids++] = e->ids[k];
        }
    }
    st->cur_cache = nw;
}

/* The tree pid an NVML pid belongs to, or 0 when it is not the tree's. */
static pid_t tree_owner(const nvml_state *st, unsigned pid)
{
    for (int i = 0; i < st->ntree_ids; i++)
        if ((unsigned)st->tree_ids[i] == pid) return st->tree_owner[i];
    return 0;
}

static int in_tree(const nvml_state *st, unsigned pid)
{
    return tree_owner(st, pid) != 0;
}

/* ---- per device readings ----------------------------------------------- */

/* Note a call's result: 15 marks the device lost. Returns 1 on success. */
static int ok_call(ndev *d, nvmlReturn_t r, unsigned unsup_bit)
{
    if (r == NV_SUCCESS) return 1;
    if (r == NV_GPU_IS_LOST) d->lost = 1;
    if (r == NV_NOT_SUPPORTED) d->unsup |= unsup_bit;
    return 0;
}

/* The struct stride the driver really wrote: the buffer was filled with 0xAA
 * and the last field of every layout (pid/memory/instance ids) never ends in
 * an 0xAA byte, so the written length is n * stride exactly. 0 if unclear. */
static int probe_stride(const unsigned char *b, unsigned n)
{
    size_t end = (size_t)n * PROC_MAX_STRIDE;
    while (end > 0 && b[end - 1] == 0xAA)
        end--;
    static const int strides[] = {16, 24, 32};
    for (int i = 0; i < 3; i++)
        if (end == (size_t)n * (size_t)strides[i]) return strides[i];
    return 0;
}

static int pid_visible(unsigned pid)
{
    char path[32];
    snprintf(path, sizeof(path), "/proc/%u", pid);
    return access(path, F_OK) == 0;
}

/* 1 when this process is not in the initial PID namespace (whose /proc inode
 * is fixed by the kernel: PROC_PID_INIT_INO). */
static int in_child_pidns(void)
{
    char l[64];
    ssize_t n = readlink("/proc/self/ns/pid", l, sizeof(l) - 1);
    if (n <= 0) return 0;
    l[n] = '\0';
    return strcmp(l, "pid:[4026531836]") != 0;
}

typedef struct tree_proc {
    unsigned pid;
    pid_t owner;
    unsigned long long mem;
    uint8_t mem_ok;
} tree_proc;

/* Read one kind of running-process list and add the tree's entries to tp.
 * Returns 1 when the list was read. */
static int read_procs(nvml_state *st, ndev *d, int kind, tree_proc *tp, int *ntp, int cap)
{
    static const int nominal[3] = {24, 24, 16}; /* v3 (current nvml.h), v2, v1 */
    while (d->proc_ver[kind] < 3) {
        int v = d->proc_ver[kind];
        nv_procs_fn fn = st->api.procs[kind][v];
        if (!fn) {
            d->proc_ver[kind]++;
            continue;
        }
        unsigned n = PROC_CAP;
        if (!d->stride[kind][v]) memset(st->procbuf, 0xAA, sizeof(st->procbuf));
        nvmlReturn_t r = fn(d->h, &n, st->procbuf);
        if (r == NV_FUNCTION_NOT_FOUND || r == NV_ARGUMENT_VERSION_MISMATCH) {
            d->proc_ver[kind]++; /* older driver: the next older version */
            continue;
        }
        if (r != NV_SUCCESS || n > PROC_CAP) {
            if (r == NV_GPU_IS_LOST) d->lost = 1;
            return 0;
        }
        int stride = d->stride[kind][v];
        if (!stride && n > 0) {
            stride = probe_stride(st->procbuf, n);
            if (stride)
                d->stride[kind][v] = stride;
            else
                stride = nominal[v];
        }
        for (unsigned i = 0; i < n; i++) {
            const unsigned char *e = st->procbuf + (size_t)i * (size_t)stride;
            unsigned pid;
            unsigned long long mem;
            memcpy(&pid, e, sizeof(pid));
            memcpy(&mem, e + 8, sizeof(mem));
            pid_t owner = st->all_pids ? (pid_t)pid : tree_owner(st, pid);
            if (!owner) {
                /* In a container NVML reports host pids; one we cannot see
                 * might be ours, so the tree's share becomes unknown. */
                if (st->child_pidns && !pid_visible(pid)) d->unattributed = 1;
                continue;
            }
            int k = 0;
            while (k < *ntp && tp[k].pid != pid)
                k++;
            if (k == *ntp) {
                if (*ntp >= cap) continue;
                tp[k] = (tree_proc){pid, owner, 0, 0};
                (*ntp)++;
            }
            /* A process with compute and graphics contexts is listed twice
             * with its one total: take the larger, do not add. */
            if (mem != NV_VALUE_NOT_AVAILABLE) {
                if (!tp[k].mem_ok || mem > tp[k].mem) tp[k].mem = mem;
                tp[k].mem_ok = 1;
            }
        }
        return 1;
    }
    return 0;
}

/* Contexts of the tree on d: sets *used, and the summed memory in *mem. */
static void scan_procs(nvml_state *st, ndev *d, int *used, fval *mem)
{
    tree_proc tp[64];
    int ntp = 0, read = 0;
    d->unattributed = 0;
    read += read_procs(st, d, 0, tp, &ntp, 64);
    if (!d->lost) read += read_procs(st, d, 1, tp, &ntp, 64);
    *used = ntp > 0;
    *mem = (fval){0, 0};
    if (!read || d->unattributed) {
        st->pmem_complete = 0;
        return;
    }
    double sum = 0;
    int all_ok = 1;
    for (int i = 0; i < ntp; i++) {
        if (tp[i].mem_ok)
            sum += (double)tp[i].mem;
        else
            all_ok = 0;
        /* Per process, summed over GPUs (procs.csv gpu_mem_bytes). */
        int k = 0;
        while (k < st->npmem && st->pmem[k].pid != tp[i].owner)
            k++;
        if (k == st->npmem) {
            if (k >= PMEM_CAP) continue;
            st->pmem[st->npmem++] = (struct pmem){tp[i].owner, 0, 1};
        }
        st->pmem[k].bytes += (double)tp[i].mem;
        st->pmem[k].ok &= tp[i].mem_ok;
    }
    /* The tree's share is unknown when a process of it has no figure. */
    if (all_ok) *mem = fv(sum);
}

/* The process-utilisation samples newer than the last read, into st->putil
 * (*n of them). 1 read, 0 none new (nothing ran since), -1 not available. */
static int putil_read(nvml_state *st, ndev *d, unsigned *n)
{
    *n = 0;
    if (!st->api.putil || (d->unsup & UNSUP_PUTIL)) return -1;
    unsigned got = PUTIL_CAP;
    nvmlReturn_t r = st->api.putil(d->h, st->putil, &got, d->putil_last_ts);
    if (r == NV_NOT_FOUND) return 0;
    if (!ok_call(d, r, UNSUP_PUTIL) || got > PUTIL_CAP) return -1;
    for (unsigned i = 0; i < got; i++)
        if (st->putil[i].ts > d->putil_last_ts) d->putil_last_ts = st->putil[i].ts;
    *n = got;
    return 1;
}

/* 1 when sample i is its pid's newest of the n read (several per pid come
 * back; the newest counts), and a share (SM above 100% is not one) */
static int putil_newest(const nvml_state *st, unsigned n, unsigned i)
{
    const nv_putil *s = &st->putil[i];
    if (s->sm > 100) return 0;
    for (unsigned j = 0; j < n; j++)
        if (j != i && st->putil[j].pid == s->pid &&
            (st->putil[j].ts > s->ts || (st->putil[j].ts == s->ts && j > i)))
            return 0;
    return 1;
}

/* SM utilisation of the tree's processes since the previous sample. */
static fval read_proc_sm(nvml_state *st, ndev *d)
{
    unsigned n;
    int r = putil_read(st, d, &n);
    if (r <= 0) return r == 0 ? fv(0) : (fval){0, 0}; /* none new: nothing ran */
    double sum = 0;
    int unattributed = 0;
    for (unsigned i = 0; i < n; i++) {
        const nv_putil *s = &st->putil[i];
        if (s->sm > 100) continue;
        if (!in_tree(st, s->pid)) {
            if (st->child_pidns && !pid_visible(s->pid)) unattributed = 1;
            continue;
        }
        if (putil_newest(st, n, i)) sum += s->sm;
    }
    return unattributed ? (fval){0, 0} : fv(sum);
}

static double field_value(const nv_field *v)
{
    switch (v->vtype) {
    case 0: return v->v.d;
    case 1: return (double)v->v.u;
    case 2: return (double)v->v.ul;
    case 3: return (double)v->v.ull;
    case 4: return (double)v->v.sll;
    case 5: return (double)v->v.si;
    case 6: return (double)v->v.us;
    }
    return 0;
}

static unsigned long long field_counter(const nv_field *v)
{
    switch (v->vtype) {
    case 1: return v->v.u;
    case 2: return v->v.ul;
    case 3: return v->v.ull;
    case 6: return v->v.us;
    case 4: return v->v.sll < 0 ? 0 : (unsigned long long)v->v.sll;
    case 5: return v->v.si < 0 ? 0 : (unsigned)v->v.si;
    }
    return 0;
}

static void add_field(ndev *d, int kind, unsigned id, unsigned scope, double unit)
{
    int i = d->nfield++;
    d->field_kind[i] = kind;
    d->field_id[i] = id;
    d->field_scope[i] = scope;
    d->field_unit[i] = unit;
}

/* Which counters this device serves: NVLink (only with links), PCIe bytes. */
static void probe_fields(nvml_state *st, ndev *d)
{
    if (!st->api.fields) return;
    nv_field q[5];
    memset(q, 0, sizeof(q));
    unsigned ids[5] = {FI_NVLINK_LINK_COUNT, FI_NVLINK_TX_KIB, FI_NVLINK_RX_KIB, FI_PCIE_TX_BYTES,
                       FI_PCIE_RX_BYTES};
    for (int i = 0; i < 5; i++) {
        q[i].field = ids[i];
        q[i].scope = i == 1 || i == 2 ? UINT_MAX : 0; /* sum over all links */
    }
    nvmlReturn_t r = st->api.fields(d->h, 5, q);
    if (r == NV_GPU_IS_LOST) d->lost = 1;
    if (r != NV_SUCCESS) return;
    int links = q[0].ret == NV_SUCCESS && field_value(&q[0]) > 0;
    if (links) {
        if (q[1].ret == NV_SUCCESS && q[2].ret == NV_SUCCESS) {
            add_field(d, FK_NVL_TX, FI_NVLINK_TX_KIB, UINT_MAX, 1024.0);
            add_field(d, FK_NVL_RX, FI_NVLINK_RX_KIB, UINT_MAX, 1024.0);
        } else {
            /* NVLink5 parts count bytes in other fields. */
            nv_field q5[2];
            memset(q5, 0, sizeof(q5));
            q5[0].field = FI_NVLINK5_TX_BYTES;
            q5[1].field = FI_NVLINK5_RX_BYTES;
            q5[0].scope = q5[1].scope = UINT_MAX;
            if (st->api.fields(d->h, 2, q5) == NV_SUCCESS && q5[0].ret == NV_SUCCESS &&
                q5[1].ret == NV_SUCCESS) {
                add_field(d, FK_NVL_TX, FI_NVLINK5_TX_BYTES, UINT_MAX, 1.0);
                add_field(d, FK_NVL_RX, FI_NVLINK5_RX_BYTES, UINT_MAX, 1.0);
            }
        }
    }
    if (q[3].ret == NV_SUCCESS && q[4].ret == NV_SUCCESS) {
        add_field(d, FK_PCIE_TX, FI_PCIE_TX_BYTES, 0, 1.0);
        add_field(d, FK_PCIE_RX, FI_PCIE_RX_BYTES, 0, 1.0);
        d->pcie_by_counter = 1;
    }
}

/* Rates from the cumulative counters: delta over the driver's own timestamps. */
static void read_fields(nvml_state *st, ndev *d, gpu_frame *g)
{
    if (!d->nfield) return;
    nv_field q[FK_N];
    memset(q, 0, sizeof(q));
    for (int i = 0; i < d->nfield; i++) {
        q[i].field = d->field_id[i];
        q[i].scope = d->field_scope[i];
    }
    nvmlReturn_t r = st->api.fields(d->h, d->nfield, q);
    if (!ok_call(d, r, 0)) return;
    for (int i = 0; i < d->nfield; i++) {
        if (q[i].ret != NV_SUCCESS) {
            if (q[i].ret == NV_GPU_IS_LOST) d->lost = 1;
            d->field_prev_ok[i] = 0;
            continue;
        }
        unsigned long long c = field_counter(&q[i]);
        long long ts = q[i].ts_us;
        if (d->field_prev_ok[i] && c >= d->field_prev[i] && ts > d->field_prev_ts[i]) {
            double bps = (double)(c - d->field_prev[i]) * d->field_unit[i] * 1e6 /
                         (double)(ts - d->field_prev_ts[i]);
            fval *dst = d->field_kind[i] == FK_NVL_TX    ? &g->nvlink_tx_bps
                        : d->field_kind[i] == FK_NVL_RX  ? &g->nvlink_rx_bps
                        : d->field_kind[i] == FK_PCIE_TX ? &g->pcie_tx_bps
                                                         : &g->pcie_rx_bps;
            fv_set(dst, bps);
        }
        /* A counter that went back (wrap, driver reload) restarts the delta. */
        d->field_prev[i] = c;
        d->field_prev_ts[i] = ts;
        d->field_prev_ok[i] = 1;
    }
}

static void read_energy(nvml_state *st, ndev *d, gpu_frame *g, double dt)
{
    unsigned long long mj;
    if (st->api.energy && !(d->unsup & UNSUP_ENERGY) &&
        ok_call(d, st->api.energy(d->h, &mj), UNSUP_ENERGY)) {
        if (!d->energy_base_ok) {
            d->energy_base = d->energy_prev = mj;
            d->energy_base_ok = 1;
        } else if (mj < d->energy_prev) {
            /* Counter restarted (driver reload): keep what was counted. */
            d->energy_acc_j += (double)(d->energy_prev - d->energy_base) / 1000.0;
            d->energy_base = d->energy_prev = mj;
        } else {
            fv_set(&g->energy_j, (double)(mj - d->energy_prev) / 1000.0);
            d->energy_prev = mj;
        }
        fv_set(&g->energy_total_j, d->energy_acc_j + (double)(mj - d->energy_base) / 1000.0);
        return;
    }
    if (d->lost || !(d->unsup & UNSUP_ENERGY)) return;
    /* No energy counter (before Volta): integrate the power readings. */
    if (g->power_w.ok) {
        if (d->power_prev_ok && dt > 0) {
            double e = (d->power_prev_w + g->power_w.v) / 2.0 * dt;
            d->energy_acc_j += e;
            fv_set(&g->energy_j, e);
        }
        d->power_prev_w = g->power_w.v;
        d->power_prev_ok = 1;
        fv_set(&g->energy_total_j, d->energy_acc_j);
    } else {
        d->power_prev_ok = 0;
    }
}

static void read_memory(nvml_state *st, ndev *d, gpu_frame *g)
{
    if (d->unsup & UNSUP_MEM) return;
    if (d->mem_ver == 2 && st->api.mem2) {
        nv_mem2 m;
        memset(&m, 0, sizeof(m));
        m.version = NV_MEM2_VERSION;
        nvmlReturn_t r = st->api.mem2(d->h, &m);
        if (r == NV_SUCCESS) {
            /* Unified-memory parts report total 0: unknown, not 0. */
            if (m.total > 0) {
                fv_set(&g->mem_total_bytes, (double)m.total);
                fv_set(&g->mem_used_bytes, (double)m.used);
            }
            return;
        }
        if (r == NV_GPU_IS_LOST) {
            d->lost = 1;
            return;
        }
        d->mem_ver = 1; /* version word refused or call missing: use v1 */
    }
    if (!st->api.mem1) return;
    nv_mem1 m;
    if (ok_call(d, st->api.mem1(d->h, &m), UNSUP_MEM) && m.total > 0) {
        fv_set(&g->mem_total_bytes, (double)m.total);
        fv_set(&g->mem_used_bytes, (double)m.used);
    }
}

static void read_temp(nvml_state *st, ndev *d, gpu_frame *g)
{
    if (d->unsup & UNSUP_TEMP) return;
    if (st->api.temp) {
        unsigned c;
        if (ok_call(d, st->api.temp(d->h, 0, &c), UNSUP_TEMP)) fv_set(&g->temp_c, c);
    } else if (st->api.temp_v) {
        nv_temp t = {NV_TEMP_VERSION, 0, 0};
        if (ok_call(d, st->api.temp_v(d->h, &t), UNSUP_TEMP)) fv_set(&g->temp_c, t.temperature);
    }
}

/* Fill g for device d. Stops at the first call that finds the GPU lost. */
static void sample_device(nvml_state *st, ndev *d, gpu_frame *g, double dt)
{
    struct nv_api *a = &st->api;
    if (a->util && !(d->unsup & UNSUP_UTIL)) {
        nv_util u;
        if (ok_call(d, a->util(d->h, &u), UNSUP_UTIL)) {
            fv_set(&g->util_pct, u.gpu);
            fv_set(&g->mem_util_pct, u.memory);
        }
    }
    if (!d->lost) read_memory(st, d, g);
    if (!d->lost) read_temp(st, d, g);
    if (!d->lost && a->power && !(d->unsup & UNSUP_POWER)) {
        unsigned mw;
        if (ok_call(d, a->power(d->h, &mw), UNSUP_POWER)) fv_set(&g->power_w, mw / 1000.0);
    }
    if (!d->lost) read_energy(st, d, g, dt);
    if (!d->lost && a->clock && !(d->unsup & UNSUP_SM)) {
        unsigned mhz;
        if (ok_call(d, a->clock(d->h, NV_CLOCK_SM, &mhz), UNSUP_SM)) fv_set(&g->sm_mhz, mhz);
    }
    if (!d->lost && a->clock && !(d->unsup & UNSUP_MEMCLK)) {
        unsigned mhz;
        if (ok_call(d, a->clock(d->h, NV_CLOCK_MEM, &mhz), UNSUP_MEMCLK)) fv_set(&g->mem_mhz, mhz);
    }
    if (!d->lost && a->reasons && !(d->unsup & UNSUP_REASONS)) {
        unsigned long long mask;
        if (ok_call(d, a->reasons(d->h, &mask), UNSUP_REASONS)) {
            fv_set(&g->throttle_mask, (double)mask);
            nvml_reasons_str(mask, g->throttle, sizeof(g->throttle));
        }
    }
    if (!d->lost) read_fields(st, d, g);
    if (!d->lost) g->proc_sm_pct = read_proc_sm(st, d);
    if (!d->lost && !d->pcie_by_counter && st->thr_on) {
        pthread_mutex_lock(&st->mu);
        d->pcie_want = 1;
        if (d->pcie_ok) {
            fv_set(&g->pcie_tx_bps, d->pcie_tx_bps);
            fv_set(&g->pcie_rx_bps, d->pcie_rx_bps);
        }
        if (d->pcie_lost) d->lost = 1;
        pthread_mutex_unlock(&st->mu);
    }
}

/* ---- PCIe helper thread ------------------------------------------------ */

/* nvmlDeviceGetPcieThroughput blocks ~20 ms per counter: call it here, once
 * per interval per device the sample asked for, never in the sample. */
static void *pcie_thread(void *arg)
{
    nvml_state *st = arg;
    pthread_mutex_lock(&st->mu);
    while (!st->stop) {
        for (int i = 0; i < st->ndev && !st->stop; i++) {
            ndev *d = &st->dev[i];
            if (!d->pcie_want || d->pcie_lost) continue;
            nvmlDevice_t h = d->h;
            pthread_mutex_unlock(&st->mu);
            unsigned tx = 0, rx = 0;
            nvmlReturn_t r1 = st->api.pcie(h, NV_PCIE_TX, &tx);
            nvmlReturn_t r2 = r1 == NV_SUCCESS ? st->api.pcie(h, NV_PCIE_RX, &rx) : r1;
            pthread_mutex_lock(&st->mu);
            d->pcie_ok = r1 == NV_SUCCESS && r2 == NV_SUCCESS;
            if (d->pcie_ok) {
                d->pcie_tx_bps = tx * 1024.0; /* KB/s */
                d->pcie_rx_bps = rx * 1024.0;
            }
            if (r1 == NV_GPU_IS_LOST || r2 == NV_GPU_IS_LOST) d->pcie_lost = 1;
            if (r1 == NV_NOT_SUPPORTED || r2 == NV_NOT_SUPPORTED) d->pcie_want = 0;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double s = st->interval_s > 0 ? st->interval_s : 1.0;
        ts.tv_sec += (time_t)s;
        ts.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!st->stop && pthread_cond_timedwait(&st->cv, &st->mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

static void start_pcie_thread(nvml_state *st)
{
    int need = 0;
    for (int i = 0; i < st->ndev; i++)
        need |= !st->dev[i].pcie_by_counter;
    if (!need || !st->api.pcie) return;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cv, &ca);
    pthread_condattr_destroy(&ca);
    /* Without the thread PCIe is simply unknown. */
    if (pthread_create(&st->thr, NULL, pcie_thread, st) == 0)
        st->thr_on = 1;
    else
        pthread_cond_destroy(&st->cv);
}

/* ---- the source -------------------------------------------------------- */

static void nvml_close(void *state)
{
    nvml_state *st = state;
    if (!st) return;
    if (st->thr_on) {
        pthread_mutex_lock(&st->mu);
        st->stop = 1;
        pthread_cond_signal(&st->cv);
        pthread_mutex_unlock(&st->mu);
        pthread_join(st->thr, NULL);
        pthread_cond_destroy(&st->cv);
    }
    if (st->loaded) st->api.shutdown();
    api_unload(&st->api);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static const char *nvml_last_error(void *state)
{
    nvml_state *st = state;
    if (!st) return "out of memory";
    return st->err[0] ? st->err : NULL;
}

/* Open one device's handle, name and uuid. 0, or -1 to leave it out. */
static int open_device(nvml_state *st, unsigned i, ndev *d)
{
    struct nv_api *a = &st->api;
    memset(d, 0, sizeof(*d));
    d->index = (int)i;
    d->mem_ver = 2;
    nvmlReturn_t r = a->get_handle(i, &d->h);
    if (r == NV_GPU_IS_LOST) {
        d->lost = 1;
        snprintf(d->name, sizeof(d->name), "GPU %u", i);
        return 0;
    }
    if (r != NV_SUCCESS) return -1; /* e.g. no permission inside a container */
    if (!a->get_name || a->get_name(d->h, d->name, sizeof(d->name)) != NV_SUCCESS)
        snprintf(d->name, sizeof(d->name), "GPU %u", i);
    if (!a->get_uuid || a->get_uuid(d->h, d->uuid, sizeof(d->uuid)) != NV_SUCCESS)
        d->uuid[0] = '\0';
    d->name[sizeof(d->name) - 1] = d->uuid[sizeof(d->uuid) - 1] = '\0';
    return 0;
}

static int nvml_init(void **state, const src_ctx *ctx)
{
    nvml_state *st = calloc(1, sizeof(*st));
    *state = st;
    if (!st) return TPF_ENOMEM;
    pthread_mutex_init(&st->mu, NULL);
    st->root = ctx && ctx->root_pid > 0 ? ctx->root_pid : getpid();
    st->interval_s = ctx && ctx->interval_s > 0 ? ctx->interval_s : 1.0;
    st->child_pidns = (uint8_t)in_child_pidns();
    if (ctx && (ctx->flags & TPF_START_NO_GPU)) {
        snprintf(st->err, sizeof(st->err), "GPU metrics turned off");
        return TPF_EUNSUPPORTED;
    }
    int rc = api_load(&st->api, st->err, sizeof(st->err));
    if (rc) return rc;
    st->loaded = 1;
    unsigned count = 0;
    nvmlReturn_t r = st->api.get_count(&count);
    if (r != NV_SUCCESS) {
        snprintf(st->err, sizeof(st->err), "nvmlDeviceGetCount failed: %s; GPU metrics off",
                 nvml_code_name(r));
        return TPF_ESYS;
    }
    for (unsigned i = 0; i < count && st->ndev < FRAME_MAX_GPUS; i++)
        if (open_device(st, i, &st->dev[st->ndev]) == 0) st->ndev++;
    if (st->ndev == 0) {
        snprintf(st->err, sizeof(st->err), "NVML sees no usable GPU; GPU metrics off");
        return TPF_EUNSUPPORTED;
    }
    resolve_visible(st);
    if (st->cvd_resolved && st->nvisible == 0) {
        snprintf(st->err, sizeof(st->err),
                 "CUDA_VISIBLE_DEVICES hides every GPU from the run; GPU metrics off");
        return TPF_EUNSUPPORTED;
    }
    for (int i = 0; i < st->ndev; i++)
        if (!st->dev[i].lost) probe_fields(st, &st->dev[i]);
    start_pcie_thread(st);
    return 0;
}

static int is_visible(const nvml_state *st, int d)
{
    for (int i = 0; i < st->nvisible; i++)
        if (st->visible[i] == d) return 1;
    return 0;
}

static int nvml_sample(void *state, const src_ctx *ctx, coll_frame *f)
{
    nvml_state *st = state;
    if (!st || !st->loaded) return TPF_ESTATE;
    if (!st->cvd_resolved) resolve_visible(st);
    build_tree_ids(st, f);
    st->npmem = 0;
    st->pmem_complete = 1;

    /* Contexts of the tree on any device: those GPUs are the run's. */
    int used_now[FRAME_MAX_GPUS];
    fval mem[FRAME_MAX_GPUS];
    for (int i = 0; i < st->ndev; i++) {
        ndev *d = &st->dev[i];
        used_now[i] = 0;
        mem[i] = (fval){0, 0};
        if (d->lost) continue;
        scan_procs(st, d, &used_now[i], &mem[i]);
        if (used_now[i] && !d->used) {
            d->used = 1;
            st->any_used = 1;
        }
    }

    int n = 0;
    for (int i = 0; i < st->ndev && n < FRAME_MAX_GPUS; i++) {
        ndev *d = &st->dev[i];
        /* Before any context: the visible devices; then those used. */
        if (st->any_used ? !d->used : !is_visible(st, i)) continue;
        gpu_frame *g = &f->gpu[n++];
        memset(g, 0, sizeof(*g));
        g->index = d->index;
        memcpy(g->name, d->name, sizeof(g->name));
        memcpy(g->uuid, d->uuid, sizeof(g->uuid));
        g->in_use = (uint8_t)used_now[i];
        if (!d->lost) {
            g->proc_mem_bytes = mem[i];
            sample_device(st, d, g, f->dt);
        }
        if (d->lost && st->thr_on) {
            pthread_mutex_lock(&st->mu);
            d->pcie_want = 0;
            pthread_mutex_unlock(&st->mu);
        }
        if (d->lost) {
            /* Nothing read from a lost GPU is trusted; it is not asked again. */
            memset(g, 0, sizeof(*g));
            g->index = d->index;
            memcpy(g->name, d->name, sizeof(g->name));
            memcpy(g->uuid, d->uuid, sizeof(g->uuid));
            g->lost = 1;
        }
    }
    f->ngpu = n;
    return 0;
}

fval nvml_proc_gpu_mem(void *state, pid_t pid)
{
    const nvml_state *st = state;
    /* A GPU whose lists could not be read may hold more of it: unknown. */
    if (!st || !st->loaded || !st->pmem_complete) return (fval){0, 0};
    for (int i = 0; i < st->npmem; i++)
        if (st->pmem[i].pid == pid) return st->pmem[i].ok ? fv(st->pmem[i].bytes) : (fval){0, 0};
    return fv(0); /* listed on no GPU */
}

const src_ops nvml_source = {
    "nvml", nvml_init, nvml_sample, nvml_last_error, nvml_close,
};

/* ---- doctor ------------------------------------------------------------ */

int nvml_query_system(nvml_sys_info *out)
{
    struct nv_api a;
    memset(out, 0, sizeof(*out));
    snprintf(out->lib, sizeof(out->lib), "%s", lib_path());
    int rc = api_load(&a, out->error, sizeof(out->error));
    if (rc) return rc;
    if (a.driver_version && a.driver_version(out->driver_version, sizeof(out->driver_version)))
        out->driver_version[0] = '\0';
    if (a.nvml_version && a.nvml_version(out->nvml_version, sizeof(out->nvml_version)))
        out->nvml_version[0] = '\0';
    out->driver_version[sizeof(out->driver_version) - 1] = '\0';
    out->nvml_version[sizeof(out->nvml_version) - 1] = '\0';
    if (!a.cuda_version || a.cuda_version(&out->cuda_driver_version) != NV_SUCCESS)
        out->cuda_driver_version = 0;
    unsigned count = 0;
    nvmlReturn_t r = a.get_count(&count);
    if (r != NV_SUCCESS) {
        snprintf(out->error, sizeof(out->error), "nvmlDeviceGetCount failed: %s",
                 nvml_code_name(r));
        rc = TPF_ESYS;
    }
    out->ndev = (int)count;
    for (unsigned i = 0; rc == 0 && i < count && out->nlisted < FRAME_MAX_GPUS; i++) {
        nvml_dev_info *di = &out->dev[out->nlisted++];
        nvmlDevice_t h;
        di->index = (int)i;
        if ((r = a.get_handle(i, &h)) != NV_SUCCESS) {
            snprintf(di->name, sizeof(di->name), "(unavailable: %s)", nvml_code_name(r));
            continue;
        }
        if (!a.get_name || a.get_name(h, di->name, sizeof(di->name)) != NV_SUCCESS)
            snprintf(di->name, sizeof(di->name), "GPU %u", i);
        if (!a.get_uuid || a.get_uuid(h, di->uuid, sizeof(di->uuid)) != NV_SUCCESS)
            di->uuid[0] = '\0';
        di->name[sizeof(di->name) - 1] = di->uuid[sizeof(di->uuid) - 1] = '\0';
        nv_mem2 m2;
        nv_mem1 m1;
        memset(&m2, 0, sizeof(m2));
        m2.version = NV_MEM2_VERSION;
        if (a.mem2 && a.mem2(h, &m2) == NV_SUCCESS && m2.total > 0)
            di->mem_total_bytes = fv((double)m2.total);
        else if (a.mem1 && a.mem1(h, &m1) == NV_SUCCESS && m1.total > 0)
            di->mem_total_bytes = fv((double)m1.total);
    }
    a.shutdown();
    api_unload(&a);
    return rc;
}

/* ---- trainperf top ----------------------------------------------------- */

/* The node's GPUs, every process on them: an nvml_state that reads every
 * device and takes every pid (all_pids), with no tree, no PCIe thread. */
struct nvml_top {
    nvml_state st;
};

int nvml_top_open(nvml_top **out, char *err, size_t errn)
{
    *out = NULL;
    nvml_top *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(err, errn, "out of memory");
        return TPF_ENOMEM;
    }
    nvml_state *st = &t->st;
    pthread_mutex_init(&st->mu, NULL);
    st->all_pids = 1;
    int rc = api_load(&st->api, err, errn);
    if (rc) {
        nvml_close(t);
        return rc;
    }
    st->loaded = 1;
    unsigned count = 0;
    nvmlReturn_t r = st->api.get_count(&count);
    if (r != NV_SUCCESS) {
        snprintf(err, errn, "nvmlDeviceGetCount failed: %s", nvml_code_name(r));
        nvml_close(t);
        return TPF_ESYS;
    }
    for (unsigned i = 0; i < count && st->ndev < FRAME_MAX_GPUS; i++)
        if (open_device(st, i, &st->dev[st->ndev]) == 0) st->ndev++;
    *out = t;
    return 0;
}

int nvml_top_read(nvml_top *t, nvml_top_gpu *gpus, int cap)
{
    if (!t) return 0;
    nvml_state *st = &t->st;
    int n = 0;
    for (int i = 0; i < st->ndev && n < cap; i++) {
        ndev *d = &st->dev[i];
        nvml_top_gpu *g = &gpus[n++];
        memset(g, 0, sizeof(*g));
        g->index = d->index;
        memcpy(g->name, d->name, sizeof(g->name));
        if (!d->lost && st->api.util && !(d->unsup & UNSUP_UTIL)) {
            nv_util u;
            if (ok_call(d, st->api.util(d->h, &u), UNSUP_UTIL)) fv_set(&g->util_pct, u.gpu);
        }
        gpu_frame gf;
        memset(&gf, 0, sizeof(gf));
        if (!d->lost) read_memory(st, d, &gf);
        g->mem_used_bytes = gf.mem_used_bytes;
        g->mem_total_bytes = gf.mem_total_bytes;
        /* compute and graphics contexts, one row per process */
        tree_proc tp[NVML_TOP_PROCS];
        int ntp = 0;
        if (!d->lost) g->procs_ok = read_procs(st, d, 0, tp, &ntp, NVML_TOP_PROCS);
        if (!d->lost) g->procs_ok |= read_procs(st, d, 1, tp, &ntp, NVML_TOP_PROCS);
        unsigned nput = 0;
        int pu = d->lost ? -1 : putil_read(st, d, &nput);
        for (int k = 0; k < ntp; k++) {
            nvml_top_proc *p = &g->proc[g->nproc++];
            p->pid = tp[k].pid;
            p->mem_bytes = tp[k].mem_ok ? fv((double)tp[k].mem) : (fval){0, 0};
            /* none new: it ran nothing since the last read; not listed: the same */
            p->sm_pct = pu < 0 ? (fval){0, 0} : fv(0);
            for (unsigned j = 0; pu > 0 && j < nput; j++)
                if (st->putil[j].pid == tp[k].pid && putil_newest(st, nput, j))
                    p->sm_pct = fv(st->putil[j].sm);
        }
        g->lost = d->lost;
    }
    return n;
}

void nvml_top_close(nvml_top *t)
{
    /* the state is the struct's first member: nvml_close frees it all */
    nvml_close(t);
}
