# expect: primary=host-code
# must_not: unstable, input-bound, compute-bound, gil-contention
# says: Waiting in the training loop; sleep_in_loop.py:21
"""A loop that sleeps 20 ms after every step (rate limiting, or polling for
a file): the training thread is idle most of the time, outside the model
and any DataLoader. The verdict says it waits, and where."""
import time

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
for step in range(150):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)
