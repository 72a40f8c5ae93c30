# expect: primary=input-bound
# must_not: host-code, unstable, undetermined
# says: cheaper
"""A per-sample loader that costs real work (0.25 ms of decoding a sample,
4 ms a batch of 16), no workers: a batch costs more to make than a worker
takes to hand it over, so workers do help here (the cheap_loader scenarios
are the other side of that line)."""
import time

import torch


class Decode(torch.utils.data.Dataset):
    def __len__(self):
        return 2048

    def __getitem__(self, i):
        t = time.perf_counter() + 0.00025
        while time.perf_counter() < t:
            pass
        return torch.randn(64), i % 10


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dl = torch.utils.data.DataLoader(Decode(), batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
