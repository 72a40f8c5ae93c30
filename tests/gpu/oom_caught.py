"""An out-of-memory error caught by the script, which goes on training.
Truth: the allocator counts an OOM, and its snapshot is written."""
import torch
from _common import DEV, Clock, mlp

model = mlp(2048, 4)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(1024, 2048, device=DEV)
for step in Clock(max_steps=200):
    if step == 40:
        try:
            torch.empty(int(4e12), dtype=torch.uint8, device=DEV)  # 4 TB: never fits
        except (torch.OutOfMemoryError, RuntimeError):
            print("caught the OOM, going on")
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
