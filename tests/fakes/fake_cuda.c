/* A stand-in for the CUDA driver's event calls (libcuda.so.1) on a machine
 * with no GPU: what the injection library's step events need
 * (gpu/cupti_inject.c). The test program plays the GPU by telling it until
 * when the GPU is busy (fake_cuda_busy_until, CLOCK_MONOTONIC ns): an
 * event recorded now completes when the GPU reaches it, at the later of
 * now and that time, as an event on the NULL stream behind queued work.
 *
 * FAKE_CUDA_NO_CTX=1: no current context (CUDA not started on the thread).
 * No synchronising call is exported at all, so a library that called one
 * would fail to resolve it. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define API __attribute__((visibility("default")))

enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_INVALID_CONTEXT = 201,
       CUDA_ERROR_INVALID_HANDLE = 400, CUDA_ERROR_NOT_READY = 600 };

typedef struct fake_event {
    uint64_t done; /* when the GPU reaches it */
    int recorded;
} fake_event;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_busy_until;
static int g_created, g_recorded, g_queries;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

API void fake_cuda_busy_until(uint64_t mono);
API void fake_cuda_busy_until(uint64_t mono)
{
    pthread_mutex_lock(&mu);
    if (mono > g_busy_until) g_busy_until = mono;
    pthread_mutex_unlock(&mu);
}

/* events created (0), recorded (1), queries (2) */
API int fake_cuda_calls(int which);
API int fake_cuda_calls(int which) { return which == 2 ? g_queries : which ? g_recorded : g_created; }

API int cuCtxGetCurrent(void **ctx);
API int cuCtxGetCurrent(void **ctx)
{
    const char *no = getenv("FAKE_CUDA_NO_CTX");
    *ctx = no && *no == '1' ? NULL : (void *)0x1;
    return CUDA_SUCCESS;
}

API int cuEventCreate(void **ev, unsigned flags);
API int cuEventCreate(void **ev, unsigned flags)
{
    if (!ev || (flags & 2)) return CUDA_ERROR_INVALID_VALUE; /* DISABLE_TIMING: not for us */
    fake_event *e = calloc(1, sizeof(*e));
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    *ev = e;
    pthread_mutex_lock(&mu);
    g_created++;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API int cuEventRecord(void *ev, void *stream);
API int cuEventRecord(void *ev, void *stream)
{
    fake_event *e = ev;
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t t = now_ns();
    pthread_mutex_lock(&mu);
    e->done = t > g_busy_until ? t : g_busy_until;
    e->recorded = 1;
    g_recorded++;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API int cuEventQuery(void *ev);
API int cuEventQuery(void *ev)
{
    fake_event *e = ev;
    if (!e || !e->recorded) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&mu);
    g_queries++;
    int ready = now_ns() >= e->done;
    pthread_mutex_unlock(&mu);
    return ready ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API int cuEventElapsedTime_v2(float *ms, void *a, void *b);
API int cuEventElapsedTime_v2(float *ms, void *a, void *b)
{
    fake_event *x = a, *y = b;
    if (!x || !y || !x->recorded || !y->recorded) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t t = now_ns();
    if (t < x->done || t < y->done) return CUDA_ERROR_NOT_READY;
    *ms = (float)(((double)y->done - (double)x->done) / 1e6);
    return CUDA_SUCCESS;
}

API int cuEventDestroy_v2(void *ev);
API int cuEventDestroy_v2(void *ev)
{
    free(ev);
    return CUDA_SUCCESS;
}
