"""A training script written against the profiling guide's step decorator:
performance_monitor(model, enabled=..., flop_counter_step=..., comm_logger_step=...,
wait=..., warmup=..., active=..., repeat=...). Runs alone, under torchrun, or
under `trainperf run`; --disabled passes enabled=False."""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn

from trainperf import performance_monitor

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--disabled", action="store_true")
args = ap.parse_args()

distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
if distributed:
    dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
if distributed:
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


@performance_monitor(model, enabled=not args.disabled, flop_counter_step=3, comm_logger_step=2,
                     wait=1, warmup=1, active=2, repeat=1)
def train_step(x, y):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


for step in range(args.steps):
    loss = train_step(torch.randn(16, 32), torch.randn(16, 8))
print("done steps %d loss %.4f" % (args.steps, loss))
if distributed:
    dist.destroy_process_group()
