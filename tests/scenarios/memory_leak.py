# expect: primary=memory-capacity
# must: memory-capacity
# must_not: undetermined
"""The classic leak: every step keeps its loss (and with it the autograd
graph and the activations) in a list 'for logging later', so the process
grows by the same amount every step."""
import torch

torch.set_num_threads(1)  # one intra-op thread (a shared CPU box)

model = torch.nn.Linear(512, 2048)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
losses = []
for it in range(100):
    x = torch.randn(512, 512)
    out = model(x)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward(retain_graph=True)
    opt.step()
    losses.append(loss)  # keeps the graph: out (4 MiB) stays alive every step
