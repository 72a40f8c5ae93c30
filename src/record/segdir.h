/* The run's segment directory: where the probes' shared segments live while
 * the run goes, off the run directory's file system.
 *
 * Why: a segment is mmap'd by the training process, so every page of it is
 * written by the trainee's stores. On a disk or network file system, the
 * write-back of those pages (and the page faults that follow it) goes
 * through that file system: when it stalls, the trainee's steps stall.
 * A tmpfs (/dev/shm) has no write-back, so the hot path touches memory
 * only. The run directory records where the segments are (run.json
 * "segments_dir"), and the directory records its run (a `run` file), so an
 * interrupted run is still recovered from them (record/recover.h) and a
 * dead run's leftovers are found and swept (rec_segdir_sweep).
 *
 * The directory is BASE/trainperf-XXXXXX (BASE: TRAINPERF_SHM_DIR, default
 * /dev/shm), made by mkdtemp: a fresh, unguessable name created with
 * mkdir's O_EXCL semantics, mode 0700. Nothing planted in BASE is ever
 * followed: a name that exists already is never taken, and every use opens
 * the directory with O_NOFOLLOW and checks that it is ours and closed to
 * others. The probes make seg-<pid>.tpf in it (probe.c: O_EXCL|O_NOFOLLOW,
 * 0600), and fall back to RUN/live when it cannot take a segment.
 *
 * Lifetime: made before the command starts, held (flock) by the collector
 * while the run goes, removed when the run is finished; after a SIGKILL of
 * the collector it stays until `trainperf report RUN` recovers the run, or
 * until a later run's sweep finds no live process using it. */
#ifndef TPF_RECORD_SEGDIR_H
#define TPF_RECORD_SEGDIR_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define SEGDIR_PREFIX "trainperf-"
#define SEGDIR_DEFAULT_BASE "/dev/shm"

typedef struct rec_segdir {
    int fd;              /* the directory, flock'd; -1 when none */
    char path[PATH_MAX]; /* "" when none */
} rec_segdir;

/* Make a segment directory for the run in run_dir (an absolute path) and
 * hold its lock. ring_events sizes the room it needs: one segment with a
 * few rings, beyond the quarter of the tmpfs the probes always leave free.
 * 0 on success; otherwise a TPF_E* code, sd->fd == -1, and why (why_len
 * bytes) says in words why the run directory must hold the segments
 * ("/dev/shm: no such file or directory", "/dev/shm has 12 MiB free").
 * The library prints nothing: the caller warns. */
int rec_segdir_make(rec_segdir *sd, const char *run_dir, uint32_t ring_events, char *why,
                    size_t why_len);

/* Remove the segments, the `run` file and the directory, and drop the lock.
 * sd may be one rec_segdir_make never filled (fd -1): nothing is done. */
void rec_segdir_remove(rec_segdir *sd);

/* Open path as a segment directory: a real directory (no symlink) named
 * trainperf-*, ours, mode 0700. Returns its fd, or a negative TPF_E* code
 * for anything else (never followed, never touched). */
int rec_segdir_open(const char *path);

/* 1 when the segment directory path belongs to the run directory run_dir
 * (its `run` file names the same directory, by device and inode). */
int rec_segdir_of_run(const char *path, const char *run_dir);

/* 1 when a process that wrote a segment in dfd still lives (the same
 * process: a reused pid started after its segment does not count). */
int rec_segdir_busy(int dfd);

/* Remove the directory at path (rec_segdir_open's checks first): its
 * segments and `run` file, then itself. Anything else in it stays. */
void rec_segdir_remove_path(const char *path);

/* Sweep BASE for segment directories of dead runs: ours, not locked by a
 * live collector, no live producer. visit (may be NULL) is called with the
 * run directory of each one whose run directory is still there, and returns
 * 1 to keep the segments (its run could not be finished: a later sweep tries
 * again); the others go. Returns how many were removed. The recovery's sweep
 * is rec_sweep_dead_runs (record/recover.h). */
typedef int (*rec_segdir_visit_fn)(const char *run_dir, void *ctx);
int rec_segdir_sweep(rec_segdir_visit_fn visit, void *ctx);

/* BASE: TRAINPERF_SHM_DIR, or /dev/shm. */
const char *rec_segdir_base(void);

#endif
