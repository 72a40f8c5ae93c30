# expect: primary=compute-bound
# must_not: recompile, unstable, gc-pauses, host-code, input-bound, undetermined
"""torch.compile'd model (default inductor backend) with an explicit warm-up:
a few untimed iterations on a dummy batch before the real loop, as
benchmarks and careful users do, then a fixed-shape training loop."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                            torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))
cmodel = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x0, y0 = torch.randn(64, 128), torch.randint(0, 10, (64,))
for _ in range(3):  # warm-up: compile forward and backward once
    torch.nn.functional.cross_entropy(cmodel(x0), y0).backward()
opt.zero_grad(set_to_none=True)

ds = torch.utils.data.TensorDataset(torch.randn(4096, 128), torch.randint(0, 10, (4096,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, drop_last=True)
for epoch in range(2):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(cmodel(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
