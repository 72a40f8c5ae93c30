/* A CUDA trainer as trainperf sees one, on a machine with no GPU: a C loop
 * with trainperf's step markers (as an llm.c-style trainer would add), the
 * CUDA driver's part played here (it loads CUDA_INJECTION64_PATH and calls
 * InitializeInjection at "CUDA initialisation"), and the GPU's part played by
 * the fake libcupti (tests/fakes/fake_cupti.c), told what "ran", and the
 * fake driver's events (tests/fakes/fake_cuda.c), told until when.
 *
 *   fake_gpu_trainer STEPS [MODE]
 *
 * Each step lasts >= 20 ms of host time. MODE says what the "GPU" did in it,
 * relative to the step's start (the truth tests/test_gpu.py checks):
 *   mixed     (default) a pageable host-to-device copy of 1 MiB at [1, 2] ms,
 *             kernels at [10, 14] and [12, 18] ms (8 ms busy, 10 ms of
 *             kernel time), a host wait for the GPU at [18, 19] ms
 *   healthy   40 kernels back to back over [0.2, 19.8] ms, the host waiting
 *             for the last ones at [18, 19.8] (as loss.item() does)
 *   launch    250 kernels of 4 us, one every 78 us: the GPU idle between them
 *   sync      kernels [0, 8] ms, the host waiting [2, 8], nothing until the
 *             host's next launches reach the GPU at 14 ms, kernels [14, 19.5]
 *   pageable  healthy, plus a 64 MiB pageable copy at [0.2, 5] ms
 *   input     a `data` phase (waiting for a batch) of 12 ms, then kernels
 *             for 7 ms
 *   behind    30 ms of kernels a step, queued behind the last step's (the
 *             host never waits): the GPU falls 10 ms further behind each step
 *   nosteps   healthy's kernels, but no step markers at all (a CUDA program
 *             with no trainperf code)
 *   profiler  healthy, with a torch.profiler window over the middle third of
 *             the steps played as Kineto plays it: the hook's pause, the
 *             profiler's own activity callbacks, then the hook's resume once
 *             it let go; prints "profiler records N" (what its callbacks got) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <trainperf.h>

typedef void (*add_fn)(int kind, uint64_t s, uint64_t e, uint64_t bytes, int copy, int src, int dst);

static uint64_t mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    for (uint64_t now = mono(); now < t; now = mono()) {
        struct timespec d = {0, (long)(t - now)};
        nanosleep(&d, NULL);
    }
}

/* What the "GPU" ran goes to the fake CUPTI (which keeps it only while a
 * kind is enabled) and, as the time the GPU is busy until, to the fake
 * driver's events (TRAINPERF_CUDA_LIB), which complete when it gets there. */
static add_fn g_cupti_add;
static void (*g_busy_until)(uint64_t);
static void gpu_ran(int kind, uint64_t s, uint64_t e, uint64_t bytes, int copy, int src, int dst)
{
    g_cupti_add(kind, s, e, bytes, copy, src, dst);
    if (g_busy_until && kind != 38) g_busy_until(e);
}

/* the profiler's activity callbacks: it counts what it was handed */
static long g_prof_bytes;
static void prof_req(uint8_t **buf, size_t *size, size_t *maxr)
{
    *buf = malloc(1 << 20);
    *size = *buf ? 1 << 20 : 0;
    *maxr = 0;
}
static void prof_done(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
    g_prof_bytes += (long)valid;
    free(buf);
}
typedef int (*reg_fn)(void (*)(uint8_t **, size_t *, size_t *),
                      void (*)(void *, uint32_t, uint8_t *, size_t, size_t));

/* Kineto enables the kinds it records at its window's start and disables
 * them at its end */
static void kineto_kinds(int (*fn)(int))
{
    static const int kinds[] = {1, 2, 10, 38};
    for (size_t i = 0; fn && i < sizeof(kinds) / sizeof(kinds[0]); i++) fn(kinds[i]);
}

static void kernels(add_fn add, uint64_t from, uint64_t to, int n)
{
    uint64_t w = (to - from) / (uint64_t)n;
    for (int k = 0; k < n; k++) add(10, from + (uint64_t)k * w, from + (uint64_t)(k + 1) * w, 0, 0, 0, 0);
}

int main(int argc, char **argv)
{
    long steps = argc > 1 ? strtol(argv[1], NULL, 10) : 20;
    const char *mode = argc > 2 ? argv[2] : "mixed";
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    add_fn add = NULL;
    void (*pause)(void) = NULL, (*resume)(void) = NULL;
    reg_fn reg = NULL;
    int (*enable)(int) = NULL, (*disable)(int) = NULL;
    int (*flush)(uint32_t) = NULL;
    if (inj && *inj) {
        void *h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
        int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
        if (!init || init() != 1) {
            fprintf(stderr, "fake_gpu_trainer: cannot initialise %s\n", inj);
            return 3;
        }
        const char *cupti = getenv("TRAINPERF_CUPTI_LIB");
        void *c = cupti ? dlopen(cupti, RTLD_NOW | RTLD_NOLOAD) : NULL;
        g_cupti_add = c ? (add_fn)dlsym(c, "fake_cupti_add") : NULL;
        add = g_cupti_add ? gpu_ran : NULL;
        const char *cuda = getenv("TRAINPERF_CUDA_LIB");
        void *d = cuda && *cuda ? dlopen(cuda, RTLD_NOW | RTLD_LOCAL) : NULL;
        *(void **)&g_busy_until = d ? dlsym(d, "fake_cuda_busy_until") : NULL;
        /* what the hook finds in the injection library (python/trainperf/_cuda.py) */
        *(void **)&pause = dlsym(h, "trainperf_cupti_pause");
        *(void **)&resume = dlsym(h, "trainperf_cupti_resume");
        *(void **)&reg = c ? dlsym(c, "cuptiActivityRegisterCallbacks") : NULL;
        *(void **)&flush = c ? dlsym(c, "cuptiActivityFlushAll") : NULL;
        *(void **)&enable = c ? dlsym(c, "cuptiActivityEnable") : NULL;
        *(void **)&disable = c ? dlsym(c, "cuptiActivityDisable") : NULL;
    }
    int prof = strcmp(mode, "profiler") == 0;
    if (prof && (!pause || !resume || !reg || !flush || !enable || !disable)) {
        fprintf(stderr, "fake_gpu_trainer: no CUPTI hand-over in %s\n", inj ? inj : "(none)");
        return 3;
    }
    const uint64_t ms = 1000000, us = 1000;
    TPF_RANGE_PUSH("data"); /* name the phase once: its id is predefined */
    TPF_RANGE_POP();
    int marks = strcmp(mode, "nosteps") != 0;
    for (long i = 0; i < steps; i++) {
        if (prof && i == steps / 3) { /* the window opens: the hook, then Kineto */
            pause();
            reg(prof_req, prof_done);
            kineto_kinds(enable);
        }
        if (prof && i == 2 * steps / 3) { /* it closes: Kineto flushes and disables its kinds, the hook resumes */
            flush(1);
            kineto_kinds(disable);
            resume();
        }
        if (marks) tpf_step_begin();
        uint64_t t0 = mono();
        if (strcmp(mode, "input") == 0) {
            TPF_RANGE_PUSH("data");
            sleep_until(t0 + 12 * ms);
            TPF_RANGE_POP();
            if (add) kernels(add, t0 + 12 * ms + 200 * us, t0 + 19 * ms + 200 * us, 10);
        } else if (!add) {
        } else if (strcmp(mode, "healthy") == 0 || strcmp(mode, "pageable") == 0 || !marks || prof) {
            kernels(add, t0 + 200 * us, t0 + 19800 * us, 40);
            add(38, t0 + 18 * ms, t0 + 19800 * us, 0, 0, 0, 0);
            if (mode[0] == 'p') add(1, t0 + 200 * us, t0 + 5 * ms, 64u << 20, 1, 1, 3);
        } else if (strcmp(mode, "behind") == 0) {
            static uint64_t gpu_free;
            uint64_t b = gpu_free > t0 ? gpu_free : t0;
            kernels(add, b, b + 30 * ms, 10);
            gpu_free = b + 30 * ms;
        } else if (strcmp(mode, "launch") == 0) {
            for (int k = 0; k < 250; k++)
                add(10, t0 + (uint64_t)k * 78 * us, t0 + (uint64_t)k * 78 * us + 4 * us, 0, 0, 0, 0);
        } else if (strcmp(mode, "sync") == 0) {
            kernels(add, t0, t0 + 8 * ms, 8);
            add(38, t0 + 2 * ms, t0 + 8 * ms, 0, 0, 0, 0);
            kernels(add, t0 + 14 * ms, t0 + 19500 * us, 6);
        } else {
            add(1, t0 + 1 * ms, t0 + 2 * ms, 1 << 20, 1, 1, 3); /* HtoD, pageable -> device */
            add(10, t0 + 10 * ms, t0 + 14 * ms, 0, 0, 0, 0);
            add(10, t0 + 12 * ms, t0 + 18 * ms, 0, 0, 0, 0);
            add(38, t0 + 18 * ms, t0 + 19 * ms, 0, 0, 0, 0);
        }
        sleep_until(t0 + 20 * ms);
        if (marks) tpf_step_end(32, 0);
    }
    if (prof) printf("profiler records %ld\n", g_prof_bytes);
    return 0;
}
