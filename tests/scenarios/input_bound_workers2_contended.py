# expect: primary=input-bound
# background: cpu_burn=4
# must: input-bound, cpu-contention
# must_not: host-code, unstable, memory-capacity, undetermined
"""Slow samples (waiting on storage/network) with two DataLoader workers, on
a machine where four other processes keep every core busy: the workers
sleep on the store, not in the run queue, so the data wait stays the
loader's own finding beside the contention (workers2_contended is the
opposite case)."""
import time

import torch


class Remote(torch.utils.data.Dataset):
    def __len__(self):
        return 640

    def __getitem__(self, i):
        time.sleep(0.012)  # fetch one sample from a slow store
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
