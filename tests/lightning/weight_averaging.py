"""Lightning's side of tests/lightning/weight_averaging_test: the run tests/ddp/weight_averaging.cc makes in Kiln.

  weight_averaging.py swa|ema|none OUT

The same module (Linear(6, 8), BatchNorm1d(8), tanh, Linear(8, 3), cross-entropy; each parameter filled with
0.5 * sin(1.3 * k + 0.7 * p)), SGD(lr=0.1, momentum=0.9) with StepLR(step_size=2, gamma=0.5), the same 64 rows in
batches of 8 (validation on the first 16), with StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=0.5,
annealing_epochs=2) for 6 epochs or EMAWeightAveraging(decay=0.9) for 3. Writes the module's final parameters and
buffers as Kiln's program does ("name v v ...", hexadecimal floating point), then n_averaged and global_step.
"""
import sys
import warnings

import lightning as L
import torch
from lightning.pytorch.callbacks import EMAWeightAveraging, StochasticWeightAveraging
from torch.utils.data import DataLoader, TensorDataset


def rows(n):
    inputs = torch.sin(torch.arange(n * 6, dtype=torch.float32) * 0.37).reshape(n, 6)
    return TensorDataset(inputs, torch.arange(n) % 3)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(6, 8)
        self.norm = torch.nn.BatchNorm1d(8)
        self.last = torch.nn.Linear(8, 3)
        with torch.no_grad():
            for p, parameter in enumerate(self.parameters()):
                k = torch.arange(parameter.numel(), dtype=torch.float32)
                parameter.copy_((torch.sin(k * 1.3 + 0.7 * p) * 0.5).reshape(parameter.shape))

    def forward(self, x):
        return self.last(torch.tanh(self.norm(self.first(x))))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        sgd = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return {"optimizer": sgd, "lr_scheduler": torch.optim.lr_scheduler.StepLR(sgd, 2, 0.5)}

    def train_dataloader(self):
        return DataLoader(rows(64), batch_size=8)

    def val_dataloader(self):
        return DataLoader(rows(16), batch_size=8)


def main():
    warnings.filterwarnings("ignore")
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "swa":
        callback = StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=0.5, annealing_epochs=2)
    elif mode == "ema":
        callback = EMAWeightAveraging(decay=0.9)
    else:
        callback = None
    net = Net()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=6 if mode == "swa" else 3, callbacks=[callback] if callback else [],
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(net)
    with open(out, "w") as file:
        for name, tensor in list(net.named_parameters()) + list(net.named_buffers()):
            values = tensor.detach().double().flatten().tolist()
            file.write(name + "".join(" " + float(v).hex() for v in values) + "\n")
        n = callback.n_averaged if mode == "swa" else callback._average_model.n_averaged if callback else 0
        file.write(f"n_averaged {int(n)}\nglobal_step {trainer.global_step}\n")


if __name__ == "__main__":
    main()
