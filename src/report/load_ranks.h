/* Loading a run directory's rank files (load_ranks.c). */
#ifndef TPF_REPORT_LOAD_RANKS_H
#define TPF_REPORT_LOAD_RANKS_H

#include "report/report_load.h"

/* Read run_dir/comm/ops-*.csv into r (per op kind totals, per rank bytes and
 * bus bandwidth). Missing or damaged files are skipped. */
void rr_load_comm(diag_run *r, const char *run_dir);

/* Read run_dir/flops/flops-rank<R>-*.json (counted by `run --flops-step`,
 * or declared with trainperf.declare_flops) into the ranks of r: FLOPs per
 * step and the peak FLOP/s. A declared count wins over a counted one; of
 * counted ones the latest step. Damaged files are skipped. */
void rr_load_flops(diag_run *r, const char *run_dir);

/* Optimizer steps of the job: most steps of any rank (not a sum over ranks). */
double rr_global_steps(const diag_run *r);

/* comm/ops-<...>.csv: a name of the communication log's files. */
int rr_is_ops_name(const char *n);

#endif
