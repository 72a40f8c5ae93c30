/* Which GPUs a run uses: CUDA_VISIBLE_DEVICES parsing and PID namespace
 * mapping, kept apart from NVML so they are tested on their own. */
#ifndef TPF_COLLECT_GPUSEL_H
#define TPF_COLLECT_GPUSEL_H

#include <stddef.h>
#include <sys/types.h>

/* A MIG instance NVML lists under a physical device. */
typedef struct gpusel_mig {
    const char *uuid; /* "MIG-..." */
    int parent;       /* NVML index of the physical GPU */
} gpusel_mig;

/* The NVML indices that CUDA_VISIBLE_DEVICES=cvd makes visible, in CUDA's
 * order, into out[0..max). cvd NULL: every device. Entries are indices, GPU
 * UUIDs or unique UUID prefixes (with or without "GPU-"), or MIG ids
 * ("MIG-<uuid>" looked up in migs, or the older "MIG-GPU-<uuid>/gi/ci"); a MIG
 * id selects its parent GPU. Like CUDA, parsing stops at the first entry that
 * names no device, so "" and "-1" hide every GPU. Duplicates count once.
 * Returns the count written (0..max). */
int gpusel_visible(const char *cvd, const char *const *uuids, int ndev, const gpusel_mig *migs,
                   int nmig, int *out, int max);

/* The pids of process `pid` in each PID namespace, as /proc/<pid>/status
 * "NSpid:" lists them (outermost visible first; out[0] == pid). Returns the
 * count (>= 1), or a negative TPF_E* code when the process is gone. */
int gpusel_nspids(pid_t pid, pid_t *out, int max);

/* Read `key` from /proc/<pid>/environ into out (terminated, truncated to n).
 * Returns 1 when set, 0 when not set, TPF_ESTATE when the environment is
 * empty (a process still in execve reads so: retry later), or another
 * negative TPF_E* code when it cannot be read (process gone, permission). */
int gpusel_environ(pid_t pid, const char *key, char *out, size_t n);

#endif
