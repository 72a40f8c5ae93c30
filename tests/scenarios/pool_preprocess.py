# expect: primary=host-code
# must_not: unstable, input-bound, compute-bound, gil-contention
# says: Waiting for input; worker pool; map_async
"""Each step prepares its 32 samples with a multiprocessing Pool
(pool.map of a Python function) inside the loop, and trains only when they
are back: the training thread waits for the pool most of the step. The
verdict says it waits for input from a worker pool and to prefetch the
next batch, not just "waiting"."""
import math
import multiprocessing as mp

import torch
import torch.nn as nn


def prep(i):
    s = 0.0
    for k in range(20000):
        s += math.sin(i * k)
    return [s % 1.0] * 128


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with mp.Pool(2) as pool:
        for step in range(60):
            rows = pool.map(prep, range(step * 32, step * 32 + 32))
            x, y = torch.tensor(rows), torch.randint(0, 10, (32,))
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
