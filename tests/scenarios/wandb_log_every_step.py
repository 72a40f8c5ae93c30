# expect: primary=host-code
# needs: wandb
# env: WANDB_MODE=offline, WANDB_SILENT=true
# says: Logging in the training loop; Log every N steps
"""wandb.log every step of a loop whose steps take a millisecond or two: the
logging call is a third of the loop (healthy at a step of a second). With
batches of 256 it was 19-28% of the samples, on the 20% line in one CI run."""
import tempfile

import torch
import wandb

run = wandb.init(project="trainperf-scenario", dir=tempfile.mkdtemp(prefix="wb-"),
                 config={"lr": 1e-3})
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
X = torch.randn(8192, 256)
Y = torch.randint(0, 10, (8192,))
for step in range(1500):
    idx = torch.randint(0, 8192, (128,))
    loss = torch.nn.functional.cross_entropy(model(X[idx]), Y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    wandb.log({"loss": loss.item(), "step": step})
run.finish()
