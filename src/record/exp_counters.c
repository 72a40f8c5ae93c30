/* Probe counters for the exporters (see exp_counters.h). */
#include "record/exp_counters.h"

#include <stdio.h>
#include <string.h>

exp_counter *exp_counters_find(exp_counters *x, const char *name, int rank, pid_t pid)
{
    for (int i = 0; i < x->n; i++) {
        exp_counter *c = &x->c[i];
        if (c->rank == rank && (rank >= 0 || c->pid == pid) && strcmp(c->name, name) == 0) return c;
    }
    return NULL;
}

static int rank_of_pid(const exp_counters *x, pid_t pid)
{
    for (int i = 0; i < x->nranks; i++)
        if (x->rank_pid[i] == pid) return x->rank_of[i];
    return -1;
}

void exp_counters_probe(exp_counters *x, const sink_probe *e)
{
    if (e->kind == SINK_PROCESS && e->rank >= 0 && x->nranks < AGG_MAX_GROUPS) {
        x->rank_pid[x->nranks] = e->pid;
        x->rank_of[x->nranks++] = e->rank;
        return;
    }
    if (e->kind != SINK_COUNTER || !e->name) return;
    int rank = rank_of_pid(x, e->pid);
    exp_counter *c = exp_counters_find(x, e->name, rank, e->pid);
    if (!c) {
        if (x->n == EXP_MAX_COUNTERS || strlen(e->name) >= sizeof(x->c[0].name)) {
            x->dropped++;
            return;
        }
        c = &x->c[x->n++];
        snprintf(c->name, sizeof(c->name), "%s", e->name);
        c->rank = rank;
        c->pid = e->pid;
    }
    c->v = e->value;
    c->fresh = 1;
}

void exp_counters_on_probe(void *st, const sink_probe *e) { exp_counters_probe(st, e); }
