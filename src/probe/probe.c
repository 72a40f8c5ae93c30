/* The probe: the hot path (tpf_step_*, tpf_range_*, tpf_counter, tpf_mark),
 * the name registry and attaching to a run directory.
 *
 * One global state word decides everything on the hot path:
 *   0              off: every call returns after one predictable branch
 *   PROBE_PENDING  a run dir is known but no segment exists yet (from the
 *                  environment, or a forked child of an attached process):
 *                  the first event creates it
 *   >= PROBE_GEN0  attached; the value is a generation number, and a thread
 *                  whose cached ring carries another generation takes the
 *                  slow path (claims a ring in the current segment).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "probe/clock.h"
#include "probe/probe.h"
#include "probe/reader.h"
#include "probe/segment.h"
#include "trainperf.h"
#include "util/err.h"

#define PROBE_PENDING 1u
#define PROBE_GEN0 2u
#define PROBE_MAX_RETIRED 64

/* Per-thread producer state. Initial-exec TLS: one %fs-relative access. */
typedef struct probe_tls {
    uint32_t gen; /* generation ring belongs to; != state: slow path */
    uint32_t mask;
    seg_ring_hdr *ring;
    seg_rec *recs;
    uint64_t head;       /* producer's copy of ring->head */
    uint64_t tail_cache; /* last tail seen; refreshed only when full */
    uint64_t drops;      /* producer's copy of ring->drops */
    uint32_t noring_gen; /* this generation had no ring left for us */
    seg_header *noring_hdr;
} probe_tls;

static __thread probe_tls t_probe __attribute__((tls_model("initial-exec")));

static _Atomic uint32_t g_state;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Everything below is guarded by g_lock. */
typedef struct probe_seg {
    void *base;
    size_t size; /* mapped bytes (map_size) */
    seg_header *h;
    int fd; /* kept to grow the file as rings are claimed; -1 */
    uint64_t file_len;
    int shm; /* in the segment directory (tmpfs): keep its floor free */
} probe_seg;

static probe_seg g_seg = {.fd = -1};
/* tpf_set_rank's rank, local rank and world size (-1: from the environment) */
static int g_rank_set[3] = {-1, -1, -1};
static uint32_t g_gen = PROBE_GEN0 - 1;
static int g_clock_tsc; /* read on the hot path; set before publish */
static char g_run_dir[PATH_MAX];
static char g_run_dir_pub[PATH_MAX]; /* what tpf_run_dir() hands out */
/* The run's private segment directory off the run directory's file system
 * (TRAINPERF_SEG_DIR, made by `trainperf run` in /dev/shm; "" for none):
 * see record/segdir.h for why. */
static char g_seg_dir[PATH_MAX];
static char g_seg_path[PATH_MAX + 32]; /* the current segment's path */
/* "seg-<pid>.<tag>.tpf" instead of "seg-<pid>.tpf": a second copy of the
 * probe in one process (the CUPTI library) must not take the first's file. */
static char g_seg_tag[16];
/* Mappings of earlier attaches. Not unmapped at detach: a thread may still
 * be inside a write to them. */
static probe_seg g_retired[PROBE_MAX_RETIRED];
static int g_nretired;
static uint64_t g_dropped_before; /* drops of earlier segments */
/* No segment for want of space (segment.h): the events this process could
 * not record are counted in a header of its own memory and published as the
 * size of RUN/live/noroom-<pid> (g_noroom_fd; -1 none). */
static seg_header g_noroom_hdr;
static _Atomic int g_noroom_fd = -1;

/* The count of unrecorded events as the marker's size: at powers of two and
 * every 1024 (a syscall per 1024 events, only in a process with no room). */
static void noroom_publish(uint64_t n, int always)
{
    int fd = atomic_load_explicit(&g_noroom_fd, memory_order_relaxed);
    if (fd >= 0 && (always || (n & (n - 1)) == 0 || (n & 1023) == 0) &&
        ftruncate(fd, (off_t)n) != 0) {
        /* nothing to do: the count stays at its last size */
    }
}

/* The events counted without a segment (noroom_begin_locked). */
static uint64_t noroom_count(void)
{
    return atomic_load_explicit(&g_noroom_hdr.drops_noring, memory_order_relaxed);
}

/* The marker's exact count (detach, exit). */
static void noroom_final(void)
{
    noroom_publish(noroom_count(), 1);
}


/* Name registry (process-local master copy; the segment gets a copy). */
static char g_names[SEG_MAX_NAMES][SEG_NAME_MAX];
static uint32_t g_name_count = TPF_NAME_FIRST_USER;
#define NAME_HASH_SLOTS (2 * SEG_MAX_NAMES)
static uint16_t g_name_hash[NAME_HASH_SLOTS]; /* 0 empty, else id */

static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static int g_key_ok;

static const char *const g_predef[] = {NULL,        "data", "forward", "backward",
                                       "optimizer", "comm", "eval",    "checkpoint"};

/* ---- names ---- */

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static uint32_t name_lookup_locked(const char *s)
{
    for (uint32_t i = name_hash(s) % NAME_HASH_SLOTS, n = 0; n < NAME_HASH_SLOTS;
         i = (i + 1) % NAME_HASH_SLOTS, n++) {
        uint32_t id = g_name_hash[i];
        if (id == 0) return 0;
        if (strcmp(g_names[id], s) == 0) return id;
    }
    return 0;
}

static void name_index_locked(uint32_t id)
{
    uint32_t i = name_hash(g_names[id]) % NAME_HASH_SLOTS;
    while (g_name_hash[i] != 0)
        i = (i + 1) % NAME_HASH_SLOTS;
    g_name_hash[i] = (uint16_t)id;
}

static void seg_put_name_locked(seg_header *h, uint32_t id)
{
    seg_name_slot *slots = (seg_name_slot *)((char *)h + h->names_off);
    size_t len = strlen(g_names[id]);
    memcpy(slots[id].s, g_names[id], len + 1);
    atomic_store_explicit(&slots[id].len, (uint32_t)len, memory_order_release);
    if (atomic_load_explicit(&h->name_count, memory_order_relaxed) <= id)
        atomic_store_explicit(&h->name_count, id + 1, memory_order_release);
}

static void names_init_locked(void)
{
    if (g_names[1][0]) return;
    for (uint32_t id = 1; id <= TPF_PHASE_CHECKPOINT; id++) {
        size_t n = strlen(g_predef[id]);
        memcpy(g_names[id], g_predef[id], n + 1);
        name_index_locked(id);
    }
}

tpf_name tpf_name_register(const char *name)
{
    if (!name || !name[0]) return TPF_NAME_NONE;
    char key[SEG_NAME_MAX];
    size_t n = strnlen(name, SEG_NAME_MAX - 1);
    memcpy(key, name, n);
    key[n] = 0;
    pthread_mutex_lock(&g_lock);
    names_init_locked();
    uint32_t id = name_lookup_locked(key);
    if (id == 0 && g_name_count < SEG_MAX_NAMES) {
        id = g_name_count++;
        memcpy(g_names[id], key, n + 1);
        name_index_locked(id);
        if (g_seg.h) seg_put_name_locked(g_seg.h, id);
    }
    pthread_mutex_unlock(&g_lock);
    return id;
}

const char *probe_name_str(tpf_name id)
{
    /* Names are never removed or changed, so the pointer stays valid. */
    pthread_mutex_lock(&g_lock);
    names_init_locked();
    const char *s = (id < SEG_MAX_NAMES && g_names[id][0]) ? g_names[id] : NULL;
    pthread_mutex_unlock(&g_lock);
    return s;
}

/* ---- attach / detach ---- */

static int env_int(const char *a, const char *b)
{
    const char *s = getenv(a);
    if (!s || !*s) s = getenv(b);
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > INT32_MAX) return -1;
    return (int)v;
}

int probe_ring_events_parse(const char *s, uint32_t *out)
{
    /* strtoull takes "-1" as 2^64-1: a sign is refused, never read as the
     * largest ring. */
    if (!s || *s < '0' || *s > '9') return TPF_EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v > SEG_RING_MAX) return TPF_EINVAL;
    if (v < SEG_RING_MIN) v = SEG_RING_MIN;
    uint32_t p = SEG_RING_MIN;
    while (p < v)
        p <<= 1; /* round up to a power of two */
    *out = p;
    return 0;
}

uint32_t probe_ring_events(void)
{
    const char *s = getenv("TRAINPERF_RING_EVENTS");
    if (!s || !*s) return SEG_RING_DEFAULT;
    /* The probe cannot say anything: a bad value means the default
     * (`trainperf run` refuses it before starting anything). */
    uint32_t p;
    return probe_ring_events_parse(s, &p) == 0 ? p : SEG_RING_DEFAULT;
}

static pid_t probe_gettid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* Create dir if missing; 0 or a TPF_E* code. */
static int ensure_dir(const char *dir)
{
    if (mkdir(dir, 0777) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(dir, &st) != 0) return err_from_errno(errno);
        return S_ISDIR(st.st_mode) ? 0 : TPF_EEXIST;
    }
    return err_from_errno(errno);
}

/* The segment directory as an fd, only when it is what `trainperf run`
 * made: a real directory (no symlink), ours, closed to everyone else. A
 * directory someone else could write to is never used. */
static int seg_dir_open(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return err_from_errno(errno);
    struct stat st;
    if (fstat(dfd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        close(dfd);
        return TPF_EACCES;
    }
    return dfd;
}

/* 1 when len more bytes may be taken in the file system of fd: the segment
 * directory's tmpfs is shared with the trainee's own users of /dev/shm
 * (DataLoader tensors, NCCL), so seg_shm_keep of it always stays free. */
static int shm_room(int fd, uint64_t len)
{
    struct statvfs v;
    if (fstatvfs(fd, &v) != 0) return 0;
    uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize, size = (uint64_t)v.f_blocks * v.f_frsize;
    return avail >= len && avail - len >= seg_shm_keep(size);
}

/* Where a segment is made: dfd and the name's directory for
 * probe_segment_path. Off the run directory when a segment directory is
 * known (steps never wait for a stalled run-dir file system), else
 * RUN_DIR/live (created when missing). */
static int seg_place(const char *run_dir, int shm, char *where, size_t cap)
{
    if (shm) {
        if ((size_t)snprintf(where, cap, "%s", g_seg_dir) >= cap) return TPF_ETOOBIG;
        return seg_dir_open(g_seg_dir);
    }
    int rc = ensure_dir(run_dir);
    if (rc) return rc;
    if ((size_t)snprintf(where, cap, "%s/live", run_dir) >= cap) return TPF_ETOOBIG;
    if ((rc = ensure_dir(where)) != 0) return rc;
    int dfd = open(where, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return dfd < 0 ? err_from_errno(errno) : dfd;
}

static int seg_create_in(const char *run_dir, int shm, probe_seg *out);

static int seg_create_locked(const char *run_dir, probe_seg *out)
{
    /* The segment directory first; when it cannot take the segment (gone,
     * not ours, its tmpfs short of room) the run directory does. */
    if (g_seg_dir[0] && seg_create_in(run_dir, 1, out) == 0) return 0;
    return seg_create_in(run_dir, 0, out);
}

static int seg_create_in(const char *run_dir, int shm, probe_seg *out)
{
    char where[PATH_MAX];
    int dfd = seg_place(run_dir, shm, where, sizeof(where));
    if (dfd < 0) return dfd;
    pid_t pid = getpid();
    char name[64], tmp[72];
    snprintf(name, sizeof(name), "seg-%d%s%s.tpf", (int)pid, g_seg_tag[0] ? "." : "", g_seg_tag);
    snprintf(tmp, sizeof(tmp), "%s.tmp", name);
    if ((size_t)snprintf(g_seg_path, sizeof(g_seg_path), "%s/%s", where, name) >=
        sizeof(g_seg_path)) {
        close(dfd);
        return TPF_ETOOBIG;
    }

    const clk_calib *ck = clk_setup();
    uint32_t ring_events = probe_ring_events();
    uint64_t names_off = SEG_HEADER_SIZE;
    uint64_t rings_off =
        seg_round_page(names_off + (uint64_t)SEG_MAX_NAMES * sizeof(seg_name_slot));
    uint64_t stride = seg_ring_stride(ring_events);
    uint64_t size = rings_off + (uint64_t)SEG_MAX_RINGS * stride;
    /* The file holds the header and names now; rings come as claimed. */
    uint64_t file_len = rings_off;

    /* Built under a temporary name and renamed into place when complete, so
     * a collector scanning the directory never sees a half-made segment. A
     * file left by an earlier attach of this pid is replaced, never
     * truncated: our own retired mapping of it may still be written.
     * O_EXCL|O_NOFOLLOW relative to the directory: a link planted at the
     * name is removed, never written through (see util/afile.h). */
    int fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        unlinkat(dfd, tmp, 0);
        fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    if (fd < 0) {
        int rc = err_from_errno(errno);
        close(dfd);
        return rc;
    }
    /* Blocks reserved before anything is mapped: on a full file system a
     * sparse file would kill this process with SIGBUS at its first write to
     * a new page (docs/reliability.md). */
    void *base = MAP_FAILED;
    int rc = shm && !shm_room(fd, file_len) ? TPF_ENOSPC : 0;
    if (rc == 0 && (rc = posix_fallocate(fd, 0, (off_t)file_len)) != 0) rc = err_from_errno(rc);
    if (rc) goto fail;
    /* Mapped to its full size: pages past the end are touched only after
     * the file has grown over them. */
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = TPF_ENOMEM;
        goto fail;
    }
    seg_header *h = base;
    memcpy(h->magic, SEG_MAGIC, 8);
    h->layout_version = SEG_LAYOUT_VERSION;
    h->header_size = SEG_HEADER_SIZE;
    h->map_size = size;
    h->ring_events = ring_events;
    h->max_rings = SEG_MAX_RINGS;
    h->max_names = SEG_MAX_NAMES;
    h->name_slot_size = sizeof(seg_name_slot);
    h->rec_size = sizeof(seg_rec);
    h->names_off = names_off;
    h->rings_off = rings_off;
    h->ring_stride = stride;
    h->clock_kind = ck->kind;
    h->ns_per_tick = ck->ns_per_tick;
    h->tsc0 = ck->tsc0;
    h->mono0 = ck->mono0;
    h->pid = pid;
    h->ppid = getppid();
    h->rank = g_rank_set[0] >= 0 ? g_rank_set[0] : env_int("RANK", "SLURM_PROCID");
    h->local_rank = g_rank_set[1] >= 0 ? g_rank_set[1] : env_int("LOCAL_RANK", "SLURM_LOCALID");
    h->world_size = g_rank_set[2] >= 0 ? g_rank_set[2] : env_int("WORLD_SIZE", "SLURM_NTASKS");
    if (gethostname(h->hostname, sizeof(h->hostname)) != 0) h->hostname[0] = 0;
    h->hostname[sizeof(h->hostname) - 1] = 0;
    h->created_mono_ns = clk_mono_ns();
    names_init_locked();
    for (uint32_t id = 1; id < g_name_count; id++)
        if (g_names[id][0]) seg_put_name_locked(h, id);
    atomic_store_explicit(&h->state, SEG_STATE_READY, memory_order_release);
    if (renameat(dfd, tmp, dfd, name) != 0) {
        rc = err_from_errno(errno);
        goto fail;
    }
    close(dfd);
    *out = (probe_seg){.base = base, .size = size, .h = h, .fd = fd, .file_len = file_len,
                       .shm = shm};
    return 0;

fail: /* the one cleanup of a half-made segment */
    if (base != MAP_FAILED) munmap(base, size);
    close(fd);
    unlinkat(dfd, tmp, 0);
    close(dfd);
    return rc;
}

static uint64_t seg_drops(const seg_header *h)
{
    uint64_t d = atomic_load_explicit(&h->drops_noring, memory_order_relaxed);
    uint32_t n = atomic_load_explicit(&h->rings_used, memory_order_acquire);
    if (n > h->max_rings) n = h->max_rings;
    for (uint32_t i = 0; i < n; i++)
        d += atomic_load_explicit(&seg_ring_at((void *)h, h, i)->drops, memory_order_relaxed);
    return d;
}

/* Attach with g_lock held; the state word changes last. */
static int attach_locked(const char *run_dir)
{
    probe_seg s;
    int rc = seg_create_locked(run_dir, &s);
    if (rc) return rc;
    if (run_dir != g_run_dir) {
        size_t n = strnlen(run_dir, sizeof(g_run_dir) - 1);
        memcpy(g_run_dir, run_dir, n);
        g_run_dir[n] = 0;
    }
    memcpy(g_run_dir_pub, g_run_dir, sizeof(g_run_dir));
    g_seg = s;
    /* Fixed per process (clk_setup decides once): written only the first
     * time, so threads still in emit() never race with this store. */
    if (g_clock_tsc != (s.h->clock_kind == SEG_CLOCK_TSC))
        g_clock_tsc = s.h->clock_kind == SEG_CLOCK_TSC;
    if (++g_gen < PROBE_GEN0) g_gen = PROBE_GEN0; /* skip 0 and PENDING on wrap */
    atomic_store_explicit(&g_state, g_gen, memory_order_release);
    return 0;
}

int probe_attach_at(const char *run_dir, const char *seg_dir)
{
    if (!run_dir || !*run_dir || strlen(run_dir) >= sizeof(g_run_dir) - 32) return TPF_EINVAL;
    if (seg_dir && strlen(seg_dir) >= sizeof(g_seg_dir) - 32) return TPF_EINVAL;
    pthread_mutex_lock(&g_lock);
    int rc = TPF_EBUSY;
    if (atomic_load_explicit(&g_state, memory_order_relaxed) == 0) {
        /* Kept for forked children, which make their own segments there. */
        snprintf(g_seg_dir, sizeof(g_seg_dir), "%s", seg_dir ? seg_dir : "");
        rc = attach_locked(run_dir);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int probe_attach(const char *run_dir)
{
    return probe_attach_at(run_dir, NULL);
}

static void retire_locked(void)
{
    if (!g_seg.h) return;
    g_dropped_before += seg_drops(g_seg.h);
    if (g_seg.fd >= 0) close(g_seg.fd);
    g_seg.fd = -1;
    if (g_nretired == PROBE_MAX_RETIRED) {
        /* Sixty-four attaches later no thread is still inside a write to
         * the oldest mapping. */
        munmap(g_retired[0].base, g_retired[0].size);
        memmove(g_retired, g_retired + 1, sizeof(g_retired[0]) * (PROBE_MAX_RETIRED - 1));
        g_nretired--;
    }
    g_retired[g_nretired++] = g_seg;
    memset(&g_seg, 0, sizeof(g_seg));
    g_seg.fd = -1;
}

void probe_detach(void)
{
    pthread_mutex_lock(&g_lock);
    atomic_store_explicit(&g_state, 0, memory_order_release);
    retire_locked();
    noroom_final();
    g_run_dir_pub[0] = 0;
    pthread_mutex_unlock(&g_lock);
}

const char *probe_segment_path(char *buf, size_t cap)
{
    pthread_mutex_lock(&g_lock);
    const char *r = NULL;
    if (g_seg.h && (size_t)snprintf(buf, cap, "%s", g_seg_path) < cap) r = buf;
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* ---- thread rings ---- */

static void thread_exit(void *arg)
{
    (void)arg;
    /* Hand the ring back for another thread once it is drained. */
    pthread_mutex_lock(&g_lock);
    probe_tls *t = &t_probe;
    if (t->ring && t->gen == atomic_load_explicit(&g_state, memory_order_relaxed))
        atomic_store_explicit(&t->ring->state, SEG_RING_FREE, memory_order_release);
    t->ring = NULL;
    t->gen = 0;
    pthread_mutex_unlock(&g_lock);
}

static void key_once(void)
{
    g_key_ok = pthread_key_create(&g_key, thread_exit) == 0;
}

/* Claim a ring in sg for the calling thread; NULL when none is left. */
static seg_ring_hdr *claim_ring_locked(probe_seg *sg)
{
    seg_header *h = sg->h;
    uint32_t n = atomic_load_explicit(&h->rings_used, memory_order_relaxed);
    /* Reuse a ring whose thread exited and whose events were all read. */
    for (uint32_t i = 0; i < n; i++) {
        seg_ring_hdr *r = seg_ring_at(h, h, i);
        uint32_t st = SEG_RING_FREE;
        if (atomic_load_explicit(&r->state, memory_order_acquire) != SEG_RING_FREE) continue;
        if (atomic_load_explicit(&r->tail, memory_order_acquire) !=
            atomic_load_explicit(&r->head, memory_order_relaxed))
            continue;
        if (atomic_compare_exchange_strong(&r->state, &st, SEG_RING_OWNED)) return r;
    }
    if (n >= h->max_rings) return NULL;
    uint64_t need = h->rings_off + (uint64_t)(n + 1) * h->ring_stride;
    if (need > sg->file_len) {
        /* Grown before rings_used says the ring exists (see segment.h), with
         * its blocks reserved: no space means no ring (the thread's events
         * are counted as dropped), never a SIGBUS in the training process. */
        if (sg->fd < 0) return NULL;
        if ((sg->shm && !shm_room(sg->fd, need - sg->file_len)) ||
            posix_fallocate(sg->fd, (off_t)sg->file_len, (off_t)(need - sg->file_len)) != 0) {
            atomic_store_explicit(&h->noroom, 1, memory_order_relaxed);
            return NULL;
        }
        sg->file_len = need;
    }
    atomic_store_explicit(&h->rings_used, n + 1, memory_order_release);
    seg_ring_hdr *r = seg_ring_at(h, h, n);
    atomic_store_explicit(&r->state, SEG_RING_OWNED, memory_order_relaxed);
    return r;
}

/* No room for a segment (run dir's file system full): the marker instead,
 * and a generation with no segment whose events are counted. */
static int noroom_begin_locked(const char *run_dir)
{
    char where[PATH_MAX], name[64];
    int dfd = seg_place(run_dir, 0, where, sizeof(where));
    if (dfd < 0) return dfd;
    snprintf(name, sizeof(name), "noroom-%d%s%s", (int)getpid(), g_seg_tag[0] ? "." : "",
             g_seg_tag);
    unlinkat(dfd, name, 0); /* an earlier attach's, or a planted link: never followed */
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int rc = fd < 0 ? err_from_errno(errno) : 0;
    close(dfd);
    if (rc) return rc;
    /* An earlier marker's fd is never closed here: a thread may be about to
     * ftruncate it, and a reused fd number would be someone else's file. */
    atomic_store_explicit(&g_noroom_fd, fd, memory_order_relaxed);
    atomic_store_explicit(&g_noroom_hdr.drops_noring, 0, memory_order_relaxed);
    atomic_store_explicit(&g_noroom_hdr.noroom, 1, memory_order_relaxed);
    if (++g_gen < PROBE_GEN0) g_gen = PROBE_GEN0;
    atomic_store_explicit(&g_state, g_gen, memory_order_release);
    return 0;
}

/* The pending run dir's segment, made now: an unusable run dir leaves the
 * probe off, silently; a full one leaves it counting what it cannot record
 * (segment.h). */
static void attach_pending_locked(void)
{
    int rc = attach_locked(g_run_dir);
    if (rc != 0 && !(rc == TPF_ENOSPC && noroom_begin_locked(g_run_dir) == 0)) {
        atomic_store_explicit(&g_state, 0, memory_order_release);
        g_run_dir_pub[0] = 0;
    }
}

/* First event of a thread in this generation (or the process's first
 * event with a pending run dir). Returns 1 when t_probe is usable. */
static __attribute__((noinline)) int slow_path(uint32_t st)
{
    probe_tls *t = &t_probe;
    if (st != PROBE_PENDING && t->noring_gen == st) {
        /* Counted without the lock: this thread found no ring before. */
        uint64_t n =
            atomic_fetch_add_explicit(&t->noring_hdr->drops_noring, 1, memory_order_relaxed) + 1;
        if (t->noring_hdr == &g_noroom_hdr) noroom_publish(n, 0);
        return 0;
    }
    int ok = 0;
    pthread_mutex_lock(&g_lock);
    st = atomic_load_explicit(&g_state, memory_order_relaxed);
    if (st == PROBE_PENDING) {
        attach_pending_locked();
        st = atomic_load_explicit(&g_state, memory_order_relaxed);
    }
    if (st >= PROBE_GEN0 && !g_seg.h && atomic_load_explicit(&g_noroom_fd, memory_order_relaxed) >= 0) {
        t->noring_gen = st;
        t->noring_hdr = &g_noroom_hdr;
        noroom_publish(
            atomic_fetch_add_explicit(&g_noroom_hdr.drops_noring, 1, memory_order_relaxed) + 1, 0);
    }
    if (st >= PROBE_GEN0 && g_seg.h) {
        seg_ring_hdr *r = claim_ring_locked(&g_seg);
        if (!r) {
            t->noring_gen = st;
            t->noring_hdr = g_seg.h;
            atomic_fetch_add_explicit(&g_seg.h->drops_noring, 1, memory_order_relaxed);
        } else {
            atomic_store_explicit(&r->tid, probe_gettid(), memory_order_relaxed);
            t->ring = r;
            t->recs = seg_ring_recs(r);
            t->mask = g_seg.h->ring_events - 1;
            t->head = atomic_load_explicit(&r->head, memory_order_relaxed);
            t->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
            t->drops = atomic_load_explicit(&r->drops, memory_order_relaxed);
            t->gen = st;
            pthread_once(&g_key_once, key_once);
            if (g_key_ok) pthread_setspecific(g_key, t);
            ok = 1;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return ok;
}

/* One record into the calling thread's ring (ts in the segment's clock). */
static inline __attribute__((always_inline)) void emit_at(uint32_t st, uint64_t ts, uint32_t kind,
                                                          uint32_t name, uint64_t a, uint64_t b)
{
    probe_tls *t = &t_probe;
    if (__builtin_expect(t->gen != st, 0) && !slow_path(st)) return;
    uint64_t h = t->head;
    if (__builtin_expect(h - t->tail_cache > t->mask, 0)) {
        t->tail_cache = atomic_load_explicit(&t->ring->tail, memory_order_acquire);
        if (h - t->tail_cache > t->mask) {
            atomic_store_explicit(&t->ring->drops, ++t->drops, memory_order_relaxed);
            return;
        }
    }
    seg_rec *r = &t->recs[h & t->mask];
    r->ts = ts ? ts : g_clock_tsc ? clk_tsc() : clk_mono_ns();
    r->kind = kind;
    r->name = name;
    r->a = a;
    r->b = b;
    t->head = h + 1;
    atomic_store_explicit(&t->ring->head, h + 1, memory_order_release);
}

/* Out of line so that the public functions' off path is load, test, return
 * (no register saves); the on path reaches here by a tail jump. */
static __attribute__((noinline)) void emit(uint32_t st, uint32_t kind, uint32_t name, uint64_t a,
                                           uint64_t b)
{
    emit_at(st, 0, kind, name, a, b);
}

void probe_set_seg_tag(const char *tag)
{
    pthread_mutex_lock(&g_lock);
    snprintf(g_seg_tag, sizeof(g_seg_tag), "%s", tag ? tag : "");
    pthread_mutex_unlock(&g_lock);
}

int probe_emit_record(uint64_t ts, uint32_t kind, uint32_t name, uint64_t a, uint64_t b)
{
    uint32_t st = atomic_load_explicit(&g_state, memory_order_relaxed);
    if (st == 0) return 0;
    if (ts == 0) ts = 1; /* 0 means "now" to emit_at */
    emit_at(st, ts, kind, name, a, b);
    return 1;
}

/* The off check: the one branch a disabled probe costs. */
#define PROBE_STATE_OR_RETURN(st)                                                                  \
    uint32_t st = atomic_load_explicit(&g_state, memory_order_relaxed);                            \
    if (__builtin_expect(st == 0, 1)) return

/* The CUPTI injection library's step hook (gpu/cupti_inject.c: CUDA events
 * at the step boundaries, and the kernel-detail windows), once CUDA loaded it
 * into this process. Looked up at steps 1, 2, 4, 8... (dlopen RTLD_NOLOAD
 * takes the loader's lock: never on every step) until found or 2^20 steps;
 * a process not under a GPU trace (no CUDA_INJECTION64_PATH) never looks. */
typedef void (*gpu_step_fn)(int end);
static _Atomic(gpu_step_fn) g_gpu_step;
static _Atomic uint64_t g_gpu_seen, g_gpu_next = 1; /* steps; the step of the next look */
static _Atomic int g_gpu_never;                     /* no hook will come: stop looking */

static __attribute__((noinline)) void gpu_step_look(int end)
{
    uint64_t seen = atomic_fetch_add_explicit(&g_gpu_seen, 1, memory_order_relaxed) + 1;
    if (seen < atomic_load_explicit(&g_gpu_next, memory_order_relaxed)) return;
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    void *h = inj && *inj ? dlopen(inj, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    gpu_step_fn f = NULL;
    if (h) *(void **)&f = dlsym(h, "trainperf_gpu_step");
    if (h) dlclose(h); /* NOLOAD took a reference: the library stays, CUDA holds it */
    if (f) {
        atomic_store_explicit(&g_gpu_step, f, memory_order_release);
        f(end);
    } else if (!inj || !*inj || seen >= (1u << 20)) {
        atomic_store_explicit(&g_gpu_never, 1, memory_order_relaxed);
    } else {
        atomic_store_explicit(&g_gpu_next, seen * 2, memory_order_relaxed);
    }
}

static inline void gpu_step(int end)
{
    gpu_step_fn f = atomic_load_explicit(&g_gpu_step, memory_order_acquire);
    if (__builtin_expect(f != NULL, 1))
        f(end);
    else if (!atomic_load_explicit(&g_gpu_never, memory_order_relaxed))
        gpu_step_look(end);
}

void tpf_step_begin(void)
{
    PROBE_STATE_OR_RETURN(st);
    emit(st, SEG_EV_STEP_BEGIN, 0, 0, 0);
    gpu_step(0);
}

void tpf_step_end(uint64_t samples, uint64_t tokens)
{
    PROBE_STATE_OR_RETURN(st);
    emit(st, SEG_EV_STEP_END, 0, samples, tokens);
    gpu_step(1);
}

void tpf_range_push(tpf_name name)
{
    PROBE_STATE_OR_RETURN(st);
    emit(st, SEG_EV_PUSH, name, 0, 0);
}

void tpf_range_pop(void)
{
    PROBE_STATE_OR_RETURN(st);
    emit(st, SEG_EV_POP, 0, 0, 0);
}

void tpf_counter(tpf_name name, double value)
{
    PROBE_STATE_OR_RETURN(st);
    uint64_t bits;
    memcpy(&bits, &value, sizeof(bits));
    emit(st, SEG_EV_COUNTER, name, bits, 0);
}

void tpf_mark(tpf_name name)
{
    PROBE_STATE_OR_RETURN(st);
    emit(st, SEG_EV_MARK, name, 0, 0);
}

void tpf_loop_end(int why)
{
    if (why != TPF_LOOP_DONE && why != TPF_LOOP_EXIT) return;
    PROBE_STATE_OR_RETURN(st);
    emit(st, SEG_EV_MARK, why == TPF_LOOP_EXIT ? SEG_NAME_EXIT : SEG_NAME_LOOP_END, 0, 0);
}

/* A pending run dir (environment, forked child) is attached now rather
 * than at the first event, so the answer is true to what events will do. */
static void resolve_pending(void)
{
    if (atomic_load_explicit(&g_state, memory_order_acquire) != PROBE_PENDING) return;
    pthread_mutex_lock(&g_lock);
    if (atomic_load_explicit(&g_state, memory_order_relaxed) == PROBE_PENDING)
        attach_pending_locked();
    pthread_mutex_unlock(&g_lock);
}

int tpf_attached(void)
{
    resolve_pending();
    return atomic_load_explicit(&g_state, memory_order_acquire) >= PROBE_GEN0;
}

uint64_t tpf_dropped(void)
{
    pthread_mutex_lock(&g_lock);
    uint64_t d = g_dropped_before + (g_seg.h ? seg_drops(g_seg.h) : 0) + noroom_count();
    pthread_mutex_unlock(&g_lock);
    return d;
}

int tpf_set_rank(int rank, int local_rank, int world_size)
{
    /* -1 is "unknown" for the other two; below it, or a rank past the world,
     * is a caller's mistake that would put the steps under a rank no job has */
    if (rank < 0 || local_rank < -1 || world_size < -1 || world_size == 0 ||
        (world_size > 0 && rank >= world_size))
        return TPF_EINVAL;
    pthread_mutex_lock(&g_lock);
    g_rank_set[0] = rank;
    g_rank_set[1] = local_rank >= 0 ? local_rank : -1;
    g_rank_set[2] = world_size > 0 ? world_size : -1;
    if (g_seg.h) {
        /* the collector reads these at each drain (seg_reader_rank); the
         * rank is stored last */
        if (g_rank_set[1] >= 0)
            __atomic_store_n(&g_seg.h->local_rank, g_rank_set[1], __ATOMIC_RELAXED);
        if (g_rank_set[2] >= 0)
            __atomic_store_n(&g_seg.h->world_size, g_rank_set[2], __ATOMIC_RELAXED);
        __atomic_store_n(&g_seg.h->rank, rank, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_lock);
    /* where in this thread's events the rank begins */
    tpf_mark(SEG_NAME_RANK_SET);
    return 0;
}

const char *tpf_run_dir(void)
{
    /* g_run_dir_pub only changes at attach/detach, which the caller
     * sequences (embedded mode: tpf_start/tpf_stop). */
    return tpf_attached() && g_run_dir_pub[0] ? g_run_dir_pub : NULL;
}

/* ---- fork ---- */

static void atfork_prepare(void)
{
    pthread_mutex_lock(&g_lock);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&g_lock);
}

static void atfork_child(void)
{
    /* Only this thread exists in the child. Forget the parent's rings and
     * mappings; with a run dir known, the child makes its own segment on its
     * first event (names carried over: ids stay valid). */
    memset(&t_probe, 0, sizeof(t_probe));
    /* CUDA cannot be used in a child forked after it started: no events */
    atomic_store_explicit(&g_gpu_step, NULL, memory_order_relaxed);
    atomic_store_explicit(&g_gpu_never, 1, memory_order_relaxed);
    uint32_t st = atomic_load_explicit(&g_state, memory_order_relaxed);
    if (g_seg.h) {
        munmap(g_seg.base, g_seg.size);
        if (g_seg.fd >= 0) close(g_seg.fd);
        memset(&g_seg, 0, sizeof(g_seg));
        g_seg.fd = -1;
    }
    for (int i = 0; i < g_nretired; i++)
        munmap(g_retired[i].base, g_retired[i].size);
    g_nretired = 0;
    g_dropped_before = 0;
    g_run_dir_pub[0] = 0;
    /* The parent's marker: its count is the parent's (one thread here: safe
     * to close). The child makes its own on its first event. */
    int nfd = atomic_exchange_explicit(&g_noroom_fd, -1, memory_order_relaxed);
    if (nfd >= 0) close(nfd);
    atomic_store_explicit(&g_noroom_hdr.drops_noring, 0, memory_order_relaxed);
    atomic_store_explicit(&g_state, st != 0 && g_run_dir[0] ? PROBE_PENDING : 0,
                          memory_order_relaxed);
    /* atfork_prepare locked it in this very thread. */
    pthread_mutex_unlock(&g_lock);
}

/* A process without room for its segment leaves its exact count at a
 * normal exit (the marker had it at powers of two and every 1024). */
__attribute__((destructor)) static void probe_fini(void)
{
    noroom_final();
}

/* Only reads the environment: no file is made in a process that never
 * emits an event, and the hot path keeps a single off check (no "env not
 * looked at yet" state). */
__attribute__((constructor)) static void probe_init(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    const char *dir = getenv("TRAINPERF_RUN_DIR");
    if (!dir || !*dir || strlen(dir) >= sizeof(g_run_dir) - 32) return;
    memcpy(g_run_dir, dir, strlen(dir) + 1);
    /* Set by `trainperf run` beside TRAINPERF_RUN_DIR (record/segdir.h). */
    const char *sd = getenv("TRAINPERF_SEG_DIR");
    if (sd && *sd && strlen(sd) < sizeof(g_seg_dir) - 32) memcpy(g_seg_dir, sd, strlen(sd) + 1);
    atomic_store_explicit(&g_state, PROBE_PENDING, memory_order_release);
}
