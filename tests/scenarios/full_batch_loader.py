# expect: primary=input-bound
# must_not: compute-bound, host-code, undetermined
# says: an epoch every step; persistent_workers=True
"""Full-batch training through a DataLoader (batch_size=len(dataset)) with
two workers: every epoch is one batch, so the workers start, fetch and
collate all 2,000 samples, and stop, for every step."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
ds = TensorDataset(torch.randn(2000, 32), torch.randint(0, 3, (2000,)))
loader = DataLoader(ds, batch_size=len(ds), shuffle=True, num_workers=2)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(80):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if epoch % 20 == 0:
        print(epoch, loss.item())
