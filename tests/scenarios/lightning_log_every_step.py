# expect: primary=host-code
# needs: lightning
# must_not: compute-bound, undetermined
# says: Log less in training_step; lightning_log_every_step.py:26
"""A LightningModule that logs three values every step with on_step, on_epoch
and prog_bar on: self.log_dict runs inside Lightning's optimizer-step closure,
so it was timed as the optimizer step ("the optimizer step is 60% of step
time ... fused=True" for an SGD over 9.6K parameters). Logging every 50th
batch: 2.76 -> 1.54 ms a step."""
import lightning as L
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class M(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def training_step(self, batch, i):
        x, y = batch
        out = self.net(x)
        loss = nn.functional.cross_entropy(out, y)
        acc = (out.argmax(1) == y).float().mean()
        self.log_dict({"loss": loss, "acc": acc, "lr": self.optimizers().param_groups[0]["lr"]}, prog_bar=True, on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


torch.manual_seed(0)
dl = DataLoader(TensorDataset(torch.randn(32768, 64), torch.randint(0, 10, (32768,))),
                batch_size=32)
trainer = L.Trainer(max_epochs=1, enable_checkpointing=False, logger=False, log_every_n_steps=1)
trainer.fit(M(), dl)
