# expect: primary=host-code
# must: host-code
# must_not: compute-bound, unstable, input-bound
"""nanoGPT-style: batches come from a plain get_batch() (no DataLoader) that
spends most of each step preparing the input on the host."""
import time

import numpy as np
import torch

torch.set_num_threads(1)  # one intra-op thread (a shared CPU box)

torch.manual_seed(0)
data = np.random.randint(0, 256, size=200_000, dtype=np.int64)
model = torch.nn.Sequential(torch.nn.Embedding(256, 32), torch.nn.Flatten(), torch.nn.Linear(32 * 16, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def get_batch():
    # slow host-side input preparation (e.g. tokenising, random slicing)
    t_end = time.perf_counter() + 0.03
    while time.perf_counter() < t_end:
        pass
    ix = np.random.randint(0, len(data) - 17, size=8)
    x = torch.from_numpy(np.stack([data[i:i + 16] for i in ix]))
    y = torch.from_numpy(np.stack([data[i + 16] for i in ix]))
    return x, y


for it in range(60):
    x, y = get_batch()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
