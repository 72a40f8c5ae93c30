#ifndef TPF_CLI_TOP_RANKS_H
#define TPF_CLI_TOP_RANKS_H

/* `trainperf top`: one row per rank (or rank-less process) from the tail of
 * RUN/steps.csv: steps done, recent step time, data wait, samples/s, how far
 * behind the leading rank, time since its last step. now_t: the run's time
 * (metrics.csv's last t; NaN when unknown). Prints nothing without steps. */
void top_ranks_print(const char *dir, double now_t, int color);

#endif
