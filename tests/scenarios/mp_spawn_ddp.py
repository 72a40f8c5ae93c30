# expect: primary=compute-bound
# must_not: straggler, unstable, host-code, undetermined
"""The healthy counterpart of mp_spawn_ddp_straggler: two ranks spawned with
torch.multiprocessing.spawn, each passed its rank in code, doing the same
work. Compute-bound, and each rank's steps carry its rank (the per-rank
view and the collectives are the job's, not two unrelated processes')."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main(rank, world):
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    # large batches of a small model: the all-reduce (1.6 MB over gloo) is a
    # small part of the step
    model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(2048, 256), torch.randint(0, 10, (2048,))
    for step in range(60):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 2000))
    mp.spawn(main, args=(2,), nprocs=2)
