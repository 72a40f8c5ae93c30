"""A small DDP (or FSDP2) training loop for torchrun on CPU with gloo.

    torchrun --nproc-per-node 2 examples/train_ddp.py --steps 20
    trainperf run -- torchrun --nproc-per-node 2 examples/train_ddp.py --slow-rank 1 --slow-ms 30

--slow-rank R --slow-ms M: rank R spends M ms more in its step (compute);
--slow-loader-rank R: rank R's DataLoader takes M ms more per batch.
--fsdp: shard the model with FSDP2 fully_shard instead of DDP.
--tokens T: batches are dicts whose "input_ids" (T tokens a sample, mean-pooled
embeddings feed the MLP) trainperf counts as tokens.
--declare-flops: declare the model's FLOPs per step (trainperf.declare_flops:
2 FLOPs per multiply-add, forward and backward), for MFU in the report.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Data(Dataset):
    def __init__(self, n, dim, delay_s, tokens=0):
        self.n, self.dim, self.delay, self.tokens = n, dim, delay_s, tokens

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        g = torch.Generator().manual_seed(i)
        if self.tokens:
            return {"input_ids": torch.randint(0, 1000, (self.tokens,), generator=g),
                    "labels": torch.randint(0, 4, (), generator=g)}
        return torch.randn(self.dim, generator=g), torch.randint(0, 4, (), generator=g)


class Pooled(nn.Module):
    """Token ids -> mean of their embeddings (no GEMM: the FLOPs stay the MLP's)."""

    def __init__(self, dim):
        super().__init__()
        self.emb = nn.Embedding(1000, dim)

    def forward(self, ids):
        return self.emb(ids).mean(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-loader-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=30.0)
    ap.add_argument("--fsdp", action="store_true")
    ap.add_argument("--barrier-every", type=int, default=0)
    ap.add_argument("--print-checksum", action="store_true")
    ap.add_argument("--declare-flops", action="store_true")
    ap.add_argument("--tokens", type=int, default=0)
    a = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    layers = [nn.Linear(a.dim, a.hidden), nn.ReLU(), nn.Linear(a.hidden, a.hidden), nn.ReLU(),
              nn.Linear(a.hidden, 4)]
    model = nn.Sequential(*([Pooled(a.dim)] if a.tokens else []), *layers)
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    else:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if a.declare_flops:
        import trainperf
        # GEMMs: forward, the weights' gradients, and the inputs' gradients of
        # every layer but the first
        macs = a.dim * a.hidden + a.hidden * a.hidden + a.hidden * 4
        trainperf.declare_flops(2 * a.batch * (3 * macs - a.dim * a.hidden))
    per_batch = a.slow_ms / 1e3 / a.batch if rank == a.slow_loader_rank else 0
    loader = DataLoader(Data(a.steps * a.batch, a.dim, per_batch, a.tokens), batch_size=a.batch)
    slow = a.slow_ms / 1e3 if rank == a.slow_rank else 0
    for i, batch in enumerate(loader):
        x, y = (batch["input_ids"], batch["labels"]) if a.tokens else batch
        loss = nn.functional.cross_entropy(model(x), y)
        if slow:
            time.sleep(slow)  # this rank's compute is slower
        loss.backward()
        opt.step()
        opt.zero_grad()
        if a.barrier_every and (i + 1) % a.barrier_every == 0:
            dist.barrier()
    if a.print_checksum and rank == 0:
        # the trained weights: what trainperf's hooks must leave unchanged
        print("checksum %.10e" % sum(float(p.double().abs().sum()) for p in model.parameters()))
    if a.print_checksum:
        # every rank done before any tears the group down (gloo aborted rank
        # 1, "terminate called without an active exception", when it
        # destroyed the group while rank 0 was still computing the checksum)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
