# expect: primary=compute-bound
# must_not: host-code, input-bound, unstable, undetermined
# says: in the optimizer step; sparse=True; SparseAdam; fused=True
"""A recommender: a 500k-row embedding table trained with plain Adam. A step
looks up 1,280 rows, but the dense optimizer updates every row (and both of
Adam's moments) each step: the optimizer is ~80% of the step. Measured on
this machine with 1M rows: 210 ms a step; fused=True 63 ms; sparse=True with
SparseAdam for the table 2.1 ms."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Rec(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(500_000, 32, mode="mean")
        self.head = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, idx, off):
        return self.head(self.emb(idx, off)).squeeze(-1)


model = Rec()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(80):
    idx = torch.randint(0, 500_000, (64 * 20,))
    off = torch.arange(0, 64 * 20, 20)
    loss = nn.functional.mse_loss(model(idx, off), torch.rand(64))
    opt.zero_grad()
    loss.backward()
    opt.step()
