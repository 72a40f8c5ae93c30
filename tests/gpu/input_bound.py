"""Input-bound on a GPU: DataLoader(num_workers=0) with a costly
__getitem__; the GPU idles while the training thread waits for data.
Truth: GPU busy < 30%, data wait > 50% of the step."""
import time

import torch
from _common import DEV, Clock, mlp


class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0015:  # decoding, augmenting...
            pass
        return torch.randn(512), i % 10


model = mlp(512, 4)
head = torch.nn.Linear(512, 10).to(DEV)
opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()))
loader = torch.utils.data.DataLoader(Slow(), batch_size=32, num_workers=0)
it = iter(loader)
for step in Clock(max_steps=120):
    x, y = next(it)
    x, y = x.to(DEV), y.to(DEV)
    loss = torch.nn.functional.cross_entropy(head(model(x)), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
