# expect: primary=compute-bound
# must_not: profiler, unstable, gc-pauses, host-code
"""Profiling done right: a schedule records two windows of three steps and
writes their traces (tensorboard_trace_handler); the rest of the run is
unprofiled. The windows' slow steps are named, not called instability."""
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

torch.manual_seed(0)
layers = []
for _ in range(6):
    layers += [torch.nn.Linear(128, 128), torch.nn.LayerNorm(128), torch.nn.GELU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(128, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ds = torch.utils.data.TensorDataset(torch.randn(8192, 128), torch.randint(0, 10, (8192,)))
dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True)
out = tempfile.mkdtemp(prefix="tb-prof-")
with profile(activities=[ProfilerActivity.CPU], on_trace_ready=tensorboard_trace_handler(out),
             schedule=schedule(skip_first=10, wait=20, warmup=2, active=3, repeat=2)) as prof:
    for epoch in range(2):
        for x, y in dl:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
