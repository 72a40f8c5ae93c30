# expect: primary=gc-pauses
# must: gc-pauses
# must_not: memory-capacity, undetermined
"""Every step builds many small Python objects with reference cycles (per-
sample records), so the cyclic garbage collector runs full collections."""
import torch

torch.set_num_threads(1)  # one intra-op thread (a shared CPU box)

keep = []


class Rec:
    __slots__ = ("a", "b", "c")


def records(n):
    out = []
    for i in range(n):
        r = Rec()
        r.a, r.b, r.c = i, {"i": i}, [r]   # a cycle: only the GC frees it
        out.append(r)
    return out


# a large long-lived heap that every full collection walks (sized so that
# several full collections happen in the run, not one or two)
keep = [{"k": i, "v": [i, str(i)]} for i in range(200_000)]
model = torch.nn.Linear(32, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for it in range(120):
    meta = records(3000)
    x = torch.randn(32, 32)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
