"""Lightning's side of tests/lightning/throughput_test.sh: the real Lightning's ThroughputMonitor on the run
throughput_monitor.cc makes in Kiln, and PyTorch's FLOP counter on its model.

  throughput.py fit DIR DEVICES
      Lightning's Trainer.fit with ThroughputMonitor(batch_size_fn, length_fn, window_size=3), log_every_n_steps=2
      and a CSVLogger in DIR, on DEVICES CPU processes (2: DDP over Gloo), the model's flops_per_batch from Lightning's
      measure_flops. Prints, on rank 0, "flops train N" (measure_flops of a training step: forward, loss, backward)
      and "flops validate N" (a forward), and the path of metrics.csv as "csv PATH".
  throughput.py compute
      Lightning's Throughput (the arithmetic) on the updates of trainer/throughput_monitor_test.cc's first test, for 1
      and 2 devices: one line per key, "WORLD KEY VALUE".
"""
import sys
import warnings

import lightning as L
import torch
from lightning.fabric.utilities.throughput import Throughput, measure_flops
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")


def net():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


class Net(L.LightningModule):
    def __init__(self, flops):
        super().__init__()
        self.net = net()
        self.flops_per_batch = flops

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(folder, devices):
    torch.manual_seed(0)
    x, y = torch.randn(80, 8), torch.randint(0, 3, (80,))
    model = net()
    train_flops = measure_flops(model, lambda: model(x[:8]),
                                lambda logits: torch.nn.functional.cross_entropy(logits, y[:8]))
    with torch.no_grad():
        validate_flops = measure_flops(model, lambda: model(x[:4]))
    monitor = ThroughputMonitor(batch_size_fn=lambda b: b[0].size(0), length_fn=lambda b: b[0].numel(),
                                window_size=3)
    trainer = L.Trainer(max_epochs=2, log_every_n_steps=2, callbacks=[monitor], logger=CSVLogger(folder),
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                        accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto")
    trainer.fit(Net(train_flops), DataLoader(TensorDataset(x[:64], y[:64]), batch_size=8),
                DataLoader(TensorDataset(x[64:], y[64:]), batch_size=4))
    if trainer.is_global_zero:
        print(f"flops train {train_flops}")
        print(f"flops validate {validate_flops}")
        print(f"csv {trainer.logger.log_dir}/metrics.csv")


def compute():
    for world in (1, 2):
        throughput = Throughput(available_flops=100, world_size=world, window_size=3)
        for time, batches, samples, lengths in ((1.0, 1, 8, 80), (2.0, 2, 16, 160), (4.0, 3, 24, 240)):
            throughput.update(time=time, batches=batches, samples=samples, lengths=lengths, flops=10)
        for key, value in sorted(throughput.compute().items()):
            print(world, key, repr(float(value)))


if __name__ == "__main__":
    if sys.argv[1] == "fit":
        fit(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "compute":
        compute()
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")
