# expect: primary=compute-bound|host-code
# must_not: unstable, gc-pauses, input-bound, memory-capacity, undetermined
"""MNIST-sized MLP with steps of about a millisecond, batched by slicing a
shuffled tensor (no DataLoader, as many tutorials do): thousands of short
steps, where scheduler noise on a shared machine is as long as a step.
The indexing, the functional loss and Python's own overhead outside the
modules are a third of such a step (measured: 33% 'other'), on the
host-code threshold: either verdict is true of it; instability is not."""
import torch

torch.set_num_threads(1)
torch.manual_seed(0)
X, Y = torch.randn(12000, 784), torch.randint(0, 10, (12000,))
model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
bs = 64
for epoch in range(3):
    perm = torch.randperm(len(X))
    for i in range(0, len(X), bs):
        idx = perm[i:i + bs]
        loss = torch.nn.functional.cross_entropy(model(X[idx]), Y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
