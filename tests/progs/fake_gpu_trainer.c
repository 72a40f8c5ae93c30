/* A CUDA trainer as trainperf sees one, on a machine with no GPU: a C loop
 * with trainperf's step markers (as an llm.c-style trainer would add), the
 * CUDA driver's part played here (it loads CUDA_INJECTION64_PATH and calls
 * InitializeInjection at "CUDA initialisation"), and the GPU's part played by
 * the fake libcupti (tests/fakes/fake_cupti.c), told what "ran".
 *
 *   fake_gpu_trainer STEPS
 *
 * Each step lasts >= 20 ms of host time; in it, relative to the step's start:
 * a pageable host-to-device copy of 1 MiB at [1, 2] ms, kernels at [10, 14]
 * and [12, 18] ms (overlapping on two streams: 8 ms of busy time, 10 ms of
 * kernel time), and a host wait for the GPU at [18, 19] ms. The truth the
 * test checks gpu_steps.csv against. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv)
{
    long steps = argc > 1 ? strtol(argv[1], NULL, 10) : 20;
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    add_fn add = NULL;
    if (inj && *inj) {
        void *h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
        int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
        if (!init || init() != 1) {
            fprintf(stderr, "fake_gpu_trainer: cannot initialise %s\n", inj);
            return 3;
        }
        const char *cupti = getenv("TRAINPERF_CUPTI_LIB");
        void *c = cupti ? dlopen(cupti, RTLD_NOW | RTLD_NOLOAD) : NULL;
        add = c ? (add_fn)dlsym(c, "fake_cupti_add") : NULL;
    }
    const uint64_t ms = 1000000;
    for (long i = 0; i < steps; i++) {
        tpf_step_begin();
        uint64_t t0 = mono();
        if (add) {
            add(1, t0 + 1 * ms, t0 + 2 * ms, 1 << 20, 1, 1, 3); /* HtoD, pageable -> device */
            add(10, t0 + 10 * ms, t0 + 14 * ms, 0, 0, 0, 0);
            add(10, t0 + 12 * ms, t0 + 18 * ms, 0, 0, 0, 0);
            add(38, t0 + 18 * ms, t0 + 19 * ms, 0, 0, 0, 0);
        }
        sleep_until(t0 + 20 * ms);
        tpf_step_end(32, 0);
    }
    return 0;
}
