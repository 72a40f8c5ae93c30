"""Pageable host-to-device copies: a 64 MiB batch in ordinary (pageable)
host memory copied every step. Truth: >= 60 MiB of pageable HtoD per step."""
import torch
from _common import DEV, Clock, mlp

model = mlp(2048, 2)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
host = torch.randn(8192, 2048)  # 64 MiB, pageable
for step in Clock(max_steps=150):
    x = host.to(DEV)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
