"""GPU-bound and healthy: big matrix products, loss.item() every step (the
host waits in .item() for the GPU's work: that is the GPU's time, not host
code). Truth: GPU busy >= 85% of the step; no host-code finding."""
import os

import torch
from _common import DEV, Clock, mlp

model = mlp(4096, 4)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device=DEV)
for step in Clock(max_steps=300):
    loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if os.environ.get("SCEN_NO_ITEM") != "1":  # healthy_noitem.py: no read-back at all
        print("step %d loss %.4f" % (step, loss.item())) if step % 50 == 0 else loss.item()
