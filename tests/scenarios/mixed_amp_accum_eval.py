# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
# says: the run already computes in bf16
"""A realistic mixed loop: bf16 autocast on the CPU, gradient accumulation
over 2 micro-batches, a OneCycle scheduler, gradient clipping, and a
validation pass (model.eval + no_grad) every 30 optimizer steps with the
metric collected by .item()."""
import torch

torch.manual_seed(0)
train = torch.utils.data.TensorDataset(torch.randn(4096, 192), torch.randint(0, 10, (4096,)))
val = torch.utils.data.TensorDataset(torch.randn(512, 192), torch.randint(0, 10, (512,)))
dl = torch.utils.data.DataLoader(train, batch_size=32, shuffle=True, drop_last=True)
vdl = torch.utils.data.DataLoader(val, batch_size=128)
model = torch.nn.Sequential(torch.nn.Linear(192, 384), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                            torch.nn.Linear(384, 384), torch.nn.ReLU(), torch.nn.Linear(384, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
accum = 2
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=len(dl) // accum + 1)


def evaluate():
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in vdl:
            correct += (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct / len(val)


step = 0
for i, (x, y) in enumerate(dl):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y) / accum
    loss.backward()
    if (i + 1) % accum == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 30 == 0:
            print("step", step, "val acc", evaluate())
