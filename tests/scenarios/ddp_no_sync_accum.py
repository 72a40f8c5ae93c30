# expect: primary=compute-bound|communication
# launch: torchrun=2
# steps: 48
# must_not: unstable, host-code, undetermined, straggler, input-bound
"""DDP over gloo with gradient accumulation: the first three of every four
micro-batches run under no_sync(), the fourth all-reduces and steps, with a
DistributedSampler and set_epoch. Steps are optimizer steps (24 a rank), not
micro-batches; one all-reduce a step is ~15% of it on 2 cores (on the line
to the 20% communication finding when the machine is busy), no rank
straggles."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
torch.set_num_threads(1)
model = DDP(nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ds = torch.utils.data.TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
sampler = torch.utils.data.distributed.DistributedSampler(ds)
dl = torch.utils.data.DataLoader(ds, batch_size=128, sampler=sampler)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for i, (x, y) in enumerate(dl):
        if i % 4 != 3:
            with model.no_sync():
                (nn.functional.cross_entropy(model(x), y) / 4).backward()
            continue
        (nn.functional.cross_entropy(model(x), y) / 4).backward()
        opt.step()
        opt.zero_grad()
dist.barrier()
dist.destroy_process_group()
