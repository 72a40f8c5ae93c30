# expect: primary=compute-bound|undetermined|cpu-contention|input-bound
# must_not: unstable
# exit: 1
# alerts_not: hang
# note: RuntimeError; summarise (post_loop_fails.py
"""A plain loop over a DataLoader ends; post-processing (statistics over the
results, in Python) then runs 25 s and raises. The run failed after its
training loop: the report says where, from the exception, not that it hung
(issue 32 item 1a)."""
import time

import torch

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(2048, 128), torch.randint(0, 10, (2048,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(2):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def summarise(seconds):
    # pure-Python work on the results, as a report generator would do
    t0 = time.monotonic()
    acc = 0.0
    while time.monotonic() - t0 < seconds:
        acc += sum(i * 0.5 for i in range(10000))
    raise RuntimeError("summary table has no column 'val_acc'")


summarise(25)
