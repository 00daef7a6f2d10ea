"""Per-step time of PyTorch's own Python training loop and of Lightning's Trainer.fit on step_bench's workloads.

Issue #41 puts these beside Kiln's figures (tests/bench/step_bench.cc). The workloads are step_bench's, built the same
way: the net is made right after torch.manual_seed(0) as the same Linear/ReLU stack (MakeNet), the batches come from
one CPU generator seeded 1 with the same randn/randint calls in the same order (MakeBatches), one intra-op thread.

  tiny:   32 -> 64 -> 1, batch 64, MSE, SGD (lr 1e-2), 2000 steps x 5 epochs
  medium: 784 -> 512 -> 256 -> 10, batch 128, cross-entropy, Adam (lr 1e-3), 300 steps
  many:   256 -> 24 x 256 -> 10, batch 32, cross-entropy, Adam (lr 1e-3), 500 steps

Modes, each a fresh net and optimizer from the same initial parameters, over the same batches:

  for_loop   the hand-written loop (zero_grad, forward, loss, backward, step) with the optimizer's default, which on
             the CPU is the per-tensor for-loop (PyTorch picks foreach only for CUDA-like devices)
  foreach    the same loop, foreach=True
  fused      the same loop, fused=True (the kernels step_bench's fused loop and Kiln's optimizers call)
  lightning  Lightning 2.x's Trainer.fit with callbacks off, over the same batches (an iterable, no DataLoader),
             its optimizer fused=True as Kiln's fit's is; like Kiln's time in step_bench it counts everything fit does per call (set-up,
             configure_optimizers, teardown), spread over the steps. The Trainer is made before the clock starts, as
             step_bench makes Kiln's.

Rounds are interleaved, the first mode rotating as in step_bench, and each mode's figure is the median of its
rounds. Output, one line per workload and mode, then one per workload with what every side starts from:

  python_step workload=tiny mode=fused us_per_step=123.4 final_loss=0.123456789 rounds=5 steps=2000 epochs=5
  python_step_fingerprint workload=tiny init_param_sum=... first_input_sum=...

final_loss is the loss of the last training step. The program exits 1, saying which, unless it is the same in every
round of a mode, lightning's equals fused's exactly (the same kernel on the same batches in the same order: the check
that Lightning took every batch once, in order), and every mode's is within LOSS_RTOL of the first mode's (the
per-tensor Adam rounds differently from the fused one). On these random targets the loss stays near its starting
value whatever the weights, so the tolerance alone says little; the exact checks and the fingerprint are what show
that the sides train the same model on the same data. The fingerprint's sums are step_bench's init_param_sum and
first_input_sum counters (each tensor's sum as a double, added in parameter order).

Usage: python_step.py [--workloads=tiny,medium,many] [--modes=for_loop,foreach,fused,lightning] [--steps=N]
       [--epochs=N] [--rounds=N]. --steps and --epochs replace every chosen workload's own.
"""
import argparse
import logging
import statistics
import sys
import tempfile
import time
import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F


class Workload(NamedTuple):
    layers: tuple  # Input, hidden..., output.
    batch_size: int
    classification: bool  # Cross-entropy and Adam, else MSE and SGD.
    steps: int
    epochs: int


# step_bench's kTiny, kMedium and kMany, with its steps and epochs.
WORKLOADS = {
    "tiny": Workload((32, 64, 1), 64, False, 2000, 5),
    "medium": Workload((784, 512, 256, 10), 128, True, 300, 1),
    "many": Workload((256,) * 25 + (10,), 32, True, 500, 1),
}
# The optimizer's arguments of each hand-written mode; lightning steps as fused does.
LOOP_OPTIONS = {"for_loop": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}
MODES = tuple(LOOP_OPTIONS) + ("lightning",)
# How far two modes' final losses may be apart, relative: the per-tensor and fused Adam round differently, and over
# 500 steps of the 24-layer net that moved the final loss by 1.5e-4 of it (tiny and medium: not in 9 digits).
LOSS_RTOL = 1e-3


def make_net(workload):
    """step_bench's MakeNet: the same layers, made right after the same seed, so the same initial parameters."""
    torch.manual_seed(0)
    layers = []
    sizes = workload.layers
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def make_optimizer(workload, parameters, options):
    if workload.classification:
        return torch.optim.Adam(parameters, lr=1e-3, **options)
    return torch.optim.SGD(parameters, lr=1e-2, **options)


def loss_of(workload, output, target):
    return F.cross_entropy(output, target) if workload.classification else F.mse_loss(output, target)


def make_batches(workload, steps):
    """step_bench's MakeBatches: one generator seeded 1, the input then the target of each batch, in order."""
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(steps):
        inputs = torch.randn(workload.batch_size, workload.layers[0], generator=generator)
        if workload.classification:
            target = torch.randint(workload.layers[-1], (workload.batch_size,), generator=generator, dtype=torch.long)
        else:
            target = torch.randn(workload.batch_size, 1, generator=generator)
        batches.append((inputs, target))
    return batches


def hand_written(workload, batches, epochs, options):
    """Seconds of the loop alone (the net and optimizer are made before), and the last step's loss."""
    net = make_net(workload)
    optimizer = make_optimizer(workload, net.parameters(), options)
    loss = None
    start = time.perf_counter()
    for _ in range(epochs):
        for inputs, target in batches:
            optimizer.zero_grad()
            loss = loss_of(workload, net(inputs), target)
            loss.backward()
            optimizer.step()
    seconds = time.perf_counter() - start
    return seconds, loss.item()


class LightningRun:
    """Lightning's side, imported only when its mode runs, so that the loops run without Lightning."""

    def __init__(self):
        # Lightning's own deprecation warning at import, its suggestions of workers and a longer logging interval for
        # loaders it does not own (neither applies to batches in memory) and its start-up notes (the accelerator it
        # chose, and so on) say nothing about the time.
        warnings.filterwarnings("ignore", message=r".*(isinstance\(treespec, LeafSpec\)|does not have many workers|"
                                "smaller than the logging interval)")
        import lightning.pytorch as pl

        logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
        self.pl = pl
        self.root = tempfile.mkdtemp(prefix="python_step_")

        class Module(pl.LightningModule):
            def __init__(self, workload):
                super().__init__()
                self.workload = workload
                self.net = make_net(workload)
                self.last_loss = None

            def training_step(self, batch, batch_idx):
                inputs, target = batch
                loss = loss_of(self.workload, self.net(inputs), target)
                self.last_loss = loss
                return loss

            def configure_optimizers(self):
                return make_optimizer(self.workload, self.parameters(), LOOP_OPTIONS["fused"])

        self.Module = Module

    def fit(self, workload, batches, epochs):
        """Seconds of Trainer.fit (the module and Trainer are made before), and the last step's loss."""
        module = self.Module(workload)
        trainer = self.pl.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, enable_checkpointing=False,
                                  logger=False, enable_progress_bar=False, enable_model_summary=False,
                                  num_sanity_val_steps=0, default_root_dir=self.root)
        loader = Batches(batches)
        start = time.perf_counter()
        trainer.fit(module, train_dataloaders=loader)
        seconds = time.perf_counter() - start
        if trainer.global_step != len(batches) * epochs:
            sys.exit(f"python_step: Lightning took {trainer.global_step} steps, not {len(batches) * epochs}")
        return seconds, module.last_loss.item()


class Batches:
    """The batches as one iterable of known length. Not the list itself: Lightning reads a list as a list of loaders."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def fingerprint(workload, batches):
    """step_bench's init_param_sum and first_input_sum."""
    init_param_sum = sum(param.sum().item() for param in make_net(workload).parameters())
    return init_param_sum, batches[0][0].sum().item()


def run(name, workload, modes, rounds, lightning):
    batches = make_batches(workload, workload.steps)
    steps = workload.steps * workload.epochs
    times = {mode: [] for mode in modes}
    losses = {mode: [] for mode in modes}
    for round_index in range(rounds):
        # Rotate which mode goes first, so that none always runs on a warmer cache or allocator (as step_bench does).
        for turn in range(len(modes)):
            mode = modes[(round_index + turn) % len(modes)]
            if mode == "lightning":
                seconds, loss = lightning.fit(workload, batches, workload.epochs)
            else:
                seconds, loss = hand_written(workload, batches, workload.epochs, LOOP_OPTIONS[mode])
            if torch.get_num_threads() != 1:
                sys.exit(f"python_step: {mode} left {torch.get_num_threads()} intra-op threads, not 1")
            times[mode].append(seconds)
            losses[mode].append(loss)
    failures = []
    for mode in modes:
        if len(set(losses[mode])) != 1:
            failures.append(f"{mode}'s final loss differs between rounds: {losses[mode]}")
        print(f"python_step workload={name} mode={mode} us_per_step={1e6 * statistics.median(times[mode]) / steps:.1f}"
              f" final_loss={losses[mode][0]:.9g} rounds={rounds} steps={workload.steps} epochs={workload.epochs}",
              flush=True)
    if "fused" in modes and "lightning" in modes and losses["fused"][0] != losses["lightning"][0]:
        failures.append(f"lightning's final loss ({losses['lightning'][0]:.9g}) is not fused's "
                        f"({losses['fused'][0]:.9g}): Lightning did not take the same steps on the same batches")
    reference = modes[0]
    for mode in modes[1:]:
        a, b = losses[reference][0], losses[mode][0]
        if abs(a - b) > LOSS_RTOL * max(abs(a), abs(b)):
            failures.append(f"final losses of {reference} ({a:.9g}) and {mode} ({b:.9g}) differ by more than "
                            f"{LOSS_RTOL:g} of them: they did not train the same model on the same batches")
    init_param_sum, first_input_sum = fingerprint(workload, batches)
    print(f"python_step_fingerprint workload={name} init_param_sum={init_param_sum:.9g} "
          f"first_input_sum={first_input_sum:.9g}", flush=True)
    return failures


def names(text, known, what):
    chosen = [name for name in text.split(",") if name]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown {what} {','.join(unknown) or '(none)'}; expected some of "
                                         f"{','.join(known)}")
    return chosen


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive count")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=lambda text: names(text, WORKLOADS, "workload"), default=list(WORKLOADS))
    parser.add_argument("--modes", type=lambda text: names(text, MODES, "mode"), default=list(MODES))
    parser.add_argument("--steps", type=positive, help="steps per epoch of every workload (default: its own)")
    parser.add_argument("--epochs", type=positive, help="epochs of every workload (default: its own)")
    parser.add_argument("--rounds", type=positive, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    lightning = LightningRun() if "lightning" in args.modes else None
    failures = []
    for name in args.workloads:
        workload = WORKLOADS[name]._replace(steps=args.steps or WORKLOADS[name].steps,
                                            epochs=args.epochs or WORKLOADS[name].epochs)
        failures += [f"{name}: {failure}" for failure in run(name, workload, args.modes, args.rounds, lightning)]
    for failure in failures:
        print(f"python_step: FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
