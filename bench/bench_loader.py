"""What a DataLoader worker costs per batch on this machine (issue 41): the
time per batch of iterating an in-memory TensorDataset with 0, 1 and 2
workers (persistent, past their start-up), interleaved rounds, median of 3.
The difference between the worker rows and the no-worker row is the
handover cost the input rule weighs a batch against (WORKER_BATCH_MS in
src/report/rules_input.c). Reported, never judged.

    python3 bench/bench_loader.py
"""
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def per_batch_ms(ds, bs, nw, n=100):
    dl = DataLoader(ds, batch_size=bs, shuffle=True, num_workers=nw, persistent_workers=nw > 0)
    it = iter(dl)
    for _ in range(5):  # past the workers' start-up and first prefetch
        next(it)
    n = min(len(dl) - 6, n)
    t = time.perf_counter()
    for _ in range(n):
        next(it)
    return (time.perf_counter() - t) / n * 1e3


def main():
    torch.set_num_threads(1)
    ds = TensorDataset(torch.randn(8192, 64), torch.randint(0, 10, (8192,)))
    print("batch  ms/batch: workers=0  workers=1  workers=2   worker cost (min over 1, 2)")
    for bs in (8, 32, 128, 512):
        r = {nw: [] for nw in (0, 1, 2)}
        for _ in range(3):
            for nw in r:
                r[nw].append(per_batch_ms(ds, bs, nw))
        m = {nw: statistics.median(v) for nw, v in r.items()}
        print("%5d  %18.3f %10.3f %10.3f   %+.3f" % (bs, m[0], m[1], m[2],
                                                  min(m[1], m[2]) - m[0]), flush=True)


if __name__ == "__main__":
    main()
