# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
"""Text batches grouped by length (HF's group_by_length, a bucketing
sampler) and padded to their longest sequence: each batch has its own length,
from 16 to 256 tokens, so a step's work, and its time, follow its batch's
length. That is not unstable step time: the verdict stays compute-bound."""
import random

import torch

torch.manual_seed(0)
random.seed(0)
V = 1000
texts = [torch.randint(1, V, (random.choice([16, 32, 64, 128, 192, 256]),)) for _ in range(2048)]
by_len = {}
for i, t in enumerate(texts):
    by_len.setdefault(len(t), []).append(i)
batches = [ix[k:k + 16] for ix in by_len.values() for k in range(0, len(ix) - 15, 16)]
random.shuffle(batches)


def collate(items):
    T = max(len(t) for t in items)
    ids = torch.zeros(len(items), T, dtype=torch.long)
    for i, t in enumerate(items):
        ids[i, :len(t)] = t
    return ids, ids.roll(-1, dims=1)


dl = torch.utils.data.DataLoader(texts, batch_sampler=batches, collate_fn=collate)


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, 64)
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 1)
        self.out = torch.nn.Linear(64, V)

    def forward(self, x):
        return self.out(self.enc(self.emb(x)))


model = LM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for x, y in dl:
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
