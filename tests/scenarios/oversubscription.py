# expect: primary=oversubscription
# must: oversubscription
# must_not: undetermined, memory-capacity
"""More threads than cores: 8 intra-op threads plus 3 busy loader workers on
a 2-core machine."""
import os
import time

import torch


class Aug(torch.utils.data.Dataset):
    def __len__(self):
        return 3000

    def __getitem__(self, i):
        t = time.perf_counter() + 0.002  # augmentation on the CPU
        while time.perf_counter() < t:
            pass
        return torch.randn(512), i % 10


if __name__ == "__main__":
    n = max(8, 4 * (len(os.sched_getaffinity(0))))
    torch.set_num_threads(n)
    dl = torch.utils.data.DataLoader(Aug(), batch_size=32, num_workers=3)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
