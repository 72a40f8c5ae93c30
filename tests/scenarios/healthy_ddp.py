# expect: primary=compute-bound
# launch: torchrun=2
# must_not: straggler, unstable, input-bound, host-code, undetermined, memory-capacity
"""DDP over gloo with two ranks, one thread each (torchrun's default), with
batches large enough that each step computes much longer than its gradient
all-reduce takes (compute grows with the batch, the all-reduce does not):
comm_bound_ddp.py is the same model with small batches."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
ds = torch.utils.data.TensorDataset(torch.randn(32768, 256), torch.randint(0, 10, (32768,)))
sampler = torch.utils.data.distributed.DistributedSampler(ds)
# 1024 a rank: collectives were 21% of a step in one CI run with 512, on
# the 20% line; with 1024 each step computes twice as long for the same
# all-reduce
dl = torch.utils.data.DataLoader(ds, batch_size=1024, sampler=sampler)
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
