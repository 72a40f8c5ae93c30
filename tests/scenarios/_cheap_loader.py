"""Shared by the cheap_loader_* scenarios: a loop over an in-memory
TensorDataset (each batch costs well under a millisecond to make) with a
small model. Batch size and workers come from the environment."""
import os

import torch


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    bs = int(os.environ.get("BATCH", "32"))
    nw = int(os.environ.get("WORKERS", "0"))
    width = int(os.environ.get("WIDTH", "64"))
    steps = int(os.environ.get("STEPS", "1500"))
    ds = torch.utils.data.TensorDataset(torch.randn(8192, 64), torch.randint(0, 10, (8192,)))
    dl = torch.utils.data.DataLoader(ds, batch_size=bs, shuffle=True, num_workers=nw,
                                     persistent_workers=nw > 0)
    model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n = 0
    while n < steps:
        for x, y in dl:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            n += 1
            if n >= steps:
                break


if __name__ == "__main__":
    main()
