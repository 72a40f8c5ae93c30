/* Finishing a run whose collector was killed (SIGKILL, the OOM killer):
 * `trainperf report DIR` calls this before it reports. What the collector
 * had drained is already on disk (flushed every drain period); what it had
 * not is still in the probes' rings (the segment directory run.json names,
 * record/segdir.h, or DIR/live), and is drained here; a segment directory
 * is removed once drained, unless a process of the run still writes to it. */
#ifndef TPF_RECORD_RECOVER_H
#define TPF_RECORD_RECOVER_H

#include <stddef.h>
#include <stdint.h>

typedef struct rec_recovery {
    int segments;          /* segments drained */
    uint64_t steps_before; /* step rows the collector had written */
    uint64_t steps;        /* step rows added from the rings */
    uint64_t gpu_steps;    /* gpu_steps.csv rows added from the rings */
    uint64_t dropped;      /* events the probes dropped (full rings) */
    int trace_repaired;    /* trace.json cut back to whole events and closed */
    int earlier;           /* recovered before (recovered.json there, by a sweep
                            * or a report that could not finish it) but never
                            * finished: nothing drained now, the rest is zero */
} rec_recovery;

/* Recover dir when it was left unfinished (run.json without summary.json,
 * and no live collector holds its lock). Returns 1 when it recovered (info
 * filled, DIR/recovered.json written) or finds it recovered earlier and
 * still without summary.json (info->earlier): either way the caller writes
 * the summary and reports next (report_finish_run). 0 when there was nothing
 * to do (a finished run, or one still being collected), or a TPF_E* code
 * with a reason in err. */
int rec_recover(const char *dir, rec_recovery *info, char *err, size_t errlen);

/* The segment directories of dead runs (record/segdir.h, rec_segdir_sweep):
 * each run that can still be recovered is (its rings drained into its
 * steps.csv), then its segments go; one whose recovery fails keeps them for a
 * later try. recovered (may be NULL) is called with each run directory
 * recovered, for its summary and reports (the report layer's, above this
 * one). Returns how many directories were removed. */
typedef void (*rec_recovered_fn)(const char *run_dir, const rec_recovery *info, void *ctx);
int rec_sweep_dead_runs(rec_recovered_fn recovered, void *ctx);

#endif
