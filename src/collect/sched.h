/* Who got the CPU: the watched tree's run-queue wait (schedstat), its
 * runnable threads, the CPUs it may use (affinity, cgroup quota) and cgroup
 * throttling. Contention and oversubscription are told apart from compute by
 * these (docs/diagnosis.md). Runs after procfs (it needs tree_pids). */
#ifndef TPF_COLLECT_SCHED_H
#define TPF_COLLECT_SCHED_H

#include "core/frame.h"

extern const src_ops sched_source;

/* The run-queue wait of one process of the tree (all its threads) over the
 * last sample's interval, % of one core; unknown when the source did not
 * sample it or on the first sample. Collector thread only. */
fval sched_proc_runq(void *state, pid_t pid);

#endif
