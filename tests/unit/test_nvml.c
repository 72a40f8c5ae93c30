/* The nvml source and GPU selection, driven through the real source code
 * against the fake libnvidia-ml (BUILD/fakes/, found next to this binary),
 * with real child processes standing in for the training tree. */
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collect/gpusel.h"
#include "collect/nvml.h"
#include "trainperf.h"
#include "tt.h"

/* ---- harness ----------------------------------------------------------- */

static char fake_dir[PATH_MAX];
static char scen_path[PATH_MAX];

static const char *fake_lib(int legacy)
{
    static char p[PATH_MAX + 64];
    if (!fake_dir[0]) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        exe[n > 0 ? n : 0] = '\0';
        snprintf(fake_dir, sizeof(fake_dir), "%s/../fakes", dirname(exe));
    }
    snprintf(p, sizeof(p), "%s/%slibnvidia-ml.so.1", fake_dir, legacy ? "legacy/" : "");
    return p;
}

/* Point the loader at the fake and write the scenario it plays. */
static void scenario(int legacy, const char *text)
{
    setenv("TRAINPERF_NVML_LIB", fake_lib(legacy), 1);
    snprintf(scen_path, sizeof(scen_path), "/tmp/tpf-nvml-%d.scn", (int)getpid());
    FILE *f = fopen(scen_path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
    setenv("TRAINPERF_FAKE_NVML", scen_path, 1);
}

/* The fake's own counters, through the handle the source also uses. */
static unsigned calls(int legacy, int dev, const char *fn)
{
    void *h = dlopen(fake_lib(legacy), RTLD_NOW | RTLD_NOLOAD);
    if (!h) return 0;
    unsigned (*f)(int, const char *) = (unsigned (*)(int, const char *))dlsym(h, "fake_nvml_calls");
    unsigned n = f ? f(dev, fn) : 0;
    dlclose(h);
    return n;
}

static long last_tid(int legacy, int dev, const char *fn)
{
    void *h = dlopen(fake_lib(legacy), RTLD_NOW | RTLD_NOLOAD);
    if (!h) return 0;
    long (*f)(int, const char *) = (long (*)(int, const char *))dlsym(h, "fake_nvml_last_tid");
    long t = f ? f(dev, fn) : 0;
    dlclose(h);
    return t;
}

/* A real process to watch: `sleep`, with CUDA_VISIBLE_DEVICES=cvd if given. */
static pid_t child(const char *cvd)
{
    char var[256];
    char *envp[3] = {"PATH=/usr/bin:/bin", NULL, NULL};
    if (cvd) {
        snprintf(var, sizeof(var), "CUDA_VISIBLE_DEVICES=%s", cvd);
        envp[1] = var;
    }
    char *argv[] = {"sleep", "60", NULL};
    pid_t pid;
    if (posix_spawnp(&pid, "sleep", NULL, NULL, argv, envp) != 0) return -1;
    /* posix_spawn returns before execve has set up the new environment:
     * wait for it so each test starts from a settled process. */
    char v[8];
    for (int i = 0; i < 400 && gpusel_environ(pid, "PATH", v, sizeof(v)) == TPF_ESTATE; i++)
        nanosleep(&(struct timespec){0, 5000000L}, NULL);
    return pid;
}

static void reap(pid_t p)
{
    if (p <= 0) return;
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
}

typedef struct rig {
    void *st;
    src_ctx ctx;
    coll_frame *f;
    pid_t tree[4];
    int init_rc;
} rig;

static void rig_open(rig *r, pid_t root, double interval)
{
    memset(r, 0, sizeof(*r));
    r->f = calloc(1, sizeof(*r->f));
    r->ctx.root_pid = root;
    r->ctx.interval_s = interval;
    r->tree[0] = root;
    r->init_rc = nvml_source.init(&r->st, &r->ctx);
}

/* One sample with dt seconds since the previous one. */
static int rig_sample(rig *r, double dt)
{
    memset(r->f, 0, sizeof(*r->f));
    r->f->dt = dt;
    r->f->tree_pids = r->tree;
    r->f->ntree = r->tree[0] ? 1 : 0;
    while (r->f->ntree < 4 && r->tree[r->f->ntree])
        r->f->ntree++;
    return nvml_source.sample(r->st, &r->ctx, r->f);
}

static void rig_close(rig *r)
{
    nvml_source.close(r->st);
    free(r->f);
    unlink(scen_path);
}

static const gpu_frame *gpu_at(const coll_frame *f, int index)
{
    for (int i = 0; i < f->ngpu; i++)
        if (f->gpu[i].index == index) return &f->gpu[i];
    return NULL;
}

/* ---- loading faults ---------------------------------------------------- */

TT_TEST(no_library_default_name)
{
    /* Only meaningful where no NVIDIA driver is installed (this machine). */
    void *real = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (real) {
        dlclose(real);
        printf("skip: a real libnvidia-ml.so.1 is installed\n");
        return;
    }
    unsetenv("TRAINPERF_NVML_LIB");
    rig r;
    rig_open(&r, getpid(), 1.0);
    TT_EQ_INT(r.init_rc, TPF_EUNSUPPORTED);
    TT_EQ_STR(nvml_source.last_error(r.st),
              "libnvidia-ml.so.1 not found: no NVIDIA driver; GPU metrics off");
    rig_close(&r);
}

TT_TEST(no_library_override_path)
{
    setenv("TRAINPERF_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    rig r;
    rig_open(&r, getpid(), 1.0);
    TT_EQ_INT(r.init_rc, TPF_EUNSUPPORTED);
    TT_ASSERT(strstr(nvml_source.last_error(r.st), "/nonexistent/libnvidia-ml.so.1") != NULL);
    TT_ASSERT(strstr(nvml_source.last_error(r.st), "GPU metrics off") != NULL);
    rig_close(&r);
}

TT_TEST(init_fails_with_driver_error)
{
    scenario(0, "gpus 1\nerr Init 9\n");
    rig r;
    rig_open(&r, getpid(), 1.0);
    TT_ASSERT(r.init_rc < 0);
    TT_ASSERT(strstr(nvml_source.last_error(r.st), "nvmlInit failed") != NULL);
    TT_ASSERT(strstr(nvml_source.last_error(r.st), "DRIVER_NOT_LOADED") != NULL);
    rig_close(&r);
}

TT_TEST(no_gpu_flag)
{
    scenario(0, "gpus 1\n");
    rig r;
    memset(&r, 0, sizeof(r));
    r.ctx.flags = TPF_START_NO_GPU;
    r.ctx.root_pid = getpid();
    TT_EQ_INT(nvml_source.init(&r.st, &r.ctx), TPF_EUNSUPPORTED);
    TT_EQ_INT(calls(0, -1, "Init"), 0); /* the library was not even loaded */
    nvml_source.close(r.st);
}

/* ---- readings ---------------------------------------------------------- */

TT_TEST(device_readings_and_units)
{
    pid_t c = child(NULL);
    TT_ASSERT(c > 0);
    scenario(0, "gpus 1\n"
                "dev 0 name NVIDIA Test 80GB\n"
                "dev 0 uuid GPU-11111111-2222-3333-4444-555555555555\n"
                "dev 0 util 10,90\ndev 0 mem_util 5,50\n"
                "dev 0 mem_total 85899345920\ndev 0 mem_used 1000000,2000000\n"
                "dev 0 mem_reserved 500000\n"
                "dev 0 temp 41,43\ndev 0 power_mw 150000,250000\n"
                "dev 0 energy_mj 5000000,5150000,5400000\n"
                "dev 0 sm_mhz 1410\ndev 0 mem_mhz 1593\n"
                "dev 0 reasons 0x1,0xC,0x104\n");
    rig r;
    rig_open(&r, c, 1.0);
    TT_EQ_INT(r.init_rc, 0);
    TT_EQ_INT(rig_sample(&r, 0), 0);
    TT_EQ_INT(r.f->ngpu, 1);
    const gpu_frame *g = &r.f->gpu[0];
    TT_EQ_STR(g->name, "NVIDIA Test 80GB");
    TT_EQ_STR(g->uuid, "GPU-11111111-2222-3333-4444-555555555555");
    TT_ASSERT(g->util_pct.ok && g->util_pct.v == 10);
    TT_ASSERT(g->mem_util_pct.ok && g->mem_util_pct.v == 5);
    /* _v2 with the right version word: used excludes the reserved memory. */
    TT_NEAR(g->mem_used_bytes.v, 1000000, 0);
    TT_NEAR(g->mem_total_bytes.v, 85899345920.0, 0);
    TT_NEAR(g->power_w.v, 150.0, 1e-9);
    TT_NEAR(g->temp_c.v, 41, 0);
    TT_NEAR(g->sm_mhz.v, 1410, 0);
    TT_NEAR(g->mem_mhz.v, 1593, 0);
    /* First sample: no interval yet, but 0 J used since the start. */
    TT_ASSERT(!g->energy_j.ok);
    TT_ASSERT(g->energy_total_j.ok && g->energy_total_j.v == 0);
    TT_NEAR(g->throttle_mask.v, 1, 0);
    TT_EQ_STR(g->throttle, ""); /* gpu_idle alone is not a slowdown */

    TT_EQ_INT(rig_sample(&r, 1.0), 0);
    g = &r.f->gpu[0];
    TT_NEAR(g->util_pct.v, 90, 0);
    TT_NEAR(g->energy_j.v, (5150000.0 - 5000000.0) / 1000.0, 1e-9);
    TT_NEAR(g->energy_total_j.v, 150.0, 1e-9);
    TT_EQ_STR(g->throttle, "sw_power_cap+hw_slowdown");

    TT_EQ_INT(rig_sample(&r, 1.0), 0);
    g = &r.f->gpu[0];
    TT_NEAR(g->energy_j.v, 250.0, 1e-9);
    TT_NEAR(g->energy_total_j.v, 400.0, 1e-9);
    TT_EQ_STR(g->throttle, "sw_power_cap+display_clocks");
    /* The versioned symbols were the ones called. */
    TT_ASSERT(calls(0, 0, "DeviceGetMemoryInfo_v2") == 3);
    TT_EQ_INT(calls(0, 0, "DeviceGetMemoryInfo"), 0);
    TT_EQ_INT(calls(0, 0, "DeviceGetCurrentClocksEventReasons"), 3);
    rig_close(&r);
    reap(c);
}

TT_TEST(unsupported_fields_are_unknown_not_zero)
{
    pid_t c = child(NULL);
    /* Only util and temperature exist; memory v2 refuses, v1 unsupported. */
    scenario(0, "gpus 1\ndev 0 util 33\ndev 0 mem_util 0\ndev 0 temp 50\n"
                "dev 0 err DeviceGetPowerUsage 3\n");
    rig r;
    rig_open(&r, c, 1.0);
    TT_EQ_INT(r.init_rc, 0);
    for (int i = 0; i < 3; i++)
        TT_EQ_INT(rig_sample(&r, 1.0), 0);
    const gpu_frame *g = &r.f->gpu[0];
    TT_ASSERT(g->util_pct.ok && g->util_pct.v == 33);
    TT_ASSERT(g->mem_util_pct.ok && g->mem_util_pct.v == 0); /* a real 0 */
    TT_ASSERT(!g->mem_used_bytes.ok && !g->mem_total_bytes.ok);
    TT_ASSERT(!g->power_w.ok && !g->energy_j.ok && !g->energy_total_j.ok);
    TT_ASSERT(!g->sm_mhz.ok && !g->mem_mhz.ok && !g->throttle_mask.ok);
    TT_ASSERT(!g->pcie_rx_bps.ok && !g->nvlink_tx_bps.ok);
    TT_ASSERT(!g->lost);
    /* NOT_SUPPORTED is remembered: power was asked once, not every sample. */
    TT_EQ_INT(calls(0, 0, "DeviceGetPowerUsage"), 1);
    rig_close(&r);
    reap(c);
}

TT_TEST(energy_from_power_without_counter)
{
    pid_t c = child(NULL);
    scenario(0, "gpus 1\ndev 0 power_mw 100000,300000,300000\n");
    rig r;
    rig_open(&r, c, 0.5);
    rig_sample(&r, 0);
    TT_ASSERT(!r.f->gpu[0].energy_j.ok);
    TT_ASSERT(r.f->gpu[0].energy_total_j.ok && r.f->gpu[0].energy_total_j.v == 0);
    rig_sample(&r, 0.5);
    /* trapezoid: (100 W + 300 W) / 2 * 0.5 s */
    TT_NEAR(r.f->gpu[0].energy_j.v, 100.0, 1e-9);
    rig_sample(&r, 0.5);
    TT_NEAR(r.f->gpu[0].energy_j.v, 150.0, 1e-9);
    TT_NEAR(r.f->gpu[0].energy_total_j.v, 250.0, 1e-9);
    rig_close(&r);
    reap(c);
}

TT_TEST(memory_v2_refused_falls_back_to_v1)
{
    pid_t c = child(NULL);
    scenario(0, "gpus 1\ndev 0 mem_total 1000000\ndev 0 mem_used 1000\n"
                "dev 0 mem_reserved 500\ndev 0 err DeviceGetMemoryInfo_v2 25\n");
    rig r;
    rig_open(&r, c, 1.0);
    rig_sample(&r, 0);
    rig_sample(&r, 1);
    /* v1 "used" includes reserved memory. */
    TT_NEAR(r.f->gpu[0].mem_used_bytes.v, 1500, 0);
    TT_EQ_INT(calls(0, 0, "DeviceGetMemoryInfo_v2"), 1); /* not retried */
    TT_EQ_INT(calls(0, 0, "DeviceGetMemoryInfo"), 2);
    rig_close(&r);
    reap(c);
}

TT_TEST(legacy_library_unversioned_symbols)
{
    pid_t c = child(NULL);
    pid_t other = child(NULL);
    char s[1024];
    snprintf(s, sizeof(s),
             "gpus 1\ndev 0 util 70\ndev 0 mem_util 1\ndev 0 mem_total 1000000\n"
             "dev 0 mem_used 1000\ndev 0 mem_reserved 500\ndev 0 reasons 0x40\n"
             "dev 0 procs %d:7000,%d:3000,%d:11000\n",
             (int)other, (int)c, 424242);
    scenario(1, s);
    rig r;
    rig_open(&r, c, 1.0);
    TT_EQ_INT(r.init_rc, 0);
    rig_sample(&r, 0);
    const gpu_frame *g = &r.f->gpu[0];
    TT_NEAR(g->util_pct.v, 70, 0);
    TT_NEAR(g->mem_used_bytes.v, 1500, 0); /* v1 struct */
    TT_EQ_STR(g->throttle, "hw_thermal");
    /* v1 process structs are 16 bytes: the second entry is the child's. */
    TT_ASSERT(g->proc_mem_bytes.ok);
    TT_NEAR(g->proc_mem_bytes.v, 3000, 0);
    TT_ASSERT(g->in_use);
    TT_EQ_INT(calls(1, -1, "Init"), 1);
    TT_EQ_INT(calls(1, 0, "DeviceGetCurrentClocksThrottleReasons"), 1);
    rig_close(&r);
    reap(c);
    reap(other);
}

/* The _v3 process call writes `stride`-byte entries; the tree is the 2nd
 * and 4th process of four, so a wrong stride reads wrong pids/memory. */
static void check_stride(int stride)
{
    pid_t a = child(NULL), b = child(NULL), x = child(NULL);
    char s[1024];
    snprintf(s, sizeof(s),
             "gpus 1\ndev 0 proc_stride %d\n"
             "dev 0 procs %d:100,%d:2000,%d:30000,%d:400000\n"
             "dev 0 gprocs %d:2000\n",
             stride, (int)x, (int)a, 999999, (int)b, (int)a);
    scenario(0, s);
    rig r;
    rig_open(&r, a, 1.0);
    r.tree[1] = b;
    rig_sample(&r, 0);
    const gpu_frame *g = &r.f->gpu[0];
    /* a (listed as compute and graphics, counted once) + b */
    TT_ASSERT(g->proc_mem_bytes.ok);
    TT_NEAR(g->proc_mem_bytes.v, 2000 + 400000, 0);
    TT_ASSERT(g->in_use);
    TT_EQ_INT(calls(0, 0, "DeviceGetComputeRunningProcesses_v3"), 1);
    rig_close(&r);
    reap(a);
    reap(b);
    reap(x);
}

TT_TEST(process_stride_24)
{
    check_stride(24);
}
TT_TEST(process_stride_32)
{
    check_stride(32);
}

TT_TEST(process_v3_missing_at_runtime_uses_v2)
{
    pid_t a = child(NULL), x = child(NULL);
    char s[512];
    snprintf(s, sizeof(s),
             "gpus 1\ndev 0 proc_stride 32\ndev 0 procs %d:5,%d:77\n"
             "dev 0 err DeviceGetComputeRunningProcesses_v3 13\n",
             (int)x, (int)a);
    scenario(0, s);
    rig r;
    rig_open(&r, a, 1.0);
    rig_sample(&r, 0);
    rig_sample(&r, 1);
    TT_NEAR(r.f->gpu[0].proc_mem_bytes.v, 77, 0);
    TT_EQ_INT(calls(0, 0, "DeviceGetComputeRunningProcesses_v3"), 1);
    TT_EQ_INT(calls(0, 0, "DeviceGetComputeRunningProcesses_v2"), 2);
    rig_close(&r);
    reap(a);
    reap(x);
}

TT_TEST(per_process_gpu_memory_over_all_gpus)
{
    pid_t a = child(NULL), b = child(NULL), x = child(NULL);
    char s[512];
    snprintf(s, sizeof(s),
             "gpus 3\ndev 0 procs %d:100,%d:999\ndev 1 procs %d:200\ndev 1 gprocs %d:200\n"
             "dev 2 procs %d:5;-\ndev 2 err DeviceGetComputeRunningProcesses_v3 3 from 2\n"
             "dev 2 err DeviceGetGraphicsRunningProcesses_v3 3 from 2\n",
             (int)a, (int)x, (int)a, (int)a, (int)a);
    scenario(0, s);
    rig r;
    rig_open(&r, a, 1.0);
    r.tree[1] = b;
    rig_sample(&r, 0);
    /* a: 100 on GPU 0 + 200 on GPU 1 (compute and graphics, once) + 5 on GPU 2 */
    fval m = nvml_proc_gpu_mem(r.st, a);
    TT_ASSERT(m.ok);
    TT_NEAR(m.v, 305, 0);
    m = nvml_proc_gpu_mem(r.st, b);
    TT_ASSERT(m.ok && m.v == 0); /* in the tree, no context */
    rig_sample(&r, 1);
    /* GPU 2's lists now fail: a process's total can no longer be told. */
    TT_ASSERT(!nvml_proc_gpu_mem(r.st, a).ok);
    TT_ASSERT(!nvml_proc_gpu_mem(r.st, b).ok);
    TT_ASSERT(!nvml_proc_gpu_mem(NULL, a).ok);
    rig_close(&r);
    reap(a);
    reap(b);
    reap(x);
}

TT_TEST(process_memory_not_available_is_unknown)
{
    pid_t a = child(NULL);
    char s[256];
    snprintf(s, sizeof(s), "gpus 1\ndev 0 procs %d:na\n", (int)a);
    scenario(0, s);
    rig r;
    rig_open(&r, a, 1.0);
    rig_sample(&r, 0);
    TT_ASSERT(r.f->gpu[0].in_use);
    TT_ASSERT(!r.f->gpu[0].proc_mem_bytes.ok);
    rig_close(&r);
    reap(a);
}

TT_TEST(process_sm_utilisation)
{
    pid_t a = child(NULL), b = child(NULL), x = child(NULL);
    char s[512];
    /* Call 1: a 30 %, b 20 %, foreign 40 %. Call 2: nothing new. Call 3: a 55 %. */
    snprintf(s, sizeof(s), "gpus 1\ndev 0 procs %d:1\ndev 0 putil %d:30,%d:20,%d:40;-;%d:55\n",
             (int)a, (int)a, (int)b, (int)x, (int)a);
    scenario(0, s);
    rig r;
    rig_open(&r, a, 1.0);
    r.tree[1] = b;
    rig_sample(&r, 0);
    TT_ASSERT(r.f->gpu[0].proc_sm_pct.ok);
    TT_NEAR(r.f->gpu[0].proc_sm_pct.v, 50, 0);
    rig_sample(&r, 1);
    TT_ASSERT(r.f->gpu[0].proc_sm_pct.ok); /* no new samples: nothing ran */
    TT_NEAR(r.f->gpu[0].proc_sm_pct.v, 0, 0);
    rig_sample(&r, 1);
    TT_NEAR(r.f->gpu[0].proc_sm_pct.v, 55, 0);
    rig_close(&r);
    reap(a);
    reap(b);
    reap(x);
}

/* ---- interconnect ------------------------------------------------------ */

TT_TEST(pcie_and_nvlink_from_counters)
{
    pid_t c = child(NULL);
    /* The init probe reads the first value of each counter. */
    scenario(0, "gpus 1\ndev 0 field_dt_us 500000\n"
                "dev 0 pcie_tx_bytes 0,1000000,3000000\ndev 0 pcie_rx_bytes 0,0,500000\n"
                "dev 0 nvlink_links 4\ndev 0 nvlink_tx_kib 0,10,30\ndev 0 nvlink_rx_kib 0,0,1\n"
                "dev 0 pcie_tx_kbps 1\ndev 0 pcie_rx_kbps 1\n");
    rig r;
    rig_open(&r, c, 1.0);
    rig_sample(&r, 0);
    TT_ASSERT(!r.f->gpu[0].pcie_tx_bps.ok); /* one reading: no rate yet */
    rig_sample(&r, 1);
    const gpu_frame *g = &r.f->gpu[0];
    TT_NEAR(g->pcie_tx_bps.v, 2000000.0 / 0.5, 1e-6);
    TT_NEAR(g->pcie_rx_bps.v, 500000.0 / 0.5, 1e-6);
    TT_NEAR(g->nvlink_tx_bps.v, 20.0 * 1024 / 0.5, 1e-6);
    TT_NEAR(g->nvlink_rx_bps.v, 1.0 * 1024 / 0.5, 1e-6);
    /* The blocking 20 ms call was never needed. */
    TT_EQ_INT(calls(0, 0, "DeviceGetPcieThroughput"), 0);
    rig_close(&r);
    reap(c);
}

TT_TEST(pcie_blocking_call_runs_off_the_sampling_thread)
{
    pid_t c = child(NULL);
    scenario(1, "gpus 1\ndev 0 util 1\ndev 0 mem_util 1\n"
                "dev 0 pcie_tx_kbps 2000\ndev 0 pcie_rx_kbps 3000\n");
    rig r;
    rig_open(&r, c, 0.05);
    int got = 0;
    /* The helper thread needs one pass (2 x 20 ms); poll up to ~5 s. */
    for (int i = 0; i < 100 && !got; i++) {
        rig_sample(&r, 0.05);
        got = r.f->gpu[0].pcie_tx_bps.ok;
        if (!got) nanosleep(&(struct timespec){0, 50000000L}, NULL);
    }
    TT_ASSERT(got);
    TT_NEAR(r.f->gpu[0].pcie_tx_bps.v, 2000.0 * 1024, 0);
    TT_NEAR(r.f->gpu[0].pcie_rx_bps.v, 3000.0 * 1024, 0);
    long tid = last_tid(1, 0, "DeviceGetPcieThroughput");
    TT_ASSERT(tid > 0);
    TT_ASSERT(tid != (long)syscall(SYS_gettid));
    TT_ASSERT(last_tid(1, 0, "DeviceGetUtilizationRates") == (long)syscall(SYS_gettid));
    rig_close(&r);
    reap(c);
}

/* ---- GPU lost ---------------------------------------------------------- */

TT_TEST(gpu_lost_mid_run)
{
    pid_t c = child(NULL);
    scenario(0, "gpus 2\ndev 0 util 10\ndev 0 mem_util 1\ndev 1 util 20\ndev 1 mem_util 2\n"
                "dev 1 power_mw 1000\ndev 1 lost_at 3\n");
    rig r;
    rig_open(&r, c, 1.0);
    TT_EQ_INT(r.init_rc, 0);
    for (int i = 0; i < 2; i++) {
        TT_EQ_INT(rig_sample(&r, 1), 0);
        TT_EQ_INT(r.f->ngpu, 2);
        TT_ASSERT(!gpu_at(r.f, 1)->lost && gpu_at(r.f, 1)->util_pct.v == 20);
    }
    TT_EQ_INT(rig_sample(&r, 1), 0); /* the run goes on */
    const gpu_frame *g1 = gpu_at(r.f, 1);
    TT_ASSERT(g1 && g1->lost);
    TT_ASSERT(!g1->util_pct.ok && !g1->power_w.ok);
    TT_ASSERT(gpu_at(r.f, 0)->util_pct.ok && !gpu_at(r.f, 0)->lost);
    unsigned before = calls(0, 1, "DeviceGetUtilizationRates");
    for (int i = 0; i < 3; i++)
        TT_EQ_INT(rig_sample(&r, 1), 0);
    /* No more calls to the lost GPU; the other one is still read. */
    TT_EQ_INT(calls(0, 1, "DeviceGetUtilizationRates"), before);
    TT_ASSERT(gpu_at(r.f, 1)->lost);
    TT_NEAR(gpu_at(r.f, 0)->util_pct.v, 10, 0);
    rig_close(&r);
    reap(c);
}

/* ---- which GPUs are the run's ------------------------------------------ */

TT_TEST(visible_devices_then_those_with_contexts)
{
    pid_t c = child("GPU-bbbb,0");
    char s[512];
    /* Call 1: no process anywhere. Call 2: the child on GPU 2. Then gone. */
    snprintf(s, sizeof(s),
             "gpus 3\ndev 0 uuid GPU-aaaa-0\ndev 1 uuid GPU-cccc-1\ndev 2 uuid GPU-bbbb-2\n"
             "dev 1 procs -;%d:64\n"
             "dev 2 procs -;%d:4096;-\n",
             (int)c, (int)c);
    scenario(0, s);
    rig r;
    rig_open(&r, c, 1.0);
    TT_EQ_INT(r.init_rc, 0);
    rig_sample(&r, 0);
    /* CUDA_VISIBLE_DEVICES of the child: GPU 2 (by UUID prefix) and GPU 0. */
    TT_EQ_INT(r.f->ngpu, 2);
    TT_ASSERT(gpu_at(r.f, 0) && gpu_at(r.f, 2) && !gpu_at(r.f, 1));
    TT_ASSERT(!gpu_at(r.f, 2)->in_use);
    rig_sample(&r, 1);
    /* The child holds contexts on 2 (visible) and 1 (an inner CUDA_VISIBLE_DEVICES
     * of its own): those are the run's now, 0 is not. */
    TT_EQ_INT(r.f->ngpu, 2);
    TT_ASSERT(gpu_at(r.f, 1) && gpu_at(r.f, 2) && !gpu_at(r.f, 0));
    TT_ASSERT(gpu_at(r.f, 2)->in_use);
    TT_NEAR(gpu_at(r.f, 2)->proc_mem_bytes.v, 4096, 0);
    rig_sample(&r, 1);
    /* A GPU once used stays the run's after its context ends. */
    TT_ASSERT(gpu_at(r.f, 2) && !gpu_at(r.f, 2)->in_use);
    TT_ASSERT(gpu_at(r.f, 2)->proc_mem_bytes.ok && gpu_at(r.f, 2)->proc_mem_bytes.v == 0);
    rig_close(&r);
    reap(c);
}

TT_TEST(visible_devices_from_own_env_while_root_unreadable)
{
    /* A root whose environment reads empty (as during execve) forever. */
    char *envp[] = {NULL};
    char *argv[] = {"/bin/sleep", "60", NULL};
    pid_t c;
    TT_EQ_INT(posix_spawn(&c, "/bin/sleep", NULL, NULL, argv, envp), 0);
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    scenario(0, "gpus 3\n");
    rig r;
    rig_open(&r, c, 1.0);
    TT_EQ_INT(r.init_rc, 0);
    rig_sample(&r, 0);
    unsetenv("CUDA_VISIBLE_DEVICES");
    TT_EQ_INT(r.f->ngpu, 1);
    TT_EQ_INT(r.f->gpu[0].index, 1);
    rig_close(&r);
    reap(c);
}

TT_TEST(visible_devices_hide_all)
{
    pid_t c = child("");
    scenario(0, "gpus 2\n");
    rig r;
    rig_open(&r, c, 1.0);
    TT_EQ_INT(r.init_rc, TPF_EUNSUPPORTED);
    TT_ASSERT(strstr(nvml_source.last_error(r.st), "CUDA_VISIBLE_DEVICES") != NULL);
    rig_close(&r);
    reap(c);
}

TT_TEST(visible_devices_mig_uuid)
{
    pid_t c = child("MIG-9999-beef");
    scenario(0, "gpus 2\ndev 1 mig MIG-1234-dead,MIG-9999-beef\n");
    rig r;
    rig_open(&r, c, 1.0);
    TT_EQ_INT(r.init_rc, 0);
    rig_sample(&r, 0);
    TT_EQ_INT(r.f->ngpu, 1);
    TT_EQ_INT(r.f->gpu[0].index, 1);
    rig_close(&r);
    reap(c);
}

TT_TEST(gpusel_parsing)
{
    const char *u[3] = {"GPU-aaaa1111", "GPU-aaaa2222", "GPU-bbbb3333"};
    int out[8];
    TT_EQ_INT(gpusel_visible(NULL, u, 3, NULL, 0, out, 8), 3);
    TT_EQ_INT(gpusel_visible("2,0", u, 3, NULL, 0, out, 8), 2);
    TT_EQ_INT(out[0], 2);
    TT_EQ_INT(out[1], 0);
    /* CUDA stops at the first entry naming no device. */
    TT_EQ_INT(gpusel_visible("1,7,0", u, 3, NULL, 0, out, 8), 1);
    TT_EQ_INT(gpusel_visible("-1", u, 3, NULL, 0, out, 8), 0);
    TT_EQ_INT(gpusel_visible("", u, 3, NULL, 0, out, 8), 0);
    TT_EQ_INT(gpusel_visible(" 1 , 1 ,2", u, 3, NULL, 0, out, 8), 2);
    /* UUIDs and unique prefixes, with or without GPU-; ambiguous stops. */
    TT_EQ_INT(gpusel_visible("GPU-bbbb,aaaa2", u, 3, NULL, 0, out, 8), 2);
    TT_EQ_INT(out[0], 2);
    TT_EQ_INT(out[1], 1);
    TT_EQ_INT(gpusel_visible("GPU-aaaa", u, 3, NULL, 0, out, 8), 0);
    TT_EQ_INT(gpusel_visible("MIG-GPU-aaaa2222/1/0", u, 3, NULL, 0, out, 8), 1);
    TT_EQ_INT(out[0], 1);
    gpusel_mig m[1] = {{"MIG-5555", 2}};
    TT_EQ_INT(gpusel_visible("MIG-5555", u, 3, m, 1, out, 8), 1);
    TT_EQ_INT(out[0], 2);
    TT_EQ_INT(gpusel_visible("0,1,2", u, 3, NULL, 0, out, 2), 2); /* capped */
}

TT_TEST(gpusel_odd_values)
{
    const char *u[2] = {"GPU-aaaa1111", NULL}; /* a device without UUID */
    int out[4];
    char big[8192];
    memset(big, '0', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    TT_EQ_INT(gpusel_visible(big, u, 2, NULL, 0, out, 4), 1); /* 000...0 is index 0 */
    big[0] = '9';
    TT_EQ_INT(gpusel_visible(big, u, 2, NULL, 0, out, 4), 0); /* huge index: none */
    TT_EQ_INT(gpusel_visible("0,,1", u, 2, NULL, 0, out, 4), 1);
    TT_EQ_INT(gpusel_visible("GPU-", u, 2, NULL, 0, out, 4), 0);
    TT_EQ_INT(gpusel_visible("MIG-", u, 2, NULL, 0, out, 4), 0);
    TT_EQ_INT(gpusel_visible("MIG-GPU-", u, 2, NULL, 0, out, 4), 0);
    TT_EQ_INT(gpusel_visible("\xff\xfe,0", u, 2, NULL, 0, out, 4), 0);
    TT_EQ_INT(gpusel_visible("1", u, 2, NULL, 0, out, 4), 1);
    TT_EQ_INT(out[0], 1);
}

TT_TEST(gpusel_environ_of_a_real_process)
{
    pid_t c = child("3,GPU-x");
    char v[64];
    TT_EQ_INT(gpusel_environ(c, "CUDA_VISIBLE_DEVICES", v, sizeof(v)), 1);
    TT_EQ_STR(v, "3,GPU-x");
    TT_EQ_INT(gpusel_environ(c, "CUDA_VISIBLE", v, sizeof(v)), 0);
    TT_EQ_INT(gpusel_environ(c, "NOT_THERE", v, sizeof(v)), 0);
    reap(c);
    TT_ASSERT(gpusel_environ(c, "PATH", v, sizeof(v)) < 0); /* gone */
}

TT_TEST(gpusel_environ_empty_means_retry)
{
    char *envp[] = {NULL};
    char *argv[] = {"/bin/sleep", "60", NULL};
    pid_t c;
    TT_EQ_INT(posix_spawn(&c, "/bin/sleep", NULL, NULL, argv, envp), 0);
    nanosleep(&(struct timespec){0, 100000000L}, NULL);
    char v[8];
    TT_EQ_INT(gpusel_environ(c, "CUDA_VISIBLE_DEVICES", v, sizeof(v)), TPF_ESTATE);
    reap(c);
}

/* A child in its own PID namespace: NVML may name it by either pid. */
static int ns_child_fn(void *arg)
{
    (void)arg;
    pause();
    return 0;
}

TT_TEST(nspid_maps_namespaced_process)
{
    static char stack[64 * 1024];
    pid_t c = clone(ns_child_fn, stack + sizeof(stack), CLONE_NEWPID | SIGCHLD, NULL);
    if (c < 0) {
        printf("skip: no permission for a PID namespace (%s)\n", strerror(errno));
        return;
    }
    pid_t ids[4];
    int n = gpusel_nspids(c, ids, 4);
    TT_EQ_INT(n, 2);
    TT_EQ_INT(ids[0], c);
    TT_EQ_INT(ids[1], 1); /* first process of the new namespace */
    /* NVML lists the process under its inner pid: it is still the tree's. */
    scenario(0, "gpus 1\ndev 0 procs 1:12345\n");
    rig r;
    rig_open(&r, c, 1.0);
    rig_sample(&r, 0);
    TT_ASSERT(r.f->gpu[0].in_use);
    TT_NEAR(r.f->gpu[0].proc_mem_bytes.v, 12345, 0);
    rig_close(&r);
    reap(c);
}

TT_TEST(reasons_words)
{
    char b[160];
    TT_EQ_INT(nvml_reasons_str(0, b, sizeof(b)), 0);
    TT_EQ_STR(b, "");
    TT_EQ_INT(nvml_reasons_str(0x1ff, b, sizeof(b)), 8);
    TT_EQ_STR(b, "applications_clocks+sw_power_cap+hw_slowdown+sync_boost+sw_thermal+"
                 "hw_thermal+hw_power_brake+display_clocks");
    nvml_reasons_str(0x80000000ULL | 0x20, b, sizeof(b));
    TT_EQ_STR(b, "sw_thermal+other");
    nvml_reasons_str(0x1ff, b, 20); /* truncated at a word boundary */
    TT_EQ_STR(b, "applications_clocks");
}

TT_TEST(query_system_for_doctor)
{
    scenario(0, "gpus 2\ndriver 550.54.15\nnvml 12.550.54.15\ncuda 12040\n"
                "dev 0 name NVIDIA A\ndev 0 mem_total 1024\ndev 0 mem_used 0\n"
                "dev 1 name NVIDIA B\ndev 1 err DeviceGetHandleByIndex 4\n");
    nvml_sys_info si;
    TT_EQ_INT(nvml_query_system(&si), 0);
    TT_EQ_STR(si.driver_version, "550.54.15");
    TT_EQ_STR(si.nvml_version, "12.550.54.15");
    TT_EQ_INT(si.cuda_driver_version, 12040);
    TT_EQ_INT(si.ndev, 2);
    TT_EQ_STR(si.dev[0].name, "NVIDIA A");
    TT_ASSERT(si.dev[0].mem_total_bytes.ok && si.dev[0].mem_total_bytes.v == 1024);
    TT_ASSERT(strstr(si.dev[1].name, "NO_PERMISSION") != NULL);
    unlink(scen_path);
}

int main(int argc, char **argv)
{
    return tt_main(argc, argv);
}
