/* The shared segment: binary layout shared by the probe (producer) and the
 * reader (collector). One file per process, RUN_DIR/live/seg-<pid>.tpf,
 * mapped MAP_SHARED by both. Both map map_size bytes, but the file only
 * grows (ftruncate, sparse) as threads claim rings: its length is the header,
 * the name table and rings 0..rings_used-1, so a copied run directory holds
 * no gigabyte of holes and only pages that are written cost memory.
 *
 * Layout version 1, all integers little-endian native, offsets from the
 * start of the file:
 *
 *   0       seg_header        (SEG_HEADER_SIZE = 4096 bytes)
 *   4096    name table        max_names x seg_name_slot (136 bytes each);
 *                             slot i holds name id i (slot 0 unused)
 *   rings_off                 max_rings x ring, each ring is
 *                             seg_ring_hdr (128 bytes) + ring_events x
 *                             seg_rec (32 bytes); rings_off and ring_stride
 *                             are multiples of 4096
 *
 * Publication protocol:
 *  - header.state goes SEG_STATE_INIT -> SEG_STATE_READY with a release
 *    store after every other header field is written; a reader that sees
 *    INIT retries later (TPF_ESTATE).
 *  - a name slot's len is stored with release after its bytes; name_count
 *    (release) bounds the slots a reader looks at.
 *  - rings_used grows (release) only after the file was extended to hold
 *    the new ring; a reader loads it, then fstat()s the file, and treats
 *    rings_used beyond the file's length as damage (never touches them).
 *  - a ring slot is claimed by a CAS on ring.state (FREE/NEW -> OWNED); the
 *    owner stores tid before its first publish. ring.head counts records
 *    ever written (producer only, release store after the record); ring.tail
 *    counts records consumed (reader only, release store after reading).
 *    A record at index i lives at recs[i & (ring_events - 1)]. The producer
 *    drops (and counts in ring.drops, producer-only) when head - tail ==
 *    ring_events. A thread that finds no ring adds to header.drops_noring;
 *    header.noroom is set (to 1, never back) when a ring could not be had
 *    for want of space (a full disk, /dev/shm short): those drops are a
 *    full disk's, not a busy thread's.
 *  - a process that could not make its segment at all for want of space
 *    makes an empty file noroom-<pid> in RUN/live instead, and counts the
 *    events it could not record in its size (ftruncate: no block is used);
 *    a lower bound while it runs, exact once it exits normally.
 *  - a ring whose thread exited is marked FREE; another thread may take it
 *    over only when it is fully drained (tail == head), so the tid the
 *    reader sees always belongs to the records it reads.
 *
 * Clock: header.clock_kind SEG_CLOCK_MONO means seg_rec.ts is
 * CLOCK_MONOTONIC ns. SEG_CLOCK_TSC means it is a raw TSC value (invariant
 * TSC only) and mono_ns = mono0 + (ts - tsc0) * ns_per_tick; the reader
 * refines ns_per_tick with its own (tsc, mono) pairs on the same machine. */
#ifndef TPF_PROBE_SEGMENT_H
#define TPF_PROBE_SEGMENT_H

#include <stdatomic.h>
#include <stdint.h>

#define SEG_MAGIC "TPFSEG1\n" /* 8 bytes, no NUL */
#define SEG_LAYOUT_VERSION 1u
#define SEG_HEADER_SIZE 4096u
#define SEG_NAME_MAX 128u   /* bytes per name incl. NUL: 127 kept */
#define SEG_MAX_NAMES 1024u /* ids 1..1023 */
#define SEG_MAX_RINGS 256u
#define SEG_RING_DEFAULT 262144u
#define SEG_RING_MIN 1024u
#define SEG_RING_MAX (1u << 22)
#define SEG_PAGE 4096u

enum { SEG_STATE_INIT = 0, SEG_STATE_READY = 1 };
enum { SEG_CLOCK_MONO = 1, SEG_CLOCK_TSC = 2 };
enum { SEG_RING_NEW = 0, SEG_RING_OWNED = 1, SEG_RING_FREE = 2 };

typedef struct seg_header {
    char magic[8];
    uint32_t layout_version;
    uint32_t header_size;   /* SEG_HEADER_SIZE */
    uint64_t map_size;      /* rings_off + max_rings * ring_stride */
    _Atomic uint32_t state; /* SEG_STATE_* */
    uint32_t ring_events;   /* records per ring, power of two */
    uint32_t max_rings;
    uint32_t max_names;
    uint32_t name_slot_size; /* sizeof(seg_name_slot) */
    uint32_t rec_size;       /* sizeof(seg_rec) */
    uint64_t names_off;
    uint64_t rings_off;
    uint64_t ring_stride; /* bytes per ring incl. its header */
    /* clock */
    uint32_t clock_kind; /* SEG_CLOCK_* */
    uint32_t pad0;
    double ns_per_tick; /* SEG_CLOCK_TSC: producer's calibration */
    uint64_t tsc0;      /* base pair taken at attach */
    uint64_t mono0;
    /* identity */
    int32_t pid, ppid;
    /* -1 when absent; tpf_set_rank may set them later (atomic stores, the
     * rank last, then a SEG_NAME_RANK_SET mark in the caller's ring) */
    int32_t rank, local_rank, world_size;
    int32_t pad1;
    char hostname[64];
    uint64_t created_mono_ns;
    /* shared counters */
    _Atomic uint32_t rings_used; /* ring slots ever handed out (<= max) */
    _Atomic uint32_t name_count; /* slots 0..name_count-1 may be valid */
    _Atomic uint64_t drops_noring;
    _Atomic uint32_t noroom; /* 1: a ring was refused for want of space */
} seg_header;

typedef struct seg_name_slot {
    _Atomic uint32_t len; /* 0: empty; else strlen, stored last */
    uint32_t pad;
    char s[SEG_NAME_MAX]; /* NUL-terminated */
} seg_name_slot;

typedef struct seg_ring_hdr {
    /* producer's cache line */
    _Atomic uint64_t head;
    _Atomic uint64_t drops;
    _Atomic int32_t tid;
    _Atomic uint32_t state; /* SEG_RING_* */
    char pad0[64 - 24];
    /* consumer's cache line */
    _Atomic uint64_t tail;
    char pad1[64 - 8];
} seg_ring_hdr;

typedef struct seg_rec {
    uint64_t ts;   /* TSC ticks or CLOCK_MONOTONIC ns */
    uint32_t kind; /* SEG_EV_* */
    uint32_t name;
    uint64_t a, b; /* samples/tokens, or the double's bits */
} seg_rec;

_Static_assert(sizeof(seg_header) <= SEG_HEADER_SIZE, "header fits");
_Static_assert(sizeof(seg_ring_hdr) == 128, "ring header is two lines");
_Static_assert(sizeof(seg_rec) == 32, "records are 32 bytes");
_Static_assert(sizeof(seg_name_slot) == 136, "name slot size");

static inline uint64_t seg_round_page(uint64_t n)
{
    return (n + SEG_PAGE - 1) & ~(uint64_t)(SEG_PAGE - 1);
}

/* The room segments leave free on a tmpfs of `size` bytes (/dev/shm): the
 * trainee's own users of it (DataLoader workers' tensors, NCCL) come first.
 * Half of it up to 4 GiB, and never less than 256 MiB, so a small /dev/shm
 * (a container's default 64 MiB) is never used and segments stay in the run
 * directory. */
static inline uint64_t seg_shm_keep(uint64_t size)
{
    uint64_t keep = size / 2, lo = (uint64_t)256 << 20, hi = (uint64_t)4 << 30;
    return keep < lo ? lo : keep > hi ? hi : keep;
}

static inline uint64_t seg_ring_stride(uint32_t ring_events)
{
    return seg_round_page(sizeof(seg_ring_hdr) + (uint64_t)ring_events * sizeof(seg_rec));
}

static inline seg_ring_hdr *seg_ring_at(void *base, const seg_header *h, uint32_t i)
{
    return (seg_ring_hdr *)((char *)base + h->rings_off + (uint64_t)i * h->ring_stride);
}

static inline seg_rec *seg_ring_recs(seg_ring_hdr *r)
{
    return (seg_rec *)(r + 1);
}

#endif
