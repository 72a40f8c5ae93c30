#!/usr/bin/env python3
"""Make a large job's run directories from a real small run (issue 37).

    python3 tests/jobgen.py BASE_RUN OUT --nodes 128 --ranks-per-node 8 \\
        [--slow-rank R --slow-ms M] [--slow-node N --slow-node-ms M] \\
        [--slow-link N --slow-link-ms M] [--clock-skew-s S]

BASE_RUN is a run directory `trainperf run` recorded of a real torchrun job
(tests/test_jobscale.py records a 2-rank gloo DDP run). OUT gets one run
directory per node, node000 .. node<N-1>, each with ranks-per-node ranks:
global rank g = node * ranks_per_node + local rank l takes the rows of the
base run's rank l % (base ranks), relabelled (rank, local_rank, pid, tid,
host, group size). Every rank keeps the base run's steps and collectives
(the same group and seq on every rank), so each collective completes at the
same instant on every node, as the report's clock alignment expects; a node's
wall clock (run.json start_unix_s) may be skewed by --clock-skew-s x node
index, which alignment must take back out.

Injections, each as synchronous data-parallel training shows it (the job's
step is its slowest rank's: every other rank waits the difference in its
collectives; --jitter-ms gives every rank up to that much noise a step):
- --slow-rank R: rank R computes M ms more a step (forward); every other
  rank waits those M ms in its collectives (comm), so every step is M ms
  longer and only R's own comm wait stays as it was.
- --slow-node N: the same for all ranks of node N at once.
- --slow-link N: node N's collectives take M ms more (its ranks' bus
  bandwidth drops accordingly); every rank waits for them (comm +M ms).

Only steps.csv, run.json, metrics.csv and comm/ are written: what the
report reads of a job's nodes. The generated data is never committed.
"""
import argparse
import csv
import json
import os
import random
import sys


def _rows(path):
    with open(path, newline="") as f:
        r = csv.reader(f)
        head = next(r)
        return head, list(r)


class Base:
    """The base run: its steps and comm rows by rank."""

    def __init__(self, d):
        self.dir = d
        self.run = json.load(open(os.path.join(d, "run.json")))
        self.steps_head, rows = _rows(os.path.join(d, "steps.csv"))
        ri = self.steps_head.index("rank")
        self.ranks = sorted({int(x[ri]) for x in rows if x[ri] not in ("", "-1")})
        if not self.ranks:
            raise SystemExit("%s: no ranked steps (record a torchrun job)" % d)
        self.steps = {k: [x for x in rows if x[ri] == str(k)] for k in self.ranks}
        self.ops, self.csteps = {}, {}
        for k in self.ranks:
            self.ops_head, self.ops[k] = _rows(os.path.join(d, "comm", "ops-rank%d.csv" % k))
            self.csteps_head, self.csteps[k] = _rows(
                os.path.join(d, "comm", "steps-rank%d.csv" % k))
        mp = os.path.join(d, "metrics.csv")
        self.metrics = open(mp).read() if os.path.exists(mp) else None


class Plan:
    """Per global rank g and step k: its extra compute (ms: the injection
    plus --jitter-ms of noise, seeded), its extra comm wait (what the job's
    step gained beyond its own compute: synchronous training waits for the
    slowest), its link's extra time; the job's extra per step and the time
    the steps before k gained (s)."""

    def __init__(self, a, world, steps):
        self.a = a
        self.rpn = a.ranks_per_node
        rnd = random.Random(a.seed)
        self.noise = [[rnd.uniform(0, a.jitter_ms) if a.jitter_ms > 0 else 0.0
                       for _ in range(steps)] for _ in range(world)]
        link = a.slow_link_ms * (a.slow_link >= 0)
        self.extra = [max(self.compute(g, k) for g in range(world)) + link for k in range(steps)]
        self.before = [0.0]
        for e in self.extra:
            self.before.append(self.before[-1] + e / 1e3)

    def node(self, g):
        return g // self.rpn

    def compute(self, g, k):
        a = self.a
        ms = a.slow_ms if g == a.slow_rank else 0.0
        if a.slow_node >= 0 and self.node(g) == a.slow_node:
            ms = max(ms, a.slow_node_ms)
        return ms + self.noise[g][k if k < len(self.noise[g]) else -1]

    def link(self, g):
        a = self.a
        return a.slow_link_ms if a.slow_link >= 0 and self.node(g) == a.slow_link else 0.0

    def comm(self, g, k):
        return self.step_extra(k) - self.compute(g, k)

    def step_extra(self, k):
        return self.extra[k if k < len(self.extra) else -1]

    def shift(self, k):
        """Seconds the steps before step k gained."""
        return self.before[k if k < len(self.before) else -1]


def _set(row, head, col, v):
    if col in head:
        row[head.index(col)] = v


def _num(row, head, col):
    return float(row[head.index(col)] or 0)


def write_node(base, plan, out, node, world, skew):
    a = plan.a
    d = os.path.join(out, "node%03d" % node)
    os.makedirs(os.path.join(d, "comm"), exist_ok=True)
    run = dict(base.run)
    run["host"] = "node%03d" % node
    run["start_unix_s"] = base.run["start_unix_s"] + skew * node
    run["root_pid"] = 1000000 + node
    run.pop("segments_dir", None)
    run["duration_s"] = base.run.get("duration_s", 0) + plan.before[-1]
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump(run, f)
    if base.metrics is not None:
        with open(os.path.join(d, "metrics.csv"), "w") as f:
            f.write(base.metrics)
    open(os.path.join(d, "alerts.jsonl"), "w").close()
    h = base.steps_head
    with open(os.path.join(d, "steps.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(h)
        rows = []
        for l in range(plan.rpn):
            g = node * plan.rpn + l
            src = base.ranks[l % len(base.ranks)]
            rows += [_step_row(r, h, plan, g, l) for r in base.steps[src]]
        rows.sort(key=lambda r: float(r[h.index("start_s")]) + float(r[h.index("duration_ns")]) / 1e9)
        w.writerows(rows)
    for l in range(plan.rpn):
        g = node * plan.rpn + l
        src = base.ranks[l % len(base.ranks)]
        _write_ops(base, plan, d, g, src, world)
        _write_csteps(base, plan, d, g, src)


def _step_row(r, h, plan, g, l):
    r = list(r)
    step = int(r[h.index("step")] or 0)
    comp, comm = plan.compute(g, step), plan.comm(g, step)
    _set(r, h, "rank", str(g))
    _set(r, h, "local_rank", str(l))
    _set(r, h, "pid", str(100000 + g))
    _set(r, h, "tid", str(100000 + g))
    _set(r, h, "start_s", "%.6f" % (_num(r, h, "start_s") + plan.shift(step)))
    for col, ms in (("duration_ns", comp + comm), ("interval_ns", comp + comm),
                    ("forward_ns", comp), ("comm_ns", comm)):
        _set(r, h, col, "%d" % (_num(r, h, col) + ms * 1e6))
    return r


def _write_ops(base, plan, d, g, src, world):
    h = base.ops_head
    link = plan.link(g)
    with open(os.path.join(d, "comm", "ops-rank%d.csv" % g), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(h)
        for r in base.ops[src]:
            r = list(r)
            step = int(r[h.index("step")] or 0)
            comp, comm = plan.compute(g, step), plan.comm(g, step)
            # its own compute delays its issue; the completion is the job's
            issue_s = plan.shift(step) + comp / 1e3
            end_s = plan.shift(step) + plan.step_extra(step) / 1e3
            _set(r, h, "rank", str(g))
            _set(r, h, "group_size", str(world))
            _set(r, h, "start_s", "%.6f" % (_num(r, h, "start_s") + issue_s))
            _set(r, h, "end_s", "%.6f" % (_num(r, h, "end_s") + end_s))
            _set(r, h, "issue_mono_ns", "%d" % (_num(r, h, "issue_mono_ns") + issue_s * 1e9))
            _set(r, h, "end_mono_ns", "%d" % (_num(r, h, "end_mono_ns") + end_s * 1e9))
            dur = _num(r, h, "duration_ns") + (comm + 0.0) * 1e6
            _set(r, h, "duration_ns", "%d" % dur)
            _set(r, h, "wait_ns", "%d" % (_num(r, h, "wait_ns") + comm * 1e6))
            if dur > 0:
                # bandwidth over its transfer time: a slow link's ranks move the
                # bytes in the time the link adds, the others' wait is not transfer
                xfer = _num(r, h, "duration_ns") + link * 1e6
                nb = _num(r, h, "bytes")
                n = world
                _set(r, h, "algbw_bps", "%.0f" % (nb / (xfer / 1e9)))
                _set(r, h, "busbw_bps", "%.0f" % (nb / (xfer / 1e9) * 2 * (n - 1) / n))
            w.writerow(r)


def _write_csteps(base, plan, d, g, src):
    h = base.csteps_head
    with open(os.path.join(d, "comm", "steps-rank%d.csv" % g), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(h)
        for r in base.csteps[src]:
            r = list(r)
            comm = plan.comm(g, int(r[h.index("step")] or 0))
            _set(r, h, "rank", str(g))
            for col in ("comm_ns", "wait_ns", "exposed_ns"):
                _set(r, h, col, "%d" % (_num(r, h, col) + comm * 1e6))
            w.writerow(r)


def generate(base_dir, out, nodes, ranks_per_node=8, slow_rank=-1, slow_ms=0.0, slow_node=-1,
             slow_node_ms=0.0, slow_link=-1, slow_link_ms=0.0, clock_skew_s=0.0, jitter_ms=0.0,
             seed=37):
    """Write the job; returns the node directories in order."""
    a = argparse.Namespace(nodes=nodes, ranks_per_node=ranks_per_node, slow_rank=slow_rank,
                           slow_ms=slow_ms, slow_node=slow_node, slow_node_ms=slow_node_ms,
                           slow_link=slow_link, slow_link_ms=slow_link_ms,
                           clock_skew_s=clock_skew_s, jitter_ms=jitter_ms, seed=seed)
    base = Base(str(base_dir))
    world = nodes * ranks_per_node
    si = base.steps_head.index("step")
    steps = 1 + max(int(x[si] or 0) for v in base.steps.values() for x in v)
    plan = Plan(a, world, steps)
    for n in range(nodes):
        write_node(base, plan, str(out), n, world, clock_skew_s)
    return [os.path.join(str(out), "node%03d" % n) for n in range(nodes)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("out")
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=30.0)
    ap.add_argument("--slow-node", type=int, default=-1)
    ap.add_argument("--slow-node-ms", type=float, default=30.0)
    ap.add_argument("--slow-link", type=int, default=-1)
    ap.add_argument("--slow-link-ms", type=float, default=30.0)
    ap.add_argument("--clock-skew-s", type=float, default=0.0)
    ap.add_argument("--jitter-ms", type=float, default=0.0,
                    help="each rank's compute varies by up to this much a step (seeded)")
    ap.add_argument("--seed", type=int, default=37)
    a = ap.parse_args(argv)
    if a.nodes < 1 or a.ranks_per_node < 1:
        ap.error("--nodes and --ranks-per-node want at least 1")
    world = a.nodes * a.ranks_per_node
    if a.slow_rank >= world or a.slow_node >= a.nodes or a.slow_link >= a.nodes:
        ap.error("the slow rank or node is not in a job of %d nodes x %d ranks"
                 % (a.nodes, a.ranks_per_node))
    generate(a.base, a.out, a.nodes, a.ranks_per_node, a.slow_rank, a.slow_ms, a.slow_node,
             a.slow_node_ms, a.slow_link, a.slow_link_ms, a.clock_skew_s, a.jitter_ms, a.seed)
    print("%s: %d nodes x %d ranks" % (a.out, a.nodes, a.ranks_per_node))


if __name__ == "__main__":
    sys.exit(main())
