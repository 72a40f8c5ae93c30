/* Compile rules: torch.compile recompiling (recompile).
 * Entries of diag_rules[] (diag.c); thresholds in rule_util.h and
 * docs/diagnosis.md. */
#include "report/rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"

static int partial_batch_reason(const char *why)
{
    return strstr(why, "size") && (strstr(why, "[0]") || strstr(why, "index 0") ||
                                   strstr(why, "dim 0") || strstr(why, "size()[0]"));
}

int dr_cand_compile(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    if (!c->have_pyprof || !(c->recompiles >= 1)) return 0;
    double total_s = isfinite(r->duration_s) && r->duration_s > 0 ? r->duration_s : NAN;
    double recomp_s = 0;
    for (int i = 0; i < c->ncomp; i++)
        if (c->comp[i].what[0]) recomp_s += c->comp[i].dur;
    double score = isfinite(total_s) ? recomp_s / total_s : 0.2;
    diag_head(d, "recompile", "torch.compile recompiles", fmin(fmax(score, 0.15), 0.9),
              "the model was recompiled %.0f time%s (%.1f s)%s%s", c->recompiles,
              c->recompiles == 1 ? "" : "s", recomp_s, c->recompile_reason[0] ? ": " : "",
              c->recompile_reason);
    ev(d, "compile_s", c->compile_s, "compiling took %.1f s in all (%.0f frames)", c->compile_s,
       c->compile_frames);
    ev(d, "recompiles", c->recompiles, "%.0f recompile%s, %.1f s", c->recompiles,
       c->recompiles == 1 ? "" : "s", recomp_s);
    if (c->recompile_reason[0])
        ev(d, "recompile_reason", NAN, "guard failure: %s", c->recompile_reason);
    if (partial_batch_reason(c->recompile_reason)) {
        rec(d, "A batch of another size (the last, partial batch of an epoch) recompiled the "
               "model: DataLoader(drop_last=True) keeps every batch the same size.");
        rec(d, "Or compile for varying batch sizes once: torch._dynamo.mark_dynamic(x, 0) on "
               "the input, or torch.compile(model, dynamic=True).");
    } else {
        rec(d, "Keep what the guards check stable between steps (shapes, dtypes, Python "
               "scalars passed to the model), or mark varying dimensions dynamic "
               "(torch._dynamo.mark_dynamic).");
        rec(d, "TORCH_LOGS=recompiles prints every guard failure with its source line.");
    }
    return 1;
}
