/* Live exporters (Prometheus, TensorBoard): sinks of the collector with one
 * shape, init / on_sample / on_step / on_alert / on_counter / flush / close,
 * registered in one static table (exporter.c). They all run on the collector
 * thread and must never block it: a slow or dead consumer loses updates and
 * counts them, the drain and the trainee never wait (docs/exporters.md). */
#ifndef TPF_RECORD_EXPORTER_H
#define TPF_RECORD_EXPORTER_H

#include <stdint.h>
#include <sys/types.h>

#include "collect/agg.h"
#include "collect/frame.h"
#include "watch/alerts.h"

/* What the exporters are asked to do, and what they may know of the run. */
typedef struct exp_ctx {
    const char *run_dir;
    const char *host;         /* node label */
    double start_unix_s;
    uint64_t start_mono_ns;
    double interval_s;
    const alert_set *alerts;  /* rule names for the firing gauges; may be NULL */
    int prom_fd;              /* listening socket (prom_listen) or -1: no Prometheus */
    int tensorboard;          /* write RUN/events.out.tfevents.* */
} exp_ctx;

/* One sample as the exporters see it. Valid during the call only. */
typedef struct exp_view {
    const coll_frame *f;
    const agg *a;             /* run totals, sketches, per-rank groups */
    const char *const *active; /* names of the alerts firing now */
    int nactive;
    int final;                /* the run's last sample */
} exp_view;

typedef struct exp_ops {
    const char *name;
    /* 0: on; 1: not asked for (skipped); < 0: cannot start (why in err). */
    int (*init)(void **st, const exp_ctx *ctx, char *err, size_t errlen);
    void (*on_sample)(void *st, const exp_view *v);
    void (*on_step)(void *st, const agg_step *s);           /* may be NULL */
    void (*on_alert)(void *st, const alert_event *e);       /* may be NULL */
    /* A probe counter (tpf_counter) of a rank (-1: none) or pid. */
    void (*on_counter)(void *st, int rank, pid_t pid, const char *name, double v); /* may be NULL */
    void (*flush)(void *st);                                 /* may be NULL */
    /* Updates lost to a slow consumer so far. */
    uint64_t (*lost)(void *st);
    void (*close)(void *st);
} exp_ops;

extern const exp_ops prom_exporter;
extern const exp_ops tfev_exporter;

#define EXP_MAX 4

typedef struct exp_set {
    const exp_ops *ops[EXP_MAX];
    void *st[EXP_MAX];
    int n;
    char status[EXP_MAX][160]; /* "ok", or why it could not start */
    const char *names[EXP_MAX];
    int nnames;
} exp_set;

/* Start every exporter ctx asks for; one that cannot start is recorded in
 * status and the run goes on without it. */
void exp_open(exp_set *s, const exp_ctx *ctx);
void exp_sample(exp_set *s, const exp_view *v);
void exp_step(exp_set *s, const agg_step *st);
void exp_alert(exp_set *s, const alert_event *e);
void exp_counter(exp_set *s, int rank, pid_t pid, const char *name, double v);
/* Flush and close every exporter; *lost gets the updates they lost. */
void exp_close(exp_set *s, uint64_t *lost);

/* ---- Prometheus helpers the CLI uses before anything starts ---- */

/* Parse "[HOST:]PORT" ("9400", "0.0.0.0:9400", "[::1]:9400"). host defaults
 * to 127.0.0.1. Returns 0 or TPF_EINVAL with err saying what is wrong. */
int prom_parse_addr(const char *s, char *host, size_t hostlen, int *port, char *err, size_t errlen);
/* A listening socket (close-on-exec) on host:port; port 0 picks a free one
 * and *bound_port says which. Returns the fd or a negative TPF_E code with
 * err saying why. */
int prom_listen(const char *host, int port, int *bound_port, char *err, size_t errlen);

#endif
