/* trace.json: Chrome/Perfetto trace in JSON array form, written as the run
 * goes (docs/run-format.md). Events gather in a capped buffer and go to the
 * file at each rec_trace_flush, whole lines at a time, so a run that dies
 * still leaves a loadable file (a missing ']' is legal in array form). */
#ifndef TPF_RECORD_TRACE_H
#define TPF_RECORD_TRACE_H

#include <stdint.h>
#include <sys/types.h>

#include "collect/agg.h"
#include "collect/frame.h"
#include "util/buf.h"
#include "watch/alerts.h"

#define REC_TRACE_MAX_EVENTS 2000000u

typedef struct rec_trace {
    int fd;                  /* -1 when closed or never opened */
    uint64_t start_mono_ns;  /* ts = 0 */
    uint64_t max_events;     /* range + step events written at most */
    uint64_t written, dropped;         /* range + step events */
    uint64_t other_written, other_dropped; /* counters, marks, metadata */
    int nevents;             /* any event written yet (comma placement) */
    int err;                 /* first write error (sticky); writing goes on */
    buf pending;
} rec_trace;

/* Create path and write the opening '['. max_events 0: REC_TRACE_MAX_EVENTS. */
int rec_trace_open(rec_trace *t, const char *path, uint64_t start_mono_ns, uint64_t max_events);
/* Process metadata: "rank R (pid P)" or "pid P"; pid 0 is "trainperf". */
void rec_trace_process(rec_trace *t, pid_t pid, int rank);
void rec_trace_step(rec_trace *t, const agg_step *s);
/* name: the range's string (NULL: "range <id>"). */
void rec_trace_range(rec_trace *t, const agg_range *r, const char *name);
/* Resource and throughput counters of a frame on pid 0 (metric table groups);
 * GPU counters "gpu<k>" as metrics.csv columns (gpu_index as there, NULL:
 * frame positions). */
void rec_trace_frame(rec_trace *t, const coll_frame *f, int ngpu, const int *gpu_index);
void rec_trace_counter(rec_trace *t, pid_t pid, const char *name, uint64_t ts_ns, double v);
void rec_trace_mark(rec_trace *t, pid_t pid, pid_t tid, const char *name, uint64_t ts_ns);
void rec_trace_alert(rec_trace *t, const alert_event *e);
/* Write what is pending to the file. Returns 0 or the sticky error. */
int rec_trace_flush(rec_trace *t);
/* Flush, write the closing ']', close. Returns 0 or the sticky error. */
int rec_trace_close(rec_trace *t);

#endif
