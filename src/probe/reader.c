/* The consumer side of a segment: validates the file, drains the rings,
 * converts timestamps to CLOCK_MONOTONIC ns. Everything read from the file
 * is checked before it is used: a damaged segment gives an error, never a
 * crash (the producer may be gone, or the file may be garbage). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe/clock.h"
#include "probe/reader.h"
#include "probe/segment.h"
#include "util/err.h"

struct seg_reader {
    void *base;
    size_t size; /* mapped: map_size */
    int fd;      /* to see how far the file has grown */
    seg_header *h;
    /* validated copies of the header's geometry */
    uint32_t ring_events, max_rings, max_names;
    uint64_t rings_off, ring_stride, names_off;
    uint32_t clock_kind;
    uint64_t tsc0, mono0;
    double ns_per_tick; /* refined at each drain (TSC clock) */
    int refine;         /* this machine can read the same TSC */
    seg_proc_info info;
    /* Last time handed out per ring: a refined TSC rate must not make a
     * thread's time run backwards across drains. */
    uint64_t last_ts[SEG_MAX_RINGS];
    char (*names)[SEG_NAME_MAX]; /* copies handed out by seg_reader_name */
    /* seg_reader_hold: how far each ring has been read (0: not read yet); the
     * producer's tail moves there only at seg_reader_release */
    int hold;
    uint64_t read_to[SEG_MAX_RINGS];
};

static int is_pow2(uint32_t v)
{
    return v && !(v & (v - 1));
}

/* 0 when the header describes a sane layout whose header and names fit
 * the file (rings are checked against the file's length at each use). */
static int validate(seg_reader *r, const seg_header *h, uint64_t fsize)
{
    if (memcmp(h->magic, SEG_MAGIC, 8) != 0) return TPF_EFORMAT;
    if (h->layout_version != SEG_LAYOUT_VERSION) return TPF_EVERSION;
    if (atomic_load_explicit(&h->state, memory_order_acquire) != SEG_STATE_READY) return TPF_ESTATE;
    if (h->header_size != SEG_HEADER_SIZE || h->rec_size != sizeof(seg_rec) ||
        h->name_slot_size != sizeof(seg_name_slot))
        return TPF_EFORMAT;
    if (!is_pow2(h->ring_events) || h->ring_events < SEG_RING_MIN || h->ring_events > SEG_RING_MAX)
        return TPF_EFORMAT;
    if (h->max_rings == 0 || h->max_rings > SEG_MAX_RINGS || h->max_names < 8 ||
        h->max_names > SEG_MAX_NAMES)
        return TPF_EFORMAT;
    if (h->names_off != SEG_HEADER_SIZE || h->ring_stride != seg_ring_stride(h->ring_events))
        return TPF_EFORMAT;
    /* Bounded factors above, so none of these products overflow. */
    if (h->rings_off < h->names_off + (uint64_t)h->max_names * sizeof(seg_name_slot) ||
        h->rings_off % SEG_PAGE != 0 || h->rings_off > fsize || h->rings_off > (uint64_t)1 << 32 ||
        h->map_size != h->rings_off + (uint64_t)h->max_rings * h->ring_stride ||
        h->map_size > (uint64_t)SIZE_MAX)
        return TPF_EFORMAT;
    if (h->clock_kind == SEG_CLOCK_TSC) {
        if (!isfinite(h->ns_per_tick) || h->ns_per_tick < 0.01 || h->ns_per_tick > 100)
            return TPF_EFORMAT;
    } else if (h->clock_kind != SEG_CLOCK_MONO) {
        return TPF_EFORMAT;
    }
    r->ring_events = h->ring_events;
    r->max_rings = h->max_rings;
    r->max_names = h->max_names;
    r->rings_off = h->rings_off;
    r->ring_stride = h->ring_stride;
    r->names_off = h->names_off;
    r->clock_kind = h->clock_kind;
    r->tsc0 = h->tsc0;
    r->mono0 = h->mono0;
    r->ns_per_tick = h->ns_per_tick;
    return 0;
}

int seg_reader_open(seg_reader **out, const char *path)
{
    if (!out || !path) return TPF_EINVAL;
    *out = NULL;
    /* Read-write: the consumer index (tail) lives in the segment. */
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return errno == EISDIR ? TPF_EFORMAT : err_from_errno(errno);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = err_from_errno(errno);
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)SEG_HEADER_SIZE) {
        close(fd);
        return TPF_EFORMAT;
    }
    seg_reader *r = calloc(1, sizeof(*r));
    if (!r) {
        close(fd);
        return TPF_ENOMEM;
    }
    r->fd = fd;
    /* The header first, to learn how much to map. */
    void *hdr = mmap(NULL, SEG_HEADER_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    int rc = hdr == MAP_FAILED ? TPF_EIO : validate(r, hdr, (uint64_t)st.st_size);
    size_t size = rc ? 0 : (size_t)((const seg_header *)hdr)->map_size;
    if (hdr != MAP_FAILED) munmap(hdr, SEG_HEADER_SIZE);
    void *base = MAP_FAILED;
    if (rc == 0) {
        /* From here on only the validated copies of the geometry are used. */
        base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) rc = TPF_ENOMEM;
    }
    if (rc) {
        close(fd);
        free(r);
        return rc;
    }
    r->base = base;
    r->size = size;
    r->h = base;
    const seg_header *h = r->h;
    r->info.pid = h->pid;
    r->info.ppid = h->ppid;
    r->info.rank = h->rank >= 0 ? h->rank : -1;
    r->info.local_rank = h->local_rank >= 0 ? h->local_rank : -1;
    r->info.world_size = h->world_size >= 0 ? h->world_size : -1;
    memcpy(r->info.hostname, h->hostname, sizeof(r->info.hostname));
    r->info.hostname[sizeof(r->info.hostname) - 1] = 0;
    r->info.created_mono_ns = h->created_mono_ns;
    r->refine = r->clock_kind == SEG_CLOCK_TSC && clk_tsc_invariant();
    *out = r;
    return 0;
}

void seg_reader_close(seg_reader *r)
{
    if (!r) return;
    munmap(r->base, r->size);
    close(r->fd);
    free(r->names);
    free(r);
}

const seg_proc_info *seg_reader_info(const seg_reader *r)
{
    return r ? &r->info : NULL;
}

int seg_reader_rank_changed(seg_reader *r)
{
    const seg_header *h = r->h;
    int32_t rank = __atomic_load_n(&h->rank, __ATOMIC_ACQUIRE);
    if (rank < 0 || rank == r->info.rank) return 0;
    int32_t lr = __atomic_load_n(&h->local_rank, __ATOMIC_RELAXED),
            ws = __atomic_load_n(&h->world_size, __ATOMIC_RELAXED);
    r->info.rank = rank;
    r->info.local_rank = lr >= 0 ? lr : -1;
    r->info.world_size = ws >= 0 ? ws : -1;
    return 1;
}

/* Re-derive the TSC rate from the producer's base pair and a pair taken
 * now: the longer the run, the more exact (pair error over elapsed time). */
static void refine_clock(seg_reader *r)
{
    if (!r->refine) return;
    uint64_t t, m;
    clk_pair(&t, &m);
    if (t <= r->tsc0 || m <= r->mono0) return;
    if (m - r->mono0 < 50000000) return; /* under 50 ms: keep the producer's */
    double rate = (double)(m - r->mono0) / (double)(t - r->tsc0);
    /* A wild rate means another boot or machine: keep the producer's. */
    if (fabs(rate / r->ns_per_tick - 1.0) < 0.01) r->ns_per_tick = rate;
}

/* Rings the reader may touch: those published (rings_used, loaded first)
 * that the file is long enough to hold. *damaged when they differ. */
static uint32_t rings_readable(const seg_reader *r, int *damaged)
{
    uint32_t n = atomic_load_explicit(&r->h->rings_used, memory_order_acquire);
    struct stat st;
    uint64_t avail = 0;
    if (fstat(r->fd, &st) == 0 && (uint64_t)st.st_size > r->rings_off)
        avail = ((uint64_t)st.st_size - r->rings_off) / r->ring_stride;
    if (avail > r->max_rings) avail = r->max_rings;
    if (n > avail) {
        if (damaged) *damaged = 1;
        n = (uint32_t)avail;
    }
    return n;
}

static uint64_t to_mono(const seg_reader *r, uint64_t ts)
{
    if (r->clock_kind != SEG_CLOCK_TSC) return ts;
    double d = (double)(int64_t)(ts - r->tsc0) * r->ns_per_tick;
    return (uint64_t)((int64_t)r->mono0 + (int64_t)llround(d));
}

long seg_reader_drain(seg_reader *r, seg_event_cb cb, void *ctx)
{
    if (!r) return TPF_EINVAL;
    int damaged = 0;
    uint32_t n = rings_readable(r, &damaged);
    refine_clock(r);
    long total = 0;
    uint64_t mask = r->ring_events - 1;
    for (uint32_t i = 0; i < n; i++) {
        seg_ring_hdr *ring =
            (seg_ring_hdr *)((char *)r->base + r->rings_off + (uint64_t)i * r->ring_stride);
        uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
        uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
        if (head < tail || head - tail > r->ring_events) {
            /* Impossible for a live producer: give up on this ring. */
            damaged = 1;
            atomic_store_explicit(&ring->tail, head, memory_order_release);
            r->read_to[i] = head;
            continue;
        }
        if (r->hold && r->read_to[i] > tail && r->read_to[i] <= head) tail = r->read_to[i];
        if (head == tail) continue;
        pid_t tid = atomic_load_explicit(&ring->tid, memory_order_relaxed);
        const seg_rec *recs = seg_ring_recs(ring);
        for (uint64_t k = tail; k != head; k++) {
            const seg_rec *rec = &recs[k & mask];
            seg_event ev;
            ev.kind = rec->kind;
            if (ev.kind < SEG_EV_STEP_BEGIN || ev.kind > SEG_EV_LAST) {
                damaged = 1;
                continue;
            }
            ev.ts_ns = to_mono(r, rec->ts);
            ev.name = rec->name;
            ev.tid = tid;
            ev.samples = ev.tokens = 0;
            ev.value = 0;
            ev.end_ns = ev.arg = 0;
            if (ev.kind >= SEG_EV_GPU_KERNEL) {
                /* GPU records come in completion order, not start order:
                 * not clamped to the ring's last time */
                ev.end_ns = to_mono(r, rec->a);
                if (ev.end_ns < ev.ts_ns) ev.end_ns = ev.ts_ns;
                ev.arg = rec->b;
            } else {
                if (ev.ts_ns < r->last_ts[i]) ev.ts_ns = r->last_ts[i];
                r->last_ts[i] = ev.ts_ns;
            }
            if (ev.kind == SEG_EV_STEP_END) {
                ev.samples = rec->a;
                ev.tokens = rec->b;
            } else if (ev.kind == SEG_EV_COUNTER) {
                memcpy(&ev.value, &rec->a, sizeof(ev.value));
            }
            if (cb) cb(ctx, &ev);
            total++;
        }
        if (r->hold) r->read_to[i] = head;
        else atomic_store_explicit(&ring->tail, head, memory_order_release);
    }
    return damaged ? TPF_EFORMAT : total;
}

void seg_reader_hold(seg_reader *r)
{
    if (r) r->hold = 1;
}

void seg_reader_release(seg_reader *r)
{
    if (!r || !r->hold) return;
    uint32_t n = rings_readable(r, NULL);
    for (uint32_t i = 0; i < n; i++) {
        seg_ring_hdr *ring =
            (seg_ring_hdr *)((char *)r->base + r->rings_off + (uint64_t)i * r->ring_stride);
        uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
        if (r->read_to[i] > tail) atomic_store_explicit(&ring->tail, r->read_to[i], memory_order_release);
    }
}

const char *seg_reader_name(seg_reader *r, tpf_name id)
{
    if (!r || id == 0 || id >= r->max_names) return NULL;
    const seg_header *h = r->h;
    if (id >= atomic_load_explicit(&h->name_count, memory_order_acquire)) return NULL;
    if (!r->names) {
        r->names = calloc(r->max_names, SEG_NAME_MAX);
        if (!r->names) return NULL;
    }
    if (r->names[id][0]) return r->names[id];
    const seg_name_slot *slot = (const seg_name_slot *)((const char *)r->base + r->names_off) + id;
    uint32_t len = atomic_load_explicit(&slot->len, memory_order_acquire);
    if (len == 0 || len >= SEG_NAME_MAX) return NULL;
    /* A slot's bytes never change once its len is published. */
    memcpy(r->names[id], slot->s, len);
    r->names[id][len] = 0;
    if (strlen(r->names[id]) != len) {
        r->names[id][0] = 0;
        return NULL;
    }
    return r->names[id];
}

int seg_reader_noroom(const seg_reader *r)
{
    return r && atomic_load_explicit(&r->h->noroom, memory_order_relaxed) != 0;
}

uint64_t seg_reader_dropped(const seg_reader *r)
{
    if (!r) return 0;
    uint64_t d = atomic_load_explicit(&r->h->drops_noring, memory_order_relaxed);
    uint32_t n = rings_readable(r, NULL);
    for (uint32_t i = 0; i < n; i++) {
        const seg_ring_hdr *ring = (const seg_ring_hdr *)((const char *)r->base + r->rings_off +
                                                          (uint64_t)i * r->ring_stride);
        d += atomic_load_explicit(&ring->drops, memory_order_relaxed);
    }
    return d;
}
