/* GPU telemetry through NVML, loaded with dlopen and never linked.
 *
 * The library is "libnvidia-ml.so.1" (env TRAINPERF_NVML_LIB overrides the
 * path: tests point it at the fake under BUILD/fakes/). docs/gpu.md says what
 * is read, how the run's GPUs are chosen and what each fault does. */
#ifndef TPF_COLLECT_NVML_H
#define TPF_COLLECT_NVML_H

#include <stdint.h>
#include <sys/types.h>

#include "core/frame.h"

/* The collector's nvml source. Its state is owned by the source (close frees
 * it). sample() never blocks for NVML's 20 ms PCIe window: PCIe comes from
 * byte counters or from a helper thread (see nvml.c). */
extern const src_ops nvml_source;

#define NVML_LIB_DEFAULT "libnvidia-ml.so.1"

/* GPU memory of one process of the watched tree (a pid of f->tree_pids),
 * summed over all GPUs, as of the last sample of the nvml source's state:
 * 0 when it holds no context, unknown when it cannot be told (no source,
 * unreadable process lists, host pids invisible in a container). For
 * procs.csv gpu_mem_bytes. Call from the sampling thread. */
fval nvml_proc_gpu_mem(void *state, pid_t pid);

/* What `trainperf doctor` shows about NVML. */
typedef struct nvml_dev_info {
    int index;
    char name[96];
    char uuid[96];
    fval mem_total_bytes;
} nvml_dev_info;

typedef struct nvml_sys_info {
    char lib[256];           /* the path that was dlopen'ed */
    char driver_version[96]; /* "" when unknown */
    char nvml_version[96];
    int cuda_driver_version; /* e.g. 12040; 0 when unknown */
    int ndev;                /* devices NVML counts (may exceed FRAME_MAX_GPUS) */
    int nlisted;             /* entries filled in dev[] */
    nvml_dev_info dev[FRAME_MAX_GPUS];
    char error[256]; /* why NVML is not usable; "" when it is */
} nvml_sys_info;

/* Load NVML, read the driver and device list, shut it down again. Returns 0,
 * or an error with out->error saying why (e.g. no driver). Not thread-safe
 * with a running nvml source in the same process only in that NVML's init is
 * reference counted; both may coexist. */
int nvml_query_system(nvml_sys_info *out);

/* Clock-event (throttle) reason bits decoded to words joined by '+', into
 * out (always terminated). gpu_idle is left out: idle clocks are not a
 * slowdown of work. Returns the number of words written. */
int nvml_reasons_str(unsigned long long mask, char *out, size_t n);

/* `trainperf top`: every GPU of the node and the processes on it, as nvitop
 * shows them. The reader keeps NVML loaded between reads, so each read's SM
 * shares cover the time since the one before (the first, the driver's
 * buffer). Not thread-safe; one reader per thread. */
#define NVML_TOP_PROCS 64 /* processes kept per GPU */
typedef struct nvml_top_proc {
    unsigned pid;   /* as NVML gives it: the host's PID namespace */
    fval mem_bytes; /* its memory on this GPU (unknown: the driver has no figure) */
    fval sm_pct;    /* its SM share since the last read, % (unknown: not supported) */
} nvml_top_proc;

typedef struct nvml_top_gpu {
    int index;
    char name[96];
    uint8_t lost;
    fval util_pct, mem_used_bytes, mem_total_bytes;
    int procs_ok; /* the process lists were read (else nproc 0 says nothing) */
    int nproc;
    nvml_top_proc proc[NVML_TOP_PROCS];
} nvml_top_gpu;

typedef struct nvml_top nvml_top;
/* Load NVML and open every device. 0 with *out set, or an error with a one-line
 * reason in err and nothing left loaded. Free with nvml_top_close. */
int nvml_top_open(nvml_top **out, char *err, size_t errn);
/* Fill gpus[0..cap) with the devices now; returns how many. */
int nvml_top_read(nvml_top *t, nvml_top_gpu *gpus, int cap);
void nvml_top_close(nvml_top *t);

/* NVML return code as a short static name ("GPU_IS_LOST"). */
const char *nvml_code_name(int code);

#endif
