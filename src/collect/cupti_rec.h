/* CUPTI activity records, read by offset (no CUDA header: the layouts are
 * declared here from the CUPTI documentation, docs/gpu.md "GPU records").
 *
 * The fields read are the prefix that every record version since CUDA 12
 * shares (Kernel9/10/11, Memcpy5, Memset4, Synchronization): a newer CUPTI
 * appends fields, so a record is decoded when it is at least as long as
 * that prefix. Pure code: the injection library (src/gpu/cupti_inject.c)
 * calls it on CUPTI's buffers, the unit tests on recorded ones. */
#ifndef TPF_COLLECT_CUPTI_REC_H
#define TPF_COLLECT_CUPTI_REC_H

#include <stddef.h>
#include <stdint.h>

/* CUpti_ActivityKind values read */
enum {
    CUPTI_KIND_MEMCPY = 1,
    CUPTI_KIND_MEMSET = 2,
    CUPTI_KIND_KERNEL = 3,
    CUPTI_KIND_CONCURRENT_KERNEL = 10,
    CUPTI_KIND_SYNCHRONIZATION = 38,
};

/* Bytes each kind's decoded prefix needs. */
#define CUPTI_KERNEL_PREFIX 112
#define CUPTI_MEMCPY_PREFIX 48
#define CUPTI_MEMSET_PREFIX 48
#define CUPTI_SYNC_PREFIX 40

/* One decoded record: what a SEG_EV_GPU_* event carries. */
typedef struct cupti_rec {
    uint32_t ev;       /* SEG_EV_GPU_* (probe/reader.h) */
    uint64_t start, end; /* CUPTI's clock */
    uint64_t b;        /* kernel: GPU_KB(device, stream); copy, memset: bytes; sync: stream */
    uint32_t aux;      /* copy: GPU_CN(...); memset: device; sync: type */
    const char *name;  /* kernel: CUPTI's (mangled) name, owned by CUPTI; else NULL */
} cupti_rec;

/* Decode the record at p, len bytes long (len: what the buffer holds from p
 * on, or the record's size when known). 1: decoded; 0: a kind not kept, a
 * record too short, or one with no timing (start 0 or end < start). */
int cupti_rec_decode(const uint8_t *p, size_t len, cupti_rec *out);

#endif
