# expect: primary=compute-bound
# needs: lightning
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
"""Lightning with the defaults most users keep: a ModelCheckpoint saving the
best model on the validation loss, validation twice in the epoch, metrics
logged every step with prog_bar=True."""
import os
import tempfile

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(),
                                       torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                       torch.nn.Linear(512, 10))

    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    torch.manual_seed(0)
    train = TensorDataset(torch.randn(12288, 128), torch.randint(0, 10, (12288,)))
    val = TensorDataset(torch.randn(512, 128), torch.randint(0, 10, (512,)))
    root = tempfile.mkdtemp()
    ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=root, monitor="val_loss", save_top_k=1)
    trainer = L.Trainer(max_epochs=1, val_check_interval=0.5, callbacks=[ckpt],
                        default_root_dir=root, logger=False, accelerator="cpu", devices=1,
                        enable_model_summary=False)
    trainer.fit(Net(), DataLoader(train, batch_size=64, shuffle=True), DataLoader(val, batch_size=128))
