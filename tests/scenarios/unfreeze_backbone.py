# expect: primary=compute-bound
# must_not: unstable, host-code, input-bound, undetermined
"""Fine-tuning that trains the head alone for the first epoch, then unfreezes
the backbone: steps take several times longer from then on (backward now
runs through the backbone). A level that moved once is not unstable."""
import torch
import torch.nn as nn

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 1024), nn.ReLU())
head = nn.Linear(1024, 10)
for p in backbone.parameters():
    p.requires_grad_(False)
opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
ds = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
for epoch in range(2):
    if epoch == 1:
        for p in backbone.parameters():
            p.requires_grad_(True)
        opt.add_param_group({"params": backbone.parameters(), "lr": 1e-4})
    for x, y in torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True):
        loss = nn.functional.cross_entropy(head(backbone(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
