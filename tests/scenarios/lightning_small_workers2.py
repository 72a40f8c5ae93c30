# expect: primary=input-bound
# needs: lightning
# must_not: unstable, host-code, memory-capacity, undetermined
# says: num_workers=0
"""A small Lightning model over an in-memory TensorDataset with 2 DataLoader
workers (the issue-41 case: "Raise num_workers from 2 to 3" was advised,
while num_workers=0 ran 3.5x faster). The batches cost less to make than to
send from a worker, so the fix is fewer workers, not more."""
import tempfile

import lightning as L
import torch
from torch import nn


class LitModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tr = torch.utils.data.TensorDataset(torch.randn(2048, 32), torch.randint(0, 10, (2048,)))
    trainer = L.Trainer(max_epochs=4, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tempfile.mkdtemp())
    trainer.fit(LitModel(), torch.utils.data.DataLoader(tr, batch_size=16, num_workers=2,
                                                        persistent_workers=True))
