/* bench_gpustep — the CPU-side cost per step of the GPU bookkeeping outside
 * the kernel-detail windows (`--gpu-trace windows`, docs/gpu.md).
 *
 * A step's boundaries under a GPU trace: tpf_step_begin and tpf_step_end,
 * each calling the CUPTI injection library's step hook (trainperf_gpu_step:
 * one CUDA event recorded, the events the GPU reached read back, the
 * window schedule at the end). Here the library is the real one
 * (BUILD/libtrainperf-cupti.so), CUPTI and the driver its fakes
 * (BUILD/fakes: an event costs a mutex and a clock read there; the real
 * driver's cuEventRecord / cuEventQuery cost is the GPU check's to measure).
 *
 *   (a) tpf_step_begin + tpf_step_end, probe attached, no GPU hook
 *   (b) the same plus the hook at both boundaries, as the probe calls it
 *       once it found the library, outside any window (the first, from
 *       CUDA's start to the 15th step, is over before the timed chunks)
 *
 * Median of ROUNDS interleaved chunks of CHUNK steps each; (b) - (a) per
 * step is the figure. Target: <= 2 us per step on the fakes (0.2% of a
 * 1 ms step). Exits 1 when missed or broken, 2 on bad setup. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "probe/clock.h"
#include "probe/probe.h"
#include "probe/reader.h"
#include "trainperf.h"

/* kept under the rings' 262144 records: nothing dropped, nothing drained */
enum { CHUNK = 1500, ROUNDS = 21 };
#define TARGET_NS 2000.0

static void (*g_hook)(int end);

static double chunk(int hooked)
{
    uint64_t t0 = clk_mono_ns();
    for (int i = 0; i < CHUNK; i++) {
        tpf_step_begin();
        if (hooked) g_hook(0);
        tpf_step_end(1, 0);
        if (hooked) g_hook(1);
    }
    return (double)(clk_mono_ns() - t0) / CHUNK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int setup(const char *build, const char *dir)
{
    char inj[4096], cupti[4096], cuda[4096];
    snprintf(inj, sizeof(inj), "%s/libtrainperf-cupti.so", build);
    snprintf(cupti, sizeof(cupti), "%s/fakes/libcupti.so.1", build);
    snprintf(cuda, sizeof(cuda), "%s/fakes/libcuda.so.1", build);
    setenv("TRAINPERF_RUN_DIR", dir, 1);
    setenv("TRAINPERF_CUPTI_LIB", cupti, 1);
    setenv("TRAINPERF_CUDA_LIB", cuda, 1);
    /* the probe of this process never looks for the hook: (b) calls it */
    unsetenv("CUDA_INJECTION64_PATH");
    if (probe_attach(dir) != 0) return -1;
    void *h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
    int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
    if (h) *(void **)&g_hook = dlsym(h, "trainperf_gpu_step");
    if (!init || !g_hook || init() != 1) {
        fprintf(stderr, "bench_gpustep: cannot load %s (%s): run make first\n", inj, dlerror());
        return -1;
    }
    /* the start's window (15 steps), then the schedule is closed */
    for (int i = 0; i < 20; i++) {
        g_hook(0);
        g_hook(1);
    }
    return 0;
}

int main(void)
{
    const char *build = getenv("TRAINPERF_BUILD");
    char dir[] = "/tmp/bench_gpustep.XXXXXX";
    if (!mkdtemp(dir)) return 2;
    if (setup(build && *build ? build : "build", dir) != 0) return 2;
    double a[ROUNDS], b[ROUNDS];
    chunk(0);
    chunk(1);
    for (int r = 0; r < ROUNDS; r++) {
        a[r] = chunk(0);
        b[r] = chunk(1);
    }
    qsort(a, ROUNDS, sizeof(a[0]), cmp_double);
    qsort(b, ROUNDS, sizeof(b[0]), cmp_double);
    double am = a[ROUNDS / 2], bm = b[ROUNDS / 2], add = bm - am;
    printf("bench_gpustep: step boundaries %.0f ns/step; with the GPU hook (event record, "
           "read-back, schedule; fake driver) %.0f ns/step: +%.0f ns/step (min +%.0f)\n",
           am, bm, add, b[0] - a[0]);
    printf("bench_gpustep: = %.3f%% of a 1 ms step; target <= %.0f ns: %s\n", add / 1e4, TARGET_NS,
           add <= TARGET_NS ? "met" : "MISSED");
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_gpustep: %s left behind\n", dir);
    return add <= TARGET_NS ? 0 : 1;
}
