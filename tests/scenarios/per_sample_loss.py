# expect: primary=tiny-ops
# must_not: unstable, input-bound, undetermined
# says: Vectorise
"""A contrastive loss written as a Python loop over the batch (common in
research code): ~900 autograd ops of a few numbers each per step, 9x slower
than the same loss on whole tensors (LOSS=vector: per_sample_loss_vectorised)."""
import os

import torch
import torch.nn as nn

torch.manual_seed(0)
enc = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))
opt = torch.optim.Adam(enc.parameters(), lr=1e-3)
VECTOR = os.environ.get("LOSS") == "vector"
for step in range(7000 if VECTOR else 700):
    a = torch.randn(64, 64)
    b = a + 0.1 * torch.randn(64, 64)
    za, zb = enc(a), enc(b)
    if VECTOR:
        pos = (za - zb).pow(2).sum(1)
        neg = (za - zb.roll(-1, 0)).pow(2).sum(1)
        loss = torch.relu(1 + pos - neg).sum()
    else:
        loss = 0
        for k in range(64):
            pos = (za[k] - zb[k]).pow(2).sum()
            neg = (za[k] - zb[(k + 1) % 64]).pow(2).sum()
            loss = loss + torch.relu(1 + pos - neg)
    opt.zero_grad()
    loss.backward()
    opt.step()
