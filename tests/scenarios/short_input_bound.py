# expect: primary=input-bound
# must: input-bound
# must_not: undetermined
"""A 40-step run of about a second, most of it waiting for data: short runs
still get a verdict from their steps (a tune trial looks like this)."""
import time

import torch


class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 40 * 8

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(32), i % 4


dl = torch.utils.data.DataLoader(Slow(), batch_size=8)
model = torch.nn.Linear(32, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in dl:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
