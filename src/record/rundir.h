/* Creating a run directory: the default name under ./trainperf-runs, the
 * `latest` link, and the check that it is writable before anything starts. */
#ifndef TPF_RECORD_RUNDIR_H
#define TPF_RECORD_RUNDIR_H

#include <stddef.h>

/* Create dir (and its parents) and dir/live; fail with TPF_EACCES / TPF_ENOENT
 * / TPF_EIO ... when it cannot be written. An existing empty or earlier run
 * directory is fine: its files are replaced, and the shared segments an
 * earlier run left in dir/live are removed (they would be drained again). */
int rec_rundir_prepare(const char *dir);

/* Claim dir for one run (rundir_lock.c): create it, take an exclusive lock
 * held as long as the returned fd stays open (released by the kernel when the
 * holder dies, even by SIGKILL), then prepare it as rec_rundir_prepare does.
 *   TPF_EBUSY   another run (a live collector) holds it
 *   TPF_EEXIST  it holds an earlier run and REC_CLAIM_FORCE was not given
 * With REC_CLAIM_FORCE the earlier run is removed first. Returns the lock fd
 * (close it when the run is finished) or a negative TPF_E* code. */
#define REC_CLAIM_FORCE 0x1u
/* Create dir and its parents; TPF_EEXIST when it is not a directory. */
int rec_rundir_mkdirs(const char *dir);
int rec_rundir_claim(const char *dir, unsigned flags);

/* Drop the lock (for every process sharing it: forked workers inherit the
 * fd) and close fd. fd < 0 is ignored. */
void rec_rundir_release(int fd);

/* 1 when a live collector holds dir's lock, 0 when none does, or an error
 * (a negative TPF_E* code: also where the file system has no flock). */
int rec_rundir_in_use(const char *dir);

/* Make a fresh run directory base/<YYYYmmdd-HHMMSS>-<label> (label: letters,
 * digits, '.', '_', '-' kept, the rest '_'; a "-2", "-3"... suffix when taken),
 * prepare it, and point base/latest at it. The path goes to out (n bytes).
 * Failing to update `latest` is not an error. */
int rec_rundir_create(const char *base, const char *label, char *out, size_t n);

#endif
