# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
"""nanoGPT-style: a tokenised corpus in a uint16 memmap on disk, get_batch()
slices random windows from it each step (cheap), a small causal transformer,
gradient clipping, a cosine learning-rate schedule and a loss printed every
10 iterations."""
import math
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

torch.set_num_threads(1)
torch.manual_seed(1337)
block_size, batch_size, vocab = 64, 12, 512
path = os.path.join(tempfile.mkdtemp(), "train.bin")
np.random.randint(0, vocab, size=400_000).astype(np.uint16).tofile(path)


def get_batch():
    data = np.memmap(path, dtype=np.uint16, mode="r")  # re-opened each batch, as nanoGPT does
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    return x, y


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.register_buffer("mask", torch.triu(torch.ones(block_size, block_size, dtype=torch.bool), 1))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, d=128, h=4, n=3):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block_size, d)
        self.blocks = nn.Sequential(*[Block(d, h) for _ in range(n)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        logits = self.head(self.ln(self.blocks(x)))
        return logits, F.cross_entropy(logits.view(-1, vocab), targets.view(-1))


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, betas=(0.9, 0.95))
max_iters, warmup = 80, 10


def get_lr(it):
    if it < warmup:
        return 6e-4 * (it + 1) / warmup
    r = (it - warmup) / (max_iters - warmup)
    return 6e-5 + 0.5 * (1 + math.cos(math.pi * r)) * (6e-4 - 6e-5)


X, Y = get_batch()
for it in range(max_iters):
    for g in opt.param_groups:
        g["lr"] = get_lr(it)
    logits, loss = model(X, Y)
    X, Y = get_batch()  # prefetch the next batch while... (on the CPU: just next)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if it % 10 == 0:
        print(f"iter {it}: loss {loss.item():.4f}")
