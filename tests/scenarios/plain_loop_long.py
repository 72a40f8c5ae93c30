# expect: primary=compute-bound
# must_not: python-tracer, debug-settings, host-code, unstable
"""A plain loop of 16 epochs over an in-memory DataLoader (healthy). The
tracer and debugging-aid scenarios run this script under cProfile, pdb,
-X dev and -X tracemalloc (`# script: plain_loop_long.py`)."""
import torch

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(256, 384), torch.nn.ReLU(), torch.nn.Linear(384, 384),
                            torch.nn.ReLU(), torch.nn.Linear(384, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(16):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if not torch.isfinite(loss):
            print("non-finite loss")
            break
