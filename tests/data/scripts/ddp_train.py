"""A small DDP training script (gloo, CPU) with no trainperf code in it: run it
with `torchrun --nproc-per-node 2 ddp_train.py --steps N`."""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 32, generator=g)
    y = x.sum(dim=1, keepdim=True)
    ds = TensorDataset(x, y)
    loader = DataLoader(ds, batch_size=16, sampler=DistributedSampler(ds))
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    it = iter(loader)
    for _ in range(args.steps):
        xb, yb = next(it)
        loss = nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("rank %d loss %.6f" % (dist.get_rank(), loss.item()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
