/* Settings rules: debugging and profiling aids left on (anomaly-detection,
 * profiler, python-tracer, debug-settings) and training set up wrong
 * (unused-gradients, eval-grad, optimizer-remade).
 * Entries of diag_rules[] (diag.c); thresholds in rule_util.h and
 * docs/diagnosis.md. */
#include "report/rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainperf.h"

#define OPT_REMADE_MIN 10     /* steps, and optimizers made while training */
#define OPT_REMADE_SHARE 0.5  /* optimizers made per step */

int dr_cand_anomaly(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    double train = c->ph_train + c->ph_compile;
    /* the flag was seen on while training, and the sampler found the
     * training thread taking tracebacks for autograd ops */
    if (!(c->anomaly_ticks >= 1) || !(train >= HOSTCODE_MIN_SAMPLES) || !(c->anomaly_samples > 0))
        return 0;
    double share = c->anomaly_samples / train;
    if (share > 0.9) share = 0.9;
    double on = c->set_ticks > 0 ? c->anomaly_ticks / c->set_ticks : NAN;
    diag_head(d, "anomaly-detection", "Autograd anomaly detection is on", share,
              "anomaly detection (torch.autograd.set_detect_anomaly(True) or detect_anomaly()) "
              "was on while the model trained: every op of the forward records a Python "
              "traceback (at least %.0f%% of the training thread's time) and backward checks "
              "every gradient for NaN",
              100 * share);
    ev(d, "anomaly_traceback_share", share,
       "%.0f%% of the training samples were taking a traceback for an autograd op "
       "(torch.fx.traceback.format_stack); the NaN checks in backward come on top",
       100 * share);
    if (isfinite(on))
        ev(d, "anomaly_on_share", on, "anomaly detection was on at %.0f%% of the checks while "
                                      "training (every 0.5 s)",
           100 * on);
    rec(d, "Turn it off for training runs: remove torch.autograd.set_detect_anomaly(True) / "
           "with torch.autograd.detect_anomaly(), or guard it behind a debug flag. It is a "
           "debugging aid that finds the op that made a NaN.");
    rec(d, "To catch NaNs cheaply instead, check the loss (torch.isfinite(loss)) every N steps "
           "and turn anomaly detection on only to find the op once a NaN appears.");
    return 1;
}

/* Seconds of [s, e] that the script's own torch.profiler recorded. */
static double prof_overlap(const dcause *c, double s, double e)
{
    double on = 0;
    for (int i = 0; i < c->nprof; i++) {
        double a = c->prof[i].t > s ? c->prof[i].t : s;
        double b = c->prof[i].t + c->prof[i].dur < e ? c->prof[i].t + c->prof[i].dur : e;
        if (b > a) on += b - a;
    }
    return on;
}

int dr_cand_profiler(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    double s = r->first_start_s, e = r->last_end_s;
    if (!c->nprof || !isfinite(s) || !isfinite(e) || !(e > s)) return 0;
    double on = prof_overlap(c, s, e) / (e - s);
    /* windows of a few steps are profiling done right (their slow steps
     * are named in the step-time finding); recording most of the training
     * slows every step it records */
    if (!(on >= PROF_MIN_SHARE)) return 0;
    double proc = c->hz > 0 ? c->prof_samples / c->hz : NAN;
    diag_head(d, "profiler", "torch.profiler recorded the training", PROF_COST * on,
              "the profiler (torch.profiler) recorded %.0f%% of the training: it records every op "
              "(more with record_shapes, with_stack or profile_memory), so each step it records "
              "is slower than the same step unprofiled, and every figure here includes that",
              100 * on);
    ev(d, "profiler_on_share", on, "the profiler recorded %.0f%% of the time between the first "
                                   "step and the last",
       100 * on);
    if (proc >= 1)
        ev(d, "profiler_processing_s", proc,
           "%.1f s in the profiler's own Python code (turning its records into events, "
           "tables and traces)",
           proc);
    rec(d, "Record a few steps, not the run: torch.profiler.profile(schedule=torch.profiler."
           "schedule(wait=1, warmup=1, active=3, repeat=1), ...) with prof.step() after each "
           "step, or `trainperf run --profile 1,1,3 -- ...` with no code change.");
    rec(d, "Keep the profiler out of training runs whose speed matters (behind a flag).");
    return 1;
}

int dr_cand_tracer(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    if (!(c->set_ticks >= TRACER_MIN_TICKS) || !(c->tracer_ticks >= 0.5 * c->set_ticks))
        return 0;
    const char *k = c->tracer_kind;
    int dbg = strcmp(k, "debugger") == 0, cov = strcmp(k, "coverage") == 0,
        prof = strcmp(k, "profiler") == 0;
    double on = c->tracer_ticks / c->set_ticks;
    diag_head(d, "python-tracer",
              dbg ? "A debugger traces the training" : cov ? "Coverage measurement is on"
              : prof ? "A Python profiler is on" : "A Python trace function is on",
              (strcmp(c->tracer_how, "sys.setprofile") == 0 ? TRACER_COST_CALL
                                                               : TRACER_COST_LINE) * on,
              "%s (%s, through %s) was hooked into the training thread at %.0f%% of the checks: "
              "every Python %s calls into it, so the loop's Python runs slower and every "
              "figure here includes that",
              dbg ? "a debugger" : cov ? "coverage" : prof ? "a profiler" : "a trace function",
              c->tracer, c->tracer_how[0] ? c->tracer_how : "a hook", 100 * on,
              strcmp(c->tracer_how, "sys.setprofile") == 0 ? "call" : "call and line");
    ev(d, "tracer_on_share", on, "%s was on at %.0f%% of the checks while training (every 0.5 s)",
       c->tracer, 100 * on);
    if (dbg)
        rec(d, "Time training outside the debugger (run it plainly, not from the IDE's debug "
               "launcher); a breakpoint anywhere keeps the tracer on for every line.");
    else if (cov)
        rec(d, "Measure coverage on a short test run, not on training runs.");
    else
        rec(d, "Remove the %s for runs whose speed matters; `trainperf run` samples the stacks "
               "already (pyprof/) at far lower cost.",
            prof ? "profiler" : "trace function");
    return 1;
}

int dr_cand_debug(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    double tm = c->set_ticks >= TRACER_MIN_TICKS ? c->tracemalloc_ticks / c->set_ticks : 0;
    int tmon = tm >= 0.5, gpu = r->ngpu_run > 0 || r->ngpu > 0;
    int blocking = gpu && c->cuda_blocking, nocache = gpu && c->no_cuda_cache;
    int pydebug = c->dev_mode || c->malloc_debug;
    if (!tmon && !blocking && !nocache && !pydebug) return 0;
    double score = (tmon ? DEBUG_TRACEMALLOC * tm : 0) + (blocking ? DEBUG_CUDA : 0) +
                   (nocache ? DEBUG_CUDA : 0) + (pydebug ? DEBUG_MINOR : 0);
    if (score > 0.9) score = 0.9;
    char what[200] = "";
    size_t at = 0;
    const char *items[4];
    int n = 0;
    if (tmon) items[n++] = "tracemalloc tracing every allocation";
    if (blocking)
        items[n++] = "CUDA_LAUNCH_BLOCKING=1 (each kernel runs to its end before the next launch)";
    if (nocache)
        items[n++] = "PYTORCH_NO_CUDA_MEMORY_CACHING=1 (device memory allocated and freed for "
                     "every tensor)";
    if (pydebug) items[n++] = "Python's debug memory allocator";
    for (int i = 0; i < n && at < sizeof(what); i++)
        at += (size_t)snprintf(what + at, sizeof(what) - at, "%s%s", i ? ", " : "", items[i]);
    diag_head(d, "debug-settings",
              n == 1 && tmon ? "tracemalloc is tracing the training" : "Debugging aids are on",
              score, "the run trained with %s: %s every step", what,
              n == 1 ? "a debugging aid that slows" : "debugging aids that slow");
    if (tmon) {
        ev(d, "tracemalloc_on_share", tm,
           "tracemalloc.is_tracing() at %.0f%% of the checks while training (every 0.5 s)",
           100 * tm);
        rec(d, "Stop tracemalloc for training runs (tracemalloc.stop(), no -X tracemalloc or "
               "PYTHONTRACEMALLOC): it records a traceback for every allocation, which made an "
               "MLP loop with its DataLoader 2.1x slower here. Trace a short run to find a leak.");
    }
    if (blocking) {
        ev(d, "cuda_launch_blocking", 1, "CUDA_LAUNCH_BLOCKING=1 in the environment");
        rec(d, "Unset CUDA_LAUNCH_BLOCKING: it is for finding the kernel that raised an error; "
               "with it the CPU waits for every kernel, so nothing overlaps.");
    }
    if (nocache) {
        ev(d, "no_cuda_memory_caching", 1, "PYTORCH_NO_CUDA_MEMORY_CACHING=1 in the environment");
        rec(d, "Unset PYTORCH_NO_CUDA_MEMORY_CACHING: every tensor then costs a cudaMalloc and a "
               "synchronising cudaFree.");
    }
    if (pydebug) {
        ev(d, "python_debug_allocator", 1, "%s",
           c->dev_mode ? "Python's development mode is on (-X dev or PYTHONDEVMODE)"
                       : "PYTHONMALLOC selects a debug allocator");
        rec(d, "Run training without -X dev / PYTHONDEVMODE / PYTHONMALLOC=debug (1.1x slower "
            "measured on an MLP loop here).");
    }
    return 1;
}

int dr_cand_unused_grads(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    double all = c->params_timed, un = c->params_grad_unused, op = c->params_optimized;
    /* an optimizer updates part of the model itself (not master copies of
     * it, as DeepSpeed's or apex's optimizers hold: then none of the model's
     * own parameters is in one), and backward computes gradients for much
     * of the rest */
    if (!(all > 0) || !(op > 0) || !(un >= UNUSED_MIN_SHARE * all))
        return 0;
    double f = un / (un + op);
    double sh[PH_COUNT];
    dc_warm_shares(r, sh);
    double bwd = sh[PH_BACKWARD];
    /* the weight gradients are about half of those layers' backward (the
     * other half passes the gradient on, still needed above a trained
     * layer): a lower bound of the saving, which is the whole backward of
     * a frozen part at the input end */
    double share = isfinite(bwd) ? 0.5 * bwd * f : NAN;
    char a[32], b[32];
    human_count(a, sizeof(a), un);
    human_count(b, sizeof(b), op);
    diag_head(d, "unused-gradients", "Gradients computed for parameters no optimizer updates",
              isfinite(share) ? (share > 0.9 ? 0.9 : share) : 0.05,
              "backward computes gradients for %s parameters (%.0f%% of the model) that no "
              "optimizer updates; the optimizers update %s: requires_grad is left on for a part "
              "that is not trained",
              a, 100 * un / all, b);
    char t[32];
    ev(d, "params_grad_unused_share", un / all,
       "%s of the model's %s parameters get a gradient and are in no optimizer", a,
       human_count(t, sizeof(t), all));
    if (isfinite(bwd))
        ev(d, "backward_share", bwd, "backward is %.0f%% of step time", 100 * bwd);
    rec(d, "Freeze what you do not train: p.requires_grad_(False) for its parameters (e.g. "
           "`for p in model.backbone.parameters(): p.requires_grad_(False)`), or run it under "
           "torch.no_grad(); backward then skips their gradients, and stops at the first trained "
           "layer when the frozen part is at the input end.");
    rec(d, "`trainperf tune --only freeze` measures it: it freezes the parameters no optimizer "
           "holds after the first step.");
    return 1;
}

int dr_cand_eval_grad(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    if (!(c->eval_fwd >= EVAL_GRAD_MIN_FWD) || !(c->eval_fwd_grad >= 0.5 * c->eval_fwd)) return 0;
    double share = dc_eval_share(r);
    /* with the run waiting for CPUs, its share with those waits left out
     * (eval-often): what the fix saves once the run has its cores */
    double batch_ms, step_ms, q, floor = dc_eval_floor_share(r, &batch_ms, &step_ms, &q);
    if (!(share >= EVAL_GRAD_MIN_SHARE) && !(floor >= EVAL_GRAD_MIN_SHARE)) return 0;
    /* a forward that builds a graph saves activations and records every op:
     * on the CPU an MLP's evaluation ran 2.4x slower with grad on; half its
     * time is the saving taken */
    double score = 0.5 * (floor > share ? floor : share);
    diag_head(d, "eval-grad", "Evaluation builds autograd graphs", score > 0.9 ? 0.9 : score,
              "%.0f%% of the evaluation forwards ran with grad enabled (model.eval() does not "
              "turn autograd off): evaluation is %.0f%% of the run, and each of its forwards "
              "records a graph and keeps activations that no backward uses",
              100 * c->eval_fwd_grad / c->eval_fwd, 100 * share);
    ev(d, "eval_share", share, "evaluation is %.0f%% of the run", 100 * share);
    dc_eval_floor_ev(d, floor, batch_ms, step_ms, q);
    ev(d, "eval_forwards_grad", c->eval_fwd_grad, "%.0f of %.0f evaluation forwards with grad on",
       c->eval_fwd_grad, c->eval_fwd);
    rec(d, "Evaluate under torch.no_grad() (or torch.inference_mode()): `with torch.no_grad(): "
           "out = model(x)` around the evaluation loop; it also frees the memory the graphs "
           "hold.");
    rec(d, "If evaluation still takes much of the run, evaluate less often or on a subset, with "
           "a larger batch.");
    return 1;
}

/* A new optimizer made for most steps (`opt = Adam(model.parameters())`
 * inside the loop): its state starts from nothing every step. A mistake in
 * what the training computes more than in its speed (its state allocated
 * again each step cost ~10% here), so a minor finding, told after the
 * verdict. */
int dr_cand_opt_remade(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    if (!(r->steps >= OPT_REMADE_MIN) || !(c->opt_made_train >= OPT_REMADE_MIN) ||
        !(c->opt_made_train >= OPT_REMADE_SHARE * r->steps))
        return 0;
    diag_head(d, "optimizer-remade", "A new optimizer every step", 0.05,
              "the script made %.0f optimizers for its %.0f steps: each one starts with empty "
              "state, so momentum and Adam's running averages never build up",
              c->opt_made_train, r->steps);
    ev(d, "optimizers_per_step", c->opt_made_train / r->steps,
       "%.0f torch.optim optimizers made after training began, %.0f steps",
       c->opt_made_train, r->steps);
    rec(d, "Make the optimizer once, before the loop, and keep it: a new one every step "
           "trains with fresh state each time (Adam's first update of each is about lr times "
           "the sign of the gradient) and allocates that state again. To change the learning "
           "rate, set param_group[\"lr\"] or use a torch.optim.lr_scheduler.");
    return 1;
}
