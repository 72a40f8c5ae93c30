/* Safe file creation (see afile.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
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

/* ---- reading a run directory's files ---- */

int afile_open_read(const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

FILE *afile_fopen_read(const char *path)
{
    int fd = afile_open_read(path);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

const char *afile_read_why(int e)
{
    return e == EINVAL || e == ELOOP ? "not a regular file" : strerror(e);
}

/* ---- outputs the user named ---- */

#define AFILE_OUT_BUF (1 << 16)

static const char *kind_name(mode_t m)
{
    return S_ISDIR(m)    ? "a directory (name a file)"
           : S_ISSOCK(m) ? "a socket"
           : S_ISBLK(m)  ? "a block device"
                         : "not a regular file";
}

static int out_refuse(const char *path, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s; not written", path, what);
    return TPF_EINVAL;
}

static int out_fail(const char *path, int e, char *err, size_t errlen)
{
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
    return err_from_errno(e);
}

/* The stream writes through here so that the first write error's errno is
 * kept (stdio forgets it): a full disk is then named as such. */
static ssize_t out_cookie_write(void *c, const char *b, size_t n)
{
    afile_out *o = c;
    size_t done = 0;
    if (afile_write_all(o->fd, b, n, &done) != 0) {
        if (!o->werr) o->werr = errno ? errno : EIO;
        return done ? (ssize_t)done : -1;
    }
    return (ssize_t)n;
}

static int out_stream(afile_out *o, int fd)
{
    cookie_io_functions_t io = {NULL, out_cookie_write, NULL, NULL};
    o->fd = fd;
    o->f = fopencookie(o, "w", io);
    if (!o->f) return TPF_ENOMEM;
    setvbuf(o->f, NULL, _IOFBF, AFILE_OUT_BUF);
    return 0;
}

/* A device or FIFO, written in place: follow is 1 for the target of a
 * symlink (/dev/stdout), whose type was checked through it. */
static int out_through(afile_out *o, const char *path, int follow, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
    if (fd < 0) {
        if (errno == ENXIO) return out_refuse(path, "a FIFO with no reader", err, errlen);
        if (errno == ELOOP) return out_refuse(path, "became a symbolic link", err, errlen);
        return out_fail(path, errno, err, errlen);
    }
    struct stat st;
    /* what was opened is what was checked (not swapped in between) */
    if (fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
        close(fd);
        return out_refuse(path, "changed while it was opened", err, errlen);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    o->through = 1;
    if (out_stream(o, fd) != 0) {
        close(fd);
        return out_fail(path, ENOMEM, err, errlen);
    }
    return 0;
}

static int out_replace(afile_out *o, const char *path, char *err, size_t errlen)
{
    char base[256];
    int dfd = afile_dir_of(path, base, sizeof(base));
    if (dfd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", path,
                 dfd == TPF_ETOOBIG ? "name too long" : strerror(errno));
        return dfd;
    }
    int rc = afile_tmp_open(&o->tmp, dfd, base, 1);
    if (rc) {
        int e = errno;
        close(dfd);
        return out_fail(path, e ? e : EIO, err, errlen);
    }
    o->dirfd = dfd;
    if (out_stream(o, o->tmp.fd) != 0) {
        afile_tmp_abort(&o->tmp);
        close(dfd);
        o->dirfd = -1;
        return out_fail(path, ENOMEM, err, errlen);
    }
    return 0;
}

int afile_out_open(afile_out *o, const char *path, char *err, size_t errlen)
{
    memset(o, 0, sizeof(*o));
    o->dirfd = o->fd = o->tmp.fd = -1;
    o->path = path;
    if (!path || !*path) {
        snprintf(err, errlen, "no output file named");
        return TPF_EINVAL;
    }
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) return out_fail(path, errno, err, errlen);
        return out_replace(o, path, err, errlen);
    }
    if (S_ISREG(st.st_mode)) return out_replace(o, path, err, errlen);
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return out_through(o, path, 0, err, errlen);
    if (S_ISLNK(st.st_mode)) {
        struct stat t;
        if (stat(path, &t) == 0 && (S_ISCHR(t.st_mode) || S_ISFIFO(t.st_mode)))
            return out_through(o, path, 1, err, errlen);
        return out_refuse(path, "a symbolic link, neither followed nor replaced (name its target)",
                          err, errlen);
    }
    return out_refuse(path, kind_name(st.st_mode), err, errlen);
}

void afile_out_abort(afile_out *o)
{
    if (o->f) fclose(o->f); /* the cookie's fd stays open: closed below */
    o->f = NULL;
    if (o->through) {
        if (o->fd >= 0) close(o->fd);
    } else {
        afile_tmp_abort(&o->tmp);
    }
    o->fd = -1;
    if (o->dirfd >= 0) close(o->dirfd);
    o->dirfd = -1;
}

int afile_out_fail(afile_out *o, int rc, char *err, size_t errlen)
{
    /* a failed write is what stopped the writer: say that */
    if (o->f) (void)fflush(o->f);
    int e = o->werr;
    afile_out_abort(o);
    return e ? out_fail(o->path, e, err, errlen) : rc;
}

int afile_out_commit(afile_out *o, char *err, size_t errlen)
{
    if (!o->f) return TPF_ESTATE;
    if (fflush(o->f) != 0 || ferror(o->f) || o->werr) return afile_out_fail(o, TPF_EIO, err, errlen);
    fclose(o->f);
    o->f = NULL;
    if (o->through) {
        int rc = close(o->fd) != 0 ? out_fail(o->path, errno, err, errlen) : 0;
        o->fd = -1;
        return rc;
    }
    /* the name is replaced only while it is still a regular file or absent */
    struct stat st;
    if (fstatat(o->dirfd, o->tmp.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
        afile_out_abort(o);
        return out_refuse(o->path, "no longer a regular file", err, errlen);
    }
    errno = 0;
    int rc = afile_tmp_commit(&o->tmp);
    int e = errno;
    o->fd = -1;
    close(o->dirfd);
    o->dirfd = -1;
    if (rc) {
        snprintf(err, errlen, "cannot write %s: %s", o->path, e ? strerror(e) : tpf_strerror(rc));
        return rc;
    }
    return 0;
}

int afile_out_write(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    afile_out o;
    int rc = afile_out_open(&o, path, err, errlen);
    if (rc) return rc;
    if (len) fwrite(data, 1, len, o.f);
    return afile_out_commit(&o, err, errlen);
}
