/* The one-time cost of a thread's first event: claiming its ring, whose
 * blocks are now reserved with posix_fallocate (docs/reliability.md) rather
 * than left sparse. Not on the hot path; printed per ring size.
 *
 *   TRAINPERF_RUN_DIR=$(mktemp -d) TRAINPERF_RING_EVENTS=262144 build/bench/bench_ring_claim */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "trainperf.h"

#define NTHREADS 16

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static double dt[NTHREADS];

static void *first_event(void *arg)
{
    long i = (long)arg;
    double t0 = now_ms();
    tpf_step_begin();
    dt[i] = now_ms() - t0;
    return NULL;
}

int main(void)
{
    if (!getenv("TRAINPERF_RUN_DIR")) {
        fprintf(stderr, "set TRAINPERF_RUN_DIR to a scratch directory\n");
        return 2;
    }
    tpf_step_begin(); /* the segment itself, made once per process */
    for (long i = 0; i < NTHREADS; i++) {
        pthread_t t;
        pthread_create(&t, NULL, first_event, (void *)i);
        pthread_join(t, NULL);
    }
    double sum = 0, max = 0;
    for (int i = 0; i < NTHREADS; i++) {
        sum += dt[i];
        if (dt[i] > max) max = dt[i];
    }
    const char *re = getenv("TRAINPERF_RING_EVENTS");
    printf("ring claim (first event of a thread), ring %s events: mean %.3f ms, max %.3f ms\n",
           re ? re : "262144", sum / NTHREADS, max);
    return 0;
}
