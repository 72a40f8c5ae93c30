"""The same matrix-heavy model in fp32 (matmul_bf16.py: under bf16 autocast).
Truth: bf16 steps are at least 1.5x faster than these."""
import os

import torch
from _common import DEV, Clock, mlp

bf16 = os.environ.get("SCEN_BF16") == "1"
model = mlp(4096, 4)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device=DEV)
for step in Clock(max_steps=200):
    with torch.autocast(DEV.type, dtype=torch.bfloat16, enabled=bf16):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 10 == 0:
        loss.item()
