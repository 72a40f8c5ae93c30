/* The live status line's data, kept by a sink (rec_sink_status, one line of
 * rec_sinks): the latest sample and the alerts firing now. The sink fills it
 * on the collector thread; the CLI, which owns the terminal, reads it from
 * its own thread and draws the line (the library never prints). */
#ifndef TPF_RECORD_STATUS_H
#define TPF_RECORD_STATUS_H

#include <pthread.h>

#include "core/sink.h"

#define REC_STATUS_ALERTS 160   /* "rule, rule, ..." cut to this size */
#define REC_STATUS_MAX_ACTIVE 32

typedef struct rec_status {
    pthread_mutex_t mu;         /* guards have, frame, alerts */
    int have;                   /* a sample was taken */
    coll_frame frame;           /* per-process lists (tree_pids, procs) left out */
    char alerts[REC_STATUS_ALERTS];
    /* collector thread only */
    const char *active[REC_STATUS_MAX_ACTIVE]; /* rule names, owned by the alert set */
    int nactive;
} rec_status;

/* Owned by the caller, who hands it to the sink through
 * rec_export_config.status and destroys it after the collector. */
void rec_status_init(rec_status *s);
void rec_status_destroy(rec_status *s);
/* A copy of the latest sample and the firing alerts' names (any thread).
 * Returns 0, or TPF_ESTATE before the first sample. */
int rec_status_get(rec_status *s, coll_frame *f, char alerts[REC_STATUS_ALERTS]);

/* Not wanted unless rec_export_config.status is set (embedded mode has no
 * status line). */
extern const sink_ops rec_sink_status;

#endif
