# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
"""A loop that saves a larger checkpoint (about 30 MB: model and Adam state)
every 40 steps, to a new file each time, keeping the last two."""
import os
import tempfile

import torch

torch.manual_seed(0)
ckpt_dir = tempfile.mkdtemp()
ds = torch.utils.data.TensorDataset(torch.randn(8192, 512), torch.randint(0, 10, (8192,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step, (x, y) in enumerate(dl, 1):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 40 == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                   os.path.join(ckpt_dir, "step%06d.pt" % step))
        old = os.path.join(ckpt_dir, "step%06d.pt" % (step - 80))
        if os.path.exists(old):
            os.remove(old)
