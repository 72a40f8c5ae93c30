# expect: primary=gil-contention
# must_not: unstable, input-bound, host-code, undetermined
# says: stats_worker; GIL
"""A background thread computes running statistics in pure Python (it holds
the GIL nearly all the time) while the training thread trains a small MLP:
every torch call gives the GIL up and waits up to the switch interval (5 ms)
to win it back, so steps take several times longer, irregularly. The verdict
names the thread and its function, not "unstable step time"."""
import threading
import time

import torch
import torch.nn as nn

torch.manual_seed(0)
stop = False
hist = []


def stats_worker():
    while not stop:
        s = 0.0
        for i in range(20000):
            s += (i * 2654435761) % 97
        hist.append(s)


th = threading.Thread(target=stats_worker, daemon=True)
th.start()
model = nn.Sequential(*[nn.Sequential(nn.Linear(128, 128), nn.ReLU()) for _ in range(12)],
                      nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ds = torch.utils.data.TensorDataset(torch.randn(1024, 128), torch.randint(0, 10, (1024,)))
# how much the thread slows the steps swings from run to run (3x to 50x:
# whether it wins the GIL at each torch call depends on its wake-up), so the
# loop trains for a fixed time rather than a fixed number of steps
t_end = time.monotonic() + 4.0
while time.monotonic() < t_end:
    for x, y in torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if time.monotonic() >= t_end:
            break
stop = True
