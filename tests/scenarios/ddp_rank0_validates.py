# expect: primary=straggler
# launch: torchrun=2
# must_not: unstable
# says: Rank 0 alone; ddp_rank0_validates.py:30
"""DDP over gloo where only rank 0 runs a validation pass (200k samples)
every 40 steps: rank 1 goes on to the next all-reduce and waits there for
it. The straggler is rank 0, and the work only it does is the validation
line."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.set_num_threads(1)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
X, Y = torch.randn(4096, 128), torch.randint(0, 10, (4096,))
Xv, Yv = torch.randn(200000, 128), torch.randint(0, 10, (200000,))
for step in range(400):
    i = (step * 64) % 4096
    loss = nn.functional.cross_entropy(model(X[i:i + 64]), Y[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0 and step % 40 == 0:
        with torch.no_grad():
            val = [nn.functional.cross_entropy(model.module(Xv[j:j + 500]), Yv[j:j + 500])
                   for j in range(0, 200000, 500)]
dist.destroy_process_group()
