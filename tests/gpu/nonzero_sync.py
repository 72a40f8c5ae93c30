"""A synchronisation inside the step: a boolean-mask index (nonzero) between
the forward and the loss drains the GPU's queue; the GPU then idles while the
host launches the backward. Truth: >= 1 host wait per step."""
import torch
from _common import DEV, Clock, mlp

model = mlp(2048, 6)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(2048, 2048, device=DEV)
for step in Clock(max_steps=300):
    out = model(x)
    picked = out[out > 0]        # boolean mask: the host waits for the count
    loss = picked.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
