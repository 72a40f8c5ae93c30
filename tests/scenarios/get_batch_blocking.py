# expect: primary=host-code
# must_not: compute-bound, unstable, input-bound
# says: blocking; Fetch the next batch while the model trains
"""A plain get_batch() (no DataLoader) that blocks on the training thread:
each batch waits 15 ms for a remote read (a sleep stands for it), then is
sliced from memory. Nothing runs ahead of the loop, so this is no producer
being slow: the wait is the call's own, and prefetching overlaps it (issue
39 item 4: it read "waiting for batches from a producer (a queue or
thread)")."""
import time

import numpy as np
import torch

torch.manual_seed(0)
data = np.random.randint(0, 256, size=200_000, dtype=np.int64)
model = torch.nn.Sequential(torch.nn.Embedding(256, 32), torch.nn.Flatten(),
                            torch.nn.Linear(32 * 16, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def get_batch():
    time.sleep(0.015)  # the remote read
    ix = np.random.randint(0, len(data) - 17, size=8)
    x = torch.from_numpy(np.stack([data[i:i + 16] for i in ix]))
    y = torch.from_numpy(np.stack([data[i + 16] for i in ix]))
    return x, y


for it in range(300):
    x, y = get_batch()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
