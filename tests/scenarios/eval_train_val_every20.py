# expect: primary=eval-often
# says: one every 20 steps
"""nanoGPT's estimate_loss(), as scripts often write it: every 20 steps the
loss of 90 batches of the train split and then of the val split, each by an
evaluate(split) that puts the model in eval mode and back. Evaluation takes
about half the loop. The two passes are one evaluation point: "one every 20
steps", not one every 10 (issue 39 item 4)."""
import numpy as np
import torch

torch.manual_seed(0)
data = {"train": np.random.randint(0, 128, 100_000), "val": np.random.randint(0, 128, 20_000)}
model = torch.nn.Sequential(torch.nn.Embedding(128, 64), torch.nn.Flatten(),
                            torch.nn.Linear(64 * 32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def get_batch(split):
    d = data[split]
    ix = np.random.randint(0, len(d) - 33, 16)
    x = torch.from_numpy(np.stack([d[i:i + 32] for i in ix]))
    y = torch.from_numpy(d[ix + 32])
    return x, y


@torch.no_grad()
def evaluate(split):
    model.eval()
    losses = torch.zeros(90)
    for k in range(90):
        x, y = get_batch(split)
        losses[k] = torch.nn.functional.cross_entropy(model(x), y).item()
    model.train()
    return losses.mean()


def estimate_loss():
    return {split: evaluate(split) for split in ("train", "val")}


for it in range(300):
    if it % 20 == 0:
        estimate_loss()
    x, y = get_batch("train")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
