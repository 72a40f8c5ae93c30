/* The live status line's sink (status.h). */
#include "record/status.h"

#include <stdio.h>
#include <string.h>

#include "record/exporter.h"
#include "trainperf.h"

void rec_status_init(rec_status *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
}

void rec_status_destroy(rec_status *s) { pthread_mutex_destroy(&s->mu); }

int rec_status_get(rec_status *s, coll_frame *f, char alerts[REC_STATUS_ALERTS])
{
    pthread_mutex_lock(&s->mu);
    int ok = s->have;
    if (ok) {
        memcpy(f, &s->frame, sizeof(*f));
        if (alerts) memcpy(alerts, s->alerts, REC_STATUS_ALERTS);
    }
    pthread_mutex_unlock(&s->mu);
    return ok ? 0 : TPF_ESTATE;
}

static int status_init(void **st, const sink_ctx *ctx)
{
    const rec_export_config *cfg = ctx->config;
    if (!cfg || !cfg->status) return 1;
    *st = cfg->status;
    return 0;
}

static void status_alert(void *st, const alert_event *e)
{
    rec_status *s = st;
    int i;
    for (i = 0; i < s->nactive; i++)
        if (strcmp(s->active[i], e->rule) == 0) break;
    if (e->fired && i == s->nactive && s->nactive < REC_STATUS_MAX_ACTIVE) s->active[s->nactive++] = e->rule;
    if (!e->fired && i < s->nactive) s->active[i] = s->active[--s->nactive];
}

/* After the sample's alerts: the sample and what fires now, in one step. */
static void status_flush(void *st, const sink_run *run)
{
    rec_status *s = st;
    if (!run->frame) return;
    pthread_mutex_lock(&s->mu);
    memcpy(&s->frame, run->frame, sizeof(s->frame));
    s->frame.tree_pids = NULL; /* valid during the sample only */
    s->frame.procs = NULL;
    s->frame.nprocs = 0;
    s->have = 1;
    size_t off = 0;
    s->alerts[0] = 0;
    for (int i = 0; i < s->nactive && off + 1 < sizeof(s->alerts); i++) {
        int w = snprintf(s->alerts + off, sizeof(s->alerts) - off, "%s%s", i ? ", " : "",
                         s->active[i]);
        if (w < 0) break;
        off += (size_t)w < sizeof(s->alerts) - off ? (size_t)w : sizeof(s->alerts) - off - 1;
    }
    pthread_mutex_unlock(&s->mu);
}

/* The state is the caller's: nothing to free. */
static void status_close(void *st, const sink_run *run) {}

const sink_ops rec_sink_status = {
    .name = "status",
    .init = status_init,
    .on_alert = status_alert,
    .flush = status_flush,
    .close = status_close,
};
