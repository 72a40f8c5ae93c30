# expect: primary=recompile
# must: recompile
# must_not: gc-pauses, undetermined
"""torch.compile with a last partial batch: 1000 samples in batches of 64
leave 40, the shape guard fails and the model recompiles every epoch end."""
import torch

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(1000, 64), torch.randint(0, 10, (1000,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
cmodel = torch.compile(model, backend="aot_eager", dynamic=False)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(cmodel(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
