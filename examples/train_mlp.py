"""A plain PyTorch training script with no trainperf code in it.

Used to show (and test) zero-code monitoring:

    trainperf run -- python examples/train_mlp.py --steps 50

A small MLP learns a fixed random "teacher" network on synthetic data, so the
loss really goes down. Prints the final loss with full precision (a test runs
it with and without trainperf and compares).
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class TeacherData(Dataset):
    """Inputs x ~ N(0, 1), targets from a fixed random teacher network."""

    def __init__(self, n, dim, seed, delay_ms=0.0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, dim, generator=g)
        teacher = torch.randn(dim, 1, generator=g)
        self.y = torch.tanh(self.x @ teacher)
        self.delay = delay_ms / 1000.0

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)  # a slow decoder / slow storage
        return self.x[i], self.y[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50, help="optimizer steps")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--accum", type=int, default=1, help="gradient accumulation micro-batches")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    ap.add_argument("--data-delay-ms", type=float, default=0.0, help="sleep per sample")
    ap.add_argument("--fail-at", type=int, default=-1, help="raise an error at this step")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    n = args.steps * args.accum * args.batch
    data = TeacherData(n, args.dim, args.seed, args.data_delay_ms)
    loader = DataLoader(data, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        generator=torch.Generator().manual_seed(args.seed))
    model = nn.Sequential(nn.Linear(args.dim, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.MSELoss()

    step = 0
    checksum = 0.0
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / args.accum
        loss.backward()
        checksum += float(x.sum())  # data integrity: same batches with and without monitoring
        if (i + 1) % args.accum == 0:
            if step == args.fail_at:
                raise RuntimeError("planted failure at step %d" % step)
            opt.step()
            opt.zero_grad()
            step += 1
    print("steps %d final_loss %.17g checksum %.17g" % (step, loss.item() * args.accum, checksum))


if __name__ == "__main__":
    main()
