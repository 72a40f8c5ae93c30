/* Flame graphs of the run's sampled stacks (pyprof/stacks-<pid>.folded,
 * docs/run-format.md): a speedscope file (stacks.speedscope.json, opened by
 * speedscope.app and Perfetto) and the report's interactive flame graph
 * (report.html, self-contained: inline SVG drawn by an inline script, no
 * network). One profile per process (rank), the training thread's phase as
 * each stack's root frame. Reads only the run directory. */
#ifndef TPF_REPORT_FLAME_H
#define TPF_REPORT_FLAME_H

#include <stddef.h>

#include "util/buf.h"

#define FLAME_FILE "stacks.speedscope.json"

/* The CSP hash of the report's flame-graph script (flame.c flame_js): the
 * report's Content-Security-Policy allows that one script and no other.
 * tests/test_flame.py checks it against the script's SHA-256. */
#define FLAME_JS_SHA256 "sha256-SAh8UaCRQp8bTYDG9SuRBc8b2+WsvV6bPeS2nEBmUr4="

typedef struct flame_stack {
    size_t off;   /* its first frame in flame_set.fidx (outermost first) */
    int depth;    /* frames, the phase included */
    double count; /* samples */
} flame_stack;

typedef struct flame_proc {
    int pid, rank; /* rank -1: none known */
    int node;      /* which of the run directories (0 for one) */
    size_t first, n; /* its stacks: stk[first .. first + n) */
    double samples;
} flame_proc;

/* Every process's stacks, frames interned once over all of them. Owned by
 * the caller; flame_free releases it. */
typedef struct flame_set {
    char **label; /* frame labels as the folded files write them */
    size_t nframes, cap_frames;
    size_t *htab; /* open addressing over label: index + 1, 0 empty */
    size_t hcap;
    int *fidx;
    size_t nfidx, cap_fidx;
    flame_stack *stk;
    size_t nstk, cap_stk;
    flame_proc *proc;
    int nproc, cap_proc;
    long skipped; /* lines left out: damaged, too long or over a cap */
} flame_set;

/* Load pyprof/stacks-*.folded of each of dirs[0..ndirs) (the nodes of one
 * job, or one run) into fs, processes ordered by rank then pid. Returns 0
 * (fs->nproc 0 when no run has stacks) or TPF_ENOMEM; damaged lines and
 * files are skipped and counted. fs is ready for flame_free either way. */
int flame_load(flame_set *fs, const char *const *dirs, int ndirs);
void flame_free(flame_set *fs);

/* The speedscope document of fs (https://www.speedscope.app/file-format-schema.json):
 * shared frames, one "sampled" profile per process (unit "none": weights
 * are sample counts). title names the file's profile group. */
int flame_speedscope(const flame_set *fs, const char *title, buf *out);

/* RUN/stacks.speedscope.json from RUN's stacks, written atomically. Returns
 * 0 written, 1 nothing to write (no stacks), or an error with a one-line
 * reason in err. */
int flame_write_speedscope(const char *run_dir, char *err, size_t errlen);

/* The report's flame-graph section (a process picker, the SVG the script
 * draws into, the call trees as JSON and the script); nothing without
 * stacks. Each process's tree keeps its heaviest nodes up to a share of
 * FLAME_HTML_NODES, so the report stays small for many ranks. */
void flame_html(const flame_set *fs, buf *out);

#endif
