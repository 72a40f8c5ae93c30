/* The procfs source: system CPU/memory/PSI/disk/net and the watched process tree.
 *
 * Cost matters (it runs beside someone's training job every second), so:
 * - system files are opened once and re-read with pread(); /proc regenerates
 *   the text on every read from offset 0;
 * - each followed process keeps its /proc/PID/stat and /proc/PID/io open too
 *   (within an fd budget): one pread per file per sample, and a held fd fails
 *   with ESRCH once that very process is gone, so a reused pid never inherits
 *   the old process's counters;
 * - parsers are hand-written single passes (no stdio, no sscanf);
 * - no allocation per sample once the tables have grown to the system's size.
 *
 * Finding the tree. /proc/PID/task/TID/children needs CONFIG_PROC_CHILDREN
 * and costs, per sample, a directory listing plus one open/read/close per
 * *thread* of every member (PyTorch processes have dozens of threads). The
 * parent pid in /proc/PID/stat works everywhere; we use it incrementally: one
 * getdents64 pass over /proc per sample (no file opened) and a stat read only
 * for pids not seen before. Measured by bench/bench_procfs.c on the dev box
 * (122 pids, a 32-process tree of single-threaded processes): listing 65 us,
 * children walk 341 us, re-reading every /proc/PID/stat 1143 us; the listing
 * grows with the system's process count, the walk with the tree's threads,
 * so the listing wins by more for real training trees. A process outside the tree cannot
 * later join it (reparenting only moves a process to an ancestor subreaper or
 * init), so known outsiders are not re-read; every FORGET_EVERY samples they
 * are forgotten anyway, so a pid reused within one interval is caught later.
 * bench/bench_procfs.c measures the alternatives (full rescan, children files).
 *
 * Members stay members while alive, even when their parent exits and they are
 * reparented out of the root's subtree (orphaned DataLoader workers still cost
 * the run). Zombies are not counted: they use no CPU or memory.
 *
 * Known gaps: CPU a process used between the last sample and its exit goes
 * with it (its counters vanish; we never guess); a process whose parent exits
 * before we first see it is reparented away and not followed. */
#include "collect/procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trainperf.h"
#include "util/err.h"

#define FORGET_EVERY 64
#define SYSBUF_START (64 * 1024)
#define SYSBUF_MAX (8 * 1024 * 1024)
#define HASH_MIN_SLOTS 1024
#define HASH_MAX_SLOTS (1u << 18)
#define PENDING_MAX (1 << 17)
#define MAX_DISKS 256
#define MAX_NETS 256
#define CHAIN_MAX 64

enum { SF_STAT, SF_MEMINFO, SF_PSI_CPU, SF_PSI_MEM, SF_PSI_IO, SF_DISK, SF_NET, SF_N };

static const char *const sf_path[SF_N] = {
    "/proc/stat",        "/proc/meminfo",   "/proc/pressure/cpu", "/proc/pressure/memory",
    "/proc/pressure/io", "/proc/diskstats", "/proc/net/dev",
};
/* Files whose text comes from one seq_file show() call: one read returns all
 * of it when the buffer is larger, so a short read means EOF (saves a syscall).
 * diskstats and net/dev are record-by-record and need reading to 0. */
static const uint8_t sf_single[SF_N] = {1, 1, 1, 1, 1, 0, 0};

/* Hash entry kinds. */
enum { K_EMPTY = 0, K_NEW, K_PENDING, K_OUT, K_MEMBER, K_ZOMBIE, K_DEAD };

typedef struct pent {
    pid_t pid;
    pid_t ppid;
    uint32_t gen; /* sample generation that last saw it in /proc */
    int32_t idx;  /* member index, -1 when not detailed */
    uint8_t kind;
} pent;

typedef struct member {
    int stat_fd, io_fd; /* -1 when not held */
    uint8_t io_denied;  /* /proc/PID/io unreadable: do not retry */
    uint64_t starttime;
    uint64_t prev_ticks;
    uint64_t prev_rd, prev_wr;
    uint8_t prev_ok, prev_io_ok;
    double rd_delta, wr_delta; /* this sample, valid when io_delta_ok */
    uint8_t io_delta_ok;
} member;

typedef struct disk_dev {
    unsigned major, minor;
    uint8_t include, have;
    uint32_t gen;
    uint64_t rd, wr;
} disk_dev;

typedef struct net_dev {
    char name[32];
    uint8_t have;
    uint32_t gen;
    uint64_t rx, tx;
} net_dev;

typedef struct procfs_state {
    char root[PATH_MAX / 4];
    pid_t root_pid;
    long hz;
    long page;
    char err[256];

    int sf_fd[SF_N];
    char *sysbuf;
    size_t sysbuf_cap;
    int proc_dir; /* <root>/proc, for getdents64 */
    int have_sys_block;

    uint64_t prev_mono_ns, prev_boot_ticks;
    uint32_t gen;
    uint64_t nsamples;

    /* system previous readings */
    int ncpu;
    procfs_cpu_times prev_all, cur_all;
    procfs_cpu_times *prev_cores, *cur_cores; /* FRAME_MAX_CPUS each */
    procfs_psi prev_psi[3];
    uint8_t prev_psi_ok[3];
    uint8_t disk_prev_ok, net_prev_ok; /* the file was read at the previous sample */
    disk_dev disks[MAX_DISKS];
    int ndisks;
    net_dev nets[MAX_NETS];
    int nnets;

    /* pid table: open addressing, linear probing */
    pent *tab, *tab_alt;
    uint32_t nslots, nused;
    uint32_t touched; /* entries marked with the current gen */

    pid_t *pending;
    int npending, pending_cap;

    /* members: three parallel arrays, compact (swap-remove) */
    procfs_proc *pub;
    member *priv;
    pid_t *pids;
    int nmem, mem_cap;
    int overflow;
    int fds_held, fd_budget;
} procfs_state;

/* ---------------------------------------------------------------- parsing */

static const char *skip_blank(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/* Unsigned decimal after optional blanks; saturates instead of wrapping. */
static int parse_u64(const char **pp, const char *e, uint64_t *out)
{
    const char *p = skip_blank(*pp, e);
    if (p >= e || *p < '0' || *p > '9') return TPF_EFORMAT;
    uint64_t v = 0;
    while (p < e && *p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
        p++;
    }
    *pp = p;
    *out = v;
    return 0;
}

static const char *skip_token(const char *p, const char *e)
{
    p = skip_blank(p, e);
    while (p < e && *p != ' ' && *p != '\t' && *p != '\n')
        p++;
    return p;
}

static const char *line_end(const char *p, const char *e)
{
    const char *nl = memchr(p, '\n', (size_t)(e - p));
    return nl ? nl : e;
}

int procfs_parse_pidstat(const char *s, size_t n, procfs_pidstat *out)
{
    if (!s || !out) return TPF_EINVAL;
    const char *p = s, *e = s + n;
    uint64_t v;
    memset(out, 0, sizeof(*out));
    if (parse_u64(&p, e, &v) != 0 || v > INT32_MAX) return TPF_EFORMAT;
    out->pid = (pid_t)v;
    const char *lp = memchr(p, '(', (size_t)(e - p));
    /* comm may contain ')' itself: the last one in the line closes it */
    const char *rp = memrchr(p, ')', (size_t)(e - p));
    if (!lp || !rp || rp < lp) return TPF_EFORMAT;
    size_t cl = (size_t)(rp - lp - 1);
    if (cl > sizeof(out->comm) - 1) cl = sizeof(out->comm) - 1;
    memcpy(out->comm, lp + 1, cl);
    out->comm[cl] = 0;
    p = skip_blank(rp + 1, e);
    if (p >= e) return TPF_EFORMAT;
    out->state = *p++;
    /* fields are numbered as in proc(5); state is 3 */
    for (int field = 4; field <= 24; field++) {
        switch (field) {
        case 4:
            if (parse_u64(&p, e, &v) != 0) return TPF_EFORMAT;
            out->ppid = (pid_t)v;
            break;
        case 14:
            if (parse_u64(&p, e, &out->utime) != 0) return TPF_EFORMAT;
            break;
        case 15:
            if (parse_u64(&p, e, &out->stime) != 0) return TPF_EFORMAT;
            break;
        case 20:
            if (parse_u64(&p, e, &v) != 0) return TPF_EFORMAT;
            out->threads = (long)v;
            break;
        case 22:
            if (parse_u64(&p, e, &out->starttime) != 0) return TPF_EFORMAT;
            break;
        case 24:
            if (parse_u64(&p, e, &out->rss_pages) != 0) return TPF_EFORMAT;
            break;
        default: {
            const char *q = skip_token(p, e);
            if (q == skip_blank(p, e)) return TPF_EFORMAT; /* field missing */
            p = q;
        }
        }
    }
    return 0;
}

/* Value of "key" at the start of a line in s (e.g. "read_bytes:"). */
static int find_key_u64(const char *s, const char *e, const char *key, size_t klen, uint64_t *out)
{
    const char *p = s;
    while (p < e) {
        const char *le = line_end(p, e);
        if ((size_t)(le - p) > klen && memcmp(p, key, klen) == 0) {
            const char *q = p + klen;
            return parse_u64(&q, le, out);
        }
        p = le + 1;
    }
    return TPF_EFORMAT;
}

int procfs_parse_io(const char *s, size_t n, uint64_t *read_bytes, uint64_t *write_bytes)
{
    if (!s || !read_bytes || !write_bytes) return TPF_EINVAL;
    if (find_key_u64(s, s + n, "read_bytes:", 11, read_bytes) != 0) return TPF_EFORMAT;
    if (find_key_u64(s, s + n, "write_bytes:", 12, write_bytes) != 0) return TPF_EFORMAT;
    return 0;
}

int procfs_parse_stat(const char *s, size_t n, procfs_cpu_times *all, procfs_cpu_times *cores,
                      int maxcores)
{
    if (!s || !all) return TPF_EINVAL;
    const char *p = s, *e = s + n;
    memset(all, 0, sizeof(*all));
    if (cores && maxcores > 0) memset(cores, 0, sizeof(*cores) * (size_t)maxcores);
    while (p < e) {
        const char *le = line_end(p, e);
        /* the cpu lines come first; stop at the first other line */
        if (le - p < 4 || memcmp(p, "cpu", 3) != 0) break;
        const char *q = p + 3;
        procfs_cpu_times *dst = NULL;
        if (*q == ' ') {
            dst = all;
        } else {
            uint64_t idx;
            if (parse_u64(&q, le, &idx) != 0) return TPF_EFORMAT;
            if (cores && idx < (uint64_t)maxcores) dst = &cores[idx];
        }
        if (dst) {
            /* user nice system idle iowait irq softirq steal [guest guest_nice] */
            uint64_t f[8] = {0};
            int nf = 0;
            while (nf < 8 && parse_u64(&q, le, &f[nf]) == 0)
                nf++;
            if (nf < 4) return TPF_EFORMAT;
            uint64_t total = 0;
            for (int i = 0; i < nf; i++)
                total += f[i];
            dst->total = total;
            dst->iowait = f[4];
            dst->busy = total - f[3] - f[4];
            dst->ok = 1;
        }
        p = le + 1;
    }
    return all->ok ? 0 : TPF_EFORMAT;
}

int procfs_parse_meminfo(const char *s, size_t n, procfs_meminfo *out)
{
    if (!s || !out) return TPF_EINVAL;
    static const struct {
        const char *k;
        size_t len;
        size_t off;
    } keys[] = {
        {"MemTotal:", 9, offsetof(procfs_meminfo, total)},
        {"MemAvailable:", 13, offsetof(procfs_meminfo, available)},
        {"SwapTotal:", 10, offsetof(procfs_meminfo, swap_total)},
        {"SwapFree:", 9, offsetof(procfs_meminfo, swap_free)},
    };
    unsigned found = 0;
    const char *p = s, *e = s + n;
    memset(out, 0, sizeof(*out));
    while (p < e && found != 0xfu) {
        const char *le = line_end(p, e);
        for (unsigned i = 0; i < 4; i++) {
            if ((size_t)(le - p) > keys[i].len && memcmp(p, keys[i].k, keys[i].len) == 0) {
                const char *q = p + keys[i].len;
                uint64_t v;
                if (parse_u64(&q, le, &v) != 0) return TPF_EFORMAT;
                q = skip_blank(q, le);
                if (le - q >= 2 && q[0] == 'k' && q[1] == 'B') v *= 1024;
                memcpy((char *)out + keys[i].off, &v, sizeof(v));
                found |= 1u << i;
                break;
            }
        }
        p = le + 1;
    }
    out->total_ok = (found & 1u) != 0;
    out->available_ok = (found & 2u) != 0;
    out->swap_ok = (found & 12u) == 12u;
    return out->total_ok ? 0 : TPF_EFORMAT;
}

int procfs_parse_psi(const char *s, size_t n, procfs_psi *out)
{
    if (!s || !out) return TPF_EINVAL;
    const char *p = s, *e = s + n;
    memset(out, 0, sizeof(*out));
    while (p < e) {
        const char *le = line_end(p, e);
        int some = (le - p >= 4 && memcmp(p, "some", 4) == 0);
        int full = (le - p >= 4 && memcmp(p, "full", 4) == 0);
        if (some || full) {
            const char *t = memmem(p, (size_t)(le - p), "total=", 6);
            if (!t) return TPF_EFORMAT;
            t += 6;
            uint64_t v;
            if (parse_u64(&t, le, &v) != 0) return TPF_EFORMAT;
            if (some) {
                out->some_us = v;
                out->some_ok = 1;
            } else {
                out->full_us = v;
                out->full_ok = 1;
            }
        }
        p = le + 1;
    }
    return out->some_ok ? 0 : TPF_EFORMAT;
}

static int copy_name(const char **pp, const char *e, char name[32])
{
    const char *p = skip_blank(*pp, e), *q = p;
    while (q < e && *q != ' ' && *q != '\t' && *q != '\n' && *q != ':')
        q++;
    size_t l = (size_t)(q - p);
    if (l == 0 || l > 31) return TPF_EFORMAT;
    memcpy(name, p, l);
    name[l] = 0;
    *pp = q;
    return 0;
}

int procfs_parse_diskstats_line(const char *s, size_t n, unsigned *major, unsigned *minor,
                                char name[32], uint64_t *rd_sectors, uint64_t *wr_sectors)
{
    if (!s || !major || !minor || !name || !rd_sectors || !wr_sectors) return TPF_EINVAL;
    const char *p = s, *e = s + n;
    uint64_t f[7], ma, mi;
    if (parse_u64(&p, e, &ma) != 0 || parse_u64(&p, e, &mi) != 0) return TPF_EFORMAT;
    if (copy_name(&p, e, name) != 0) return TPF_EFORMAT;
    /* reads, reads merged, sectors read, ms reading, writes, writes merged, sectors written */
    for (int i = 0; i < 7; i++)
        if (parse_u64(&p, e, &f[i]) != 0) return TPF_EFORMAT;
    *major = (unsigned)ma;
    *minor = (unsigned)mi;
    *rd_sectors = f[2];
    *wr_sectors = f[6];
    return 0;
}

int procfs_parse_netdev_line(const char *s, size_t n, char name[32], uint64_t *rx_bytes,
                             uint64_t *tx_bytes)
{
    if (!s || !name || !rx_bytes || !tx_bytes) return TPF_EINVAL;
    const char *p = s, *e = s + n;
    if (copy_name(&p, e, name) != 0) return TPF_EFORMAT;
    if (p >= e || *p != ':') return TPF_EFORMAT;
    p++;
    /* 8 receive columns (bytes first), then transmit bytes */
    uint64_t f[9];
    for (int i = 0; i < 9; i++)
        if (parse_u64(&p, e, &f[i]) != 0) return TPF_EFORMAT;
    *rx_bytes = f[0];
    *tx_bytes = f[8];
    return 0;
}

/* ------------------------------------------------------------------ I/O */

/* Read a whole /proc file from offset 0 into b (NUL-terminated). Returns the
 * length, -E2BIG when it did not fit, or -errno. */
static ssize_t read_fd(int fd, char *b, size_t cap, int single)
{
    size_t n = 0;
    for (;;) {
        ssize_t r = pread(fd, b + n, cap - 1 - n, (off_t)n);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n >= cap - 1) return -E2BIG;
        if (single) break;
    }
    b[n] = 0;
    return (ssize_t)n;
}

/* A system file into the growable sysbuf; grows only while warming up. */
static ssize_t read_sys(procfs_state *s, int which)
{
    for (;;) {
        ssize_t r = read_fd(s->sf_fd[which], s->sysbuf, s->sysbuf_cap, sf_single[which]);
        if (r != -E2BIG) return r;
        if (s->sysbuf_cap >= SYSBUF_MAX) return -E2BIG;
        char *nb = realloc(s->sysbuf, s->sysbuf_cap * 2);
        if (!nb) return -ENOMEM;
        s->sysbuf = nb;
        s->sysbuf_cap *= 2;
    }
}

/* <root>/proc/<pid>/<leaf> */
static int path_of(const procfs_state *s, char *out, size_t cap, pid_t pid, const char *leaf)
{
    int n = snprintf(out, cap, "%s/proc/%ld/%s", s->root, (long)pid, leaf);
    return (n < 0 || (size_t)n >= cap) ? TPF_ETOOBIG : 0;
}

static int open_ro(const char *path)
{
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* Read a small per-process file once: open, read, close. */
static ssize_t read_path_once(const char *path, char *b, size_t cap)
{
    int fd = open_ro(path);
    if (fd < 0) return -errno;
    ssize_t r = read_fd(fd, b, cap, 1);
    close(fd);
    return r;
}

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    if (clock_gettime(c, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ pid table */

static uint32_t hash_pid(pid_t pid)
{
    return (uint32_t)pid * 2654435761u;
}

static pent *tab_find(procfs_state *s, pid_t pid)
{
    uint32_t mask = s->nslots - 1;
    for (uint32_t i = hash_pid(pid) & mask;; i = (i + 1) & mask) {
        pent *e = &s->tab[i];
        if (e->kind == K_EMPTY) return NULL;
        if (e->pid == pid) return e;
    }
}

static pent *tab_put(pent *tab, uint32_t nslots, const pent *src)
{
    uint32_t mask = nslots - 1;
    for (uint32_t i = hash_pid(src->pid) & mask;; i = (i + 1) & mask) {
        if (tab[i].kind == K_EMPTY) {
            tab[i] = *src;
            return &tab[i];
        }
    }
}

/* Rebuild into tab_alt with nslots_new slots, dropping entries not seen in
 * this sample when drop_stale is set. Both tables are reallocated only
 * when the size changes. */
static int tab_rebuild(procfs_state *s, uint32_t nslots_new, int drop_stale)
{
    pent *alt = s->tab_alt;
    if (nslots_new != s->nslots || !alt) {
        alt = calloc(nslots_new, sizeof(pent));
        if (!alt) return TPF_ENOMEM;
    } else {
        memset(alt, 0, sizeof(pent) * nslots_new);
    }
    uint32_t used = 0;
    for (uint32_t i = 0; i < s->nslots; i++) {
        pent *e = &s->tab[i];
        if (e->kind == K_EMPTY) continue;
        if (drop_stale && e->gen != s->gen) continue;
        tab_put(alt, nslots_new, e); /* member indices stay valid */
        used++;
    }
    if (nslots_new != s->nslots) {
        free(s->tab);
        free(s->tab_alt);
        s->tab = alt;
        s->tab_alt = calloc(nslots_new, sizeof(pent)); /* may fail: made lazily later */
    } else {
        s->tab_alt = s->tab;
        s->tab = alt;
    }
    s->nslots = nslots_new;
    s->nused = used;
    return 0;
}

/* Insert pid (absent). Returns NULL when the table is at its cap. */
static pent *tab_insert(procfs_state *s, pid_t pid, uint8_t kind)
{
    if ((s->nused + 1) * 2 > s->nslots) {
        if (s->nslots >= HASH_MAX_SLOTS || tab_rebuild(s, s->nslots * 2, 0) != 0) return NULL;
    }
    pent e = {pid, 0, s->gen, -1, kind};
    s->nused++;
    s->touched++;
    return tab_put(s->tab, s->nslots, &e);
}

/* ------------------------------------------------------------ members */

/* Exited and not yet reaped. A leader that called pthread_exit() also shows
 * 'Z' while its other threads run on: that process is alive (threads > 1). */
static int is_dead(const procfs_pidstat *st)
{
    return st->state == 'X' || (st->state == 'Z' && st->threads <= 1);
}

static void member_release(procfs_state *s, int i)
{
    member *m = &s->priv[i];
    if (m->stat_fd >= 0) {
        close(m->stat_fd);
        s->fds_held--;
    }
    if (m->io_fd >= 0) {
        close(m->io_fd);
        s->fds_held--;
    }
    m->stat_fd = m->io_fd = -1;
}

/* Remove member i (swap with the last), fixing the moved entry's index. */
static void member_remove(procfs_state *s, int i)
{
    member_release(s, i);
    int last = s->nmem - 1;
    if (i != last) {
        s->pub[i] = s->pub[last];
        s->priv[i] = s->priv[last];
        s->pids[i] = s->pids[last];
        pent *e = tab_find(s, s->pids[i]);
        if (e) e->idx = i;
    }
    s->nmem--;
}

static int members_grow(procfs_state *s)
{
    if (s->nmem < s->mem_cap) return 0;
    if (s->mem_cap >= PROCFS_MAX_PROCS) return TPF_EFULL;
    int nc = s->mem_cap ? s->mem_cap * 2 : 64;
    if (nc > PROCFS_MAX_PROCS) nc = PROCFS_MAX_PROCS;
    procfs_proc *pub = realloc(s->pub, sizeof(*pub) * (size_t)nc);
    if (!pub) return TPF_ENOMEM;
    s->pub = pub;
    member *priv = realloc(s->priv, sizeof(*priv) * (size_t)nc);
    if (!priv) return TPF_ENOMEM;
    s->priv = priv;
    pid_t *pids = realloc(s->pids, sizeof(*pids) * (size_t)nc);
    if (!pids) return TPF_ENOMEM;
    s->pids = pids;
    s->mem_cap = nc;
    return 0;
}

/* Update member i from its files. Returns 0, or -1 when the process is gone
 * (exited, reaped, or a zombie). */
static int member_read(procfs_state *s, int i, double dt)
{
    member *m = &s->priv[i];
    procfs_proc *pp = &s->pub[i];
    char b[2048], path[PATH_MAX];
    ssize_t r;
    if (m->stat_fd >= 0) {
        r = read_fd(m->stat_fd, b, sizeof(b), 1);
    } else {
        if (path_of(s, path, sizeof(path), s->pids[i], "stat") != 0) return -1;
        r = read_path_once(path, b, sizeof(b));
    }
    procfs_pidstat st;
    if (r <= 0 || procfs_parse_pidstat(b, (size_t)r, &st) != 0) return -1;
    /* a path read may hit a new process that reused the pid */
    if (m->stat_fd < 0 && st.starttime != m->starttime) return -1;
    if (is_dead(&st)) return -1;

    pp->ppid = st.ppid;
    memcpy(pp->comm, st.comm, sizeof(pp->comm));
    pp->threads = (int)st.threads;
    fv_set(&pp->rss_bytes, (double)st.rss_pages * (double)s->page);
    uint64_t ticks = st.utime + st.stime;
    pp->cpu_pct.ok = 0;
    if (m->prev_ok && dt > 0 && ticks >= m->prev_ticks)
        fv_set(&pp->cpu_pct, (double)(ticks - m->prev_ticks) / (double)s->hz / dt * 100.0);
    m->prev_ticks = ticks;
    m->prev_ok = 1;

    pp->read_bytes.ok = pp->write_bytes.ok = 0;
    m->io_delta_ok = 0;
    if (!m->io_denied) {
        if (m->io_fd >= 0) {
            r = read_fd(m->io_fd, b, sizeof(b), 1);
        } else if (path_of(s, path, sizeof(path), s->pids[i], "io") == 0) {
            r = read_path_once(path, b, sizeof(b));
        } else {
            r = -ENAMETOOLONG;
        }
        uint64_t rd, wr;
        if (r > 0 && procfs_parse_io(b, (size_t)r, &rd, &wr) == 0) {
            fv_set(&pp->read_bytes, (double)rd);
            fv_set(&pp->write_bytes, (double)wr);
            if (m->prev_io_ok && dt > 0 && rd >= m->prev_rd && wr >= m->prev_wr) {
                m->rd_delta = (double)(rd - m->prev_rd);
                m->wr_delta = (double)(wr - m->prev_wr);
                m->io_delta_ok = 1;
            }
            m->prev_rd = rd;
            m->prev_wr = wr;
            m->prev_io_ok = 1;
        } else if (r == -EACCES || r == -EPERM) {
            m->io_denied = 1;
            if (m->io_fd >= 0) {
                close(m->io_fd);
                s->fds_held--;
                m->io_fd = -1;
            }
        }
    }
    return 0;
}

/* Follow e's process in detail (e is already K_MEMBER); beyond the cap it is
 * only counted. dt as for member_read (0 on the first sample). */
static void member_add(procfs_state *s, pent *e, double dt)
{
    if (members_grow(s) != 0) {
        e->idx = -1;
        s->overflow++;
        return;
    }
    int i = s->nmem;
    member *m = &s->priv[i];
    procfs_proc *pp = &s->pub[i];
    memset(m, 0, sizeof(*m));
    memset(pp, 0, sizeof(*pp));
    m->stat_fd = m->io_fd = -1;
    pp->pid = e->pid;
    s->pids[i] = e->pid;
    char path[PATH_MAX], b[2048];
    if (path_of(s, path, sizeof(path), e->pid, "stat") != 0) goto gone;
    int fd = open_ro(path);
    if (fd < 0) goto gone;
    ssize_t r = read_fd(fd, b, sizeof(b), 1);
    procfs_pidstat st;
    if (r <= 0 || procfs_parse_pidstat(b, (size_t)r, &st) != 0 || is_dead(&st)) {
        close(fd);
        goto gone;
    }
    m->starttime = st.starttime;
    if (s->fds_held + 2 <= s->fd_budget) {
        m->stat_fd = fd;
        s->fds_held++;
        if (path_of(s, path, sizeof(path), e->pid, "io") == 0) {
            m->io_fd = open_ro(path);
            if (m->io_fd >= 0)
                s->fds_held++;
            else if (errno == EACCES || errno == EPERM)
                m->io_denied = 1;
        }
    } else {
        close(fd);
    }
    /* Born since the previous sample: all its CPU and I/O happened in this
     * interval, so its counters' previous values are known to be 0. */
    if (dt > 0 && st.starttime >= s->prev_boot_ticks) {
        m->prev_ok = 1;
        m->prev_io_ok = 1;
    }
    s->nmem++;
    e->idx = i;
    if (member_read(s, i, dt) != 0) {
        member_remove(s, i);
        goto gone;
    }
    return;
gone:
    e->kind = K_DEAD;
    e->idx = -1;
}

/* ------------------------------------------------------------ tree scan */

static int pending_push(procfs_state *s, pid_t pid)
{
    if (s->npending == s->pending_cap) {
        if (s->pending_cap >= PENDING_MAX) return TPF_EFULL;
        int nc = s->pending_cap ? s->pending_cap * 2 : 256;
        pid_t *np = realloc(s->pending, sizeof(pid_t) * (size_t)nc);
        if (!np) return TPF_ENOMEM;
        s->pending = np;
        s->pending_cap = nc;
    }
    s->pending[s->npending++] = pid;
    return 0;
}

static int is_digits(const char *n)
{
    if (!*n) return 0;
    for (; *n; n++)
        if (*n < '0' || *n > '9') return 0;
    return 1;
}

/* One pass over /proc: mark known pids as seen, queue the others. */
static int scan_proc(procfs_state *s)
{
    char b[16384];
    if (lseek(s->proc_dir, 0, SEEK_SET) < 0) return err_from_errno(errno);
    for (;;) {
        ssize_t r = getdents64(s->proc_dir, b, sizeof(b));
        if (r < 0) {
            if (errno == EINTR) continue;
            return err_from_errno(errno);
        }
        if (r == 0) break;
        for (ssize_t off = 0; off < r;) {
            struct dirent64 *d = (struct dirent64 *)(void *)(b + off);
            off += d->d_reclen;
            if (!is_digits(d->d_name)) continue;
            long v = strtol(d->d_name, NULL, 10);
            if (v <= 0 || v > INT32_MAX) continue;
            pid_t pid = (pid_t)v;
            pent *e = tab_find(s, pid);
            if (e) {
                if (e->gen != s->gen) s->touched++;
                e->gen = s->gen;
                if (e->kind == K_DEAD || e->kind == K_NEW) {
                    /* a listed pid we saw die (a new process), or one left unread */
                    e->kind = K_NEW;
                    pending_push(s, pid);
                } else if (e->kind == K_MEMBER && e->idx < 0) {
                    s->overflow++;
                }
                continue;
            }
            if (tab_insert(s, pid, K_NEW) && pending_push(s, pid) != 0) {
                /* queue full: forget it so a later pass picks it up */
                e = tab_find(s, pid);
                if (e) {
                    e->gen = 0;
                    e->kind = K_DEAD;
                }
            }
        }
    }
    return 0;
}

/* Read the parent of each queued pid. */
static void read_pending(procfs_state *s)
{
    char b[2048], path[PATH_MAX];
    for (int i = 0; i < s->npending; i++) {
        pent *e = tab_find(s, s->pending[i]);
        if (!e || e->kind != K_NEW) continue;
        procfs_pidstat st;
        ssize_t r = -1;
        if (path_of(s, path, sizeof(path), e->pid, "stat") == 0)
            r = read_path_once(path, b, sizeof(b));
        if (r <= 0 || procfs_parse_pidstat(b, (size_t)r, &st) != 0) {
            e->kind = K_DEAD; /* gone already */
            e->gen = 0;
            continue;
        }
        e->ppid = st.ppid;
        e->kind = is_dead(&st) ? K_ZOMBIE : K_PENDING;
    }
}

/* Walk up from pid through undecided entries to a decided one (or the root)
 * and give the whole chain its verdict. Returns 1 when left undecided. */
static int classify_one(procfs_state *s, pid_t pid, pid_t *chain, double dt, int last_pass)
{
    int n = 0;
    uint8_t verdict = K_OUT;
    pid_t cur = pid;
    for (;;) {
        pent *c = tab_find(s, cur);
        /* a parent not listed, or that vanished while we read: retry later */
        if (!c || c->kind == K_DEAD || c->kind == K_NEW) {
            verdict = K_DEAD;
            break;
        }
        if (c->kind == K_MEMBER) {
            verdict = K_MEMBER;
            break;
        }
        if (c->kind != K_PENDING) {
            verdict = K_OUT;
            break;
        }
        if (c->pid == s->root_pid) {
            chain[n++] = cur;
            verdict = K_MEMBER;
            break;
        }
        if (n == CHAIN_MAX) {
            if (!last_pass) return 1;
            verdict = K_DEAD;
            break;
        }
        chain[n++] = cur;
        if (c->ppid <= 0) {
            verdict = K_OUT;
            break;
        }
        cur = c->ppid;
    }
    /* parents first, so member order follows the tree */
    for (int k = n - 1; k >= 0; k--) {
        pent *c = tab_find(s, chain[k]);
        if (!c) continue;
        if (verdict == K_DEAD) {
            c->kind = K_DEAD;
            c->gen = 0; /* read again next sample */
        } else if (verdict == K_MEMBER) {
            c->kind = K_MEMBER;
            member_add(s, c, dt);
        } else {
            c->kind = K_OUT;
        }
    }
    return 0;
}

/* Decide member or outsider for each queued pid by walking up its parents.
 * A chain deeper than CHAIN_MAX is left pending for another pass (its upper
 * part gets decided from its own queue entry); what is still undecided after
 * a few passes is read again next sample. */
static void classify_pending(procfs_state *s, double dt)
{
    pid_t chain[CHAIN_MAX];
    int left = 1;
    for (int pass = 0; pass < 4 && left; pass++) {
        left = 0;
        for (int i = 0; i < s->npending; i++) {
            pent *e = tab_find(s, s->pending[i]);
            if (!e || e->kind != K_PENDING) continue;
            left += classify_one(s, e->pid, chain, dt, pass == 3);
        }
    }
    s->npending = 0;
}

/* Drop entries /proc no longer lists, and periodically forget outsiders. */
static void sweep(procfs_state *s)
{
    int forget = s->nsamples % FORGET_EVERY == 0;
    if (forget) {
        for (uint32_t i = 0; i < s->nslots; i++)
            if (s->tab[i].kind == K_OUT || s->tab[i].kind == K_ZOMBIE) s->tab[i].kind = K_DEAD;
    }
    if (s->touched != s->nused) {
        uint32_t ns = s->nslots;
        while (ns > HASH_MIN_SLOTS && s->touched * 8 < ns)
            ns /= 2;
        tab_rebuild(s, ns, 1);
        /* member indices are unchanged by a rebuild */
    }
}

static void sample_tree(procfs_state *s, coll_frame *f, double dt)
{
    s->overflow = 0;
    s->touched = 0;
    if (scan_proc(s) != 0) {
        s->npending = 0;
        goto totals; /* keep following the known members */
    }
    /* known members: a member /proc no longer lists, or whose files fail, is gone */
    for (int i = s->nmem - 1; i >= 0; i--) {
        pent *e = tab_find(s, s->pids[i]);
        int listed = e && e->gen == s->gen;
        if (listed && member_read(s, i, dt) == 0) continue;
        member_remove(s, i);
        if (e) {
            e->idx = -1;
            e->kind = K_DEAD;
            /* listed but dead: the pid was reused, or it is a zombie */
            if (listed) {
                e->kind = K_NEW;
                pending_push(s, e->pid);
            }
        }
    }
    read_pending(s);
    classify_pending(s, dt);
    sweep(s);
totals:;
    double cpu = 0, rss = 0, rd = 0, wr = 0, threads = 0;
    int io_known = 0, cpu_known = 0;
    f->main_cpu_pct.ok = 0;
    for (int i = 0; i < s->nmem; i++) {
        const procfs_proc *pp = &s->pub[i];
        threads += pp->threads;
        if (pp->rss_bytes.ok) rss += pp->rss_bytes.v;
        if (pp->cpu_pct.ok) {
            cpu += pp->cpu_pct.v;
            cpu_known++;
        }
        if (s->priv[i].io_delta_ok) {
            rd += s->priv[i].rd_delta;
            wr += s->priv[i].wr_delta;
            io_known++;
        }
        if (pp->pid == s->root_pid) f->main_cpu_pct = pp->cpu_pct;
    }
    f->tree_procs = fv((double)(s->nmem + s->overflow));
    f->tree_threads.ok = f->tree_rss_bytes.ok = 0;
    f->tree_cpu_pct.ok = 0;
    f->tree_read_bps.ok = f->tree_write_bps.ok = 0;
    /* With no live process (the tree has exited) the tree's figures are
     * unknown, not 0: what it used after the last sample was not seen. */
    if (s->nmem > 0) {
        fv_set(&f->tree_threads, threads);
        fv_set(&f->tree_rss_bytes, rss);
    }
    if (dt > 0 && s->nmem > 0) {
        if (cpu_known) fv_set(&f->tree_cpu_pct, cpu);
        if (io_known) {
            fv_set(&f->tree_read_bps, rd / dt);
            fv_set(&f->tree_write_bps, wr / dt);
        }
    }
    f->tree_pids = s->pids;
    f->ntree = s->nmem;
}

/* ------------------------------------------------------------ system */

static double clamp_pct(double v)
{
    return v < 0 ? 0 : v > 100 ? 100 : v;
}

static void cpu_pct_of(const procfs_cpu_times *prev, const procfs_cpu_times *cur, fval *busy,
                       fval *iowait)
{
    busy->ok = 0;
    if (iowait) iowait->ok = 0;
    if (!prev->ok || !cur->ok || cur->total <= prev->total) return;
    double dtot = (double)(cur->total - prev->total);
    /* per-cpu idle/iowait can step backwards: clamp rather than go negative */
    fv_set(busy, clamp_pct(((double)cur->busy - (double)prev->busy) / dtot * 100.0));
    if (iowait)
        fv_set(iowait, clamp_pct(((double)cur->iowait - (double)prev->iowait) / dtot * 100.0));
}

static void sample_cpu(procfs_state *s, coll_frame *f)
{
    f->ncpu = s->ncpu;
    ssize_t r = s->sf_fd[SF_STAT] >= 0 ? read_sys(s, SF_STAT) : -1;
    if (r <= 0 ||
        procfs_parse_stat(s->sysbuf, (size_t)r, &s->cur_all, s->cur_cores, FRAME_MAX_CPUS) != 0) {
        s->cur_all.ok = 0;
        memset(s->cur_cores, 0, sizeof(*s->cur_cores) * FRAME_MAX_CPUS);
    }
    cpu_pct_of(&s->prev_all, &s->cur_all, &f->cpu_pct, &f->cpu_iowait_pct);
    for (int i = 0; i < s->ncpu; i++)
        cpu_pct_of(&s->prev_cores[i], &s->cur_cores[i], &f->cpu_core_pct[i], NULL);
    s->prev_all = s->cur_all;
    procfs_cpu_times *t = s->prev_cores;
    s->prev_cores = s->cur_cores;
    s->cur_cores = t;
}

static void sample_mem(procfs_state *s, coll_frame *f)
{
    procfs_meminfo mi;
    f->mem_total_bytes.ok = f->mem_used_bytes.ok = f->mem_available_bytes.ok = 0;
    f->swap_used_bytes.ok = 0;
    ssize_t r = s->sf_fd[SF_MEMINFO] >= 0 ? read_sys(s, SF_MEMINFO) : -1;
    if (r <= 0 || procfs_parse_meminfo(s->sysbuf, (size_t)r, &mi) != 0) return;
    fv_set(&f->mem_total_bytes, (double)mi.total);
    if (mi.available_ok) {
        fv_set(&f->mem_available_bytes, (double)mi.available);
        fv_set(&f->mem_used_bytes, (double)mi.total - (double)mi.available);
    }
    if (mi.swap_ok) fv_set(&f->swap_used_bytes, (double)mi.swap_total - (double)mi.swap_free);
}

static void sample_psi(procfs_state *s, coll_frame *f, double dt)
{
    fval *some[3] = {&f->psi_cpu_some_pct, &f->psi_mem_some_pct, &f->psi_io_some_pct};
    fval *full[3] = {NULL, &f->psi_mem_full_pct, &f->psi_io_full_pct};
    for (int k = 0; k < 3; k++) {
        some[k]->ok = 0;
        if (full[k]) full[k]->ok = 0;
        int which = SF_PSI_CPU + k;
        if (s->sf_fd[which] < 0) continue;
        procfs_psi cur;
        ssize_t r = read_sys(s, which);
        if (r < 0 && r != -EINTR && r != -EAGAIN) {
            /* e.g. EOPNOTSUPP when booted with psi=0: stop trying */
            close(s->sf_fd[which]);
            s->sf_fd[which] = -1;
            s->prev_psi_ok[k] = 0;
            continue;
        }
        if (r <= 0 || procfs_parse_psi(s->sysbuf, (size_t)r, &cur) != 0) {
            s->prev_psi_ok[k] = 0;
            continue;
        }
        if (s->prev_psi_ok[k] && dt > 0) {
            procfs_psi *p = &s->prev_psi[k];
            if (cur.some_ok && p->some_ok && cur.some_us >= p->some_us)
                fv_set(some[k], clamp_pct((double)(cur.some_us - p->some_us) / (dt * 1e6) * 100.0));
            if (full[k] && cur.full_ok && p->full_ok && cur.full_us >= p->full_us)
                fv_set(full[k], clamp_pct((double)(cur.full_us - p->full_us) / (dt * 1e6) * 100.0));
        }
        s->prev_psi[k] = cur;
        s->prev_psi_ok[k] = 1;
    }
}

static int has_prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Whole physical devices only. Partitions would count their disk twice;
 * dm-* and md* stack on physical disks (their I/O is counted there); loop,
 * ram and zram are not storage. */
static int disk_wanted(const procfs_state *s, const char *name)
{
    if (has_prefix(name, "loop") || has_prefix(name, "ram") || has_prefix(name, "zram") ||
        has_prefix(name, "dm-") || has_prefix(name, "md"))
        return 0;
    if (s->have_sys_block) {
        /* whole disks are exactly the entries of /sys/block ('/' becomes '!') */
        char path[PATH_MAX], nm[32];
        size_t l = strlen(name);
        if (l >= sizeof(nm)) return 0;
        for (size_t i = 0; i <= l; i++)
            nm[i] = name[i] == '/' ? '!' : name[i];
        int n = snprintf(path, sizeof(path), "%s/sys/block/%s", s->root, nm);
        if (n < 0 || (size_t)n >= sizeof(path)) return 0;
        return access(path, F_OK) == 0;
    }
    /* no sysfs (containers, tests): guess from the name */
    size_t l = strlen(name);
    size_t d = l;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9')
        d--;
    if (d == l) return 1; /* sda, vda */
    /* nvme0n1 / mmcblk0 end in digits but are whole disks; their partitions
     * carry a 'p' (nvme0n1p1), sdX partitions are sdX + digits */
    if (d > 0 && name[d - 1] == 'p' && d >= 2 && name[d - 2] >= '0' && name[d - 2] <= '9') return 0;
    if (has_prefix(name, "sd") || has_prefix(name, "vd") || has_prefix(name, "hd") ||
        has_prefix(name, "xvd"))
        return 0;
    return 1;
}

static void sample_disk(procfs_state *s, coll_frame *f, double dt)
{
    f->disk_read_bps.ok = f->disk_write_bps.ok = 0;
    ssize_t r = s->sf_fd[SF_DISK] >= 0 ? read_sys(s, SF_DISK) : -1;
    int prev_ok = s->disk_prev_ok;
    s->disk_prev_ok = r >= 0;
    if (r < 0) return;
    const char *p = s->sysbuf, *e = s->sysbuf + r;
    double rd = 0, wr = 0;
    while (p < e) {
        const char *le = line_end(p, e);
        unsigned ma, mi;
        char name[32];
        uint64_t rs, ws;
        if (procfs_parse_diskstats_line(p, (size_t)(le - p), &ma, &mi, name, &rs, &ws) == 0) {
            disk_dev *d = NULL;
            for (int i = 0; i < s->ndisks; i++)
                if (s->disks[i].major == ma && s->disks[i].minor == mi) {
                    d = &s->disks[i];
                    break;
                }
            if (!d && s->ndisks < MAX_DISKS) {
                d = &s->disks[s->ndisks++];
                memset(d, 0, sizeof(*d));
                d->major = ma;
                d->minor = mi;
                d->include = (uint8_t)disk_wanted(s, name);
            }
            if (d && d->include) {
                /* diskstats counts 512-byte sectors whatever the device's block size */
                if (d->have && d->gen + 1 == s->gen && rs >= d->rd && ws >= d->wr) {
                    rd += (double)(rs - d->rd) * 512.0;
                    wr += (double)(ws - d->wr) * 512.0;
                }
                d->rd = rs;
                d->wr = ws;
                d->have = 1;
                d->gen = s->gen;
            }
        }
        p = le + 1;
    }
    if (dt > 0 && prev_ok) {
        fv_set(&f->disk_read_bps, rd / dt);
        fv_set(&f->disk_write_bps, wr / dt);
    }
}

static void sample_net(procfs_state *s, coll_frame *f, double dt)
{
    f->net_rx_bps.ok = f->net_tx_bps.ok = 0;
    ssize_t r = s->sf_fd[SF_NET] >= 0 ? read_sys(s, SF_NET) : -1;
    int prev_ok = s->net_prev_ok;
    s->net_prev_ok = r >= 0;
    if (r < 0) return;
    const char *p = s->sysbuf, *e = s->sysbuf + r;
    double rx = 0, tx = 0;
    while (p < e) {
        const char *le = line_end(p, e);
        char name[32];
        uint64_t rb, tb;
        if (procfs_parse_netdev_line(p, (size_t)(le - p), name, &rb, &tb) == 0 &&
            strcmp(name, "lo") != 0) {
            net_dev *d = NULL;
            for (int i = 0; i < s->nnets; i++)
                if (strcmp(s->nets[i].name, name) == 0) {
                    d = &s->nets[i];
                    break;
                }
            if (!d && s->nnets < MAX_NETS) {
                d = &s->nets[s->nnets++];
                memset(d, 0, sizeof(*d));
                memcpy(d->name, name, sizeof(d->name));
            }
            if (d) {
                if (d->have && d->gen + 1 == s->gen && rb >= d->rx && tb >= d->tx) {
                    rx += (double)(rb - d->rx);
                    tx += (double)(tb - d->tx);
                }
                d->rx = rb;
                d->tx = tb;
                d->have = 1;
                d->gen = s->gen;
            }
        }
        p = le + 1;
    }
    if (dt > 0 && prev_ok) {
        fv_set(&f->net_rx_bps, rx / dt);
        fv_set(&f->net_tx_bps, tx / dt);
    }
}

/* ------------------------------------------------------------ the source */

/* Why the last init failed (init runs on one thread, before sampling). */
static char init_err[256];

/* Close and free everything but the struct itself (and its err text). */
static void state_release(procfs_state *s)
{
    for (int i = 0; i < s->nmem; i++)
        member_release(s, i);
    s->nmem = 0;
    for (int i = 0; i < SF_N; i++) {
        if (s->sf_fd[i] >= 0) close(s->sf_fd[i]);
        s->sf_fd[i] = -1;
    }
    if (s->proc_dir >= 0) close(s->proc_dir);
    s->proc_dir = -1;
    void **owned[] = {(void **)&s->sysbuf, (void **)&s->prev_cores, (void **)&s->cur_cores,
                      (void **)&s->tab,    (void **)&s->tab_alt,    (void **)&s->pending,
                      (void **)&s->pub,    (void **)&s->priv,       (void **)&s->pids};
    for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) {
        free(*owned[i]);
        *owned[i] = NULL;
    }
}

static void state_free(procfs_state *s)
{
    if (!s) return;
    state_release(s);
    free(s);
}

int procfs_init_at(void **state, const src_ctx *ctx, const char *root)
{
    if (!state || !ctx) return TPF_EINVAL;
    *state = NULL;
    procfs_state *s = calloc(1, sizeof(*s));
    if (!s) return TPF_ENOMEM;
    for (int i = 0; i < SF_N; i++)
        s->sf_fd[i] = -1;
    s->proc_dir = -1;
    int rc = TPF_ENOMEM;
    if (root && *root) {
        size_t l = strlen(root);
        if (l >= sizeof(s->root)) {
            snprintf(s->err, sizeof(s->err), "procfs: root path too long");
            rc = TPF_ETOOBIG;
            goto fail_keep_err;
        }
        memcpy(s->root, root, l + 1);
    }
    s->root_pid = ctx->root_pid;
    s->hz = sysconf(_SC_CLK_TCK);
    s->page = sysconf(_SC_PAGESIZE);
    if (s->hz <= 0) s->hz = 100;
    if (s->page <= 0) s->page = 4096;

    struct rlimit rl;
    s->fd_budget = 2 * PROCFS_MAX_PROCS;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 4 < (rlim_t)s->fd_budget)
        s->fd_budget = (int)(rl.rlim_cur / 4); /* leave most fds to the rest of the program */

    s->sysbuf_cap = SYSBUF_START;
    s->sysbuf = malloc(s->sysbuf_cap);
    s->prev_cores = calloc(FRAME_MAX_CPUS, sizeof(procfs_cpu_times));
    s->cur_cores = calloc(FRAME_MAX_CPUS, sizeof(procfs_cpu_times));
    s->nslots = HASH_MIN_SLOTS;
    s->tab = calloc(s->nslots, sizeof(pent));
    s->tab_alt = calloc(s->nslots, sizeof(pent));
    if (!s->sysbuf || !s->prev_cores || !s->cur_cores || !s->tab || !s->tab_alt) goto fail;

    char path[PATH_MAX];
    for (int i = 0; i < SF_N; i++) {
        int n = snprintf(path, sizeof(path), "%s%s", s->root, sf_path[i]);
        if (n < 0 || (size_t)n >= sizeof(path)) {
            rc = TPF_ETOOBIG;
            goto fail;
        }
        s->sf_fd[i] = open_ro(path); /* missing PSI/diskstats: those fields stay unknown */
    }
    if (s->sf_fd[SF_STAT] < 0) {
        rc = err_from_errno(errno);
        snprintf(s->err, sizeof(s->err), "cannot open %.200s/proc/stat: %s", s->root,
                 strerror(errno));
        goto fail_keep_err;
    }
    snprintf(path, sizeof(path), "%s/proc", s->root);
    s->proc_dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->proc_dir < 0) {
        rc = err_from_errno(errno);
        snprintf(s->err, sizeof(s->err), "cannot open %.200s: %s", path, strerror(errno));
        goto fail_keep_err;
    }
    snprintf(path, sizeof(path), "%s/sys/block", s->root);
    struct stat sb;
    s->have_sys_block = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);

    /* cores: those /proc/stat lists now, or more if configured (offline ones
     * show as unknown until they come online) */
    ssize_t r = read_sys(s, SF_STAT);
    procfs_cpu_times all;
    if (r <= 0 ||
        procfs_parse_stat(s->sysbuf, (size_t)r, &all, s->cur_cores, FRAME_MAX_CPUS) != 0) {
        rc = TPF_EFORMAT;
        snprintf(s->err, sizeof(s->err), "%.200s/proc/stat: unexpected format", s->root);
        goto fail_keep_err;
    }
    for (int i = 0; i < FRAME_MAX_CPUS; i++)
        if (s->cur_cores[i].ok) s->ncpu = i + 1;
    if (!s->root[0]) {
        long conf = sysconf(_SC_NPROCESSORS_CONF);
        if (conf > s->ncpu) s->ncpu = conf > FRAME_MAX_CPUS ? FRAME_MAX_CPUS : (int)conf;
    }
    memset(s->cur_cores, 0, sizeof(procfs_cpu_times) * FRAME_MAX_CPUS);
    *state = s;
    return 0;

fail:
    snprintf(s->err, sizeof(s->err), "procfs: %s", tpf_strerror(rc));
fail_keep_err:
    /* A failed init still hands back a husk holding only the reason, for
     * last_error(); close() frees it. last_error(NULL) says it too. */
    memcpy(init_err, s->err, sizeof(init_err));
    state_release(s);
    *state = s;
    return rc;
}

static int procfs_init(void **state, const src_ctx *ctx)
{
    return procfs_init_at(state, ctx, NULL);
}

static int procfs_sample(void *state, const src_ctx *ctx, coll_frame *f)
{
    procfs_state *s = state;
    if (!s || !f || !s->sysbuf) return TPF_EINVAL;
    if (ctx && ctx->root_pid != s->root_pid) s->root_pid = ctx->root_pid;
    /* the collector's sample time when it gives one, so every source agrees */
    uint64_t now = f->mono_ns ? f->mono_ns : clock_ns(CLOCK_MONOTONIC);
    uint64_t boot_ticks = clock_ns(CLOCK_BOOTTIME) / (1000000000u / (uint64_t)s->hz);
    double dt = 0;
    if (s->prev_mono_ns && now > s->prev_mono_ns) dt = (double)(now - s->prev_mono_ns) / 1e9;
    s->gen++;
    s->nsamples++;

    sample_cpu(s, f);
    sample_mem(s, f);
    sample_psi(s, f, dt);
    sample_disk(s, f, dt);
    sample_net(s, f, dt);
    sample_tree(s, f, dt);

    s->prev_mono_ns = now;
    s->prev_boot_ticks = boot_ticks;
    return 0;
}

static const char *procfs_last_error(void *state)
{
    procfs_state *s = state;
    if (!s) return init_err[0] ? init_err : NULL;
    return s->err[0] ? s->err : NULL;
}

static void procfs_close(void *state)
{
    state_free(state);
}

int procfs_procs(void *state, const procfs_proc **out)
{
    procfs_state *s = state;
    if (!s || !out) return TPF_EINVAL;
    *out = s->pub;
    return s->nmem;
}

int procfs_overflow(void *state)
{
    procfs_state *s = state;
    return s ? s->overflow : TPF_EINVAL;
}

const src_ops procfs_source = {
    "procfs", procfs_init, procfs_sample, procfs_last_error, procfs_close,
};
