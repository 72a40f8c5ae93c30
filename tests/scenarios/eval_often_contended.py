# expect: primary=cpu-contention|eval-often
# background: cpu_burn=4
# must: eval-often
# must_not: undetermined
"""An evaluation every 20 steps over a validation set about as large as 20
training batches (~40% of the loop), while four other processes hold the
cores. Contention is primary when it is, but it must not hide what the run
itself does: evaluation's share is measured on the run's own clock and
stays a finding (issue 32 item 2)."""
import torch

torch.manual_seed(0)
train = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(6400, 128), torch.randint(0, 10, (6400,))),
    batch_size=64, shuffle=True)
val = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(2560, 128), torch.randint(0, 10, (2560,))),
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
        with torch.no_grad():
            for vx, vy in val:
                correct += int((model(vx).argmax(1) == vy).sum())
        model.train()
