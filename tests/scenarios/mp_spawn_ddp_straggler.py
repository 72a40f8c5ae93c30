# expect: primary=straggler
# must_not: communication, unstable, host-code, undetermined
# says: rank 1; score_batch
"""DDP over gloo started the way PyTorch's DDP tutorial does it: the script
spawns its ranks with torch.multiprocessing.spawn and passes each one its
rank in code (init_process_group(rank=r)), so no RANK is in the
environment. Rank 1 alone scores every batch with an extra network (a
metric only it computes), and rank 0 waits for it in each all-reduce. The
verdict names rank 1 and the line of the work only it does."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def score_batch(scorer, x):
    with torch.no_grad():
        return scorer(x).softmax(-1).max(-1).values.mean()


def main(rank, world):
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)))
    scorer = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                           nn.Linear(2048, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    for step in range(120):
        loss = nn.functional.cross_entropy(model(x), y)
        if rank == 1:
            for _ in range(3):
                score_batch(scorer, x)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 2000))
    mp.spawn(main, args=(2,), nprocs=2)
