# expect: primary=input-bound
# must: input-bound
# must_not: host-code, unstable, memory-capacity, undetermined
"""Slow samples (waiting on storage/network) with two DataLoader workers:
still input-bound."""
import time

import torch


class Remote(torch.utils.data.Dataset):
    def __len__(self):
        return 480

    def __getitem__(self, i):
        # fetch one sample from a slow store: 240 ms a batch from two workers,
        # longer than a step takes even with the run starved of CPU beside
        # four burners on two cores (136 ms measured), so the wait holds in
        # both scenarios that run this script
        time.sleep(0.03)
        return torch.randn(64), i % 10


if __name__ == "__main__":
    dl = torch.utils.data.DataLoader(Remote(), batch_size=16, num_workers=2)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
