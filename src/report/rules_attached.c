/* The verdicts of an attached run (`trainperf attach`): from the training
 * threads' Python stacks, read from outside by py-spy (pyprof/attach.json),
 * where `trainperf run` has the hook's steps and phases. Each names the share
 * of the training thread's samples it explains; thresholds in
 * docs/diagnosis.md ("Attached runs"). */
#include <math.h>
#include <string.h>

#include "report/rules.h"

/* the user's line the training thread was in most, as evidence */
static void top_line(const dattach *a, dfinding *d)
{
    if (!a->top_func[0] || !(a->top_samples > 0) || !(a->samples > 0)) return;
    const char *base = strrchr(a->top_file, '/');
    ev(d, "top_line_share", a->top_samples / a->samples,
       "%.0f%% of the samples in %s (%s:%d), %s", 100 * a->top_samples / a->samples, a->top_func,
       base ? base + 1 : a->top_file, a->top_line, a->top_phase[0] ? a->top_phase : "other");
}

int dr_att_input(const diag_run *r, const dctx *c, dfinding *d)
{
    const dattach *a = &r->at;
    if (!a->have || !(a->samples >= ATT_MIN_SAMPLES)) return 0;
    double sh = a->ph[DA_DATA] / a->samples;
    if (!(sh >= INPUT_SHARE)) return 0;
    diag_head(d, "input-bound", "Input-bound (from the stacks)", sh,
              "the training thread waited in the DataLoader's next batch in %.0f%% of %.0f stack "
              "samples",
              100 * sh, a->samples);
    ev(d, "data_share_stacks", sh,
       "%.0f%% of the training thread's samples were inside the DataLoader iterator's __next__",
       100 * sh);
    rec(d, "Load batches ahead of the training loop: more DataLoader workers (num_workers), "
           "persistent_workers=True, and a cheaper __getitem__ (decode or fetch less per sample).");
    rec(d, "`trainperf run` on the same script measures the data wait of every step and what "
           "the loader's workers do (attached, only the stacks tell it).");
    return 1;
}

int dr_att_hostcode(const diag_run *r, const dctx *c, dfinding *d)
{
    const dattach *a = &r->at;
    if (!a->have || !(a->samples >= ATT_MIN_SAMPLES)) return 0;
    double sh = a->ph[DA_OTHER] / a->samples;
    if (!(sh >= ATT_HOSTCODE_SHARE)) return 0;
    diag_head(d, "host-code", "Host code (from the stacks)", sh,
              "the training thread was outside the DataLoader, the model's forward, the backward "
              "and the optimizer in %.0f%% of %.0f stack samples",
              100 * sh, a->samples);
    ev(d, "other_share_stacks", sh,
       "%.0f%% of the training thread's samples outside the loader, the modules, backward and "
       "torch.optim",
       100 * sh);
    top_line(a, d);
    rec(d, "Look at the lines named above: Python work between the steps (logging, metrics, "
           "conversions, .item() or .cpu() calls) is time no step computes.");
    rec(d, "Attached, a line of the script that calls tensor ops itself (a loss, a metric) counts "
           "here too: `trainperf run` tells the two apart.");
    return 1;
}

void dr_att_healthy(const diag_run *r, const dctx *c, dfinding *d)
{
    const dattach *a = &r->at;
    double model = (a->ph[DA_FORWARD] + a->ph[DA_BACKWARD] + a->ph[DA_OPTIMIZER]) / a->samples;
    if (model >= ATT_MODEL_SHARE) {
        diag_head(d, "compute-bound", "Compute-bound (from the stacks)", 0,
                  "the training thread was in the model's forward, the backward and the optimizer "
                  "in %.0f%% of %.0f stack samples; no input or host-code limit in the stacks",
                  100 * model, a->samples);
        ev(d, "model_share_stacks", model,
           "%.0f%% of the training thread's samples in forward, backward and optimizer",
           100 * model);
        return;
    }
    diag_head(d, "undetermined", "No limit found in the stacks", 0,
              "the training thread's %.0f samples spread over the loader (%.0f%%), the model "
              "(%.0f%%) and other code (%.0f%%), none enough to name a bottleneck",
              a->samples, 100 * a->ph[DA_DATA] / a->samples, 100 * model,
              100 * a->ph[DA_OTHER] / a->samples);
    top_line(a, d);
    rec(d, "`trainperf run` on the same script times every step and its phases.");
}
