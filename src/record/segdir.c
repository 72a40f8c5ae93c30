/* The run's segment directory off the run directory (see segdir.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "probe/segment.h"
#include "record/segdir.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/err.h"
#include "util/pstat.h"

#define SEGDIR_RUN_FILE "run"
#define SEGDIR_MIN_RINGS 4 /* room asked for at the start: one segment, 4 rings */

const char *rec_segdir_base(void)
{
    const char *b = getenv("TRAINPERF_SHM_DIR");
    return b && *b ? b : SEGDIR_DEFAULT_BASE;
}

static int is_seg_name(const char *n)
{
    size_t k = strlen(n);
    return strncmp(n, "seg-", 4) == 0 &&
           ((k > 8 && strcmp(n + k - 4, ".tpf") == 0) || (k > 12 && strcmp(n + k - 8, ".tpf.tmp") == 0));
}

int rec_segdir_open(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (strncmp(slash ? slash + 1 : path, SEGDIR_PREFIX, strlen(SEGDIR_PREFIX)) != 0)
        return TPF_EINVAL;
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return errno == ELOOP || errno == ENOTDIR ? TPF_EACCES : err_from_errno(errno);
    struct stat st;
    if (fstat(dfd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 07777) != 0700) {
        close(dfd);
        return TPF_EACCES;
    }
    return dfd;
}

/* The base must not let others swap our directory: a directory anyone may
 * write to is only fine with the sticky bit (as /dev/shm and /tmp are). */
static int base_ok(const char *base, char *why, size_t why_len)
{
    struct stat st;
    if (stat(base, &st) != 0) {
        snprintf(why, why_len, "%s: %s", base, strerror(errno));
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, why_len, "%s is not a directory", base);
        return 0;
    }
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
        snprintf(why, why_len, "%s is writable by anyone and not sticky", base);
        return 0;
    }
    return 1;
}

int rec_segdir_make(rec_segdir *sd, const char *run_dir, uint32_t ring_events, char *why,
                    size_t why_len)
{
    sd->fd = -1;
    sd->path[0] = 0;
    if (why && why_len) why[0] = 0;
    char dummy[8];
    if (!why || !why_len) {
        why = dummy;
        why_len = sizeof(dummy);
    }
    const char *base = rec_segdir_base();
    if (!base_ok(base, why, why_len)) return TPF_ENOENT;
    /* The room one segment with a few rings takes, beyond what the probes
     * leave to the trainee's own users of the tmpfs (seg_shm_keep). */
    uint64_t names = seg_round_page(SEG_HEADER_SIZE + (uint64_t)SEG_MAX_NAMES * sizeof(seg_name_slot));
    uint64_t need = names + SEGDIR_MIN_RINGS * seg_ring_stride(ring_events);
    struct statvfs v;
    if (statvfs(base, &v) == 0) {
        uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize, size = (uint64_t)v.f_blocks * v.f_frsize;
        if (avail < seg_shm_keep(size) + need) {
            snprintf(why, why_len, "%s has %.0f MiB free, too little for the probes' rings", base,
                     (double)avail / 1048576.0);
            return TPF_ENOSPC;
        }
    }
    char tmpl[PATH_MAX];
    if ((size_t)snprintf(tmpl, sizeof(tmpl), "%s/" SEGDIR_PREFIX "XXXXXX", base) >= sizeof(tmpl)) {
        snprintf(why, why_len, "%s: path too long", base);
        return TPF_ETOOBIG;
    }
    /* mkdtemp: a random name, made with mkdir (never an existing entry),
     * mode 0700. */
    if (!mkdtemp(tmpl)) {
        int e = errno;
        snprintf(why, why_len, "%s: %s", base, strerror(e));
        return err_from_errno(e);
    }
    int dfd = rec_segdir_open(tmpl);
    if (dfd < 0) {
        rmdir(tmpl);
        snprintf(why, why_len, "%s: %s", tmpl, tpf_strerror(dfd));
        return dfd;
    }
    /* Held while the collector lives: the sweep leaves a locked one alone. */
    flock(dfd, LOCK_EX | LOCK_NB);
    /* The way back to the run: "<dev> <ino>\n<path>\n" of the run directory. */
    struct stat rs;
    char text[PATH_MAX + 64];
    int n = stat(run_dir, &rs) == 0
                ? snprintf(text, sizeof(text), "%" PRIu64 " %" PRIu64 "\n%s\n", (uint64_t)rs.st_dev,
                           (uint64_t)rs.st_ino, run_dir)
                : -1;
    int rc = n > 0 && (size_t)n < sizeof(text)
                 ? afile_write_at(dfd, SEGDIR_RUN_FILE, text, (size_t)n)
                 : TPF_EINVAL;
    if (rc) {
        close(dfd);
        rmdir(tmpl);
        snprintf(why, why_len, "%s: %s", tmpl, tpf_strerror(rc));
        return rc;
    }
    sd->fd = dfd;
    memcpy(sd->path, tmpl, strlen(tmpl) + 1);
    return 0;
}

/* Unlink the segments and the run file in dfd; 1 when nothing else is left. */
static int empty_dir(int dfd)
{
    int fd = dup(dfd);
    if (fd < 0) return 0;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    /* a dup shares the offset: whoever read dfd before left it at the end */
    rewinddir(d);
    int left = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) continue;
        /* ".run.tmp-PID-N": afile_write_at's temporary for the run file */
        if (is_seg_name(n) || strcmp(n, SEGDIR_RUN_FILE) == 0 || strncmp(n, ".run.tmp", 8) == 0) {
            if (unlinkat(dfd, n, 0) != 0 && errno != ENOENT) left++;
        } else {
            left++;
        }
    }
    closedir(d);
    return left == 0;
}

void rec_segdir_remove(rec_segdir *sd)
{
    if (!sd || sd->fd < 0) return;
    if (empty_dir(sd->fd)) rmdir(sd->path);
    /* For every holder: forked workers (embedded mode) share the fd. */
    flock(sd->fd, LOCK_UN);
    close(sd->fd);
    sd->fd = -1;
    sd->path[0] = 0;
}

void rec_segdir_remove_path(const char *path)
{
    int dfd = rec_segdir_open(path);
    if (dfd < 0) return;
    if (empty_dir(dfd)) rmdir(path);
    close(dfd);
}

/* The run file's device and inode (and path, when asked). 0 or -1. */
static int read_run_file(int dfd, uint64_t *dev, uint64_t *ino, char *path, size_t cap)
{
    int fd = openat(dfd, SEGDIR_RUN_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    char text[PATH_MAX + 64];
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0) return -1;
    text[n] = 0;
    char *end;
    errno = 0;
    unsigned long long d = strtoull(text, &end, 10);
    if (errno || *end != ' ') return -1;
    unsigned long long i = strtoull(end + 1, &end, 10);
    if (errno || *end != '\n') return -1;
    *dev = d;
    *ino = i;
    if (path) {
        char *p = end + 1, *nl = strchr(p, '\n');
        if (!nl || p[0] != '/' || (size_t)(nl - p) >= cap) return -1;
        memcpy(path, p, (size_t)(nl - p));
        path[nl - p] = 0;
    }
    return 0;
}

int rec_segdir_of_run(const char *path, const char *run_dir)
{
    int dfd = rec_segdir_open(path);
    if (dfd < 0) return 0;
    uint64_t dev, ino;
    struct stat rs;
    int ok = read_run_file(dfd, &dev, &ino, NULL, 0) == 0 && stat(run_dir, &rs) == 0 &&
             (uint64_t)rs.st_dev == dev && (uint64_t)rs.st_ino == ino;
    close(dfd);
    return ok;
}

/* Seconds since boot at which pid started (/proc/PID/stat field 22), or -1. */
static double proc_start_s(pid_t pid)
{
    char text[1024];
    const char *s = pstat_fields(pid, text, sizeof(text));
    if (!s) return -1;
    /* after ")": field 3 (state) ... field 22 (starttime) */
    int field = 2;
    for (const char *q = s; *q; q++) {
        if (*q != ' ') continue;
        if (++field == 22) {
            long hz = sysconf(_SC_CLK_TCK);
            return hz > 0 ? (double)strtoull(q + 1, NULL, 10) / (double)hz : -1;
        }
    }
    return -1;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Is the producer of segment name in dfd alive? A pid taken over by a
 * process started after the segment was made does not count (its start
 * time, since boot, is compared with the segment's CLOCK_MONOTONIC birth
 * plus the time the machine spent suspended, so a real producer is never
 * taken for a stranger). */
static int producer_alive(int dfd, const char *name)
{
    char *end;
    long pid = strtol(name + 4, &end, 10);
    if (pid <= 0 || pid > INT32_MAX || (*end != '.')) return 0;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 1;
    seg_header h;
    ssize_t n = pread(fd, &h, sizeof(h), 0);
    close(fd);
    if (n != (ssize_t)sizeof(h) || memcmp(h.magic, SEG_MAGIC, 8) != 0 || h.pid != (int32_t)pid)
        return 1; /* being made, or unreadable: assume alive */
    double start = proc_start_s((pid_t)pid);
    double slept = clock_s(CLOCK_BOOTTIME) - clock_s(CLOCK_MONOTONIC);
    return !(start >= 0 && start > (double)h.created_mono_ns / 1e9 + slept + 1.0);
}

int rec_segdir_busy(int dfd)
{
    int fd = dup(dfd);
    if (fd < 0) return 1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 1;
    }
    rewinddir(d); /* the offset is dfd's, shared */
    int busy = 0;
    struct dirent *de;
    while (!busy && (de = readdir(d)) != NULL)
        if (is_seg_name(de->d_name)) busy = producer_alive(dfd, de->d_name);
    closedir(d);
    return busy;
}

int rec_segdir_sweep(rec_segdir_visit_fn visit, void *ctx)
{
    const char *base = rec_segdir_base();
    DIR *d = opendir(base);
    if (!d) return 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, SEGDIR_PREFIX, strlen(SEGDIR_PREFIX)) != 0) continue;
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", base, de->d_name) >= sizeof(path))
            continue;
        /* Someone else's, a link, a file: never followed, never touched. */
        int dfd = rec_segdir_open(path);
        if (dfd < 0) continue;
        if (flock(dfd, LOCK_EX | LOCK_NB) != 0 || rec_segdir_busy(dfd)) {
            close(dfd);
            continue;
        }
        uint64_t dev, ino;
        char run_dir[PATH_MAX];
        int keep = 0;
        struct stat ds;
        if (read_run_file(dfd, &dev, &ino, run_dir, sizeof(run_dir)) != 0) {
            /* No way back to a run: one being made this instant (mkdtemp, then
             * its lock), or one whose maker died there. Only the old go. */
            keep = fstat(dfd, &ds) != 0 || ds.st_mtime > time(NULL) - 60;
        } else {
            /* Its run was never finished (collector killed): the visitor
             * finishes it (record/recover.c), and keeps the segments when
             * that fails, for a later try. */
            struct stat rs;
            if (stat(run_dir, &rs) == 0 && (uint64_t)rs.st_dev == dev &&
                (uint64_t)rs.st_ino == ino && visit)
                keep = visit(run_dir, ctx);
        }
        if (!keep) {
            /* the visitor may have removed it already */
            if (empty_dir(dfd)) rmdir(path);
            if (lstat(path, &ds) != 0) removed++;
        }
        close(dfd);
    }
    closedir(d);
    return removed;
}
