# expect: primary=anomaly-detection
# must_not: unstable, host-code, undetermined
# says: set_detect_anomaly
"""A training loop that left autograd anomaly detection on (a debugging aid:
it records a Python traceback for every op of the forward and checks every
gradient in backward; this MLP of 73 modules steps 2x slower with it).
Its twin without the flag is healthy (compute-bound): healthy_plain."""
import torch

torch.manual_seed(0)
torch.autograd.set_detect_anomaly(True)
layers = []
for _ in range(24):
    layers += [torch.nn.Linear(128, 128), torch.nn.LayerNorm(128), torch.nn.GELU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(128, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(200):
    x = torch.randn(32, 128)
    y = torch.randint(0, 10, (32,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
