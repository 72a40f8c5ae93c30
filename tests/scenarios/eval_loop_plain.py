# expect: primary=compute-bound
# must_not: unstable, input-bound, host-code, undetermined, gc-pauses
"""A plain loop with an evaluation pass (model.eval() + torch.no_grad()) every
20 steps: evaluation is labelled and kept out of training step time.
EVAL_GRAD=1 leaves out the no_grad (eval_without_no_grad)."""
import contextlib
import os

import torch

torch.manual_seed(0)
train = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(3200, 128), torch.randint(0, 10, (3200,))),
    batch_size=64, shuffle=True)
val = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(2048, 128), torch.randint(0, 10, (2048,))),
    batch_size=64)
model = torch.nn.Sequential(torch.nn.Linear(128, 384), torch.nn.ReLU(), torch.nn.Linear(384, 384),
                            torch.nn.ReLU(), torch.nn.Linear(384, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step, (x, y) in enumerate(train):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 19:
        model.eval()
        correct = 0
        with contextlib.nullcontext() if os.environ.get("EVAL_GRAD") else torch.no_grad():
            for vx, vy in val:
                correct += (model(vx).argmax(1) == vy).sum().item()
        model.train()
