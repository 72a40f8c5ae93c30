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

/* Make a fresh run directory base/<YYYYmmdd-HHMMSS>-<label> (label: letters,
 * digits, '.', '_', '-' kept, the rest '_'; a "-2", "-3"... suffix when taken),
 * prepare it, and point base/latest at it. The path goes to out (n bytes).
 * Failing to update `latest` is not an error. */
int rec_rundir_create(const char *base, const char *label, char *out, size_t n);

#endif
