/* CUPTI activity records read by offset (see cupti_rec.h). */
#include <string.h>

#include "collect/cupti_rec.h"
#include "probe/reader.h"

static uint64_t rd64(const uint8_t *p, size_t off)
{
    uint64_t v;
    memcpy(&v, p + off, sizeof(v));
    return v;
}

static uint32_t rd32(const uint8_t *p, size_t off)
{
    uint32_t v;
    memcpy(&v, p + off, sizeof(v));
    return v;
}

int cupti_rec_decode(const uint8_t *p, size_t len, cupti_rec *o)
{
    if (!p || len < 8) return 0;
    memset(o, 0, sizeof(*o));
    uint32_t kind = rd32(p, 0);
    switch (kind) {
    case CUPTI_KIND_KERNEL:
    case CUPTI_KIND_CONCURRENT_KERNEL: {
        if (len < CUPTI_KERNEL_PREFIX) return 0;
        o->ev = SEG_EV_GPU_KERNEL;
        o->start = rd64(p, 16);
        o->end = rd64(p, 24);
        o->b = GPU_KB(rd32(p, 40), rd32(p, 48));
        const char *name;
        memcpy(&name, p + 104, sizeof(name));
        o->name = name;
        /* NCCL's kernels (ncclKernel_..., ncclDevKernel_...): a name CUPTI
         * owns, NUL-terminated */
        if (name && strstr(name, "nccl")) o->b |= GPU_KB_COMM;
        break;
    }
    case CUPTI_KIND_MEMCPY:
        if (len < CUPTI_MEMCPY_PREFIX) return 0;
        o->ev = SEG_EV_GPU_COPY;
        o->b = rd64(p, 8);
        o->start = rd64(p, 16);
        o->end = rd64(p, 24);
        o->aux = GPU_CN(p[4], p[5], p[6], rd32(p, 32));
        break;
    case CUPTI_KIND_MEMSET:
        if (len < CUPTI_MEMSET_PREFIX) return 0;
        o->ev = SEG_EV_GPU_MEMSET;
        o->b = rd64(p, 8);
        o->start = rd64(p, 16);
        o->end = rd64(p, 24);
        o->aux = rd32(p, 32);
        break;
    case CUPTI_KIND_SYNCHRONIZATION:
        if (len < CUPTI_SYNC_PREFIX) return 0;
        o->ev = SEG_EV_GPU_SYNC;
        o->aux = rd32(p, 4);
        o->start = rd64(p, 8);
        o->end = rd64(p, 16);
        o->b = rd32(p, 32);
        break;
    default: return 0;
    }
    return o->start != 0 && o->end >= o->start;
}
