# expect: primary=compute-bound
# must_not: unstable, host-code, undetermined, anomaly-detection
# says: Train in float32
"""Scientific-style code that sets float64 as the default dtype before
building an MLP: compute-bound, and float64 halves the CPU's arithmetic
rate (2.1x slower steps than float32 here), so the first fix is float32."""
import torch

torch.set_default_dtype(torch.float64)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(120):
    x = torch.randn(64, 512)
    y = torch.randint(0, 10, (64,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
