# expect: primary=compute-bound
# must_not: gil-contention, unstable, host-code, input-bound, undetermined
"""A healthy loop with a background thread that wakes every 200 ms to
gather a few statistics in Python (a heartbeat or metrics pusher): the
thread is mostly asleep, so it costs the training thread nothing worth a
finding."""
import threading
import time

import torch
import torch.nn as nn

torch.manual_seed(0)
stop = threading.Event()
beats = []


def heartbeat():
    while not stop.wait(0.2):
        beats.append(sum(i % 7 for i in range(5000)))


threading.Thread(target=heartbeat, daemon=True).start()
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                      nn.Linear(1024, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ds = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
for epoch in range(2):
    for x, y in torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
stop.set()
time.sleep(0.01)
