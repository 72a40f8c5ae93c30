/* One run per run directory (rundir.h: rec_rundir_claim).
 *
 * The lock is flock() on the directory itself: no lock file to plant a link
 * at or to leave behind, and the kernel drops it when its holder dies, so a
 * run killed by SIGKILL or the OOM killer never leaves the directory stuck.
 * File systems without flock (some network mounts) run without the lock. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "record/rundir.h"
#include "record/safeout.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/err.h"

#define RUNDIR_RM_DEPTH 16

/* The files that make a directory a run directory (docs/run-format.md). */
static const char *const rundir_marks[] = {"run.json", "steps.csv", "metrics.csv", "trace.json",
                                           "summary.json"};
#define RUNDIR_NMARKS (int)(sizeof(rundir_marks) / sizeof(rundir_marks[0]))

static int has_entry(int dfd, const char *name)
{
    struct stat st;
    return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static int holds_run(int dfd)
{
    for (int i = 0; i < RUNDIR_NMARKS; i++)
        if (has_entry(dfd, rundir_marks[i])) return 1;
    return 0;
}

/* Remove everything inside dfd, never following a symlink out of it. */
static int rm_inside(int dfd, int depth)
{
    if (depth > RUNDIR_RM_DEPTH) return TPF_ETOOBIG;
    int fd = dup(dfd);
    if (fd < 0) return err_from_errno(errno);
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return err_from_errno(errno);
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) continue;
        struct stat st;
        if (fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            int sub = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0) {
                rc = rc ? rc : err_from_errno(errno);
                continue;
            }
            int r2 = rm_inside(sub, depth + 1);
            close(sub);
            if (r2 == 0 && unlinkat(dfd, n, AT_REMOVEDIR) != 0) r2 = err_from_errno(errno);
            if (r2 && !rc) rc = r2;
        } else if (unlinkat(dfd, n, 0) != 0 && !rc) {
            rc = err_from_errno(errno);
        }
    }
    closedir(d);
    return rc;
}

/* --force: a directory that is a trainperf run (run.json) is emptied; in any
 * other directory only the run's own files are replaced, never the user's. */
static int clear_run(int dfd)
{
    if (has_entry(dfd, "run.json")) return rm_inside(dfd, 0);
    for (int i = 0; i < RUNDIR_NMARKS; i++)
        if (unlinkat(dfd, rundir_marks[i], 0) != 0 && errno != ENOENT) return err_from_errno(errno);
    return 0;
}

int rec_rundir_claim(const char *dir, unsigned flags)
{
    if (!dir || !*dir) return TPF_EINVAL;
    int rc = rec_rundir_mkdirs(dir);
    if (rc) return rc;
    int dfd = afile_dir_open(dir);
    if (dfd < 0) return dfd;
    if (flock(dfd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            close(dfd);
            return TPF_EBUSY;
        }
        if (e != ENOLCK && e != EOPNOTSUPP && e != EINVAL) {
            close(dfd);
            return err_from_errno(e);
        }
    }
    if (holds_run(dfd)) {
        if (!(flags & REC_CLAIM_FORCE)) {
            close(dfd);
            return TPF_EEXIST;
        }
        if ((rc = clear_run(dfd)) != 0) {
            close(dfd);
            return rc;
        }
    }
    rc = rec_rundir_prepare(dir);
    if (rc) {
        close(dfd);
        return rc;
    }
    /* The space for the run's last files is taken now, before the command
     * starts and its probes take theirs (record/safeout.h). */
    rec_reserve_make(dir);
    return dfd;
}

void rec_rundir_release(int fd)
{
    if (fd < 0) return;
    /* A run that never got to its end (the command could not start) leaves
     * no reserve behind; at a normal end it is gone already. */
    unlinkat(fd, REC_RESERVE_NAME, 0);
    flock(fd, LOCK_UN);
    close(fd);
}

int rec_rundir_in_use(const char *dir)
{
    int dfd = afile_dir_open(dir);
    if (dfd < 0) return dfd;
    int busy = 0;
    if (flock(dfd, LOCK_SH | LOCK_NB) != 0)
        busy = errno == EWOULDBLOCK ? 1 : err_from_errno(errno); /* no flock: unknown */
    else
        flock(dfd, LOCK_UN);
    close(dfd);
    return busy;
}
