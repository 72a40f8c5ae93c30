# expect: primary=host-code
# says: Input preparation in the training loop; encode
"""Raw text tokenised in the training loop by a hand-written encode() (split,
a vocabulary dict, padding into a tensor) before every step: input
preparation on the training thread. The vocabulary's dict.get is Python
work, not a wait for a queue."""
import random

import torch

random.seed(0)
torch.manual_seed(0)
words = [f"w{i}" for i in range(3000)]
corpus = [" ".join(random.choice(words) for _ in range(random.randint(20, 60)))
          for _ in range(4000)]
labels = [random.randrange(2) for _ in corpus]
vocab = {w: i + 1 for i, w in enumerate(words)}


def encode(texts, n=64):
    ids = torch.zeros(len(texts), n, dtype=torch.long)
    for r, t in enumerate(texts):
        toks = [vocab.get(w, 0) for w in t.lower().split()][:n]
        ids[r, :len(toks)] = torch.tensor(toks)
    return ids


model = torch.nn.Sequential(torch.nn.EmbeddingBag(3001, 64), torch.nn.Linear(64, 2))
opt = torch.optim.Adam(model.parameters(), 1e-3)
for epoch in range(3):
    for i in range(0, 4000, 32):
        x = encode(corpus[i:i + 32])
        y = torch.tensor(labels[i:i + 32])
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
