# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
"""A loop with a tqdm progress bar and a logging call every step with the
loss and the accuracy (two .item() calls per step). The model is sized so a
step takes several ms, as real steps do: with a 2 ms step the ~0.4 ms of
logging and tqdm is a fifth of the step, a true host-code finding."""
import logging
import sys

import torch
from tqdm import tqdm

logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(message)s")
log = logging.getLogger("train")
torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(3072, 256), torch.randint(0, 10, (3072,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(2):
    bar = tqdm(dl, desc=f"epoch {epoch}", file=sys.stdout)
    for i, (x, y) in enumerate(bar):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = (out.argmax(1) == y).float().mean().item()
        bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{acc:.2f}")
        log.info("epoch %d step %d loss %.4f acc %.3f", epoch, i, loss.item(), acc)
