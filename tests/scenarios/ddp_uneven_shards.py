# expect: primary=uneven-end
# launch: torchrun=2
# exit: 1
# says: A rank left the training loop before the others; drop_last=True
"""DDP over gloo where each rank iterates its own shard of a list of
unequal halves (rank 0 gets 200 batches, rank 1 240): rank 0 leaves the
loop and destroys the process group while rank 1 waits in the all-reduce
of its 201st step, which fails ("Connection closed by peer"). The job
exits 1; it read "Communication" before."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.set_num_threads(1)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = 200 if rank == 0 else 240  # the shards were split by hand, unevenly
for step in range(batches):
    x = torch.randn(32, 64)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
