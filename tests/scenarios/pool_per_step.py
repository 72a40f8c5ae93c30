# expect: primary=host-code
# must_not: compute-bound, input-bound, undetermined
# says: A process pool started in the training loop; pool_per_step.py:27
"""A multiprocessing.Pool made inside the loop for each step's augmentation
(`with Pool(2) as pool: pool.map(...)`): two processes forked and joined every
step. 22.5 ms a step; one pool made before the loop: 3.4 ms. It had read
"Python code in the training loop ... wrap the step in torch.compile"."""
import multiprocessing as mp

import numpy as np
import torch
import torch.nn as nn


def augment(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(64).astype(np.float32) * 0.1


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    X = torch.randn(10000, 64)
    Y = torch.randint(0, 4, (10000,))
    for step in range(60):
        with mp.Pool(2) as pool:
            noise = pool.map(augment, range(step * 32, step * 32 + 32))
        i = (step * 32) % 9968
        x = X[i:i + 32] + torch.from_numpy(np.stack(noise))
        y = Y[i:i + 32]
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(step, loss.item())
