# expect: primary=compute-bound
# must_not: unstable, host-code, input-bound, undetermined, gil-contention
"""A character LSTM trained with truncated backpropagation through time
(the hidden state carried across windows, detached) and gradient clipping,
slicing its batches from one tensor: healthy."""
import torch
import torch.nn as nn

torch.manual_seed(0)
V, H, T, B = 64, 256, 32, 32
data = torch.randint(0, V, (B, 20000))
emb, lstm, head = nn.Embedding(V, 64), nn.LSTM(64, H, batch_first=True), nn.Linear(H, V)
params = list(emb.parameters()) + list(lstm.parameters()) + list(head.parameters())
opt = torch.optim.Adam(params, lr=1e-3)
h = None
for i in range(0, 120 * T, T):
    x, y = data[:, i:i + T], data[:, i + 1:i + T + 1]
    out, h = lstm(emb(x), h)
    h = tuple(t.detach() for t in h)
    loss = nn.functional.cross_entropy(head(out).reshape(-1, V), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
