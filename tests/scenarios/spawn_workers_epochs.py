# expect: primary=input-bound
# must_not: unstable, host-code, undetermined
# says: persistent_workers=True; epoch start
"""DataLoader workers started with the spawn context and not persistent:
each of the four epochs starts two fresh interpreters that import torch
again (about a second) before the first batch. A few steps, but most of the
training time: the verdict is input-bound at epoch starts, not "a few slow
steps" and not undetermined. PERSISTENT=1 keeps the workers (healthy)."""
import os

import torch
import torch.nn as nn

if __name__ == "__main__":
    torch.manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(2048, 256), torch.randint(0, 10, (2048,)))
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2,
                                     multiprocessing_context="spawn",
                                     persistent_workers=os.environ.get("PERSISTENT") == "1")
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(4):
        for x, y in dl:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
