# expect: primary=communication
# launch: torchrun=2
# must: communication
# must_not: input-bound, host-code, undetermined, memory-capacity
"""DDP over gloo with two ranks and small batches: each step computes a few
milliseconds (32 samples) and then all-reduces 5 MB of gradients in one bucket (no
overlap with the backward), so about as long is spent in exposed
all-reduce over loopback TCP as in compute (healthy_ddp.py: large batches)."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
ds = torch.utils.data.TensorDataset(torch.randn(2048, 256), torch.randint(0, 10, (2048,)))
sampler = torch.utils.data.distributed.DistributedSampler(ds)
dl = torch.utils.data.DataLoader(ds, batch_size=32, sampler=sampler)
model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
dist.destroy_process_group()
