# expect: primary=debug-settings
# says: tracemalloc
"""Leak hunting left in: tracemalloc.start() before the training loop and a
snapshot's top lines printed at the end. Every allocation records its
traceback meanwhile (2x slower loop here). `python -X tracemalloc` and
PYTHONTRACEMALLOC are seen the same way (and trace torch's import too).
Started before the model and optimizer are made, it also traces torch's
lazy imports at the first optimizer (40 s here): the suite starts it after
them, as a leak hunt in the loop does."""
import tracemalloc

import torch

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(256, 384), torch.nn.ReLU(), torch.nn.Linear(384, 384),
                            torch.nn.ReLU(), torch.nn.Linear(384, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
tracemalloc.start(10)
for epoch in range(3):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
for stat in tracemalloc.take_snapshot().statistics("lineno")[:3]:
    print(stat)
