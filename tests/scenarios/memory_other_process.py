# expect: primary=compute-bound
# background: mem_grow=60
# must_not: memory-capacity, undetermined, host-code
"""A healthy run while another process on the host grows its memory by
60 MiB/s: memory taken by others is a note about the host, not a finding
about the run."""
import torch

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(2048, 256), torch.randint(0, 10, (2048,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
# (steps of a few ms: with a 1 ms step the loader's 0.2 ms collate was a
# fifth of it, and the run sat on the input-bound threshold)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(3):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
