# expect: primary=cpu-contention|oversubscription
# launch: torchrun=2
# env: OMP_NUM_THREADS=2
# must_not: input-bound, host-code, undetermined, memory-capacity
# says: core
"""Two gloo DDP ranks on a 2-core machine, each computing on 2 threads, with
280 KB of gradients a step: the ranks' threads (4, plus gloo's) queue for the
2 cores, and every collective waits for the rank that got its CPU last. The
comm share is high, but bucket_cap_mb cannot help: the cores are the limit
and the verdict says that first (issue 39 item 5)."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
ds = torch.utils.data.TensorDataset(torch.randn(4096, 128), torch.randint(0, 10, (4096,)))
sampler = torch.utils.data.distributed.DistributedSampler(ds)
dl = torch.utils.data.DataLoader(ds, batch_size=64, sampler=sampler)
# 128*512 + 512*10 parameters: ~70K, 280 KB of fp32 gradients
model = DDP(torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(4):
    sampler.set_epoch(epoch)
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
dist.destroy_process_group()
