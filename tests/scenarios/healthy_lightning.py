# expect: primary=compute-bound
# needs: lightning
# must_not: unstable, input-bound, host-code, gc-pauses, memory-capacity, undetermined
"""A LightningModule as Lightning's docs write one, validation every epoch,
DataLoader workers restarted each epoch (Lightning's defaults)."""
import os
import tempfile

import lightning as L
import torch
from torch import nn


class LitModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(256, 384), nn.ReLU(), nn.Linear(384, 384), nn.ReLU(),
                                 nn.Linear(384, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    torch.manual_seed(0)
    tr = torch.utils.data.TensorDataset(torch.randn(1600, 256), torch.randint(0, 10, (1600,)))
    va = torch.utils.data.TensorDataset(torch.randn(640, 256), torch.randint(0, 10, (640,)))
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tempfile.mkdtemp())
    trainer.fit(LitModel(), torch.utils.data.DataLoader(tr, batch_size=64, num_workers=1),
                torch.utils.data.DataLoader(va, batch_size=64, num_workers=1))
