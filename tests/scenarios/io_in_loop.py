# expect: primary=host-code
# must: host-code
# must_not: input-bound, compute-bound, undetermined, unstable
"""Each step reads its batch from files with numpy, in the training loop
(no DataLoader)."""
import os
import tempfile

import numpy as np
import torch

torch.set_num_threads(1)  # one intra-op thread (a shared CPU box)

d = tempfile.mkdtemp()
for i in range(8):
    np.save(os.path.join(d, "shard%d.npy" % i), np.random.randn(20000, 64).astype(np.float32))


def load_shard_batch(it):
    arr = np.load(os.path.join(d, "shard%d.npy" % (it % 8)))
    idx = np.random.randint(0, len(arr), 32)
    return torch.from_numpy(arr[idx]), torch.from_numpy(idx % 10)


model = torch.nn.Linear(64, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for it in range(600):
    x, y = load_shard_batch(it)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
