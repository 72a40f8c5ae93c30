"""A deliberately input-bound PyTorch training script (no trainperf code).

Each sample takes --decode-ms of "decoding" in the Dataset (a sleep standing
in for JPEG decoding or slow storage) while the model is tiny, so the loop
spends most of its time waiting for data:

    trainperf run -- python examples/input_bound.py --steps 30

and the report names the input pipeline as the bottleneck. Try --workers 4
to see the data wait shrink.
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset):
    def __init__(self, n, decode_ms, seed):
        self.n, self.decode_s, self.seed = n, decode_ms / 1000.0, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.decode_s)  # the slow part: decoding / reading
        g = torch.Generator().manual_seed(self.seed * 100003 + i)
        img = torch.rand(3, 16, 16, generator=g)
        return img, int(img.mean() > 0.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--decode-ms", type=float, default=2.0, help="per sample")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    data = SlowImages(args.steps * args.batch, args.decode_ms, args.seed)
    loader = DataLoader(data, batch_size=args.batch, num_workers=args.workers)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("final_loss %.6f" % loss.item())


if __name__ == "__main__":
    main()
