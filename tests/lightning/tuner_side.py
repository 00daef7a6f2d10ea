"""Lightning's side of tests/lightning/tuner_test.sh: the real Lightning's Tuner.lr_find on lightning_side.py's
rows and model (the same TorchScript weights Kiln trains: net.pt), compared with what Kiln's fit --auto_lr_find wrote.

  tuner_side.py lr_find DIR SEED KILN_LR_FIND_CSV MIN_LR MAX_LR NUM_TRAINING MODE
      Runs Tuner(trainer).lr_find with those arguments, Adam at lightning_side.LR, the training rows in Kiln's order,
      and checks against Kiln's CSV (lr,loss): the same number of points, every learning rate equal (both derive them
      from min_lr, max_lr and num_training in double precision), every smoothed loss within 1e-6 relative (float32
      training on two builds of the same LibTorch release, Kiln's fused Adam against torch.optim.Adam: measured
      3.4e-9 on 2026-12-07), and the same suggested index.

  tuner_side.py scale_batch_size DIR SEED MODE
      Runs Tuner(trainer).scale_batch_size(mode=MODE) on the CPU with the training rows of DIR in a datamodule whose
      loaders use its batch_size, and a module that also keeps batch_size in its hparams (as fit's does, for
      hparams.yaml) at BATCH; prints the batch size found, and exits non-zero unless both holders were given it.
"""
import math
import sys

import lightning as L
import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
import lightning_side as side  # noqa: E402


def lr_find(directory, seed, kiln_csv, min_lr, max_lr, num_training, mode):
    train, val = side.loaders(directory, int(seed))
    model = side.LitNet()
    scripted = torch.jit.load(f"{directory}/net.pt")
    model.load_state_dict(scripted.state_dict())
    trainer = L.Trainer(max_epochs=20, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=f"{directory}/lightning_tune",
                        num_sanity_val_steps=0)
    found = L.pytorch.tuner.Tuner(trainer).lr_find(model, train, val, min_lr=float(min_lr), max_lr=float(max_lr),
                                                   num_training=int(num_training), mode=mode, update_attr=False)
    lines = open(kiln_csv).read().split("\n")[1:]
    kiln = [[float(v) for v in line.split(",")] for line in lines if line]
    lrs, losses = found.results["lr"], found.results["loss"]
    if len(kiln) != len(lrs):
        sys.exit(f"FAIL: Kiln recorded {len(kiln)} points, Lightning {len(lrs)}")
    worst = 0.0
    for i, ((k_lr, k_loss), lr, loss) in enumerate(zip(kiln, lrs, losses)):
        if k_lr != lr:
            sys.exit(f"FAIL: point {i}: Kiln's learning rate {k_lr!r}, Lightning's {lr!r}")
        if math.isfinite(loss) or math.isfinite(k_loss):
            worst = max(worst, abs(k_loss - loss) / max(abs(loss), 1e-12))
    if worst > 1e-6:
        sys.exit(f"FAIL: the smoothed losses differ by {worst:.3g} relative (more than 1e-6)")
    found.suggestion()
    print(f"points {len(lrs)}, worst relative loss difference {worst:.3g}, Lightning's index {found._optimal_idx}")
    return found._optimal_idx


class Rows(L.LightningDataModule):
    def __init__(self, directory, seed):
        super().__init__()
        train, val = side.loaders(directory, int(seed))
        self.train_set, self.val_set = train.dataset, val.dataset
        self.batch_size = side.BATCH

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.train_set, batch_size=self.batch_size)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(self.val_set, batch_size=self.batch_size)


class HparamsNet(side.LitNet):
    def __init__(self, batch_size):
        super().__init__()
        self.save_hyperparameters({"batch_size": batch_size})


def scale_batch_size(directory, seed, mode):
    data = Rows(directory, seed)
    model = HparamsNet(side.BATCH)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=f"{directory}/lightning_scale_{mode}")
    size = L.pytorch.tuner.Tuner(trainer).scale_batch_size(model, datamodule=data, mode=mode)
    if data.batch_size != size or model.hparams.batch_size != size:
        sys.exit(f"FAIL: Lightning found {size}, but left the datamodule at {data.batch_size} and the hparams at "
                 f"{model.hparams.batch_size}")
    print(size)


if __name__ == "__main__":
    if sys.argv[1] == "lr_find":
        index = lr_find(*sys.argv[2:9])
        if len(sys.argv) > 9 and str(index) != sys.argv[9]:
            sys.exit(f"FAIL: Lightning suggests point {index}, Kiln point {sys.argv[9]}")
    elif sys.argv[1] == "scale_batch_size":
        scale_batch_size(*sys.argv[2:5])
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
