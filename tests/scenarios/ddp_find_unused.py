# expect: primary=communication
# launch: torchrun=2
# says: find_unused_parameters=False; aux.weight
"""DDP over gloo with find_unused_parameters=True and a layer the forward
never uses: DDP walks the autograd graph after every forward, and the unused
layer's parameters never get a gradient. On a 4-layer MLP over gloo the flag
alone made steps 1.9x slower (1.80 -> 3.42 ms, measured here)."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.aux = nn.Linear(256, 256)  # an auxiliary head the forward no longer uses
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.body(x))


model = DDP(Net(), find_unused_parameters=True)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
X = torch.randn(4096, 128)
Y = torch.randint(0, 10, (4096,))
for step in range(700):
    i = (step * 64) % 4096
    loss = nn.functional.cross_entropy(model(X[i:i + 64]), Y[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
