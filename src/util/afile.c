/* Safe file creation (see afile.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainperf.h"
#include "util/afile.h"
#include "util/err.h"

#define AFILE_TMP_TRIES 16

static _Atomic unsigned afile_seq;

int afile_dir_open(const char *dir)
{
    if (!dir || !*dir) return TPF_EINVAL;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd >= 0 ? fd : err_from_errno(errno);
}

int afile_dir_of(const char *path, char *base, size_t cap)
{
    if (!path || !*path || !base || cap == 0) return TPF_EINVAL;
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    size_t n = strlen(name);
    if (n == 0 || n >= cap) return n ? TPF_ETOOBIG : TPF_EINVAL;
    memcpy(base, name, n + 1);
    if (!slash) return afile_dir_open(".");
    if (slash == path) return afile_dir_open("/");
    char dir[4096];
    size_t dn = (size_t)(slash - path);
    if (dn >= sizeof(dir)) return TPF_ETOOBIG;
    memcpy(dir, path, dn);
    dir[dn] = 0;
    return afile_dir_open(dir);
}

static int name_ok(const char *name)
{
    return name && *name && !strchr(name, '/') && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

int afile_create_at(int dirfd, const char *name, int flags)
{
    if (!name_ok(name)) return TPF_EINVAL;
    /* Unlink, then create exclusively: a link planted between the two makes
     * the create fail (EEXIST) rather than write through it. */
    if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT) {
        if (errno == EISDIR || errno == EPERM) return TPF_EEXIST;
        return err_from_errno(errno);
    }
    int fd = openat(dirfd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    return fd >= 0 ? fd : err_from_errno(errno);
}

int afile_append_at(int dirfd, const char *name)
{
    if (!name_ok(name)) return TPF_EINVAL;
    int fd = openat(dirfd, name, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return err_from_errno(errno == ELOOP ? EEXIST : errno);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        close(fd);
        return TPF_EEXIST;
    }
    return fd;
}

int afile_tmp_open(afile_tmp *t, int dirfd, const char *name, int sync)
{
    memset(t, 0, sizeof(*t));
    t->fd = -1;
    t->dirfd = dirfd;
    t->sync = sync;
    if (!name_ok(name)) return TPF_EINVAL;
    size_t n = strlen(name);
    if (n >= sizeof(t->name)) return TPF_ETOOBIG;
    memcpy(t->name, name, n + 1);
    for (int i = 0; i < AFILE_TMP_TRIES; i++) {
        unsigned k = atomic_fetch_add(&afile_seq, 1);
        snprintf(t->tmp, sizeof(t->tmp), ".%s.tmp-%d-%u", name, (int)getpid(), k);
        t->fd = openat(dirfd, t->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (t->fd >= 0) return 0;
        /* Taken (something planted there): never reuse it, try another. */
        if (errno != EEXIST) return err_from_errno(errno);
    }
    return TPF_EEXIST;
}

int afile_tmp_commit(afile_tmp *t)
{
    if (t->fd < 0) return TPF_ESTATE;
    int rc = 0;
    if (t->sync && fsync(t->fd) != 0 && errno != EINVAL) rc = err_from_errno(errno);
    if (close(t->fd) != 0 && rc == 0) rc = err_from_errno(errno);
    t->fd = -1;
    /* rename replaces a symlink at the final name; it never follows it. */
    if (rc == 0 && renameat(t->dirfd, t->tmp, t->dirfd, t->name) != 0) rc = err_from_errno(errno);
    if (rc) {
        unlinkat(t->dirfd, t->tmp, 0);
        return rc;
    }
    if (t->sync) (void)fsync(t->dirfd); /* the rename itself; best effort */
    return 0;
}

void afile_tmp_abort(afile_tmp *t)
{
    if (t->fd < 0) return;
    close(t->fd);
    t->fd = -1;
    unlinkat(t->dirfd, t->tmp, 0);
}

int afile_write_all(int fd, const void *p, size_t n, size_t *done)
{
    const char *c = p;
    size_t off = 0;
    int rc = 0;
    while (off < n) {
        ssize_t w = write(fd, c + off, n - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            rc = err_from_errno(errno);
            break;
        }
        if (w == 0) {
            rc = TPF_EIO;
            break;
        }
        off += (size_t)w;
    }
    if (done) *done = off;
    return rc;
}

int afile_write_at(int dirfd, const char *name, const void *data, size_t len)
{
    afile_tmp t;
    int rc = afile_tmp_open(&t, dirfd, name, 1);
    if (rc) return rc;
    rc = afile_write_all(t.fd, data, len, NULL);
    if (rc) {
        afile_tmp_abort(&t);
        return rc;
    }
    return afile_tmp_commit(&t);
}

int afile_write(const char *path, const void *data, size_t len)
{
    char base[256];
    int dfd = afile_dir_of(path, base, sizeof(base));
    if (dfd < 0) return dfd;
    int rc = afile_write_at(dfd, base, data, len);
    close(dfd);
    return rc;
}
