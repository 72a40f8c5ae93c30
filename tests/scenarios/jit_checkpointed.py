# expect: primary=compute-bound
# must_not: unstable, host-code, input-bound, undetermined, gil-contention
"""A block stack under activation checkpointing (torch.utils.checkpoint)
with a TorchScript head and a DataLoader: recomputation is compute, the
scripted module is still a module call. Healthy."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
blocks = nn.ModuleList([nn.Sequential(nn.Linear(512, 512), nn.GELU()) for _ in range(6)])
head = torch.jit.script(nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)))
opt = torch.optim.Adam(list(blocks.parameters()) + list(head.parameters()), lr=1e-3)
ds = torch.utils.data.TensorDataset(torch.randn(4096, 512), torch.randint(0, 10, (4096,)))
for epoch in range(2):
    for x, y in torch.utils.data.DataLoader(ds, batch_size=128, shuffle=True):
        for b in blocks:
            x = checkpoint(b, x, use_reentrant=False)
        loss = nn.functional.cross_entropy(head(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
