# expect: primary=compute-bound
# must_not: recompile, unstable, gc-pauses, host-code, undetermined
"""torch.compile done right: drop_last=True keeps every batch the same size,
so it compiles once."""
import torch

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(2048, 256), torch.randint(0, 10, (2048,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, drop_last=True)
model = torch.nn.Sequential(torch.nn.Linear(256, 384), torch.nn.ReLU(), torch.nn.Linear(384, 384),
                            torch.nn.ReLU(), torch.nn.Linear(384, 10))
cmodel = torch.compile(model, backend="aot_eager")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(2):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(cmodel(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
