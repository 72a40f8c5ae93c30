/* The probe counters a live exporter keeps (Prometheus, TensorBoard): one
 * series per name and rank (per pid for a process without a rank), the last
 * value of each, and the pid -> rank map the segments announce. Shared so
 * both exporters key and cap their series the same way. */
#ifndef TPF_RECORD_EXP_COUNTERS_H
#define TPF_RECORD_EXP_COUNTERS_H

#include <stdint.h>
#include <sys/types.h>

#include "core/figs.h"
#include "core/sink.h"

#define EXP_MAX_COUNTERS 64 /* series (name x rank): exporters want few labels */

typedef struct exp_counter {
    char name[64];
    int rank; /* -1: none (then pid tells the series apart) */
    pid_t pid;
    double v;
    int fresh; /* set on update; the exporter clears it once written */
} exp_counter;

typedef struct exp_counters {
    exp_counter c[EXP_MAX_COUNTERS];
    int n;
    uint64_t dropped; /* updates of series over the cap (or names too long) */
    pid_t rank_pid[AGG_MAX_GROUPS];
    int rank_of[AGG_MAX_GROUPS];
    int nranks;
} exp_counters;

/* Take a probe event: SINK_PROCESS records the pid's rank, SINK_COUNTER
 * updates (or adds) its series; other kinds are ignored. */
void exp_counters_probe(exp_counters *x, const sink_probe *e);
/* The same as a sink_ops on_probe, for a sink whose state starts with its
 * exp_counters (the Prometheus and TensorBoard sinks). */
void exp_counters_on_probe(void *st, const sink_probe *e);
/* The series of name for rank (or pid when rank < 0); NULL when none. */
exp_counter *exp_counters_find(exp_counters *x, const char *name, int rank, pid_t pid);

#endif
