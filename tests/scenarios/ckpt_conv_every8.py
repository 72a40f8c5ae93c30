# expect: primary=compute-bound
# must: checkpoint-cost
# must_not: unstable, gc-pauses, input-bound, memory-capacity, undetermined
"""A small conv net that saves model + optimizer state with torch.save every
8 steps: the saves are a sizeable share of the run (about 5-15%), found beside
the compute that is most of the step (issue 39 item 3). CKPT_EVERY=0 saves
once at the end instead (ckpt_rare_healthy)."""
import os
import tempfile

import torch

torch.manual_seed(1)
EVERY = int(os.environ.get("CKPT_EVERY", "8"))
ckpt = os.path.join(tempfile.mkdtemp(), "last.pt")
model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(),
                            torch.nn.Linear(256, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(1, 121):
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if EVERY and step % EVERY == 0:
        torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, ckpt)
if not EVERY:
    torch.save(model.state_dict(), ckpt)
