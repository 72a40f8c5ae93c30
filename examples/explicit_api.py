"""The explicit trainperf API in a PyTorch loop.

    python examples/explicit_api.py            # embedded mode: writes ./trainperf-runs/...
    trainperf run -- python examples/explicit_api.py   # the same, collected by `run`

Under `trainperf run` the auto-instrumentation sees trainperf.step() and
steps down, so each step is counted once.
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainperf


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()

    run_dir = trainperf.start()  # no-op (returns the run's dir) under `trainperf run`
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(args.steps * args.batch, 32),
                         torch.randn(args.steps * args.batch, 1))
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in trainperf.timed(DataLoader(data, batch_size=args.batch)):
        with trainperf.step(samples=len(x)):
            with trainperf.phase("forward"):
                loss = nn.functional.mse_loss(model(x), y)
            with trainperf.phase("backward"):
                opt.zero_grad()
                loss.backward()
            with trainperf.phase("optimizer"):
                opt.step()
        trainperf.counter("loss", loss.item())
    trainperf.stop()
    print("run directory:", run_dir)


if __name__ == "__main__":
    main()
