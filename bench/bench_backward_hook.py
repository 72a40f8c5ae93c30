"""The auto hook's torch.autograd.backward wrapper (_core.backward_hook)
against the plain range wrapper it replaced (_core.timed) and a bare call,
around a no-op function, in one process under `trainperf run` (probe
attached), rounds alternated. Two cases: an optimizer exists (the wrapper
only times the phase) and none does (each call also ends a step and begins
the next: a hand-written update loop). Reported, not judged.

    python3 bench/bench_backward_hook.py [--rounds N] [--calls N]
(runs itself under BUILD/trainperf run when not already under one)
"""
import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=100000)
    a = ap.parse_args()
    if not os.environ.get("TRAINPERF_RUN_DIR"):
        import subprocess
        import tempfile
        cli = os.path.join(ROOT, os.environ.get("TRAINPERF_BUILD", "build"), "trainperf")
        with tempfile.TemporaryDirectory() as d:
            sys.exit(subprocess.call([cli, "run", "--quiet", "--out", os.path.join(d, "run"),
                                      "--", sys.executable, os.path.abspath(__file__),
                                      *sys.argv[1:]]))
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import trainperf
    from trainperf import _autohook, _state
    _autohook.install()
    import torch
    core = trainperf._core
    if not hasattr(core, "backward_hook"):
        sys.exit("the C extension is not built (make python)")

    def inner():
        return None

    timed = core.timed(inner, 3)
    hook = core.backward_hook(inner, _state.ev, _state.begin_if_closed, _state.step_in_eval)

    def per_call(f):
        t = time.perf_counter()
        for _ in range(a.calls):
            f()
        return (time.perf_counter() - t) / a.calls * 1e9

    def rounds():
        r = {"bare": [], "timed": [], "backward_hook": []}
        for i in range(a.rounds):
            order = [("bare", inner), ("timed", timed), ("backward_hook", hook)]
            for name, f in order if i % 2 == 0 else order[::-1]:
                r[name].append(per_call(f))
        return {k: statistics.median(v) for k, v in r.items()}

    _state.begin_if_closed()  # a step open, as in a training loop
    no_opt = rounds()              # no optimizer: each backward is a step boundary
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    with_opt = rounds()            # an optimizer exists: the phase only
    for label, r in (("optimizer exists", with_opt), ("no optimizer (boundary)", no_opt)):
        print("%-24s bare %5.0f ns  timed %5.0f ns (+%4.0f)  backward_hook %5.0f ns (+%4.0f)  "
              "ratio hook/timed overhead %.2f" % (
                  label, r["bare"], r["timed"], r["timed"] - r["bare"], r["backward_hook"],
                  r["backward_hook"] - r["bare"],
                  (r["backward_hook"] - r["bare"]) / max(1e-9, r["timed"] - r["bare"])))


if __name__ == "__main__":
    main()
