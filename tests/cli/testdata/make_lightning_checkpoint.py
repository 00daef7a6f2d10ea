"""Writes lightning-2.2.5.ckpt: a checkpoint written by Lightning itself, for python_checkpoint_test.sh to resume.

Run with a Python that has Lightning 2.2.5 (pip install lightning==2.2.5); it was run once, on 2026-12-02, with
torch 2.15.0 (CPU). The model is Kiln's MLP for fit's defaults (16 features, 4 classes, hidden sizes 16 and 16, the
names Kiln gives: net.0, net.2, net.4), trained for 2 epochs with Adam on random data by Lightning's Trainer.
"""
import glob
import shutil
import sys

import lightning.pytorch as pl
import torch


class Mlp(pl.LightningModule):
    def __init__(self, hidden=16):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                                       torch.nn.ReLU(), torch.nn.Linear(hidden, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main():
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(128, 16), torch.randint(4, (128,)))
    trainer = pl.Trainer(max_epochs=2, default_root_dir="/tmp/kiln-lightning-fixture", accelerator="cpu",
                         enable_progress_bar=False, logger=False)
    trainer.fit(Mlp(), torch.utils.data.DataLoader(data, batch_size=32))
    written = glob.glob("/tmp/kiln-lightning-fixture/checkpoints/*.ckpt")
    shutil.copy(written[0], sys.argv[1])
    print("copied", written[0], "to", sys.argv[1])


if __name__ == "__main__":
    main()
