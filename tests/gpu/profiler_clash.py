"""The script's own torch.profiler takes CUPTI for a few steps (Kineto
re-registers the activity callbacks). Truth: the run is unharmed (exit 0)
and GPU records are there before the window (and, if CUPTI hands them back,
after it)."""
import os
import tempfile

import torch
from _common import DEV, Clock, mlp

model = mlp(2048, 4)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(2048, 2048, device=DEV)
d = tempfile.mkdtemp()
prof = torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
    schedule=torch.profiler.schedule(wait=40, warmup=2, active=3, repeat=1),
    on_trace_ready=torch.profiler.tensorboard_trace_handler(d))
prof.start()
for step in Clock(max_steps=300):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    prof.step()
prof.stop()
print("profiler traces:", os.listdir(d))
