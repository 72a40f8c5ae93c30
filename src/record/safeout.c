/* Writing through a full file system (see safeout.h). */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "record/safeout.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/err.h"
#include "util/jsonw.h"

static uint64_t count_lines(const char *p, size_t n)
{
    uint64_t k = 0;
    for (const char *e = p + n; (p = memchr(p, '\n', (size_t)(e - p))) != NULL; p++) k++;
    return k;
}

int rec_append_whole(int fd, uint64_t *size, const char *data, size_t len, uint64_t *lost)
{
    if (len == 0) return 0;
    size_t done = 0;
    int rc = fd < 0 ? TPF_EIO : afile_write_all(fd, data, len, &done);
    if (rc == 0) {
        *size += len;
        return 0;
    }
    /* Cut back what went out of this batch: whole rows or none. */
    if (done > 0 && ftruncate(fd, (off_t)*size) != 0) {
        /* Cannot cut: keep the complete lines that did go out. */
        const char *nl = done ? memrchr(data, '\n', done) : NULL;
        size_t keep = nl ? (size_t)(nl - data) + 1 : 0;
        if (ftruncate(fd, (off_t)(*size + keep)) == 0) {
            *size += keep;
            data += keep;
            len -= keep;
        }
    }
    /* Without O_APPEND the offset is past the cut: the next write would
     * leave a hole of NUL bytes. */
    (void)lseek(fd, (off_t)*size, SEEK_SET);
    if (lost) *lost += count_lines(data, len);
    return rc;
}

uint64_t rec_reserve_make(const char *run_dir)
{
    int dfd = afile_dir_open(run_dir);
    if (dfd < 0) return 0;
    int fd = afile_create_at(dfd, REC_RESERVE_NAME, O_WRONLY);
    uint64_t got = 0;
    /* A quarter of the free space at most: the streamed rows come first,
     * the reserve only keeps the last words (summary.json, run.json, the
     * reports: some 60 KiB for a short run, more than an eighth of a tiny
     * file system). The probes' segments are no longer here (segdir.h). */
    struct statvfs sv;
    uint64_t cap = REC_RESERVE_BYTES;
    if (fd >= 0 && fstatvfs(fd, &sv) == 0) {
        uint64_t free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
        if (free_b / 4 < cap) cap = free_b / 4;
    }
    if (fd >= 0) {
        for (uint64_t want = cap; want >= (4u << 10); want /= 2) {
            if (posix_fallocate(fd, 0, (off_t)want) == 0) {
                got = want;
                break;
            }
        }
        close(fd);
        if (!got) unlinkat(dfd, REC_RESERVE_NAME, 0);
    }
    close(dfd);
    return got;
}

void rec_reserve_release(const char *run_dir)
{
    int dfd = afile_dir_open(run_dir);
    if (dfd < 0) return;
    unlinkat(dfd, REC_RESERVE_NAME, 0);
    close(dfd);
}

/* What a failing file system cost, one row per count: its JSON key (run.json
 * io.lost) and its words in the warning line. */
static const struct {
    const char *key, *what;
    size_t off;
} lost_parts[] = {
    {"steps", "steps.csv rows", offsetof(rec_loss, steps)},
    {"metrics", "metrics.csv rows", offsetof(rec_loss, metrics)},
    {"procs", "procs.csv rows", offsetof(rec_loss, procs)},
    {"alerts", "alerts", offsetof(rec_loss, alerts)},
    {"trace_events", "trace events", offsetof(rec_loss, trace_events)},
};
#define NLOST (sizeof(lost_parts) / sizeof(lost_parts[0]))

static uint64_t lost_n(const rec_loss *l, size_t i)
{
    return *(const uint64_t *)((const char *)l + lost_parts[i].off);
}

void rec_loss_text(const rec_loss *l, char *out, size_t cap)
{
    out[0] = 0;
    int any = l->error[0] != 0;
    for (size_t i = 0; i < NLOST; i++) any |= lost_n(l, i) != 0;
    if (!any) return;
    size_t off = 0;
#define LPUT(...)                                                                                  \
    do {                                                                                           \
        int w_ = snprintf(out + off, cap - off, __VA_ARGS__);                                      \
        if (w_ > 0) off = (size_t)w_ < cap - off ? off + (size_t)w_ : cap - 1;                     \
    } while (0)
    LPUT("writing the run directory failed (%s)", l->error[0] ? l->error : "unknown error");
    const char *sep = ": not written: ";
    for (size_t i = 0; i < NLOST; i++) {
        if (!lost_n(l, i)) continue;
        LPUT("%s%llu %s", sep, (unsigned long long)lost_n(l, i), lost_parts[i].what);
        sep = ", ";
    }
#undef LPUT
}

void rec_loss_json(jw *w, const rec_loss *l)
{
    static const rec_loss none;
    if (!l) l = &none;
    jw_key(w, "io");
    jw_obj_begin(w);
    jw_key(w, "error");
    if (l->error[0])
        jw_str(w, l->error);
    else
        jw_null(w);
    jw_key(w, "lost");
    jw_obj_begin(w);
    for (size_t i = 0; i < NLOST; i++) jw_kuint(w, lost_parts[i].key, lost_n(l, i));
    jw_obj_end(w);
    jw_obj_end(w);
}
