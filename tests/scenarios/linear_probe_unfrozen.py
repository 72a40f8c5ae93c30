# expect: primary=unused-gradients
# must_not: unstable, host-code, undetermined
# says: requires_grad_(False)
"""Linear probing a pretrained backbone: the optimizer holds only the head,
but the backbone's parameters still require grad, so every backward
computes their gradients for nothing (2.7x slower steps than with the
backbone frozen). Its twin linear_probe_frozen freezes it: healthy."""
import os

import torch

torch.manual_seed(0)
backbone = torch.nn.Sequential(*[m for _ in range(8)
                                 for m in (torch.nn.Linear(512, 512), torch.nn.ReLU())])
head = torch.nn.Linear(512, 10)
model = torch.nn.Sequential(backbone, head)
if os.environ.get("FREEZE"):
    for p in backbone.parameters():
        p.requires_grad_(False)
opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
data = torch.utils.data.TensorDataset(torch.randn(16384, 512), torch.randint(0, 10, (16384,)))
for x, y in torch.utils.data.DataLoader(data, batch_size=64, shuffle=True):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
