"""torch.compile with a batch size that changes: recompiles (dynamo's eager
backend: no Triton build, so the check stays short). Truth: recompiles are
named; GPU records are there."""
import torch
from _common import DEV, Clock, mlp

torch._dynamo.config.automatic_dynamic_shapes = False
model = mlp(1024, 4)
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
sizes = [256, 512, 384, 640, 768, 896]
for step in Clock(max_steps=300):
    x = torch.randn(sizes[(step // 10) % len(sizes)], 1024, device=DEV)
    loss = cmodel(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
