"""The same batch from pinned memory with non_blocking=True (the fix).
Truth: >= 60 MiB HtoD per step, none of it pageable."""
import torch
from _common import DEV, Clock, mlp

model = mlp(2048, 2)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
host = torch.randn(8192, 2048).pin_memory()
for step in Clock(max_steps=150):
    x = host.to(DEV, non_blocking=True)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
