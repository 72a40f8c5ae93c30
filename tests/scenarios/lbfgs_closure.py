# expect: primary=compute-bound
# must_not: unstable, host-code, input-bound, undetermined
# steps: 150
"""Full-batch LBFGS with a closure: forward and backward run inside
optimizer.step, up to five evaluations a step early on and one or two as it
converges, so the step time falls from ~20 ms to ~5 ms in plateaus. Steady
steps whose level moved are not unstable (at most a minor "step time
changed" finding)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(2048, 64)
Y = torch.randn(2048, 1)
model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                      nn.Linear(256, 1))
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=10)


def closure():
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(X), Y)
    loss.backward()
    return loss


for it in range(150):
    opt.step(closure)
