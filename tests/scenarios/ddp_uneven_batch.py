# expect: primary=straggler
# launch: torchrun=2
# must_not: unstable
# says: Give every rank the same work per step; rank 1's steps carry 96 samples each
"""DDP over gloo, each rank with its own DataLoader, where a per-rank batch
size leaves rank 1 with three times rank 0's samples a step: rank 0 waits
for it in every all-reduce. The first fix names the uneven batches."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
torch.set_num_threads(1)
ds = TensorDataset(torch.randn(20000, 256), torch.randint(0, 10, (20000,)))
dl = DataLoader(ds, batch_size=32 if rank == 0 else 96, shuffle=True)
model = DDP(nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
for step, (x, y) in enumerate(dl):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 150:
        break
dist.barrier()
dist.destroy_process_group()
