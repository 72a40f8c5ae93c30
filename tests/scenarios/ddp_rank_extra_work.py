# expect: primary=straggler
# launch: torchrun=2
# must_not: communication, unstable, host-code, undetermined
# says: rank 1; probe(x)
"""DDP over gloo where rank 1 alone runs three extra forward passes of a
larger probe network every step (work only one rank does: a probe, a metric,
logging on one rank): rank 0 waits for it in every all-reduce. The verdict
is a straggler naming rank 1, and the all-reduce wait is not reported as
communication: the transfers themselves are rank 1's own short wait."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)
model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)))
probe = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                      nn.Linear(2048, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
for step in range(150):
    loss = nn.functional.cross_entropy(model(x), y)
    if rank == 1:
        with torch.no_grad():
            for _ in range(3):
                probe(x)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.barrier()
dist.destroy_process_group()
