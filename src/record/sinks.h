/* The run directory's sinks (core/sink.h): one per file. rec_sinks is the
 * one table of a run's sinks, in the order they are called and closed (the
 * trace before summary.json, which reports the trace's counts). A new sink
 * (an exporter) is one ops struct and one line in rec_sinks (record/sinks.c). */
#ifndef TPF_RECORD_SINKS_H
#define TPF_RECORD_SINKS_H

#include <stddef.h>

#include "core/sink.h"

extern const sink_ops rec_sink_reserve;  /* space kept for the last files (safeout.h) */
extern const sink_ops rec_sink_metrics;  /* metrics.csv */
extern const sink_ops rec_sink_procs;    /* procs.csv */
extern const sink_ops rec_sink_steps;    /* steps.csv */
extern const sink_ops rec_sink_gpu_steps; /* gpu_steps.csv (GPU runs only) */
extern const sink_ops rec_sink_alerts;   /* alerts.jsonl */
extern const sink_ops rec_sink_trace;    /* trace.json */
extern const sink_ops rec_sink_summary;  /* run.json (first sample, end), summary.json (end) */
/* and, declared beside their options: rec_sink_prometheus,
 * rec_sink_tensorboard (exporter.h), rec_sink_status (status.h) */

extern const sink_ops *const rec_sinks[];
extern const size_t rec_nsinks;

#endif
