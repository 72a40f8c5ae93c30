# expect: primary=host-code
# must_not: input-bound, compute-bound
# says: permutes the whole index range; random_choice_batches.py:19
"""Each batch drawn with np.random.choice(N, 256, replace=False) from 2M
rows: the legacy sampler permutes all N indices on every call (64 ms here;
np.random.default_rng().choice takes 0.02 ms)."""
import numpy as np
import torch
import torch.nn as nn

np.random.seed(0)
N = 2_000_000
data = torch.randn(N, 32)
labels = torch.randint(0, 2, (N,))
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
opt = torch.optim.Adam(model.parameters())
for step in range(100):
    # 256 of the 2M rows, each at most once
    idx = np.random.choice(N, 256, replace=False)
    loss = nn.functional.cross_entropy(model(data[idx]), labels[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
