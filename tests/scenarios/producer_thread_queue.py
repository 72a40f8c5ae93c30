# expect: primary=host-code
# must: host-code
# must_not: compute-bound, unstable, gc-pauses, memory-capacity
# says: Waiting for input; make_batch
"""Batches made by a hand-written background thread that fills a
queue.Queue (a prefetcher, as custom loaders do); the producer reads each
batch (a 10 ms read: it releases the GIL, as file and network reads do) and
prepares it in Python, slower than the step, so the training loop waits in
queue.get(): waiting for input outside any DataLoader."""
import queue
import threading
import time

import torch

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
STEPS = 80


def make_batch(i):
    time.sleep(0.01)  # the read
    rows = []
    for k in range(64):
        v = [((i * 64 + k) * 2654435761 + j * 97) % 1000 / 1000.0 for j in range(128)]
        rows.append(v)
    return torch.tensor(rows), torch.randint(0, 10, (64,))


batches = queue.Queue(maxsize=4)


def producer():
    for i in range(STEPS):
        batches.put(make_batch(i))


threading.Thread(target=producer, daemon=True).start()
for step in range(STEPS):
    x, y = batches.get()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
