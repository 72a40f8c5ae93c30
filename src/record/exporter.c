/* The exporter table (see exporter.h). */
#include <stdio.h>
#include <string.h>

#include "record/exporter.h"
#include "trainperf.h"

/* Registered explicitly, in call order. */
static const exp_ops *const exp_table[] = {&prom_exporter, &tfev_exporter};
#define EXP_NTABLE (int)(sizeof(exp_table) / sizeof(exp_table[0]))

void exp_open(exp_set *s, const exp_ctx *ctx)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < EXP_NTABLE && s->n < EXP_MAX; i++) {
        const exp_ops *o = exp_table[i];
        void *st = NULL;
        char err[160] = "";
        int rc = o->init(&st, ctx, err, sizeof(err));
        if (rc == 1) continue;
        s->names[s->nnames] = o->name;
        if (rc < 0) {
            snprintf(s->status[s->nnames], sizeof(s->status[0]), "%s", err[0] ? err : tpf_strerror(rc));
            s->nnames++;
            continue;
        }
        snprintf(s->status[s->nnames], sizeof(s->status[0]), "ok");
        s->nnames++;
        s->ops[s->n] = o;
        s->st[s->n] = st;
        s->n++;
    }
}

void exp_sample(exp_set *s, const exp_view *v)
{
    for (int i = 0; i < s->n; i++) {
        s->ops[i]->on_sample(s->st[i], v);
        if (s->ops[i]->flush) s->ops[i]->flush(s->st[i]);
    }
}

void exp_step(exp_set *s, const agg_step *st)
{
    for (int i = 0; i < s->n; i++)
        if (s->ops[i]->on_step) s->ops[i]->on_step(s->st[i], st);
}

void exp_alert(exp_set *s, const alert_event *e)
{
    for (int i = 0; i < s->n; i++)
        if (s->ops[i]->on_alert) s->ops[i]->on_alert(s->st[i], e);
}

void exp_counter(exp_set *s, int rank, pid_t pid, const char *name, double v)
{
    if (!name) return;
    for (int i = 0; i < s->n; i++)
        if (s->ops[i]->on_counter) s->ops[i]->on_counter(s->st[i], rank, pid, name, v);
}

void exp_close(exp_set *s, uint64_t *lost)
{
    uint64_t l = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->ops[i]->flush) s->ops[i]->flush(s->st[i]);
        if (s->ops[i]->lost) l += s->ops[i]->lost(s->st[i]);
        s->ops[i]->close(s->st[i]);
    }
    s->n = 0;
    if (lost) *lost = l;
}
