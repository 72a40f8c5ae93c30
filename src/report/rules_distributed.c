/* Distributed rules: collectives (communication), a rank the others wait for
 * (straggler), a rank that left the loop early (uneven-end), DDP searching
 * for unused parameters (ddp-find-unused).
 * Entries of diag_rules[] (diag.c); thresholds in rule_util.h and
 * docs/diagnosis.md. */
#include "report/rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report_ranks.h"
#include "trainperf.h"

/* A model sharded by FSDP whose whole training state fits on every rank
 * many times over: DDP's one all-reduce a step replaces an all-gather per
 * layer in forward and backward and a reduce-scatter. The state per rank
 * unsharded (parameters and gradients at 4 bytes, two fp32 optimizer
 * moments) over the memory a rank has (its GPU's, or the host's shared by
 * the ranks on it); NAN when unknown. */
static double fsdp_state_share(const diag_run *r, double *state, double *mem)
{
    const dcause *k = &r->cause;
    double procs = k->nprocs_py > 0 ? k->nprocs_py : 1;
    *state = k->params_all / procs * 16.0;
    *mem = NAN;
    for (int i = 0; i < r->ngpu; i++)
        if (r->gpus[i].mem_total > 0 && !(r->gpus[i].mem_total >= *mem))
            *mem = r->gpus[i].mem_total; /* the smallest GPU's */
    if (!(*mem > 0) && r->mem_total.n) {
        int nodes = r->nnodes > 1 ? r->nnodes : 1;
        *mem = r->mem_total.max / (procs / nodes);
    }
    return *state > 0 && *mem > 0 ? *state / *mem : NAN;
}

/* The bytes a rank's collectives move per step (comm/), mean over the ranks
 * that recorded any; NAN unknown. */
static double comm_bytes_per_step(const diag_run *r, double *ops)
{
    double bytes = 0, n = 0, nops = 0;
    double steps = (double)figs_global_steps(&r->sf);
    if (!r->have_comm || !(steps > 0)) return NAN;
    for (int i = 0; i < r->nranks; i++)
        if (r->ranks[i].comm_ops > 0) {
            bytes += r->ranks[i].comm_bytes;
            nops += r->ranks[i].comm_ops;
            n++;
        }
    if (!(n > 0)) return NAN;
    *ops = nops / n / steps;
    return bytes / n / steps;
}

int dr_cand_comm(const diag_run *r, const dctx *c, dfinding *d)
{
    if (!dr_phase_rule(c, d, PH_COMM, COMM_SHARE, "communication", "Communication",
                    "collective communication", "step time"))
        return 0;
    if (r->sf.ngroups > 1) ev(d, "ranks", r->sf.ngroups, "%d ranks", r->sf.ngroups);
    rr_slow_link_t sl;
    if (rr_slow_link(r, &sl)) {
        char a[32], b[32];
        human_bytes(a, sizeof(a), sl.busbw_bps);
        human_bytes(b, sizeof(b), sl.median_busbw_bps);
        ev(d, "slow_link_node", sl.node,
           "slow link: node %d (%s)'s collectives move %s/s bus bandwidth, the nodes' median %s/s",
           sl.node, sl.host ? sl.host : "?", a, b);
        rec(d,
            "Check node %d (%s)'s network link: its NIC's speed and errors (ethtool, ibstat), "
            "its cable and switch port; NCCL_DEBUG=INFO shows the transport it uses.",
            sl.node, sl.host ? sl.host : "?");
    }
    rr_overlap_t ov;
    if (rr_overlap(r, &ov))
        ev(d, "comm_exposed_ms", ov.exposed_ms,
           "per rank and step: %.1f ms of collectives in flight, %.1f ms exposed, %.1f ms "
           "overlapped with compute",
           ov.busy_ms, ov.exposed_ms, ov.overlapped_ms);
    char fsdp[600], unused[600];
    /* DDP's search for unused parameters: first when some never got a
     * gradient (their all-reduce is waste too), else after the rest */
    int lead = dc_ddp_unused_advice(r, unused, sizeof(unused)) == 2;
    if (lead) rec(d, "%s", unused);
    rr_fsdp_advice(r, fsdp, sizeof(fsdp));
    double state = NAN, mem = NAN, fits = fsdp[0] ? fsdp_state_share(r, &state, &mem) : NAN;
    if (fits <= FSDP_FITS_SHARE) {
        char a[32], b[32];
        human_bytes(a, sizeof(a), state);
        human_bytes(b, sizeof(b), mem);
        ev(d, "fsdp_state_share", fits,
           "the whole training state (parameters, gradients, two optimizer moments: about %s) "
           "is %.1f%% of the %s a rank has",
           a, 100 * fits, b);
        rec(d, "This model does not need sharding: its whole training state (about %s) fits on "
               "every rank. DistributedDataParallel sends one all-reduce of the gradients a step, "
               "overlapped with the backward, instead of an all-gather per layer in forward and "
               "backward and a reduce-scatter (a 1.6M-parameter MLP on 2 ranks over gloo: 79.5 ms "
               "a step under FSDP, 25.9 ms under DDP); or keep FSDP with "
               "reshard_after_forward=False (60.5 ms).",
            a);
    }
    if (fsdp[0]) rec(d, "%s", fsdp);
    /* tiny collectives: their time is latency and the ranks' arrival, not
     * bandwidth; bucket tuning or the interconnect cannot help */
    double ops = NAN, per_step = comm_bytes_per_step(r, &ops);
    int tiny = !fsdp[0] && per_step < COMM_TINY_BYTES;
    if (tiny) {
        char a[32];
        human_bytes(a, sizeof(a), per_step);
        ev(d, "comm_bytes_per_step", per_step,
           "the collectives move only %s per rank and step (%.1f ops): their time is latency "
           "and waiting for the other ranks to arrive, not bandwidth",
           a, ops);
        rec(d, "The ranks meet late, not slowly: make the work before each collective even "
               "across ranks (the same batch sizes, no rank doing extra logging or evaluation "
               "inside the step), and see that no rank waits for a CPU. Tuning buckets or the "
               "interconnect will not help collectives this small.");
        rec(d, "A model this small may not need data parallelism: one process with a larger "
               "batch (or several independent runs) can train as fast without the per-step "
               "meeting.");
    } else if (fsdp[0]) {
        /* FSDP: the all-reduce advice below is DDP's */
    } else if (r->python) {
        rec(d, "Overlap gradients' all-reduce with the backward pass (DDP does so by bucket: "
               "tune bucket_cap_mb) and avoid synchronising calls in the step.");
        rec(d, "%s", r->cause.ddp_no_sync
                         ? "Communicate less often: accumulate more micro-batches under no_sync() "
                           "per optimizer step (the run already skips the all-reduce of some)."
                         : "Communicate less often: gradient accumulation with no_sync() on the "
                           "inner steps.");
    } else {
        rec(d, "Overlap gradients' all-reduce with the backward pass: start it per bucket of "
               "layers on its own stream as their gradients are ready.");
        rec(d, "Communicate less often: accumulate gradients over several micro-batches before "
               "each all-reduce.");
    }
    if (unused[0] && !lead) rec(d, "%s", unused);
    if (!tiny)
        rec(d, "Check the interconnect: NCCL_DEBUG=INFO shows whether NVLink/InfiniBand are used "
               "or traffic falls back to TCP sockets.");
    return 1;
}

/* The straggler's work per step against the other ranks': samples (or,
 * with as many samples, tokens) a step. The ratio, or NAN when the steps
 * carry no such counts; *what names the count, *mine and *others its means. */
static double rank_load(const diag_run *r, int rank, const char **what, double *mine,
                        double *others)
{
    for (int k = 0; k < 2; k++) {
        double m = NAN, o = 0;
        int no = 0;
        for (int i = 0; i < r->sf.ngroups; i++) {
            const agg_group *g = r->sf.groups[i];
            if (!g->count || g->rank < 0) continue;
            double per = (double)(k ? g->tokens : g->samples) / (double)g->count;
            if (g->rank == rank) m = per;
            else o += per, no++;
        }
        if (!(m > 0) || !no || !(o > 0)) continue;
        o /= no;
        double ratio = m / o;
        if (k == 0 && fabs(ratio - 1) < 0.05) continue; /* the same batches: try tokens */
        *what = k ? "tokens" : "samples";
        *mine = m, *others = o;
        return ratio;
    }
    return NAN;
}

/* Evidence and the first fix when the straggler's steps carry more work. */
static void rank_load_advice(const diag_run *r, dfinding *d, int rank)
{
    const char *what = "";
    double mine = NAN, others = NAN, load = rank_load(r, rank, &what, &mine, &others);
    if (!(load >= STRAGGLER_LOAD)) return;
    ev(d, "straggler_load_ratio", load,
       "rank %d's steps carry %.0f %s each, the other ranks' %.0f on average (%.1fx)", rank,
       mine, what, others, load);
    rec(d, "Give every rank the same work per step: rank %d trains on %.1fx the %s of the others "
           "(%s), and synchronous training waits for the largest. Check the per-rank batch size "
           "and how the sampler splits the data%s.",
        rank, load, what,
        what[0] == 's' ? "a batch size set per rank or a sampler that splits unevenly"
                       : "longer sequences on that rank",
        what[0] == 't' ? ", and bucket the samples by length across ranks" : "");
}

/* Work only the straggler does, where the samples of its training thread
 * show it: evidence and the first recommendation. */
static void rank_only_work(const diag_run *r, dfinding *d, int rank)
{
    const dc_func *f;
    const char *src;
    double mine, others;
    if (!dc_rank_only_line(&r->cause, rank, &f, &src, &mine, &others)) return;
    int q = src[0] != 0;
    ev(d, "rank_only_share", mine,
       "rank %d spends %.0f%% of its samples at %s:%d%s%s%s (in %s), the other ranks %.0f%%", rank,
       100 * mine, f->file, f->line, q ? " `" : "", src, q ? "`" : "", f->func, 100 * others);
    rec(d,
        "Rank %d alone spends %.0f%% of its time at %s:%d%s%s%s: share that work across the "
        "ranks, run it every N steps, or move it off the training step (another process, after "
        "training).",
        rank, 100 * mine, f->file, f->line, q ? " (`" : "", src, q ? "`)" : "");
}

/* The rank the others wait for in collectives (synchronous training evens
 * the step times out, so their medians cannot show it). */
static int dr_cand_waited_for(const diag_run *r, dfinding *d)
{
    rr_strag s;
    if (!rr_straggler(r, &s)) return 0;
    char why[320];
    rr_evidence(r, why, sizeof(why));
    fmt(d->id, sizeof(d->id), "straggler");
    fmt(d->title, sizeof(d->title), "Straggler");
    fmt(d->summary, sizeof(d->summary),
        "the other ranks wait %.1f ms a step (%.0f%% of step time) for rank %d, which spends "
        "it in its own %s",
        s.gap_ms, 100 * s.share, s.rank, s.loader ? "data loader" : "step");
    d->score = s.share + 0.3 > 0.9 ? 0.9 : s.share + 0.3;
    ev(d, "straggler_rank", s.rank, "%s", why);
    ev(d, "others_comm_wait_ms", s.others_wait_ms,
       "the other ranks wait %.1f ms a step in %s, rank %d %.1f ms", s.others_wait_ms, s.op, s.rank,
       s.own_wait_ms);
    if (s.loader) {
        ev(d, "extra_data_wait_ms", s.extra_data_ms, "rank %d waits %.1f ms a step more for data",
           s.rank, s.extra_data_ms);
        rec(d,
            "Speed up rank %d's input: more DataLoader workers (num_workers), pinned memory, "
            "prefetching; check its shard's storage and sample sizes.",
            s.rank);
    } else {
        ev(d, "extra_compute_ms", s.extra_compute_ms, "rank %d computes %.1f ms a step more",
           s.rank, s.extra_compute_ms);
        rank_load_advice(r, d, s.rank);
        rank_only_work(r, d, s.rank);
        rec(d,
            "Look at rank %d: its device clocks and temperature, other work on its host or CPU "
            "cores, work only it does (logging, checkpointing, evaluation on rank 0), uneven "
            "shards or sample lengths.",
            s.rank);
    }
    rec(d, "Balance the work across ranks: equal-sized shards, samples bucketed by length.");
    return 1;
}

/* A node whose ranks all hold the others back (rr_slow_node): the straggler
 * finding, said of the node. */
static int dr_cand_slow_node(const diag_run *r, dfinding *d)
{
    rr_slow_node_t s;
    if (!rr_slow_node(r, &s)) return 0;
    const char *host = s.host ? s.host : "?";
    fmt(d->id, sizeof(d->id), "straggler");
    fmt(d->title, sizeof(d->title), "Slow node");
    fmt(d->summary, sizeof(d->summary),
        "the other nodes' ranks wait %.1f ms a step (%.0f%% of step time) for node %d (%s), "
        "whose %d ranks spend it in their own %s",
        s.gap_ms, 100 * s.share, s.node, host, s.ranks, s.where);
    d->score = s.share + 0.3 > 0.9 ? 0.9 : s.share + 0.3;
    ev(d, "slow_node", s.node,
       "the other nodes' ranks wait %.1f ms a step in collectives, node %d's %d ranks %.1f ms",
       s.others_wait_ms, s.node, s.ranks, s.own_wait_ms);
    if (s.extra_data_ms >= 0.5 * s.gap_ms)
        ev(d, "extra_data_wait_ms", s.extra_data_ms,
           "node %d's ranks wait %.1f ms a step more for data", s.node, s.extra_data_ms);
    else
        ev(d, "extra_compute_ms", s.extra_compute_ms,
           "node %d's ranks compute %.1f ms a step more", s.node, s.extra_compute_ms);
    rec(d,
        "Look at node %d (%s) as a whole: its GPUs' clocks and temperature (throttling), other "
        "jobs on it, its CPU and memory bandwidth, its local storage for the data; drain it "
        "from the job if it stays slow.",
        s.node, host);
    return 1;
}

int dr_cand_straggler(const diag_run *r, const dctx *c, dfinding *d)
{
    if (dr_cand_waited_for(r, d)) return 1;
    if (dr_cand_slow_node(r, d)) return 1;
    double *p = malloc((size_t)(r->sf.ngroups > 0 ? r->sf.ngroups : 1) * sizeof(*p));
    if (!p) return 0;
    int n = 0, slow = -1;
    double worst = 0;
    for (int i = 0; i < r->sf.ngroups; i++) {
        const agg_group *g = r->sf.groups[i];
        if (g->rank < 0 || g->step_ns.count < MIN_STEPS) continue;
        p[n++] = sketch_quantile(&g->step_ns, 0.5) / 1e6;
    }
    /* median of the ranks' medians */
    double med = n >= 2 ? diag_median(p, n) : NAN;
    free(p);
    if (n < 2) return 0;
    for (int i = 0; i < r->sf.ngroups; i++) {
        const agg_group *g = r->sf.groups[i];
        if (g->rank < 0 || g->step_ns.count < MIN_STEPS) continue;
        double q = sketch_quantile(&g->step_ns, 0.5) / 1e6;
        if (q > worst) worst = q, slow = g->rank;
    }
    double ratio = med > 0 ? worst / med : NAN;
    if (!(ratio >= STRAGGLER_RATIO)) return 0;
    fmt(d->id, sizeof(d->id), "straggler");
    fmt(d->title, sizeof(d->title), "Straggler");
    fmt(d->summary, sizeof(d->summary), "rank %d is %.0f%% slower than the median rank", slow,
        100 * (ratio - 1));
    /* every rank waits for the slowest at each collective, so a straggler
     * limits the whole job: weighted above its bare slowdown */
    d->score = ratio - 1 + 0.3 > 0.9 ? 0.9 : ratio - 1 + 0.3;
    ev(d, "slowest_rank", slow, "rank %d median step %.1f ms vs %.1f ms across ranks", slow, worst,
       med);
    (void)c;
    rank_load_advice(r, d, slow);
    rank_only_work(r, d, slow);
    rec(d,
        "Look at rank %d's node: GPU clocks and temperature, other jobs on the host, its "
        "data shard (uneven shard sizes or sample lengths).",
        slow);
    rec(d, "Balance the work: bucket samples by length, or give every rank equal-sized shards.");
    return 1;
}

#define DDP_MIN_WALKS 3 /* looks at the gradients before any is called never set */

int dc_ddp_unused_advice(const diag_run *r, char *out, size_t n)
{
    const dcause *c = &r->cause;
    out[0] = 0;
    if (!c->ddp.find_unused || c->ddp.static_graph) return 0;
    const char *off = strcmp(c->framework, "hf") == 0
                          ? "TrainingArguments(ddp_find_unused_parameters=False)"
                      : strcmp(c->framework, "lightning") == 0
                          ? "strategy=\"ddp\" (not ddp_find_unused_parameters_true)"
                          : "DDP(..., find_unused_parameters=False)";
    if (c->ddp.never > 0 && c->ddp.walks >= DDP_MIN_WALKS) {
        char a[32];
        fmt(out, n, "DDP searches the autograd graph for unused parameters after every forward "
                    "(find_unused_parameters=True), and %s parameters never got a gradient (%s): "
                    "remove them from the model or freeze them (requires_grad_(False)), then "
                    "%s.",
            human_count(a, sizeof(a), c->ddp.never), c->ddp.never_names, off);
        return 2;
    }
    fmt(out, n, "DDP searches the autograd graph for unused parameters after every forward "
                "(find_unused_parameters=True)%s: %s. What it costs depends on the model "
                "(measured here over gloo: 1.9x slower steps on a 4-layer MLP, 10%% on a "
                "40-layer one, nothing measurable on a 2-layer GPT-2 under the HF Trainer).",
        c->ddp.walks >= DDP_MIN_WALKS ? ", yet every parameter got a gradient" : "", off);
    return 1;
}

int dr_cand_ddp_unused(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    char fix[600];
    dc_ddp_unused_advice(r, fix, sizeof(fix));
    if (!fix[0]) return 0;
    /* its cost is not measured in the run: a minor finding, after the
     * verdict (the communication finding puts its fix first) */
    diag_head(d, "ddp-find-unused", "DDP searches for unused parameters every step", 0.05,
              "DistributedDataParallel runs with find_unused_parameters=True: after every "
              "forward it walks the autograd graph for parameters that will get no gradient");
    if (c->ddp.walks >= DDP_MIN_WALKS && c->ddp.params > 0)
        ev(d, "ddp_never_grad_share", c->ddp.never / c->ddp.params,
           "%.0f%% of the trainable parameters never got a gradient",
           100 * c->ddp.never / c->ddp.params);
    rec(d, "%s", fix);
    return 1;
}

/* Steps a rank completed (figs groups), -1 when it has none. */
static double rank_steps(const diag_run *r, int rank)
{
    for (int i = 0; i < r->sf.ngroups; i++)
        if (r->sf.groups[i]->rank == rank) return (double)r->sf.groups[i]->count;
    return -1;
}

int dr_cand_uneven_end(const diag_run *r, const dctx *cx, dfinding *d)
{
    const dcause *c = &r->cause;
    if (!r->exit_known || (r->exit_code == 0 && r->exit_signal <= 0)) return 0;
    /* a rank that left its loop without an error, and one that failed in a
     * collective: it waited for a peer that had gone */
    int done = -1, failed = -1;
    for (int i = 0; i < c->nexit; i++) {
        if (c->exits[i].ended && !c->exits[i].error[0] && done < 0) done = i;
        if (c->exits[i].error[0] && dr_comm_error(c->exits[i].error) && failed < 0) failed = i;
    }
    if (done < 0 || failed < 0) return 0;
    int rd = c->exits[done].rank, rf = c->exits[failed].rank;
    double nd = rank_steps(r, rd), nf = rank_steps(r, rf);
    char steps[160] = "";
    if (nd >= 0 && nf >= 0)
        fmt(steps, sizeof(steps), " after %.0f steps while rank %d, %.0f steps done, was in a "
                                  "collective of its next step",
            nd, rf, nf);
    else
        fmt(steps, sizeof(steps), " while rank %d was in a collective", rf);
    /* the innermost message of a chain ("...: RuntimeError: Connection closed") */
    const char *why = c->exits[failed].error;
    for (const char *p = why; (p = strstr(p, "Error: ")) != NULL; p += 7)
        why = p + 7;
    diag_head(d, "uneven-end", "A rank left the training loop before the others", 1.0,
              "rank %d ended normally%s, which then failed (%s): the ranks ran different "
              "numbers of steps",
              rd, steps[0] ? steps : "", why);
    ev(d, "rank_done", rd, "rank %d reached the end of the script without an error", rd);
    ev(d, "rank_failed", rf, "rank %d ended with %s", rf, c->exits[failed].error);
    if (nd >= 0 && nf >= 0)
        ev(d, "steps_done", nd, "steps completed: rank %d %.0f, rank %d %.0f", rd, nd, rf, nf);
    rec(d, "Give every rank the same number of steps: the ranks' shares of the data differ in "
           "length. DistributedSampler(..., drop_last=True) evens them; with a sampler or an "
           "IterableDataset of your own, stop every rank at the same step (a fixed max_steps, or "
           "all_reduce a 'done' flag each step and leave together).");
    rec(d, "Where inputs are uneven by design, run the loop inside "
           "torch.distributed.algorithms.Join([model]): DDP then stands in for the ranks that "
           "finished.");
    return 1;
}

/* ---- folds ---------------------------------------------------------------- */

static int waits_in_collectives(const dfinding *d)
{
    return dr_has_ev(d, "others_comm_wait_ms") || dr_has_ev(d, "slow_node");
}

/* The other ranks' wait for a straggler is not communication: what the
 * collectives cost on their own is the straggler's own wait (it arrives
 * last and waits only for the transfer); the finding keeps that share, or
 * goes under COMM_SHARE. */
static int comm_into_straggler(const dfold_at *x, dfinding *from, dfinding *into)
{
    rr_strag st;
    rr_slow_node_t sn;
    char who[48];
    double own;
    if (rr_straggler(x->r, &st) && st.step_ms > 0) {
        own = st.own_wait_ms / st.step_ms;
        snprintf(who, sizeof(who), "rank %d", st.rank);
    } else if (rr_slow_node(x->r, &sn) && sn.step_ms > 0) {
        own = sn.own_wait_ms / sn.step_ms;
        snprintf(who, sizeof(who), "node %d", sn.node);
    } else {
        return DF_NO;
    }
    ev(into, "comm_share", from->score,
       "collectives take %.0f%% of step time on average over the ranks; the transfers "
       "themselves %.0f%% (%s's own wait), the rest is waiting for %s",
       100 * from->score, 100 * own, who, who);
    if (!(own >= COMM_SHARE)) return DF_DROP;
    from->score = own;
    return DF_KEEP;
}

/* What of the collectives' share a wait for a CPU can explain, on one host:
 * only the ranks' late arrival (the others' wait beyond the least-waiting
 * rank's, which is the collectives' own time), and of it no more than the
 * training threads waited in the run queue a step (schedstat): a rank
 * delayed that long reaches each collective that much later. NAN without
 * per-rank comm waits or the threads' run-queue wait; *own_ms, *late_ms,
 * *runq_ms: the figures a rank and step. */
static double comm_cpu_explained(const diag_run *r, double *own_ms, double *late_ms,
                                 double *runq_ms)
{
    rr_strag st;
    const dcause *c = &r->cause;
    rr_straggler(r, &st);
    if (st.rank < 0 || !(st.step_ms > 0) || !(c->tt_span_s > 0) || !(r->steps > 0))
        return NAN;
    double ranks = r->sf.ngroups > 1 ? r->sf.ngroups : 2;
    *own_ms = st.own_wait_ms;
    *late_ms = st.gap_ms > 0 ? st.gap_ms * (ranks - 1) / ranks : 0; /* of the mean */
    *runq_ms = 1e3 * c->tt_runq_s / r->steps;
    return (*late_ms < *runq_ms ? *late_ms : *runq_ms) / st.step_ms;
}

/* Collectives on one host while the ranks waited for CPUs: a rank that
 * waits for one arrives late at every collective (and gloo reduces on the
 * CPU). The part of the share that wait can explain (comm_cpu_explained)
 * is the contention's; the finding stays (its share is the run's own
 * breakdown) with the rest, after the contention when the rest is under
 * the threshold. Without per-rank figures, a share within twice the
 * threshold is taken as the contention's. */
static int comm_into_cpu_wait(const dfold_at *x, dfinding *from, dfinding *into)
{
    if (x->r->nnodes > 1) return DF_NO;
    double own_ms = NAN, late_ms = NAN, runq_ms = NAN;
    double share = x->c->share[PH_COMM];
    double cpu = comm_cpu_explained(x->r, &own_ms, &late_ms, &runq_ms);
    /* On one host the collectives run on the same starved cores (gloo
     * reduces and copies on the CPU, over loopback): their own time moving
     * far less than loopback carries is the CPU wait too, not the network or
     * the buckets (two ranks on two cores, 280 KB a step: 31 MB/s, 9 ms a
     * step; on free cores 5 MB a step went at 370 MB/s and more) */
    double ops = NAN, bytes = comm_bytes_per_step(x->r, &ops);
    double bps = own_ms > 0 ? bytes / (own_ms / 1e3) : NAN;
    int starved = isfinite(cpu) && bps < COMM_CPU_STARVED_BPS && bytes >= COMM_TINY_BYTES;
    if (starved) cpu = share;
    double own = isfinite(cpu) ? share - cpu : share < 2 * COMM_SHARE ? 0 : share;
    /* a straggler's fold may have left only the collectives' own already */
    if (own > from->score) own = from->score;
    char why[120] = "";
    if (isfinite(cpu))
        fmt(why, sizeof(why),
            "%.1f ms a step their own, %.1f ms waiting for later ranks; %.1f ms the training "
            "threads' wait",
            own_ms, late_ms, runq_ms);
    if (own >= COMM_SHARE) {
        /* a share of its own: the ranks also waited for CPUs, which can
         * explain only part of it */
        ev(from, "cpu_wait", into->score,
           "%.0f%% of the step is the collectives' own, though the ranks also waited for a CPU "
           "(%s%s%s)",
           100 * own, into->id, why[0] ? ": " : "", why);
        return DF_KEEP;
    }
    if (starved) {
        char a[32], b[32];
        human_bytes(a, sizeof(a), bytes);
        human_bytes(b, sizeof(b), bps);
        ev(into, "comm_share", share,
           "collectives took %.0f%% of step time while the ranks waited for CPUs: %s a rank and "
           "step at %s/s, far below what loopback carries, so the collectives too wait for the "
           "cores (bucket_cap_mb or the interconnect cannot help; fewer threads or ranks per "
           "core can)",
           100 * share, a, b);
        /* the fixes that fit: the cores first, not the buckets */
        from->nrec = 0;
        rec(from, "Give the ranks the cores first (the %s finding): with fewer busy threads than "
                  "cores, measure again; tuning buckets or the interconnect cannot help "
                  "collectives that wait for a CPU.",
            into->id);
    } else {
        ev(into, "comm_share", share,
           "collectives took %.0f%% of step time while the ranks waited for CPUs: ranks that "
           "wait for one arrive late at each (measure again on free cores before tuning "
           "communication)",
           100 * share);
    }
    /* it stays, after the contention that explains it */
    ev(from, "cpu_wait", into->score, "the contention comes first: %s",
       why[0] ? why : "the ranks waited for CPUs, and arrive late at each collective");
    from->score = own > COMM_MINOR ? own : COMM_MINOR;
    if (from->score >= into->score) from->score = 0.99 * into->score;
    return DF_KEEP;
}

/* The straggler's training thread against the other ranks' (schedstat,
 * a share of their time): 1 when it used no more CPU (at most
 * STRAGGLER_SAME_CPU x their mean) but waited in the run queue at least
 * half the gap longer a step, with *more_ms that extra wait a step. */
static int starved_rank(const diag_run *r, const rr_strag *st, double *more_ms)
{
    const dcause *c = &r->cause;
    double cpu = NAN, q = NAN, ocpu = 0, oq = 0, n = 0;
    for (int i = 0; i < c->ntt; i++) {
        if (!(c->tt[i].span_s > 0) || c->tt[i].rank < 0) continue;
        double a = c->tt[i].cpu_s / c->tt[i].span_s, b = c->tt[i].runq_s / c->tt[i].span_s;
        if (c->tt[i].rank == st->rank)
            cpu = a, q = b;
        else
            ocpu += a, oq += b, n++;
    }
    if (!(n > 0) || !isfinite(cpu)) return 0;
    *more_ms = (q - oq / n) * st->step_ms;
    return cpu <= STRAGGLER_SAME_CPU * ocpu / n && *more_ms >= 0.5 * st->gap_ms;
}

/* On one host, a rank slowed in its own step by less than twice the
 * threshold (gap share < 20%, or < 1.4x the median rank: score < 0.5)
 * while the run's threads waited for a CPU: that rank got fewer cycles (a
 * slow loader, or a larger gap, stays a straggler finding) -- or, whatever
 * the gap, when its training thread computed no more than the others' and
 * waited for a CPU longer by half the gap or more (starved_rank). */
static int straggler_into_cpu_wait(const dfold_at *x, dfinding *from, dfinding *into)
{
    if (x->r->nnodes > 1 || strstr(from->summary, "data loader")) return DF_NO;
    rr_strag st;
    double more = NAN;
    int starved = rr_straggler(x->r, &st) && starved_rank(x->r, &st, &more);
    if (!(from->score < 0.5) && !starved) return DF_NO;
    if (starved)
        ev(into, "straggler_rank", from->ev[0].value,
           "%s: its training thread waited %.1f ms a step longer for a CPU than the others', "
           "computing no more",
           from->summary, more);
    else
        ev(into, "straggler_rank", from->ev[0].value, "%s: ranks on this host share its cores",
           from->summary);
    return DF_DROP;
}

/* the communication finding carries find_unused_parameters' fix */
static int ddp_into_comm(const dfold_at *x, dfinding *from, dfinding *into)
{
    return DF_DROP;
}

const dfold dr_comm_folds[] = {
    {5, NULL, {{"straggler"}, waits_in_collectives}, comm_into_straggler},
    /* any CPU wait, the run's own threads' too (oversubscription without
     * other processes): ranks whose threads queue for the cores arrive late
     * at each collective however their buckets are cut (issue 39 item 5) */
    {7, NULL, {{"cpu-contention", "oversubscription"}, NULL}, comm_into_cpu_wait},
    {0},
};

const dfold dr_straggler_folds[] = {
    {6, NULL, DR_CPU_WAIT, straggler_into_cpu_wait},
    {0},
};

const dfold dr_ddp_unused_folds[] = {
    {11, NULL, {{"communication"}, NULL}, ddp_into_comm},
    {0},
};
