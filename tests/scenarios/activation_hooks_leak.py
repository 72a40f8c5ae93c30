# expect: primary=memory-capacity
# must_not: undetermined
# says: kept growing
"""Forward hooks that append every ReLU's output to a list, graph and all:
RSS grows ~1.5 MiB a step, 320 -> 900 MiB over a 3-second run. The leak rule
had missed it: the window's last sample fell outside its own series bucket."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                      nn.Linear(1024, 10))
acts = []
for m in model:
    if isinstance(m, nn.ReLU):
        m.register_forward_hook(lambda mod, inp, out: acts.append(out))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
for step in range(400):
    x = torch.randn(128, 256)
    y = torch.randint(0, 10, (128,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(step, loss.item(), len(acts))
