"""GPU-bound with no synchronisation in the loop: the host runs ahead until
the launch queue is full, then each host step lasts one GPU step. Truth: GPU
busy >= 85%."""
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
