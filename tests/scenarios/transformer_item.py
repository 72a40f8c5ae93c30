# expect: primary=compute-bound
# must_not: unstable, gc-pauses, input-bound, memory-capacity, undetermined
"""A transformer LM over token batches from a DataLoader, with the loss read
back every step (.item(), a host sync that costs nothing on the CPU) and
summed for a running perplexity."""
import math

import torch
import torch.nn as nn

torch.set_num_threads(1)
torch.manual_seed(0)
V, T = 1000, 48
tokens = torch.randint(0, V, (1536, T + 1))
ds = torch.utils.data.TensorDataset(tokens[:, :-1], tokens[:, 1:])
dl = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, drop_last=True)


class LM(nn.Module):
    def __init__(self, d=128):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.out = nn.Linear(d, V)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, x):
        return self.out(self.enc(self.emb(x), mask=self.mask, is_causal=True))


model = LM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
total, n = 0.0, 0
for x, y in dl:
    logits = model(x)
    loss = nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    total += loss.item()
    n += 1
print("ppl %.1f" % math.exp(total / n))
