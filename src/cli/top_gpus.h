#ifndef TPF_CLI_TOP_GPUS_H
#define TPF_CLI_TOP_GPUS_H

#include "cli/top_ranks.h"
#include "collect/nvml.h"

/* `trainperf top`: one row per GPU of this node as NVML sees it now (util,
 * memory, name), and under it one row per process on it, as nvitop shows
 * them: pid, rank (steps.csv's, through pids; "run" for another process of
 * the run's tree, procs.csv's last sample; "-" for a process not the run's),
 * memory, SM share since the last refresh, command name. NVML pids are the
 * host's: a run pid matches through every PID namespace it has (NSpid).
 * Returns the GPUs shown (0: none, nothing printed). */
int top_gpus_print(nvml_top *nv, const char *dir, const top_pids *pids, int color);

#endif
