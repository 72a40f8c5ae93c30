# expect: primary=profiler
# must_not: gc-pauses, unstable
# says: torch.profiler; schedule(
"""The whole training loop inside `with torch.profiler.profile()`, its table
printed at the end: every op of every step is recorded, and the records are
turned into Python events afterwards (seconds, after the last step)."""
import torch

torch.manual_seed(0)
layers = []
for _ in range(6):
    layers += [torch.nn.Linear(128, 128), torch.nn.LayerNorm(128), torch.nn.GELU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(128, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ds = torch.utils.data.TensorDataset(torch.randn(4096, 128), torch.randint(0, 10, (4096,)))
dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
