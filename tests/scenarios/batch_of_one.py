# expect: primary=compute-bound
# says: too small to keep the CPU computing; larger batch
"""Online learning one sample at a time (a small MLP, batch of 1): each step
is a few hundred microseconds of per-op overhead, so a batch of 64 trains
~50x more samples a second on this CPU; a GPU would not help."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                            torch.nn.ReLU(), torch.nn.Linear(64, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
X = torch.randn(20000, 32)
Y = (X[:, 0] > 0).long()
for step in range(6000):
    i = step % 20000
    loss = torch.nn.functional.cross_entropy(model(X[i:i + 1]), Y[i:i + 1])
    opt.zero_grad()
    loss.backward()
    opt.step()
