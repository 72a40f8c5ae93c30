/* trainperf.h — the whole public API of libtrainperf.
 *
 * If a name is not declared here, it is not API. Every public name starts with
 * tpf_ / TPF_. The probe functions (step, range, counter, mark) are safe to call
 * from any thread at any time; with no collector attached each costs one
 * predictable branch. They never block, lock, allocate or enter the kernel once
 * the calling thread has its ring (the first event of a thread may allocate it).
 *
 * Build with -DTPF_DISABLE to compile the TPF_* convenience macros away.
 */
#ifndef TRAINPERF_H
#define TRAINPERF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TPF_BUILDING_LIBRARY)
#define TPF_API __attribute__((visibility("default")))
#else
#define TPF_API
#endif

#define TPF_VERSION_MAJOR 0
#define TPF_VERSION_MINOR 1
#define TPF_VERSION_PATCH 0
/* The one version of trainperf: the Makefile (pkg-config), setup.py (the
 * Python package) and the library read it from the three numbers above. */
#define TPF_VERSION_XSTR_(x) #x
#define TPF_VERSION_STR_(a, b, c) TPF_VERSION_XSTR_(a) "." TPF_VERSION_XSTR_(b) "." TPF_VERSION_XSTR_(c)
#define TPF_VERSION_STRING TPF_VERSION_STR_(TPF_VERSION_MAJOR, TPF_VERSION_MINOR, TPF_VERSION_PATCH)

/* ---- errors ------------------------------------------------------------ */

/* Functions that can fail return 0 or one of these negative codes. */
#define TPF_ERRNO_MAP(X)                                                   \
    X(INVAL, -1, "invalid argument")                                       \
    X(NOMEM, -2, "out of memory")                                          \
    X(IO, -3, "input/output error")                                        \
    X(NOENT, -4, "no such file or directory")                              \
    X(EXIST, -5, "already exists")                                         \
    X(ACCES, -6, "permission denied")                                      \
    X(BUSY, -7, "already started")                                         \
    X(STATE, -8, "not started or wrong state")                             \
    X(FULL, -9, "table or ring is full")                                   \
    X(TOOBIG, -10, "size limit exceeded")                                  \
    X(FORMAT, -11, "malformed input")                                      \
    X(UNSUPPORTED, -12, "not supported on this system")                    \
    X(VERSION, -13, "incompatible version")                                \
    X(SYS, -14, "system call failed")                                      \
    X(CHILD, -15, "child process failed")                                  \
    X(NOSPC, -16, "no space left on device")

typedef enum tpf_err {
    TPF_OK = 0,
#define TPF_ERR_ENUM_(name, val, msg) TPF_E##name = (val),
    TPF_ERRNO_MAP(TPF_ERR_ENUM_)
#undef TPF_ERR_ENUM_
} tpf_err;

/* A static, never-NULL message for err ("unknown error" for unknown codes). */
TPF_API const char *tpf_strerror(int err);
/* The code's name without prefix ("INVAL"), or "UNKNOWN". Static. */
TPF_API const char *tpf_errname(int err);

/* The library version as a static string, e.g. "0.1.0". */
TPF_API const char *tpf_version(void);

/* ---- names ------------------------------------------------------------- */

/* Interned names for ranges, counters and marks. 0 is never a valid name. */
typedef uint32_t tpf_name;

/* Predefined phase names: the diagnosis understands these. Registering the
 * string "data", "forward", ... returns the same ids. */
enum {
    TPF_NAME_NONE = 0,
    TPF_PHASE_DATA = 1,
    TPF_PHASE_FORWARD = 2,
    TPF_PHASE_BACKWARD = 3,
    TPF_PHASE_OPTIMIZER = 4,
    TPF_PHASE_COMM = 5,
    TPF_PHASE_EVAL = 6,
    TPF_PHASE_CHECKPOINT = 7,
    TPF_NAME_FIRST_USER = 16
};

/* Intern name (copied; at most 127 bytes are kept). Returns its id, stable
 * for the life of the process and its forked children, or 0 when name is
 * NULL/empty or the table is full. Thread-safe; may lock: call it once per
 * call site (the TPF_* macros do), not per event. Works with or without a
 * collector attached. */
TPF_API tpf_name tpf_name_register(const char *name);

/* ---- the probe (hot path) ---------------------------------------------- */

/* Step boundaries of the calling thread. samples/tokens: work done in the
 * step (0 when unknown). */
TPF_API void tpf_step_begin(void);
TPF_API void tpf_step_end(uint64_t samples, uint64_t tokens);

/* Nested ranges (phases) on the calling thread. A pop without a push is
 * recorded and ignored by the collector. */
TPF_API void tpf_range_push(tpf_name name);
TPF_API void tpf_range_pop(void);

/* A sampled value (e.g. loss, learning rate) and an instant event. */
TPF_API void tpf_counter(tpf_name name, double value);
TPF_API void tpf_mark(tpf_name name);

/* The calling process's training loop ended (TPF_LOOP_DONE: its data ran
 * out, it left the loop; TPF_LOOP_EXIT: it is shutting down). Until its
 * next step no step is awaited from it: the `hang` alert does not count the
 * time after the loop (work after it, a slow exit) as a stall, and a
 * shutdown that lasts is the `shutdown_hang` alert. tpf_stop says it too.
 * One event, like tpf_mark; other values of why are ignored. */
enum { TPF_LOOP_DONE = 1, TPF_LOOP_EXIT = 2 };
TPF_API void tpf_loop_end(int why);

/* 1 when events of this process go to a collector, else 0. */
TPF_API int tpf_attached(void);

/* Events this process dropped because a ring was full or no ring was left. */
TPF_API uint64_t tpf_dropped(void);

/* This process's rank, for a launcher that passes it in code rather than in
 * the environment (RANK/SLURM_PROCID are read at attach): with
 * torch.multiprocessing.spawn, init_process_group(rank=r). Steps recorded
 * from now on carry it; local_rank and world_size may be -1 (unknown).
 * Returns 0, or TPF_EINVAL for a negative rank, a local_rank or world_size
 * below -1, a world_size of 0, or a rank not below world_size. Thread-safe. */
TPF_API int tpf_set_rank(int rank, int local_rank, int world_size);

/* ---- embedded mode ----------------------------------------------------- */

#define TPF_OPTIONS_VERSION 1

/* Crosses the API boundary: always set version and size (TPF_OPTIONS_INIT). */
typedef struct tpf_options {
    uint32_t version;     /* TPF_OPTIONS_VERSION */
    uint32_t size;        /* sizeof(tpf_options) */
    const char *run_dir;  /* NULL: a fresh folder under ./trainperf-runs */
    double interval_s;    /* resource sampling interval, 0.01..3600 s; 0: 1.0 */
    uint32_t flags;       /* TPF_START_* */
} tpf_options;

#define TPF_START_NO_PROCFS 0x1u /* do not sample system/process resources */
#define TPF_START_NO_GPU 0x2u    /* do not load NVML */

#define TPF_OPTIONS_INIT {TPF_OPTIONS_VERSION, (uint32_t)sizeof(tpf_options), NULL, 0.0, 0u}

/* Start a collector as a thread of this process, writing a run directory.
 * opt may be NULL for defaults. Returns 0, TPF_EBUSY when already attached
 * (also when started by `trainperf run`) or when run_dir is in use by another
 * run, TPF_EVERSION for an options version newer than this library,
 * TPF_EINVAL for a bad field (interval outside 0.01..3600, unknown flags,
 * a size that does not fit the version), or another error. An earlier,
 * finished run in run_dir is replaced. Not for the hot
 * path; call from one thread. */
TPF_API int tpf_start(const tpf_options *opt);

/* Stop the embedded collector: drain, write every file of the run directory,
 * join the thread. Returns 0, TPF_ESTATE when not started, or an I/O error
 * (files written before the error are kept). */
TPF_API int tpf_stop(void);

/* The run directory events go to, or NULL when not attached. Valid until
 * tpf_stop(); owned by the library. */
TPF_API const char *tpf_run_dir(void);

/* ---- convenience macros ------------------------------------------------ */

#ifdef TPF_DISABLE
#define TPF_RANGE_PUSH(str) ((void)0)
#define TPF_RANGE_POP() ((void)0)
#define TPF_COUNTER(str, v) ((void)0)
#define TPF_MARK(str) ((void)0)
#define TPF_STEP_BEGIN() ((void)0)
#define TPF_STEP_END(samples, tokens) ((void)0)
#else
/* Register the literal once per call site, then record. */
#define TPF_NAME_ONCE_(str, var)                                           \
    static tpf_name var;                                                   \
    if (__builtin_expect(var == 0, 0)) var = tpf_name_register(str)
#define TPF_RANGE_PUSH(str)                                                \
    do {                                                                   \
        TPF_NAME_ONCE_(str, tpf_site_name_);                               \
        tpf_range_push(tpf_site_name_);                                    \
    } while (0)
#define TPF_RANGE_POP() tpf_range_pop()
#define TPF_COUNTER(str, v)                                                \
    do {                                                                   \
        TPF_NAME_ONCE_(str, tpf_site_name_);                               \
        tpf_counter(tpf_site_name_, (v));                                  \
    } while (0)
#define TPF_MARK(str)                                                      \
    do {                                                                   \
        TPF_NAME_ONCE_(str, tpf_site_name_);                               \
        tpf_mark(tpf_site_name_);                                          \
    } while (0)
#define TPF_STEP_BEGIN() tpf_step_begin()
#define TPF_STEP_END(samples, tokens) tpf_step_end((samples), (tokens))
#endif

#ifdef __cplusplus
}
#endif
#endif /* TRAINPERF_H */
