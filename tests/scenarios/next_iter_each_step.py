# expect: primary=input-bound
# must_not: compute-bound, host-code, undetermined
# says: new DataLoader iterator every step; next(iter(loader))
"""`next(iter(loader))` in the step: each batch comes from a new iterator,
so the two workers start, prefetch and stop for every step. 39 ms a step
here; one iterator drawn with next(it): 2.8 ms."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
ds = TensorDataset(torch.randn(20000, 64), torch.randint(0, 5, (20000,)))
loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=2)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(100):
    x, y = next(iter(loader))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(step, loss.item())
