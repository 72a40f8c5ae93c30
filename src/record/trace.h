/* trace.json: Chrome/Perfetto trace in JSON array form, written as the run
 * goes (docs/run-format.md). Events gather in a capped buffer and go to the
 * file whole lines at a time, so a run that dies still leaves a loadable file
 * (a missing ']' is legal in array form). The writing is done by a thread of
 * its own: the collector's drain, which keeps the probes' rings from filling,
 * must never wait on the disk (a trace can take 200 MB/s, and the kernel
 * throttles such writers for 100 ms and more). When that thread falls behind,
 * range and step events are dropped and counted, never the run's data. */
#ifndef TPF_RECORD_TRACE_H
#define TPF_RECORD_TRACE_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/figs.h"
#include "core/frame.h"
#include "core/sink.h"
#include "util/buf.h"

struct seg_event;

#define REC_TRACE_MAX_EVENTS 2000000u
#define REC_TRACE_GPU_TRACKS 64

typedef struct rec_trace {
    int fd;                  /* -1 when closed or never opened */
    uint64_t start_mono_ns;  /* ts = 0 */
    uint64_t max_events;     /* range + step events written at most */
    uint64_t written, dropped;         /* range + step events */
    uint64_t other_written, other_dropped; /* counters, marks, metadata */
    int nevents;             /* any event written yet (comma placement) */
    int err;                 /* first write error (sticky); writing goes on */
    uint64_t size;           /* bytes on disk: whole events only (safeout.h) */
    uint64_t lost_events;    /* events a failed write lost (disk full) */
    buf pending;             /* being filled by the collector thread */
    buf inflight;            /* being written by the writer thread */
    pthread_t writer;
    pthread_mutex_t mu;      /* guards busy, quit, err, inflight */
    pthread_cond_t cv;
    int has_writer, busy, quit;
    /* GPU records: a budget of their own (a launch-bound run makes 100k
     * kernels a second: they must not crowd out the host's ranges), and the
     * tracks already named */
    uint64_t gpu_written, gpu_dropped;
    struct {
        pid_t pid;
        int32_t tid;
    } gpu_tracks[REC_TRACE_GPU_TRACKS];
    int ngpu_tracks;
    char path[4096];         /* as opened: removed at close when not even "[]" fitted */
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
/* A GPU record (SEG_EV_GPU_*: a kernel, copy, memset or host wait) of
 * process pid, on a track per device and stream ("GPU 0 stream 7") under
 * the process, on the host's clock. name: the kernel's (NULL otherwise or
 * unknown). At most max_events / 4 of them. */
void rec_trace_gpu(rec_trace *t, pid_t pid, const struct seg_event *ev, const char *name);
void rec_trace_alert(rec_trace *t, const alert_event *e);
/* Hand what is pending to the writer thread (or write it, when the thread
 * could not start); returns at once when the writer is still busy. Returns 0
 * or the sticky error. */
int rec_trace_flush(rec_trace *t);
/* Write everything, the closing ']', stop the writer, close. Returns 0 or
 * the sticky error. */
int rec_trace_close(rec_trace *t);

#endif
