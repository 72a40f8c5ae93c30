# expect: primary=memory-capacity
# must: memory-capacity
# must_not: undetermined
"""The classic leak: every step keeps its outputs (a list of activations for
'later'), so the process grows by the same amount every step."""
import torch

torch.set_num_threads(1)  # one intra-op thread (a shared CPU box)

model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
history = []
for it in range(160):
    x = torch.randn(64, 256)
    out = model(x)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append(torch.randn(1024, 1024))  # 4 MiB kept every step
    history.append(out.detach())
