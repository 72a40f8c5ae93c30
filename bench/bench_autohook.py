"""Where the zero-code hook's per-step cost goes (issue 12 item 9).

One process under `trainperf run` (the hook installed, the probe attached)
runs the near-empty step of bench_python.py (c) (Linear(8, 1), batch 8, Adam,
1 torch thread) in chunks, alternating chunks with the hook's wrappers
switched off (the originals put back: DataLoader __next__, the top module's
forward, torch.autograd.backward, the global optimizer hooks) and on. Each
chunk gives its p10 step time and the training thread's CPU time per step;
the figure is the median over pairs of (on - off), so drift of a shared
machine hits both alike. Everything else the hook started (sampler thread,
gc callback, comm writer) runs in both, so this is the wrappers' cost alone;
bench_python.py (c) gives the whole. Reported, not judged.

    trainperf run -- python3 bench/bench_autohook.py [--only fwd,bwd,nxt,opt] [--pairs N] [--steps N]
    python3 bench/bench_autohook.py --all     # each wrapper alone, then all (runs trainperf run itself)
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("fwd", "bwd", "nxt", "opt")


def measure(only, pairs, steps):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from trainperf import _autohook
    _autohook.install()
    import torch
    from torch import nn
    from torch.optim import optimizer as optmod
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data import dataloader as dl
    torch.manual_seed(0)
    torch.set_num_threads(1)
    B, D = 8, 8
    data = TensorDataset(torch.randn(steps * B, D), torch.randn(steps * B, 1))
    model = nn.Linear(D, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def chunk():
        ts = []
        t_prev = time.perf_counter()
        c0 = time.thread_time()
        for x, y in DataLoader(data, batch_size=B):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            t = time.perf_counter()
            ts.append(t - t_prev)
            t_prev = t
        return statistics.quantiles(ts[5:], n=10)[0], (time.thread_time() - c0) / len(ts)

    chunk()  # finds the top module (wraps its class's forward), starts the sampler

    def orig_of(f):
        while hasattr(f, "__wrapped__"):
            f = f.__wrapped__
        return f

    hooked = dict(fwd=nn.Linear.forward, bwd=torch.autograd.backward,
                  nxt=dl._BaseDataLoaderIter.__next__,
                  pre=dict(optmod._global_optimizer_pre_hooks),
                  post=dict(optmod._global_optimizer_post_hooks))

    def off():
        nn.Linear.forward = orig_of(hooked["fwd"])
        torch.autograd.backward = orig_of(hooked["bwd"])
        dl._BaseDataLoaderIter.__next__ = orig_of(hooked["nxt"])
        optmod._global_optimizer_pre_hooks.clear()
        optmod._global_optimizer_post_hooks.clear()

    def on():
        off()
        if "fwd" in only:
            nn.Linear.forward = hooked["fwd"]
        if "bwd" in only:
            torch.autograd.backward = hooked["bwd"]
        if "nxt" in only:
            dl._BaseDataLoaderIter.__next__ = hooked["nxt"]
        if "opt" in only:
            optmod._global_optimizer_pre_hooks.update(hooked["pre"])
            optmod._global_optimizer_post_hooks.update(hooked["post"])

    a, b = [], []
    for i in range(pairs):
        for first in ((on, b), (off, a)) if i % 2 == 0 else ((off, a), (on, b)):
            first[0]()
            first[1].append(chunk())
    on()
    d10 = statistics.median((y[0] - x[0]) * 1e6 for x, y in zip(a, b))
    dcpu = statistics.median((y[1] - x[1]) * 1e6 for x, y in zip(a, b))
    print("%-16s p10 step %6.1f -> %6.1f us: +%5.1f us   thread CPU/step +%5.1f us" % (
        ",".join(only), statistics.median(x[0] for x in a) * 1e6,
        statistics.median(y[0] for y in b) * 1e6, d10, dcpu))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(PARTS))
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--all", action="store_true", help="each wrapper alone, then all")
    args = ap.parse_args()
    if not args.all:
        if not os.environ.get("TRAINPERF_RUN_DIR"):
            print("bench_autohook: run it under `trainperf run` (or use --all)", file=sys.stderr)
            return 2
        measure(args.only.split(","), args.pairs, args.steps)
        return 0
    cli = os.path.join(ROOT, os.environ.get("TRAINPERF_BUILD", "build"), "trainperf")
    if not os.access(cli, os.X_OK):
        print("bench_autohook: %s not built" % cli, file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINPERF_")}
    for only in list(PARTS) + [",".join(PARTS)]:
        d = tempfile.mkdtemp(prefix="bench-autohook-")
        r = subprocess.run([cli, "run", "--quiet", "--no-auto", "--out", os.path.join(d, "run"), "--",
                            sys.executable, os.path.abspath(__file__), "--only", only,
                            "--pairs", str(args.pairs), "--steps", str(args.steps)],
                           capture_output=True, text=True, env=env, timeout=900)
        lines = [ln for ln in r.stdout.splitlines() if "p10 step" in ln]
        print(lines[-1] if lines else "%s: failed: %s" % (only, r.stderr[-300:]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
