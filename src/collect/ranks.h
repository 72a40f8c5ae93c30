/* Live per-rank figures (see ranks.c). */
#ifndef TPF_COLLECT_RANKS_H
#define TPF_COLLECT_RANKS_H

#include "collect/agg.h"
#include "core/frame.h"

/* Fill f's straggler fields from the ranks' figures since the previous call
 * and start a new interval. Leaves them unknown with fewer than two ranks. */
void ranks_live(agg *a, coll_frame *f);

#endif
