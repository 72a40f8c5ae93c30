"""A PyTorch training loop that goes on until told to stop: for the tests of a
run already going (`trainperf dump`, `trainperf profile`, tests/test_live.py).

    live_train.py STOP_FILE [--block-at N] [--device cuda]

Trains a small MLP from a DataLoader until STOP_FILE exists (checked every
step). --block-at N: after step N the main thread waits on an empty queue
(in wait_for_batch) until STOP_FILE exists: a process blocked in a queue;
STOP_FILE.blocked is made when it begins to wait.
"""
import os
import queue
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def wait_for_batch(q, stop):
    open(stop + ".blocked", "w").close()
    while not os.path.exists(stop):
        try:
            return q.get(timeout=0.2)
        except queue.Empty:
            pass
    return None


def main():
    stop = sys.argv[1]
    block_at = int(sys.argv[sys.argv.index("--block-at") + 1]) if "--block-at" in sys.argv else -1
    dev = torch.device(sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv
                       else "cpu")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(512, 32), torch.randint(0, 4, (512,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while not os.path.exists(stop):
        for x, y in loader:
            x, y = x.to(dev), y.to(dev)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == block_at:
                wait_for_batch(queue.Queue(), stop)
            if os.path.exists(stop):
                break


if __name__ == "__main__":
    main()
