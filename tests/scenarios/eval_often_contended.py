# expect: primary=cpu-contention|eval-often
# background: cpu_burn=4
# must: eval-often
# must_not: undetermined
"""An evaluation every 5 steps over a validation set of 30 training batches
(about half of the loop on free cores), while four other processes hold the
cores. Contention is primary when it is, but it must not hide what the run
itself does: under contention the wall-clock share is the scheduler's as
much as the run's (evaluating every 20 steps read 16-29% here, 35-37% by its
own timers without the burners: on the 40% line either way), so eval-often
also compares an evaluation batch and a training step each at its fastest
tenth, where no wait for a CPU fell (issue 32 item 2).
eval_often_quiet runs it without the load."""

import torch

torch.manual_seed(0)
train = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(1920, 128), torch.randint(0, 10, (1920,))),
    batch_size=64, shuffle=True)
val = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(1920, 128), torch.randint(0, 10, (1920,))),
    batch_size=64)
model = torch.nn.Sequential(torch.nn.Linear(128, 384), torch.nn.ReLU(), torch.nn.Linear(384, 384),
                            torch.nn.ReLU(), torch.nn.Linear(384, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step, (x, y) in enumerate(train):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 4:
        model.eval()
        correct = 0
        with torch.no_grad():
            for vx, vy in val:
                correct += int((model(vx).argmax(1) == vy).sum())
        model.train()
