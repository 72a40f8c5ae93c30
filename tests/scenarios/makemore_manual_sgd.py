# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
# steps: 500
"""makemore-style character MLP (Karpathy's lectures): a context of three
characters embedded, a tanh hidden layer, minibatches drawn by random
indexing into the dataset tensor, and no torch.optim optimizer: the loop
updates the parameters by hand (p.data += -lr * p.grad) with a step-decayed
learning rate. One step per iteration, each boundary the end of backward()."""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)  # one intra-op thread (a shared CPU box)
random.seed(42)
g = torch.Generator().manual_seed(2147483647)

# a names-like corpus: pronounceable words from alternating consonants and vowels
cons, vows = "bcdfghjklmnprstvwz", "aeiouy"
words = ["".join(random.choice(cons if i % 2 == 0 else vows) for i in range(random.randint(3, 9)))
         for _ in range(8000)]
chars = sorted(set("".join(words)))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0
block_size = 3


def build_dataset(ws):
    X, Y = [], []
    for w in ws:
        context = [0] * block_size
        for ch in w + ".":
            ix = stoi[ch]
            X.append(context)
            Y.append(ix)
            context = context[1:] + [ix]
    return torch.tensor(X), torch.tensor(Y)


random.shuffle(words)
n1 = int(0.9 * len(words))
Xtr, Ytr = build_dataset(words[:n1])
Xdev, Ydev = build_dataset(words[n1:])


class MLP(nn.Module):
    def __init__(self, vocab, n_embd=24, n_hidden=384):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.mlp = nn.Sequential(nn.Linear(block_size * n_embd, n_hidden), nn.Tanh(),
                                 nn.Linear(n_hidden, n_hidden), nn.Tanh(),
                                 nn.Linear(n_hidden, vocab))

    def forward(self, idx):
        emb = self.wte(idx)
        return self.mlp(emb.view(emb.shape[0], -1))


model = MLP(len(stoi))
parameters = list(model.parameters())
lossi = []
for i in range(500):
    ix = torch.randint(0, Xtr.shape[0], (256,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix]
    loss = F.cross_entropy(model(Xb), Yb)
    for p in parameters:
        p.grad = None
    loss.backward()
    lr = 0.1 if i < 350 else 0.01
    for p in parameters:
        p.data += -lr * p.grad
    lossi.append(loss.log10().item() if i % 50 == 0 else None)

with torch.no_grad():
    model.eval()
    print("dev loss %.4f" % F.cross_entropy(model(Xdev), Ydev).item())
