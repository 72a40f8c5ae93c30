"""A growing cache: each step's output is kept with its graph (a list of
losses not detached). Truth: allocated GPU memory grows through the run.
Four seconds of training (the allocator is read every half second, and the
growth rule wants the first quarter, the middle and the end: the first
capture ran 0.5 s and had two readings), at most ~12 GiB kept."""
import torch
from _common import DEV, Clock, mlp

model = mlp(2048, 4)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(1024, 2048, device=DEV)
history = []
for step in Clock(max_steps=1600, max_s=4):
    out = model(x)
    loss = out.pow(2).mean()
    history.append(out)          # the leak: activations kept alive
    opt.zero_grad()
    loss.backward()
    opt.step()
