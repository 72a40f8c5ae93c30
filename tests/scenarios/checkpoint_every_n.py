# expect: primary=compute-bound
# must_not: unstable, storage-io, gc-pauses, host-code, input-bound, memory-capacity, undetermined
"""A plain loop that saves a checkpoint (model + optimizer state) with
torch.save every 25 steps, the way most training scripts do."""
import os
import tempfile

import torch

torch.manual_seed(0)
ckpt_dir = tempfile.mkdtemp()
ds = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                            torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
step = 0
for epoch in range(2):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 25 == 0:
            torch.save({"step": step, "model": model.state_dict(), "optim": opt.state_dict()},
                       os.path.join(ckpt_dir, "ckpt.pt"))
