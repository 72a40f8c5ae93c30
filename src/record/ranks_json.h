/* Per-rank and job-wide step figures in summary.json (see ranks_json.c). */
#ifndef TPF_RECORD_RANKS_JSON_H
#define TPF_RECORD_RANKS_JSON_H

#include "core/figs.h"
#include "util/jsonw.h"

/* Keys of one steps.per_rank entry beyond the basic ones. */
void rec_rank_extra(jw *w, const agg_group *g);
/* steps.global_steps: optimizer steps of the job (most steps of any rank). */
void rec_global_steps(jw *w, const figs *a);

#endif
