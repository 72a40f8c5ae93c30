# expect: primary=host-code
# must_not: input-bound, compute-bound
# says: Data conversion in the training loop; convert the dataset once
"""The whole float64 NumPy dataset is turned into a float32 tensor inside the
loop, every step, to index one batch of it: the conversion is nearly all of
the step."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(0)
data = rng.standard_normal((120_000, 64))
labels = rng.integers(0, 2, 120_000)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 2))
opt = torch.optim.Adam(model.parameters())
for step in range(200):
    X = torch.tensor(data, dtype=torch.float32)
    Y = torch.tensor(labels)
    idx = torch.randint(0, len(X), (256,))
    loss = nn.functional.cross_entropy(model(X[idx]), Y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
