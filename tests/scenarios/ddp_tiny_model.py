# expect: primary=communication
# launch: torchrun=2
# must: communication
# must_not: input-bound, undetermined, memory-capacity
# says: latency; meet late
"""DDP over gloo with a 21-parameter model (Linear(4, 4) and Linear(4, 1)):
each step's all-reduce moves 84 bytes, so its time is latency and the other
rank's arrival, never bandwidth. The advice was "overlap all-reduce with
backward (tune bucket_cap_mb)" and "check the interconnect", which cannot
help bytes this few (issue 29): it now says the ranks meet late, and that
a model this small may not need data parallelism."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(1500):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
