#ifndef TPF_CLI_TOP_RANKS_H
#define TPF_CLI_TOP_RANKS_H

/* The processes steps.csv's tail names and their ranks (-1: none), for the
 * GPU rows (top_gpus.h) */
#define TOP_PIDS_MAX 256
typedef struct top_pids {
    int n;
    long pid[TOP_PIDS_MAX];
    int rank[TOP_PIDS_MAX];
} top_pids;

/* `trainperf top`: one row per rank (or rank-less process) from the tail of
 * RUN/steps.csv: steps done, recent step time, data wait, samples/s, how far
 * behind the leading rank, time since its last step. now_t: the run's time
 * (metrics.csv's last t; NaN when unknown). Prints nothing without steps.
 * pids (may be NULL) gets every process the tail names. */
void top_ranks_print(const char *dir, double now_t, int color, top_pids *pids);

#endif
