/* trainperf doctor: what this machine offers trainperf, what each part
 * enables, and how to fix what is missing. Informational: exits 0 whatever
 * it finds (2 only for bad arguments). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/human.h"
#include "collect/gpusel.h"
#include "collect/nvml.h"
#include "trainperf.h"
#include "util/buf.h"
#include "util/jsonw.h"
#include "watch/hangdump.h"

typedef enum { ST_OK, ST_LIMITED, ST_MISSING } doc_status;
static const char *const status_word[] = {"ok", "limited", "missing"};

/* One finding. Text fields are owned by the check (fixed buffers). */
typedef struct doc_check {
    const char *name;  /* json key */
    const char *label; /* for people */
    doc_status status;
    char detail[512];
    const char *enables;
    char fix[320]; /* "" when nothing to fix */
} doc_check;

typedef struct doc_py {
    int ran; /* the interpreter ran to the end */
    int timed_out;
    char exe[256];
    char version[64];
    char torch[64];      /* "" when not importable */
    char torch_cuda[32]; /* CUDA version torch was built with; "" for CPU builds */
    int cuda_available;
    char torch_error[160];
    char libdirs[8][512]; /* nvidia/<x>/lib folders of pip wheels, torch/lib */
    int nlibdirs;
} doc_py;

/* ---- small helpers ----------------------------------------------------- */

static int read_text(const char *path, char *b, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t r = read(fd, b, n - 1);
    int e = errno;
    close(fd);
    if (r < 0) {
        errno = e;
        return -1;
    }
    b[r] = '\0';
    while (r > 0 && (b[r - 1] == '\n' || b[r - 1] == ' '))
        b[--r] = '\0';
    return 0;
}

/* ---- NVML -------------------------------------------------------------- */

/* What CUDA_VISIBLE_DEVICES of this shell selects, in CUDA's order. */
static int visible_gpus(const nvml_sys_info *si, int *out)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    const char *uuids[FRAME_MAX_GPUS];
    for (int i = 0; i < si->nlisted; i++)
        uuids[i] = si->dev[i].uuid;
    return gpusel_visible(cvd, uuids, si->nlisted, NULL, 0, out, FRAME_MAX_GPUS);
}

static void check_nvml(doc_check *c, nvml_sys_info *si)
{
    c->name = "nvml";
    c->label = "NVML";
    c->enables = "GPU utilisation, memory, power, energy, clocks, throttling, PCIe/NVLink "
                 "and per-process GPU memory in every sample";
    if (nvml_query_system(si) != 0) {
        c->status = ST_MISSING;
        snprintf(c->detail, sizeof(c->detail), "%s", si->error);
        snprintf(c->fix, sizeof(c->fix),
                 "install the NVIDIA driver (nvidia-smi must work); in a container, start it "
                 "with the NVIDIA container toolkit (docker run --gpus all)");
        return;
    }
    c->status = si->ndev > 0 ? ST_OK : ST_LIMITED;
    char cuda[32] = "";
    if (si->cuda_driver_version > 0)
        snprintf(cuda, sizeof(cuda), ", CUDA %d.%d", si->cuda_driver_version / 1000,
                 si->cuda_driver_version % 1000 / 10);
    snprintf(c->detail, sizeof(c->detail), "driver %s, NVML %s%s; %d GPU%s",
             si->driver_version[0] ? si->driver_version : "?",
             si->nvml_version[0] ? si->nvml_version : "?", cuda, si->ndev,
             si->ndev == 1 ? "" : "s");
    if (si->ndev == 0)
        snprintf(c->fix, sizeof(c->fix),
                 "NVML sees no GPU: check nvidia-smi and the container's device access");
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd && si->nlisted > 0) {
        int vis[FRAME_MAX_GPUS];
        int nv = visible_gpus(si, vis);
        size_t l = strlen(c->detail);
        int w = snprintf(c->detail + l, sizeof(c->detail) - l,
                         "; CUDA_VISIBLE_DEVICES=%.64s selects", cvd);
        for (int i = 0; w > 0 && i < nv; i++) {
            l = strlen(c->detail);
            w = snprintf(c->detail + l, sizeof(c->detail) - l, " GPU %d", vis[i]);
        }
        if (nv == 0) {
            l = strlen(c->detail);
            snprintf(c->detail + l, sizeof(c->detail) - l, " no GPU");
            c->status = ST_LIMITED;
            snprintf(c->fix, sizeof(c->fix),
                     "CUDA_VISIBLE_DEVICES hides every GPU: unset it or name indices/UUIDs");
        }
    }
}

/* ---- PSI --------------------------------------------------------------- */

static void check_psi(doc_check *c, int have[3])
{
    static const char *const res[3] = {"cpu", "memory", "io"};
    c->name = "psi";
    c->label = "PSI";
    c->enables = "CPU, memory and I/O pressure-stall columns and the alerts built on them";
    int n = 0;
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
        char path[64], b[256];
        snprintf(path, sizeof(path), "/proc/pressure/%s", res[i]);
        have[i] = read_text(path, b, sizeof(b)) == 0 && strstr(b, "some") != NULL;
        n += have[i];
        if (have[i] && len < sizeof(c->detail)) {
            int w =
                snprintf(c->detail + len, sizeof(c->detail) - len, "%s%s", len ? " " : "", res[i]);
            if (w > 0) len += (size_t)w;
        }
    }
    if (n == 3) {
        c->status = ST_OK;
        return;
    }
    c->status = n ? ST_LIMITED : ST_MISSING;
    if (n == 0) snprintf(c->detail, sizeof(c->detail), "/proc/pressure is not readable");
    snprintf(c->fix, sizeof(c->fix),
             "needs Linux >= 4.20 built with CONFIG_PSI; add psi=1 to the kernel command line "
             "where it is built disabled by default");
}

/* ---- cgroup limits ----------------------------------------------------- */

typedef struct doc_cg {
    int version; /* 2, 1, or 0 when unknown */
    char path[512];
    double mem_max; /* bytes; < 0 when unlimited or unknown */
    double cpu_max; /* CPUs; < 0 when unlimited or unknown */
} doc_cg;

/* The tightest memory.max / cpu.max from the current cgroup up to the root. */
static void cg2_limits(doc_cg *g)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "/sys/fs/cgroup%s", strcmp(g->path, "/") == 0 ? "" : g->path);
    for (;;) {
        char p[1100], b[128];
        snprintf(p, sizeof(p), "%s/memory.max", dir);
        if (read_text(p, b, sizeof(b)) == 0 && strcmp(b, "max") != 0) {
            double v = strtod(b, NULL);
            if (v > 0 && (g->mem_max < 0 || v < g->mem_max)) g->mem_max = v;
        }
        snprintf(p, sizeof(p), "%s/cpu.max", dir);
        if (read_text(p, b, sizeof(b)) == 0 && strncmp(b, "max", 3) != 0) {
            char *end;
            double quota = strtod(b, &end), period = strtod(end, NULL);
            if (quota > 0 && period > 0 && (g->cpu_max < 0 || quota / period < g->cpu_max))
                g->cpu_max = quota / period;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || strcmp(dir, "/sys/fs/cgroup") == 0) break;
        *slash = '\0';
    }
}

static void cg1_limits(doc_cg *g, const char *mem_path, const char *cpu_path)
{
    char p[1100], b[128];
    /* Inside a container the hierarchy root is the container's own group. */
    snprintf(p, sizeof(p), "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", mem_path);
    if (read_text(p, b, sizeof(b)) != 0)
        read_text("/sys/fs/cgroup/memory/memory.limit_in_bytes", b, sizeof(b));
    double v = strtod(b, NULL);
    if (v > 0 && v < 4.0e18) g->mem_max = v; /* "no limit" is a page-rounded LLONG_MAX */
    char q[128] = "", per[128] = "";
    snprintf(p, sizeof(p), "/sys/fs/cgroup/cpu%s/cpu.cfs_quota_us", cpu_path);
    if (read_text(p, q, sizeof(q)) != 0)
        read_text("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", q, sizeof(q));
    snprintf(p, sizeof(p), "/sys/fs/cgroup/cpu%s/cpu.cfs_period_us", cpu_path);
    if (read_text(p, per, sizeof(per)) != 0)
        read_text("/sys/fs/cgroup/cpu/cpu.cfs_period_us", per, sizeof(per));
    double qv = strtod(q, NULL), pv = strtod(per, NULL);
    if (qv > 0 && pv > 0) g->cpu_max = qv / pv;
}

static void check_cgroup(doc_check *c, doc_cg *g)
{
    c->name = "cgroup";
    c->label = "cgroup";
    c->enables = "the container's real limits: trainperf's memory columns are host-wide "
                 "(/proc/meminfo), so a lower memory.max leaves less headroom than they show";
    memset(g, 0, sizeof(*g));
    g->mem_max = g->cpu_max = -1;
    char b[4096];
    if (read_text("/proc/self/cgroup", b, sizeof(b)) != 0) {
        c->status = ST_MISSING;
        snprintf(c->detail, sizeof(c->detail), "/proc/self/cgroup is not readable");
        snprintf(c->fix, sizeof(c->fix), "mount /proc; limits cannot be read without it");
        return;
    }
    char v2[512] = "", mem1[512] = "", cpu1[512] = "";
    int have_v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
    char *save = NULL;
    for (char *l = strtok_r(b, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(l, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctl = c1 + 1, *path = c2 + 1;
        if (strcmp(l, "0") == 0 && *ctl == '\0') snprintf(v2, sizeof(v2), "%s", path);
        /* v1 lists controllers comma separated, e.g. "cpu,cpuacct". */
        if (strstr(ctl, "memory")) snprintf(mem1, sizeof(mem1), "%s", path);
        if (strcmp(ctl, "cpu") == 0 || strncmp(ctl, "cpu,", 4) == 0)
            snprintf(cpu1, sizeof(cpu1), "%s", path);
    }
    if (have_v2 && v2[0]) {
        g->version = 2;
        snprintf(g->path, sizeof(g->path), "%s", v2);
        cg2_limits(g);
    } else if (mem1[0] || cpu1[0]) {
        g->version = 1;
        snprintf(g->path, sizeof(g->path), "%s", mem1[0] ? mem1 : cpu1);
        cg1_limits(g, mem1, cpu1);
    }
    char mem[48] = "none", cpu[48] = "none";
    if (g->mem_max > 0) human_bytes(mem, sizeof(mem), g->mem_max);
    if (g->cpu_max > 0) snprintf(cpu, sizeof(cpu), "%.2f CPUs", g->cpu_max);
    if (g->version == 2) {
        c->status = ST_OK;
        snprintf(c->detail, sizeof(c->detail), "v2 %.300s: memory.max %s, cpu.max %s", g->path, mem,
                 cpu);
    } else if (g->version == 1) {
        c->status = ST_LIMITED;
        snprintf(c->detail, sizeof(c->detail), "v1 only (%.300s): memory limit %s, CPU quota %s",
                 g->path, mem, cpu);
        snprintf(c->fix, sizeof(c->fix),
                 "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2) for memory.max/cpu.max "
                 "and pressure per group");
    } else {
        c->status = ST_MISSING;
        snprintf(c->detail, sizeof(c->detail), "no cgroup hierarchy found");
        snprintf(c->fix, sizeof(c->fix), "mount cgroup2 on /sys/fs/cgroup");
    }
}

/* ---- perf counters ----------------------------------------------------- */

typedef struct doc_perf {
    int paranoid; /* -99 when unreadable */
    int hw, sw;   /* an event of that kind opened */
    int hw_errno;
} doc_perf;

static int try_perf(unsigned type, unsigned long long config)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof(a));
    a.size = sizeof(a);
    a.type = type;
    a.config = config;
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    long fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0UL);
    if (fd < 0) return -errno;
    close((int)fd);
    return 0;
}

static void check_perf(doc_check *c, doc_perf *p)
{
    c->name = "perf";
    c->label = "perf";
    c->enables = "CPU cycle/instruction counters (perf_event_open) for CPU-side profilers "
                 "such as perf; trainperf itself does not read them yet";
    char b[32];
    p->paranoid = read_text("/proc/sys/kernel/perf_event_paranoid", b, sizeof(b)) == 0
                      ? (int)strtol(b, NULL, 10)
                      : -99;
    int rh = try_perf(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES);
    int rs = try_perf(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK);
    p->hw = rh == 0;
    p->sw = rs == 0;
    p->hw_errno = -rh;
    char par[24] = "unreadable";
    if (p->paranoid != -99) snprintf(par, sizeof(par), "%d", p->paranoid);
    if (p->hw) {
        c->status = ST_OK;
        snprintf(c->detail, sizeof(c->detail), "hardware counters open (perf_event_paranoid %s)",
                 par);
        return;
    }
    c->status = p->sw ? ST_LIMITED : ST_MISSING;
    snprintf(c->detail, sizeof(c->detail),
             "cycles counter: %s; software counters %s "
             "(perf_event_paranoid %s)",
             strerror(p->hw_errno), p->sw ? "work" : "fail", par);
    if (p->hw_errno == EACCES || p->hw_errno == EPERM)
        snprintf(c->fix, sizeof(c->fix),
                 "sysctl kernel.perf_event_paranoid=2 (or lower), or grant CAP_PERFMON; in a "
                 "container also allow perf_event_open in its seccomp profile");
    else
        snprintf(c->fix, sizeof(c->fix),
                 "no hardware PMU is exposed (a VM without vPMU?): enable it in the hypervisor");
}

/* ---- stacks of hung processes (docs/failures.md) ----------------------- */

static void check_stacks(doc_check *c)
{
    c->name = "hang_stacks";
    c->label = "stacks";
    c->enables = "stacks of hung processes without the Python hook (`run --hang-timeout`): "
                 "Python stacks from py-spy, native stacks from gdb";
    int pyspy = hd_in_path("py-spy"), gdb = hd_in_path("gdb");
    char b[32], scope[48] = "";
    if (read_text("/proc/sys/kernel/yama/ptrace_scope", b, sizeof(b)) == 0)
        snprintf(scope, sizeof(scope), "; kernel.yama.ptrace_scope %ld", strtol(b, NULL, 10));
    c->status = pyspy && gdb ? ST_OK : pyspy || gdb ? ST_LIMITED : ST_MISSING;
    snprintf(c->detail, sizeof(c->detail), "py-spy %s, gdb %s%s", pyspy ? "found" : "not found",
             gdb ? "found" : "not found", scope);
    if (!pyspy || !gdb)
        snprintf(c->fix, sizeof(c->fix), "%s%s%s", pyspy ? "" : "pip install py-spy",
                 !pyspy && !gdb ? "; " : "", gdb ? "" : "apt-get install gdb");
    else if (scope[0] && strtol(b, NULL, 10) >= 2)
        snprintf(c->fix, sizeof(c->fix),
                 "sysctl kernel.yama.ptrace_scope=1 (2 and 3 forbid attaching to one's own "
                 "processes)");
}

/* ---- Python and PyTorch ------------------------------------------------ */

static const char py_script[] =
    "import sys, os, glob\n"
    "print('exe', sys.executable)\n"
    "print('python', sys.version.split()[0])\n"
    "dirs = []\n"
    "try:\n"
    "    import nvidia\n"
    "    for p in nvidia.__path__: dirs += glob.glob(os.path.join(p, '*', 'lib'))\n"
    "except Exception: pass\n"
    "try:\n"
    "    import torch\n"
    "    print('torch', torch.__version__)\n"
    "    print('torch_cuda', torch.version.cuda or '')\n"
    "    print('cuda_available', int(torch.cuda.is_available()))\n"
    "    dirs.append(os.path.join(os.path.dirname(torch.__file__), 'lib'))\n"
    "except Exception as e:\n"
    "    print('torch_error', type(e).__name__, str(e).splitlines()[0][:120] if str(e) else '')\n"
    "for d in dirs: print('libdir', d)\n";

/* Run the interpreter with a deadline; its stdout lands in out (capped). */
static int run_python(const char *py, double timeout_s, buf *out, int *timed_out)
{
    int fds[2];
    *timed_out = 0;
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        int dn = open("/dev/null", O_RDWR);
        if (dn >= 0) {
            dup2(dn, 0);
            dup2(dn, 2);
        }
        /* -u: each line arrives as printed, so a slow `import torch` cut off
         * at the deadline still leaves the interpreter's own lines */
        execlp(py, py, "-u", "-c", py_script, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        double left = timeout_s -
                      ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9);
        if (left <= 0) {
            *timed_out = 1;
            break;
        }
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) continue;
        char chunk[4096];
        ssize_t r = read(fds[0], chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        buf_append(out, chunk, (size_t)r);
    }
    close(fds[0]);
    if (*timed_out) kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void probe_python(doc_py *p, const char *py, double timeout_s)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->exe, sizeof(p->exe), "%s", py);
    buf out;
    buf_init(&out, 1 << 16);
    int rc = run_python(py, timeout_s, &out, &p->timed_out);
    p->ran = rc == 0 && !p->timed_out;
    char *save = NULL;
    for (char *l = out.data ? strtok_r(out.data, "\n", &save) : NULL; l;
         l = strtok_r(NULL, "\n", &save)) {
        char *sp = strchr(l, ' ');
        const char *v = sp ? sp + 1 : "";
        if (sp) *sp = '\0';
        if (strcmp(l, "exe") == 0)
            snprintf(p->exe, sizeof(p->exe), "%s", v);
        else if (strcmp(l, "python") == 0)
            snprintf(p->version, sizeof(p->version), "%s", v);
        else if (strcmp(l, "torch") == 0)
            snprintf(p->torch, sizeof(p->torch), "%s", v);
        else if (strcmp(l, "torch_cuda") == 0)
            snprintf(p->torch_cuda, sizeof(p->torch_cuda), "%s", v);
        else if (strcmp(l, "cuda_available") == 0)
            p->cuda_available = strcmp(v, "1") == 0;
        else if (strcmp(l, "torch_error") == 0)
            snprintf(p->torch_error, sizeof(p->torch_error), "%s", v);
        else if (strcmp(l, "libdir") == 0 && p->nlibdirs < 8)
            snprintf(p->libdirs[p->nlibdirs++], sizeof(p->libdirs[0]), "%s", v);
    }
    buf_free(&out);
}

/* The probe was cut off, not refused: the fix is more time. */
static void slow_fix(doc_check *c, double timeout_s)
{
    snprintf(c->fix, sizeof(c->fix), "give it longer: `trainperf doctor --timeout %.0f`",
             timeout_s * 3 > 180 ? timeout_s * 3 : 180);
}

static void check_python(doc_check *c, const doc_py *p, double timeout_s)
{
    c->name = "python";
    c->label = "Python";
    c->enables = "`trainperf run -- python ...` auto-instrumentation: steps and data-loader "
                 "waits with no code change";
    if (p->version[0]) {
        c->status = ST_OK;
        snprintf(c->detail, sizeof(c->detail), "Python %s (%s)", p->version, p->exe);
        return;
    }
    if (p->timed_out) {
        /* it started: slow (a busy machine, a cold disk), not missing */
        c->status = ST_LIMITED;
        snprintf(c->detail, sizeof(c->detail),
                 "%s did not answer within %.0f s: it runs, but slowly (a busy machine?)", p->exe,
                 timeout_s);
        slow_fix(c, timeout_s);
        return;
    }
    c->status = ST_MISSING;
    snprintf(c->detail, sizeof(c->detail), "%s could not be run", p->exe);
    snprintf(c->fix, sizeof(c->fix),
             "install Python 3 or name the interpreter with TRAINPERF_PYTHON=/path/to/python");
}

static void check_torch(doc_check *c, const doc_py *p, double timeout_s)
{
    c->name = "torch";
    c->label = "PyTorch";
    c->enables = "torch helpers: profiler windows, CUDA memory stats, FLOP counting and MFU";
    if (p->torch[0]) {
        c->status = ST_OK;
        snprintf(c->detail, sizeof(c->detail), "torch %s (%s%s)", p->torch,
                 p->torch_cuda[0] ? "CUDA " : "CPU build", p->torch_cuda[0] ? p->torch_cuda : "");
        if (p->torch_cuda[0] && !p->cuda_available) {
            c->status = ST_LIMITED;
            size_t l = strlen(c->detail);
            snprintf(c->detail + l, sizeof(c->detail) - l, "; torch.cuda.is_available() is False");
            snprintf(c->fix, sizeof(c->fix),
                     "torch has CUDA but sees no GPU: check the driver (NVML above) and "
                     "CUDA_VISIBLE_DEVICES");
        }
        return;
    }
    if (p->timed_out) {
        c->status = ST_LIMITED;
        snprintf(c->detail, sizeof(c->detail), "%s within %.0f s (slow, not missing)",
                 p->version[0] ? "`import torch` did not finish" : "not checked: Python did not answer",
                 timeout_s);
        slow_fix(c, timeout_s);
        return;
    }
    c->status = ST_MISSING;
    if (!p->version[0])
        snprintf(c->detail, sizeof(c->detail), "not checked: no Python");
    else
        snprintf(c->detail, sizeof(c->detail), "not importable%s%s", p->torch_error[0] ? ": " : "",
                 p->torch_error);
    snprintf(c->fix, sizeof(c->fix), "pip install torch (in the environment that runs training)");
}

/* ---- CUPTI and NCCL libraries ------------------------------------------ */

/* Look for lib<stem>.so* where the dynamic loader and pip wheels keep them.
 * Found by path, not dlopen: loading CUDA libraries runs their constructors. */
static int find_lib(const char *stem, const doc_py *p, char *out, size_t n)
{
    const char *fixed[] = {"/usr/local/cuda/lib64",
                           "/usr/local/cuda/extras/CUPTI/lib64",
                           "/usr/lib/x86_64-linux-gnu",
                           "/usr/lib/aarch64-linux-gnu",
                           "/usr/lib64",
                           "/usr/lib",
                           "/usr/local/lib"};
    char dirs[32][512];
    int nd = 0;
    const char *llp = getenv("LD_LIBRARY_PATH");
    if (llp) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s", llp);
        char *save = NULL;
        for (char *d = strtok_r(tmp, ":", &save); d && nd < 12; d = strtok_r(NULL, ":", &save))
            snprintf(dirs[nd++], sizeof(dirs[0]), "%s", d);
    }
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]) && nd < 24; i++)
        snprintf(dirs[nd++], sizeof(dirs[0]), "%s", fixed[i]);
    for (int i = 0; i < p->nlibdirs && nd < 32; i++)
        snprintf(dirs[nd++], sizeof(dirs[0]), "%s", p->libdirs[i]);
    for (int i = 0; i < nd; i++) {
        char pat[600];
        glob_t g;
        snprintf(pat, sizeof(pat), "%.511s/lib%.32s.so*", dirs[i], stem);
        if (glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
            snprintf(out, n, "%s", g.gl_pathv[0]);
            globfree(&g);
            return 1;
        }
        globfree(&g);
    }
    /* The loader cache (ldconfig -p) knows the configured directories too. */
    FILE *f = popen("ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null", "r");
    if (!f) return 0;
    char line[1024], want[64];
    int found = 0;
    snprintf(want, sizeof(want), "lib%s.so", stem);
    while (fgets(line, sizeof(line), f)) {
        char *arrow = strstr(line, "=> ");
        if (!found && strstr(line, want) && arrow) {
            arrow[strcspn(arrow, "\n")] = '\0';
            snprintf(out, n, "%s", arrow + 3);
            found = 1;
        }
    }
    pclose(f);
    return found;
}

static void check_lib(doc_check *c, const char *name, const char *label, const char *stem,
                      const doc_py *p, char *path, size_t n, const char *enables, const char *fix)
{
    c->name = name;
    c->label = label;
    c->enables = enables;
    if (find_lib(stem, p, path, n)) {
        c->status = ST_OK;
        snprintf(c->detail, sizeof(c->detail), "%s", path);
    } else {
        c->status = ST_MISSING;
        path[0] = '\0';
        snprintf(c->detail, sizeof(c->detail), "lib%s.so not found", stem);
        snprintf(c->fix, sizeof(c->fix), "%s", fix);
    }
}

/* ---- output ------------------------------------------------------------ */

static void print_text(const doc_check *cs, int n, const nvml_sys_info *si)
{
    printf("%strainperf %s doctor%s: what this machine offers trainperf\n\n", cli_c(CLI_BOLD),
           tpf_version(), cli_c(CLI_RESET));
    for (int i = 0; i < n; i++) {
        const doc_check *c = &cs[i];
        const char *col = c->status == ST_OK        ? CLI_GREEN
                          : c->status == ST_LIMITED ? CLI_YELLOW
                                                    : CLI_RED;
        printf("%-9s %s%-8s%s %s\n", c->label, cli_c(col), status_word[c->status], cli_c(CLI_RESET),
               c->detail);
        if (strcmp(c->name, "nvml") == 0 && c->status != ST_MISSING) {
            for (int d = 0; d < si->nlisted; d++) {
                char mem[32] = "?";
                if (si->dev[d].mem_total_bytes.ok)
                    human_bytes(mem, sizeof(mem), si->dev[d].mem_total_bytes.v);
                printf("%-18s GPU %d: %s, %s, %s\n", "", si->dev[d].index, si->dev[d].name,
                       si->dev[d].uuid[0] ? si->dev[d].uuid : "no UUID", mem);
            }
        }
        printf("%-18s %senables: %s%s\n", "", cli_c(CLI_DIM), c->enables, cli_c(CLI_RESET));
        if (c->fix[0]) printf("%-18s fix: %s\n", "", c->fix);
    }
}

static void json_opt_num(jw *w, const char *k, double v, int ok)
{
    jw_key(w, k);
    if (ok)
        jw_num(w, v);
    else
        jw_null(w);
}

static void json_opt_str(jw *w, const char *k, const char *s)
{
    jw_kstr(w, k, s && *s ? s : NULL);
}

static int print_json(const doc_check *cs, int n, const nvml_sys_info *si, const int psi[3],
                      const doc_cg *cg, const doc_perf *pf, const doc_py *py, const char *cupti,
                      const char *nccl)
{
    buf b;
    buf_init(&b, 1 << 20);
    jw w;
    jw_init(&w, &b, 1);
    jw_obj_begin(&w);
    jw_kstr(&w, "trainperf_version", tpf_version());
    jw_key(&w, "checks");
    jw_obj_begin(&w);
    for (int i = 0; i < n; i++) {
        const doc_check *c = &cs[i];
        jw_key(&w, c->name);
        jw_obj_begin(&w);
        jw_kstr(&w, "status", status_word[c->status]);
        jw_kstr(&w, "detail", c->detail);
        jw_kstr(&w, "enables", c->enables);
        json_opt_str(&w, "fix", c->fix);
        if (strcmp(c->name, "nvml") == 0) {
            jw_kstr(&w, "library", si->lib);
            json_opt_str(&w, "driver_version", si->driver_version);
            json_opt_str(&w, "nvml_version", si->nvml_version);
            json_opt_num(&w, "cuda_driver_version", si->cuda_driver_version,
                         si->cuda_driver_version > 0);
            json_opt_num(&w, "device_count", si->ndev, c->status != ST_MISSING);
            jw_key(&w, "visible");
            jw_arr_begin(&w);
            int vis[FRAME_MAX_GPUS];
            int nv = c->status != ST_MISSING ? visible_gpus(si, vis) : 0;
            for (int v = 0; v < nv; v++)
                jw_int(&w, vis[v]);
            jw_arr_end(&w);
            jw_key(&w, "devices");
            jw_arr_begin(&w);
            for (int d = 0; d < si->nlisted; d++) {
                jw_obj_begin(&w);
                jw_kint(&w, "index", si->dev[d].index);
                jw_kstr(&w, "name", si->dev[d].name);
                json_opt_str(&w, "uuid", si->dev[d].uuid);
                json_opt_num(&w, "mem_total_bytes", si->dev[d].mem_total_bytes.v,
                             si->dev[d].mem_total_bytes.ok);
                jw_obj_end(&w);
            }
            jw_arr_end(&w);
        } else if (strcmp(c->name, "psi") == 0) {
            jw_kbool(&w, "cpu", psi[0]);
            jw_kbool(&w, "memory", psi[1]);
            jw_kbool(&w, "io", psi[2]);
        } else if (strcmp(c->name, "cgroup") == 0) {
            json_opt_num(&w, "version", cg->version, cg->version > 0);
            json_opt_str(&w, "path", cg->path);
            json_opt_num(&w, "memory_max_bytes", cg->mem_max, cg->mem_max > 0);
            json_opt_num(&w, "cpu_max", cg->cpu_max, cg->cpu_max > 0);
        } else if (strcmp(c->name, "perf") == 0) {
            json_opt_num(&w, "perf_event_paranoid", pf->paranoid, pf->paranoid != -99);
            jw_kbool(&w, "hardware_counters", pf->hw);
            jw_kbool(&w, "software_counters", pf->sw);
        } else if (strcmp(c->name, "python") == 0) {
            jw_kstr(&w, "executable", py->exe);
            json_opt_str(&w, "version", py->version);
        } else if (strcmp(c->name, "torch") == 0) {
            json_opt_str(&w, "version", py->torch);
            json_opt_str(&w, "cuda", py->torch_cuda);
            jw_key(&w, "cuda_available");
            if (py->torch[0])
                jw_bool(&w, py->cuda_available);
            else
                jw_null(&w);
        } else if (strcmp(c->name, "cupti") == 0) {
            json_opt_str(&w, "path", cupti);
        } else if (strcmp(c->name, "nccl") == 0) {
            json_opt_str(&w, "path", nccl);
        }
        jw_obj_end(&w);
    }
    jw_obj_end(&w);
    jw_obj_end(&w);
    buf_putc(&b, '\n');
    int rc = jw_error(&w) ? -1 : 0;
    if (!rc) fwrite(b.data, 1, b.len, stdout);
    buf_free(&b);
    return rc;
}

static void doctor_usage(FILE *f)
{
    fprintf(f, "usage: trainperf doctor [--json] [--timeout SECONDS]\n\n"
               "Show what this machine offers trainperf: NVML and the GPUs, pressure stall\n"
               "information, cgroup limits, perf counters, Python and PyTorch, CUPTI and NCCL;\n"
               "for each what it enables and how to fix what is missing. Exits 0.\n\n"
               "  --json              machine-readable output\n"
               "  --timeout SECONDS   limit for the Python/PyTorch probe (default 60)\n\n"
               "Environment: TRAINPERF_PYTHON (interpreter, default python3),\n"
               "TRAINPERF_NVML_LIB (path of libnvidia-ml.so.1).\n");
}

int cmd_doctor(int argc, char **argv)
{
    int json = 0;
    double timeout_s = 60;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--timeout") == 0) {
            if (i + 1 >= argc || cli_parse_double(argv[i + 1], &timeout_s) != 0 || timeout_s <= 0) {
                cli_error("--timeout needs a positive number of seconds");
                return CLI_USAGE;
            }
            i++;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            doctor_usage(stdout);
            return CLI_OK;
        } else {
            cli_error("doctor: unknown option '%s' (see `trainperf doctor --help`)", argv[i]);
            return CLI_USAGE;
        }
    }
    const char *py = getenv("TRAINPERF_PYTHON");
    if (!py || !*py) py = "python3";

    static nvml_sys_info si;
    doc_check cs[9];
    int psi[3];
    doc_cg cg;
    doc_perf pf;
    doc_py pyi;
    char cupti[512], nccl[512];
    memset(cs, 0, sizeof(cs));
    probe_python(&pyi, py, timeout_s);
    check_nvml(&cs[0], &si);
    check_psi(&cs[1], psi);
    check_cgroup(&cs[2], &cg);
    check_perf(&cs[3], &pf);
    check_python(&cs[4], &pyi, timeout_s);
    check_torch(&cs[5], &pyi, timeout_s);
    check_lib(&cs[6], "cupti", "CUPTI", "cupti", &pyi, cupti, sizeof(cupti),
              "GPU kernels and memcpys in torch.profiler traces, which `trainperf analyze` reads",
              "pip install nvidia-cuda-cupti-cu12 (CUDA wheels of torch bring it), or add the "
              "CUDA toolkit's extras/CUPTI/lib64 to LD_LIBRARY_PATH");
    check_lib(&cs[7], "nccl", "NCCL", "nccl", &pyi, nccl, sizeof(nccl),
              "multi-GPU collectives; their kernels in torch.profiler traces give `trainperf "
              "analyze` its communication and overlap figures",
              "pip install nvidia-nccl-cu12 (CUDA wheels of torch bring it), or install libnccl2");
    check_stacks(&cs[8]);
    if (json) {
        if (print_json(cs, 9, &si, psi, &cg, &pf, &pyi, cupti, nccl) != 0) {
            cli_error("doctor: could not build the JSON output");
            return CLI_FAIL;
        }
    } else {
        print_text(cs, 9, &si);
    }
    return CLI_OK;
}
