# expect: primary=host-code
# must: host-code
# must_not: compute-bound, unstable, input-bound, undetermined
# steps: 60
"""A hand-written update loop (no torch.optim optimizer, as in micrograd /
makemore) whose batches come from a slow hand-written get_batch() outside any
DataLoader: most of each step is input preparation on the host. The steps
come from backward() (one per iteration)."""
import time

import numpy as np
import torch

torch.set_num_threads(1)  # one intra-op thread (a shared CPU box)

torch.manual_seed(0)
rng = np.random.default_rng(0)
data = rng.integers(0, 256, size=200_000, dtype=np.int64)
model = torch.nn.Sequential(torch.nn.Embedding(256, 32), torch.nn.Flatten(),
                            torch.nn.Linear(32 * 16, 256))


def get_batch(batch_size=8, block=16):
    # slow host-side input preparation (cleaning, tokenising, random windows)
    t_end = time.perf_counter() + 0.03
    while time.perf_counter() < t_end:
        pass
    ix = rng.integers(0, len(data) - block - 1, size=batch_size)
    x = torch.from_numpy(np.stack([data[i:i + block] for i in ix]))
    y = torch.from_numpy(np.stack([data[i + block] for i in ix]))
    return x, y


lr = 0.05
for it in range(60):
    x, y = get_batch()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
