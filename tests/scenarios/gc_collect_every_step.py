# expect: primary=gc-pauses
# must_not: unstable
# says: calls gc.collect() at gc_collect_every_step.py:27
"""gc.collect() after every step "to free memory", in a script that keeps
a list of per-step records (objects the full collection walks): every step
pays a full collection of the whole heap, torch's modules included. Torch
frees a tensor when its last reference goes; the call frees nothing
sooner."""
import gc

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
X = torch.randn(8192, 256)
Y = torch.randint(0, 10, (8192,))
history = [{"step": i, "vals": list(range(20))} for i in range(5000)]
for step in range(60):
    i = (step * 128) % 8192
    loss = nn.functional.cross_entropy(model(X[i:i + 128]), Y[i:i + 128])
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append({"step": step, "loss": loss.item()})
    gc.collect()
