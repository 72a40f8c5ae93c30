# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, recompile, undetermined
# says: fused=True
"""A plain loop over an in-memory DataLoader: the model's compute is the step.

Batches of 16 keep AdamW's loop over the parameters at 45-52% of the step, so
its fused=True advice (given from 30%) holds on every run: with batches of 64
and a narrower model the optimizer sat at 28-34% and the advice came and went
between runs (CI read it missing on the first try)."""
import torch

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(2048, 256), torch.randint(0, 10, (2048,)))
dl = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                            torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(2):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
