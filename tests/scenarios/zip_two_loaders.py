# expect: primary=input-bound
# must_not: unstable, host-code, compute-bound
"""Two DataLoaders zipped (paired domains), one of them with a slow
__getitem__ and no workers: the step waits for its batches."""
import time

import torch
import torch.nn as nn

torch.manual_seed(0)


class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0004:
            pass
        return torch.randn(64), 1


a = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
    torch.randn(4096, 64), torch.zeros(4096, dtype=torch.long)), batch_size=32)
b = torch.utils.data.DataLoader(Slow(), batch_size=32)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for (xa, ya), (xb, yb) in zip(a, b):
    loss = nn.functional.cross_entropy(model(torch.cat([xa, xb])), torch.cat([ya, yb]))
    opt.zero_grad()
    loss.backward()
    opt.step()
