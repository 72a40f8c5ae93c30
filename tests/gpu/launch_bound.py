"""Launch-bound: a tiny MLP at batch 1; each step is a few hundred tiny
kernels and the GPU idles between them while the host launches the next.
Truth: GPU busy < 40%, >= 40 kernels per step, median kernel < 20 us."""
import torch
from _common import DEV, Clock, mlp

model = mlp(64, 8)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
x = torch.randn(1, 64, device=DEV)
for step in Clock(max_steps=1500):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
