/* Live exporters (Prometheus, TensorBoard): sinks of the run (core/sink.h),
 * listed in record/sinks.c rec_sinks. They run on the collector thread and
 * never block it: a slow or dead consumer loses updates and counts them
 * (sink_tally.exporter_lost); the drain and the trainee never wait
 * (docs/exporters.md). */
#ifndef TPF_RECORD_EXPORTER_H
#define TPF_RECORD_EXPORTER_H

#include <stddef.h>

#include "core/sink.h"

struct rec_status;

/* What coll_opts.sink_config points to: the options of the sinks a run may
 * leave out (exporters, the status line). */
typedef struct rec_export_config {
    int prom_fd;          /* listening socket (prom_listen), owned by the sink from
                           * its init on; -1: no Prometheus endpoint */
    int tensorboard;      /* write RUN/events.out.tfevents.* */
    struct rec_status *status; /* the status line's data (record/status.h); NULL: none */
} rec_export_config;

extern const sink_ops rec_sink_prometheus;
extern const sink_ops rec_sink_tensorboard;

/* Parse "[HOST:]PORT" ("9400", "0.0.0.0:9400", "[::1]:9400"). host defaults
 * to 127.0.0.1. Returns 0 or TPF_EINVAL with err saying what is wrong. */
int prom_parse_addr(const char *s, char *host, size_t hostlen, int *port, char *err, size_t errlen);
/* A listening socket (close-on-exec, non-blocking) on host:port; port 0 picks
 * a free one and *bound_port says which. Returns the fd or a negative TPF_E
 * code (TPF_EBUSY: address in use) with err saying why. */
int prom_listen(const char *host, int port, int *bound_port, char *err, size_t errlen);

#endif
