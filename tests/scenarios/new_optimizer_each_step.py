# expect: primary=compute-bound
# must: optimizer-remade
# must_not: insufficient-data, undetermined
# says: Adam
"""`opt = torch.optim.Adam(model.parameters())` inside the loop: every step
has a new optimizer with empty state. Each new one used to be taken for a
second optimizer alternating with the first (a GAN's), so only one step was
counted: "Not enough data"."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(512, 512), nn.ReLU())],
                      nn.Linear(512, 10))
for step in range(200):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 512)
    y = torch.randint(0, 10, (64,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 40 == 0:
        print(step, loss.item())
