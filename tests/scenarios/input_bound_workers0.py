# expect: primary=input-bound
# must: input-bound
# must_not: host-code, unstable, memory-capacity, undetermined
"""A Dataset whose __getitem__ is slow (decoding on the CPU), no workers."""
import time

import torch


class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 1024

    def __getitem__(self, i):
        t = time.perf_counter() + 0.0015  # decode one sample
        while time.perf_counter() < t:
            pass
        return torch.randn(64), i % 10


dl = torch.utils.data.DataLoader(Slow(), batch_size=16)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in dl:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
