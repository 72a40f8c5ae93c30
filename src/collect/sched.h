/* Who got the CPU: the watched tree's run-queue wait (schedstat), its
 * runnable threads, the CPUs it may use (affinity, cgroup quota) and cgroup
 * throttling. Contention and oversubscription are told apart from compute by
 * these (docs/diagnosis.md). Runs after procfs (it needs tree_pids). */
#ifndef TPF_COLLECT_SCHED_H
#define TPF_COLLECT_SCHED_H

#include "core/frame.h"

extern const src_ops sched_source;

#endif
