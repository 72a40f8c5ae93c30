# expect: primary=eval-often
# must_not: eval-grad, compute-bound, host-code
# says: Evaluate less often; one every step
"""The whole validation set (2,048 samples, under torch.no_grad()) is run
after every training step to print a validation loss: evaluation is ~70% of
the loop. It read "Compute-bound on the CPU" (step time leaves evaluation
out)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
X = torch.randn(8192, 256)
Y = torch.randint(0, 10, (8192,))
Xv = torch.randn(2048, 256)
Yv = torch.randint(0, 10, (2048,))
for step in range(400):
    i = (step * 128) % 8192
    model.train()
    loss = nn.functional.cross_entropy(model(X[i:i + 128]), Y[i:i + 128])
    opt.zero_grad()
    loss.backward()
    opt.step()
    model.eval()
    with torch.no_grad():
        val = nn.functional.cross_entropy(model(Xv), Yv)
    if step % 100 == 0:
        print(step, round(loss.item(), 4), round(val.item(), 4))
