# expect: primary=compute-bound
# must_not: checkpoint-cost, storage-io, unstable, undetermined
"""The healthy twin: a small conv net that saves its state_dict once at the
end, a negligible share of the run."""
import os
import tempfile

import torch

torch.manual_seed(2)
ckpt = os.path.join(tempfile.mkdtemp(), "final.pt")
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
torch.save(model.state_dict(), ckpt)
