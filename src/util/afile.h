/* Safe file creation in a directory someone else may write to (a run
 * directory under /tmp, a shared scratch volume; trainperf often runs as
 * root). Every file is opened relative to a directory fd, never through a
 * symlink (O_NOFOLLOW), and never by truncating what is there: a name is
 * unlinked first and created anew with O_EXCL, so neither a planted symlink
 * nor a planted hard link lets a write land on another file.
 *
 * Whole documents are replaced atomically: written to a fresh temporary
 * (".NAME.tmp-PID-N", O_EXCL), fsync'd, renamed over NAME; a reader sees the
 * old file or the new one, never half of one.
 *
 * Functions return 0 / an fd, or a negative TPF_E* code; errno is kept for
 * callers that want the system's words. */
#ifndef TPF_UTIL_AFILE_H
#define TPF_UTIL_AFILE_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* An fd for the directory dir (symlinks in the path are followed: the user
 * named it). Close with close(). */
int afile_dir_open(const char *dir);

/* Split path into its directory (opened as by afile_dir_open) and its last
 * component (copied to base, cap bytes). Returns the dir fd. */
int afile_dir_of(const char *path, char *base, size_t cap);

/* A fresh regular file NAME in dirfd: whatever was at NAME (file, symlink,
 * hard link) is unlinked first, then it is created with O_EXCL|O_NOFOLLOW.
 * flags: O_WRONLY or O_RDWR, plus extras (O_APPEND...). Returns an fd. */
int afile_create_at(int dirfd, const char *name, int flags);

/* An existing regular file NAME in dirfd opened to append, refusing a
 * symlink and a file with other links. Returns an fd. */
int afile_append_at(int dirfd, const char *name);

/* A temporary for NAME, to be committed (renamed over NAME) or aborted. */
typedef struct afile_tmp {
    int dirfd;      /* borrowed */
    int fd;
    int sync;       /* fsync before the rename */
    char name[256]; /* final name */
    char tmp[300];  /* temporary name */
} afile_tmp;

/* Open a temporary beside NAME. sync: fsync it (and the directory) at
 * commit; 0 for scratch files nobody needs after a crash. */
int afile_tmp_open(afile_tmp *t, int dirfd, const char *name, int sync);
/* fsync (when asked), close, rename over the final name. On failure the
 * temporary is removed. Returns 0 or an error. */
int afile_tmp_commit(afile_tmp *t);
/* Close and remove the temporary. */
void afile_tmp_abort(afile_tmp *t);

/* Replace NAME in dirfd with len bytes of data, atomically and durably. */
int afile_write_at(int dirfd, const char *name, const void *data, size_t len);
/* The same for a path (its directory opened for the call). */
int afile_write(const char *path, const void *data, size_t len);

/* Write all of p (retrying EINTR and short writes). 0 or an error; on error
 * *done (when not NULL) says how much went out. */
int afile_write_all(int fd, const void *p, size_t n, size_t *done);

/* ---- reading a run directory's files ----
 * A FIFO planted at summary.json must not hang `report` or `top`, a symlink
 * must not send them elsewhere: the open is O_NONBLOCK|O_NOFOLLOW, and only a
 * regular file is kept (its fd made blocking again). Returns an fd, or -1
 * with errno set (EINVAL: not a regular file, ELOOP: a symlink). */
int afile_open_read(const char *path);
/* The same as a stdio stream ("rb"); NULL with errno set. */
FILE *afile_fopen_read(const char *path);
/* What to say for an errno from these: "not a regular file" for a FIFO, a
 * device or a symlink, else strerror. */
const char *afile_read_why(int e);

/* ---- outputs the user named (--out FILE, -o FILE) ----
 *
 * What is at the name decides, and nothing but a regular file is ever
 * replaced (as root, `-o /dev/full` must not turn the machine's device into a
 * file):
 * - no such name, or a regular file: a temporary beside it, renamed over it
 *   when whole (a reader never sees half a document);
 * - a character device or a FIFO (itself, or the target of a symlink such as
 *   /dev/stdout): written in place, never truncated or replaced; a FIFO with
 *   no reader is refused rather than waited for;
 * - anything else (a directory, a socket, a block device, a symlink to a
 *   regular file or to nothing): refused, nothing written.
 * Refusals and write errors (a full disk, ENOSPC from /dev/full) come back as
 * a negative TPF_E* code with one line in err; the CLI exits 2. */
typedef struct afile_out {
    FILE *f;        /* write here (buffered); owned, closed by commit/abort */
    int through;    /* 1: a device or FIFO written in place */
    int fd;         /* what the stream writes to */
    int werr;       /* errno of the first failed write; 0 none */
    int dirfd;      /* replace mode: the name's directory; -1 otherwise */
    afile_tmp tmp;  /* replace mode */
    const char *path; /* borrowed: the caller's string outlives the afile_out */
} afile_out;
/* The stream's cookie is the afile_out itself: it must stay where it was
 * opened (no copies) until commit or abort. */

/* Open path for writing as above. 0, or an error with err filled. */
int afile_out_open(afile_out *o, const char *path, char *err, size_t errlen);
/* Flush and finish: commit the temporary (replace mode) or close the device.
 * 0, or an error with err filled (nothing replaced). */
int afile_out_commit(afile_out *o, char *err, size_t errlen);
/* Drop it: the temporary removed, the name left as it was. */
void afile_out_abort(afile_out *o);
/* The writer stopped with error rc (err filled): drop the output as
 * afile_out_abort does. When the stream had failed a write (a full disk),
 * that is what stopped the writer: err then says so. Returns the error. */
int afile_out_fail(afile_out *o, int rc, char *err, size_t errlen);
/* The whole of data to path (afile_out_open + write + commit). */
int afile_out_write(const char *path, const void *data, size_t len, char *err, size_t errlen);

#endif
