# expect: primary=cpu-contention
# background: cpu_burn=4
# must: cpu-contention
# must_not: unstable, gc-pauses, undetermined, oversubscription
"""The model is fine; four other processes keep every core busy, so the run
gets a fraction of the CPU (nanoGPT's CPU recipe on a shared box)."""
import torch

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(1280, 128), torch.randint(0, 10, (1280,)))
dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(1):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
