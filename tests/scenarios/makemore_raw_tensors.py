# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
# steps: 700
"""makemore part 2 as the lecture writes it: no nn.Module and no optimizer.
The parameters are bare tensors (C, W1, b1, W2, b2), the forward pass is
tensor expressions at the top level of the script, and the update is
`p.data += -lr * p.grad`. The steps come from backward(); the forward's
tensor ops have no phase of their own, and the stack sampler counts the
time on those lines as model compute, not host code."""
import random

import torch
import torch.nn.functional as F

torch.set_num_threads(1)  # one intra-op thread (a shared CPU box)
random.seed(42)
g = torch.Generator().manual_seed(2147483647)
cons, vows = "bcdfghjklmnprstvwz", "aeiouy"
words = ["".join(random.choice(cons if i % 2 == 0 else vows) for i in range(random.randint(3, 9)))
         for _ in range(8000)]
chars = sorted(set("".join(words)))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0
vocab_size = len(stoi)
block_size = 3
X, Y = [], []
for w in words:
    context = [0] * block_size
    for ch in w + ".":
        ix = stoi[ch]
        X.append(context)
        Y.append(ix)
        context = context[1:] + [ix]
Xtr, Ytr = torch.tensor(X), torch.tensor(Y)

n_embd, n_hidden = 24, 1024
C = torch.randn((vocab_size, n_embd), generator=g)
W1 = torch.randn((block_size * n_embd, n_hidden), generator=g) * (5 / 3) / (block_size * n_embd) ** 0.5
b1 = torch.randn(n_hidden, generator=g) * 0.01
W2 = torch.randn((n_hidden, vocab_size), generator=g) * 0.01
b2 = torch.randn(vocab_size, generator=g) * 0
parameters = [C, W1, b1, W2, b2]
for p in parameters:
    p.requires_grad = True

lossi = []
for i in range(700):
    # minibatch construct
    ix = torch.randint(0, Xtr.shape[0], (512,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix]
    # forward pass
    emb = C[Xb]
    embcat = emb.view(emb.shape[0], -1)
    hpreact = embcat @ W1 + b1
    h = torch.tanh(hpreact)
    logits = h @ W2 + b2
    loss = F.cross_entropy(logits, Yb)
    # backward pass
    for p in parameters:
        p.grad = None
    loss.backward()
    # update
    lr = 0.1 if i < 500 else 0.01
    for p in parameters:
        p.data += -lr * p.grad
    if i % 100 == 0:
        lossi.append(loss.log10().item())
print("train loss %.4f" % loss.item())
