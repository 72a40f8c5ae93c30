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

#endif
