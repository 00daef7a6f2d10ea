"""Lightning's side of tests/lightning: the real Lightning 2.x (PyPI) on Kiln's files.

  lightning_side.py make DIR SEED
      Writes DIR/train.csv (160 rows: 8 features, a class in 0..2) and DIR/net.pt, the TorchScript module Kiln
      trains (torch.jit.script of Net, seeded), whose parameter names are the LightningModule's below.
  lightning_side.py resume DIR CKPT MAX_EPOCHS OUT_CKPT SEED EXPECT_EPOCH EXPECT_STEP EXPECT_BATCH
      Lightning's Trainer.fit(ckpt_path=CKPT) on the same rows in the same order, to MAX_EPOCHS; checks that its
      first batch was batch EXPECT_BATCH of epoch EXPECT_EPOCH at global step EXPECT_STEP, with Adam's step at
      EXPECT_STEP for every parameter, that no warning was raised about the checkpoint, and saves OUT_CKPT.
  lightning_side.py evaluate DIR CKPT SEED KILN_VAL_LOSS
      Lightning's validate, test and predict with ckpt_path=CKPT (no warnings); validate's val_loss must equal
      KILN_VAL_LOSS, what Kiln logged for the same weights and rows, to float tolerance.
  lightning_side.py weights_only DIR SEED KILN_CKPT_DIR
      Lightning's fit with ModelCheckpoint(save_weights_only=True, every_n_train_steps=3, save_top_k=-1) for 2
      epochs; checks that Kiln's run of the same settings (KILN_CKPT_DIR) wrote the same file names, that each Kiln
      file has Lightning's top-level keys (beside Kiln's own section and the hyper-parameters Kiln's model has), that
      Lightning's validate loads each Kiln file, and that Lightning's fit refuses to resume from it as from its own.
  lightning_side.py rebuild RUN_DIR CKPT ROWS_CSV KILN_PREDICTIONS_CSV
      Rebuilds Kiln's MLP from the run's hparams.yaml alone (sizes and activation) as torch.nn.Sequential, loads the
      checkpoint's state_dict into it, and checks its class probabilities for ROWS_CSV against Kiln's predictions;
      also that the checkpoint's hyper_parameters say what hparams.yaml says.

Kiln splits the rows with LibTorch's randperm(rows) on a CPU generator seeded with --seed; PyTorch's randperm is the
same kernel (the same 2.x release), so the rows below are Kiln's.
"""
import math
import os
import sys
import warnings

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

FEATURES, CLASSES, ROWS, VAL_FRACTION, BATCH, LR = 8, 3, 160, 0.2, 32, 0.01
# Warnings that say nothing about the checkpoint, which Lightning gives its own runs as well: the small test loaders,
# a checkpoint folder that already holds checkpoints (the run's own, resumed in place), PyTorch's own deprecations.
# Warnings about the run's settings or the machine, not about Kiln's files (Lightning hints at srun wherever SLURM is
# installed, as on a machine that ran tools/slurm_check.sh).
UNRELATED = ("does not have many workers", "The number of training batches", "exists and is not empty",
             "isinstance(treespec, LeafSpec)", "The `srun` command is available on your system but is not used")


def layers():
    """The model's layers, under the names both modules give them (body.0, head)."""
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh()), torch.nn.Linear(16, CLASSES)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = layers()

    def forward(self, x):
        return self.head(self.body(x))


class LitNet(L.LightningModule):
    """The same parameters, under the same names, as Net: Kiln's state_dict is this module's."""

    def __init__(self):
        super().__init__()
        self.body, self.head = layers()

    def forward(self, x):
        return self.head(self.body(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.cross_entropy(self(x), y))

    def predict_step(self, batch, batch_idx):
        return self(batch[0]).softmax(1)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=LR)


def read_rows(directory):
    lines = open(f"{directory}/train.csv").read().split("\n")[1:]
    rows = [[float(cell) for cell in line.split(",")] for line in lines if line]
    table = torch.tensor(rows, dtype=torch.float32)
    return table[:, :FEATURES], table[:, FEATURES].long()


def loaders(directory, seed):
    """Kiln's split (a seeded randperm: training rows first) and order (--shuffle=false)."""
    x, y = read_rows(directory)
    num_val = round(VAL_FRACTION * len(x))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    train, val = order[: len(x) - num_val], order[len(x) - num_val :]
    return (DataLoader(TensorDataset(x[train], y[train]), batch_size=BATCH),
            DataLoader(TensorDataset(x[val], y[val]), batch_size=BATCH))


def trainer(directory, max_epochs, ckpt):
    # The ModelCheckpoint of the Kiln run that wrote `ckpt`, in the same folder, as a Lightning user continuing that
    # run gives it: Lightning then takes up its state. Every epoch, or every N steps when $EVERY_N_TRAIN_STEPS says
    # so (resume_test.sh).
    every_n_train_steps = int(os.environ.get("EVERY_N_TRAIN_STEPS", "0"))
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=os.path.dirname(os.path.abspath(ckpt)),
                                                     every_n_train_steps=every_n_train_steps or None)
    return L.Trainer(max_epochs=max_epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[checkpoint],
                     default_root_dir=f"{directory}/lightning_run", num_sanity_val_steps=0)


class Watch:
    """Every warning raised inside, less the unrelated and the `allowed` ones; fails the test on any."""

    def __init__(self, allowed=()):
        self.allowed = UNRELATED + tuple(allowed)

    def __enter__(self):
        self._catch = warnings.catch_warnings(record=True)
        self.caught = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        bad = [str(w.message) for w in self.caught if not any(u in str(w.message) for u in self.allowed)]
        if bad and exc[0] is None:
            sys.exit("FAIL: Lightning warned:\n  " + "\n  ".join(bad))


class ResumeProbe(L.Callback):
    """Where the resumed run started: its epoch, global step and Adam's step for each parameter."""

    def __init__(self):
        self.seen = None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self.seen is None:
            optimizer = trainer.optimizers[0]
            steps = sorted({int(state["step"]) for state in optimizer.state.values()})
            self.seen = (trainer.current_epoch, trainer.global_step, batch_idx, steps)


def make(directory, seed):
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(CLASSES, FEATURES, generator=generator) * 2
    labels = torch.randint(0, CLASSES, (ROWS,), generator=generator)
    features = centres[labels] + torch.randn(ROWS, FEATURES, generator=generator)
    with open(f"{directory}/train.csv", "w") as out:
        out.write(",".join([f"f{i}" for i in range(FEATURES)] + ["label"]) + "\n")
        for row, label in zip(features.tolist(), labels.tolist()):
            out.write(",".join(repr(v) for v in row) + f",{label}\n")
    torch.manual_seed(seed)
    torch.jit.script(Net()).save(f"{directory}/net.pt")


def resume(directory, ckpt, max_epochs, out_ckpt, seed, expect_epoch, expect_step, expect_batch):
    train, val = loaders(directory, seed)
    probe = ResumeProbe()
    run = trainer(directory, max_epochs, ckpt)
    run.callbacks.append(probe)
    # Lightning's own warning for every mid-epoch checkpoint of a loader without state (as these are).
    allowed = ("ended before the epoch ended",) if expect_batch > 0 else ()
    with Watch(allowed):
        run.fit(LitNet(), train, val, ckpt_path=ckpt)
    epoch, step, batch_idx, adam_steps = probe.seen
    if (epoch, step, batch_idx, adam_steps) != (expect_epoch, expect_step, expect_batch, [expect_step]):
        sys.exit(f"FAIL: Lightning resumed at epoch {epoch}, global step {step}, batch {batch_idx}, Adam's steps "
                 f"{adam_steps}; Kiln's checkpoint stands at epoch {expect_epoch}, step {expect_step}, batch "
                 f"{expect_batch}")
    print(f"Lightning resumed at epoch {epoch}, step {step}, Adam's step {adam_steps[0]}; "
          f"ended at epoch {run.current_epoch}, step {run.global_step}")
    run.save_checkpoint(out_ckpt)


def evaluate(directory, ckpt, seed, kiln_val_loss):
    train, val = loaders(directory, seed)
    with Watch():
        validated = trainer(directory, 1, ckpt).validate(LitNet(), val, ckpt_path=ckpt, verbose=False)
        trainer(directory, 1, ckpt).test(LitNet(), val, ckpt_path=ckpt, verbose=False)
        predictions = trainer(directory, 1, ckpt).predict(LitNet(), val, ckpt_path=ckpt)
    val_loss = validated[0]["val_loss"]
    if not math.isclose(val_loss, kiln_val_loss, rel_tol=1e-5):
        sys.exit(f"FAIL: Lightning validated Kiln's checkpoint to val_loss {val_loss}; Kiln logged {kiln_val_loss}")
    rows = sum(len(p) for p in predictions)
    print(f"Lightning's validate, test and predict ran on Kiln's checkpoint: val_loss {val_loss:.6f} "
          f"(Kiln: {kiln_val_loss:.6f}), {rows} predictions")


def weights_only(directory, seed, kiln_dir):
    train, val = loaders(directory, seed)
    ours = f"{directory}/lightning_weights_only"
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=ours, save_weights_only=True, every_n_train_steps=3,
                                                     save_top_k=-1)
    run = L.Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                    callbacks=[checkpoint], default_root_dir=f"{directory}/lightning_run", num_sanity_val_steps=0)
    run.fit(LitNet(), train, val)
    names = sorted(n for n in os.listdir(ours) if n.endswith(".ckpt"))
    kiln_names = sorted(n for n in os.listdir(kiln_dir) if n.endswith(".ckpt") and n != "last.ckpt")
    if names != kiln_names:
        sys.exit(f"FAIL: Lightning wrote {names}, Kiln {kiln_names}")
    kiln_own = {"kiln", "hparams_name", "hyper_parameters", "TabularData"}
    for name in names:
        theirs = set(torch.load(f"{ours}/{name}", weights_only=True))
        mine = set(torch.load(f"{kiln_dir}/{name}", weights_only=True))
        if mine - kiln_own != theirs - kiln_own:
            sys.exit(f"FAIL: {name}: Lightning's keys {sorted(theirs)}, Kiln's {sorted(mine)}")
        for key in ("optimizer_states", "lr_schedulers", "callbacks"):
            if key in mine:
                sys.exit(f"FAIL: Kiln's weights-only {name} has {key}")
        with Watch():
            L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False).validate(
                LitNet(), val, ckpt_path=f"{kiln_dir}/{name}", verbose=False)
        for path in (f"{ours}/{name}", f"{kiln_dir}/{name}"):
            try:
                L.Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                          enable_checkpointing=False, num_sanity_val_steps=0).fit(LitNet(), train, val,
                                                                                  ckpt_path=path)
            except KeyError as error:
                if "save_weights_only" not in str(error):
                    sys.exit(f"FAIL: Lightning refused {path} for another reason: {error}")
            else:
                sys.exit(f"FAIL: Lightning resumed from the weights-only {path}")
    print(f"Lightning and Kiln wrote the same weights-only files {names}, with the same keys; Lightning validates "
          f"Kiln's and refuses to resume from either")


def rebuild(run_dir, ckpt, rows_csv, predictions_csv):
    import yaml  # PyYAML, which Lightning needs too.

    hparams = yaml.safe_load(open(f"{run_dir}/hparams.yaml"))
    checkpoint = torch.load(ckpt, weights_only=True)
    if checkpoint["hyper_parameters"] != hparams:
        sys.exit(f"FAIL: the checkpoint's hyper_parameters {checkpoint['hyper_parameters']} are not hparams.yaml's "
                 f"{hparams}")
    if hparams.get("model") != "mlp" or "activation" not in hparams:
        sys.exit(f"FAIL: hparams.yaml does not describe an MLP with its activation: {hparams}")
    activation = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "gelu": torch.nn.GELU}[hparams["activation"]]
    sizes = [hparams["num_features"]] + [int(h) for h in str(hparams["hidden_sizes"]).split(",") if h]
    layers = []
    for size_in, size_out in zip(sizes, sizes[1:]):
        layers += [torch.nn.Linear(size_in, size_out), activation()]
    layers.append(torch.nn.Linear(sizes[-1], hparams["num_outputs"]))
    net = torch.nn.Sequential(*layers)
    net.load_state_dict({k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items()})
    lines = open(rows_csv).read().split("\n")[1:]
    rows = torch.tensor([[float(c) for c in line.split(",")] for line in lines if line])
    with torch.no_grad():
        mine = net(rows).softmax(1)
    theirs = torch.tensor([[float(c) for c in line.split(",")[2:]]
                           for line in open(predictions_csv).read().split("\n")[1:] if line])
    if not torch.allclose(mine, theirs, rtol=1e-5, atol=1e-6):
        sys.exit(f"FAIL: the MLP rebuilt from hparams.yaml predicts {mine.tolist()}, Kiln predicted {theirs.tolist()}")
    print(f"the {hparams['activation']} MLP {sizes + [hparams['num_outputs']]} rebuilt from hparams.yaml predicts "
          f"what Kiln predicted for {len(rows)} rows")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "make":
        make(args[0], int(args[1]))
    elif command == "resume":
        resume(args[0], args[1], int(args[2]), args[3], int(args[4]), int(args[5]), int(args[6]), int(args[7]))
    elif command == "evaluate":
        evaluate(args[0], args[1], int(args[2]), float(args[3]))
    elif command == "weights_only":
        weights_only(args[0], int(args[1]), args[2])
    elif command == "rebuild":
        rebuild(*args)
    else:
        sys.exit(f"unknown command {command!r}")
