# expect: primary=compute-bound|undetermined|cpu-contention
# must_not: unstable
# alerts_not: hang, shutdown_hang
"""A hand-written loop (no DataLoader: its end is known only when the
interpreter shuts down), then an atexit handler that takes ~20 s, as a
logger flushing to a slow disk or a tracker uploading would. A slow exit is
not a hang (issue 29 item 1)."""
import atexit
import time

import torch


def flush_logs(seconds=20):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        sum(i for i in range(10000))


atexit.register(flush_logs)
torch.manual_seed(0)
X, Y = torch.randn(4096, 128), torch.randint(0, 10, (4096,))
model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                            torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(150):
    i = torch.randint(0, 4096, (128,))
    loss = torch.nn.functional.cross_entropy(model(X[i]), Y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
