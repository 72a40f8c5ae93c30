# expect: primary=compute-bound
# needs: tensorboard
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
"""A loop that logs the loss, the learning rate and the gradient norm to
TensorBoard (SummaryWriter) every step, and weight histograms every 500
(once in this run; HIST_EVERY in the environment): healthy.
tensorboard_histograms.py logs them often."""
import os
import tempfile

import torch
from torch.utils.tensorboard import SummaryWriter

torch.manual_seed(0)
writer = SummaryWriter(tempfile.mkdtemp())
ds = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
HIST_EVERY = int(os.environ.get("HIST_EVERY", "500"))
step = 0
for epoch in range(3):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        writer.add_scalar("train/loss", loss.item(), step)
        writer.add_scalar("train/grad_norm", gn.item(), step)
        writer.add_scalar("train/lr", opt.param_groups[0]["lr"], step)
        if step % HIST_EVERY == 0:
            for name, p in model.named_parameters():
                writer.add_histogram(name, p.detach(), step)
        step += 1
writer.close()
