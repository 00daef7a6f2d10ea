"""The Lightning side of examples/real_models: the same models, on the same batches in the same order, trained by the
real Lightning 2.x (PyPI), so that tests/lightning:real_models_test can compare Kiln's per-step training loss with
Lightning's.

  lightning_twin.py make EXAMPLE DIR
      Writes what both sides read: DIR/model.pt (the model, scripted with torch.jit.script and seeded; the GAN's is a
      module holding `generator` and `discriminator`) and DIR/data.pt (the data as the buffers of a scripted module).
  lightning_twin.py train EXAMPLE DIR [DEVICES]
      Trains DIR/model.pt on DIR/data.pt with Lightning, logging every step to DIR/lightning/version_0/metrics.csv
      (CSVLogger: the layout Kiln's CsvLogger writes too). With DEVICES > 1 (the gan), on that many CPU processes
      under DDP (ddp_find_unused_parameters_true: each toggled step leaves the other network out), each on its
      DistributedSampler share of the data.

EXAMPLE is two_inputs (a two-tower classifier: dictionary batches, two validation sets), gan (a GAN on sklearn's
digits with manual optimization) or char_gpt (a byte-level GPT on a text file from a Debian package, streamed,
bf16-mixed, gradient clipping, a cosine schedule with warm-up). Each example's settings are in SETTINGS; the Kiln
programs (examples/real_models/*.cc) use the same ones.
"""
import csv
import gzip
import math
import os
import sys
import warnings

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset

SETTINGS = {
    "two_inputs": {"epochs": 2, "batch_size": 16, "lr": 0.05, "momentum": 0.9},
    "gan": {"epochs": 4, "batch_size": 32, "lr": 2e-4, "noise": 16},
    "char_gpt": {"steps": 200, "batch_size": 8, "block": 64, "lr": 3e-3, "warmup": 20, "clip": 1.0,
                 "text": "/usr/share/common-licenses/GPL-3"},
}
DIGITS = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


class Holder(torch.nn.Module):
    def __init__(self, tensors):
        super().__init__()
        for name, tensor in tensors.items():
            self.register_buffer(name, tensor)

    def forward(self) -> int:
        return 0


def save_data(path, tensors):
    torch.jit.script(Holder(tensors)).save(path)


def load_data(path):
    return dict(torch.jit.load(path).named_buffers())


# --- two_inputs -----------------------------------------------------------------------------------------------------

class TwoTower(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.left = torch.nn.Linear(8, 32)
        self.right = torch.nn.Linear(8, 32)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(torch.relu(self.left(batch["left"]) + self.right(batch["right"])))


def make_two_inputs(out):
    generator = torch.Generator().manual_seed(3)
    mix_left = torch.randn(8, 4, generator=generator)
    mix_right = torch.randn(8, 4, generator=generator)

    def rows(n, shift):
        left = torch.randn(n, 8, generator=generator) + shift
        right = torch.randn(n, 8, generator=generator) - shift
        score = left @ mix_left + torch.tanh(right) @ mix_right + 0.3 * torch.randn(n, 4, generator=generator)
        return left, right, score.argmax(1)

    data = {}
    for name, n, shift in (("train", 1600, 0.0), ("near", 256, 0.0), ("far", 256, 1.0)):
        data[f"{name}_left"], data[f"{name}_right"], data[f"{name}_target"] = rows(n, shift)
    save_data(f"{out}/data.pt", data)
    torch.manual_seed(5)
    torch.jit.script(TwoTower()).save(f"{out}/model.pt")


class DictRows(Dataset):
    def __init__(self, tensors):
        self.tensors = tensors

    def __len__(self):
        return len(next(iter(self.tensors.values())))

    def __getitem__(self, index):
        return {name: tensor[index] for name, tensor in self.tensors.items()}


class TwoInputs(L.LightningModule):
    def __init__(self, out):
        super().__init__()
        self.net = torch.jit.load(f"{out}/model.pt")
        self.data = load_data(f"{out}/data.pt")

    def loader(self, name):
        tensors = {key: self.data[f"{name}_{key}"] for key in ("left", "right", "target")}
        return DataLoader(DictRows(tensors), batch_size=SETTINGS["two_inputs"]["batch_size"], shuffle=False)

    def train_dataloader(self):
        return self.loader("train")

    def val_dataloader(self):
        return [self.loader("near"), self.loader("far")]

    def training_step(self, batch, batch_idx):
        logits = self.net(batch)
        loss = F.cross_entropy(logits, batch["target"])
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, sync_dist=True)
        self.log("train_acc", (logits.argmax(1) == batch["target"]).float().mean(), on_step=False, on_epoch=True,
                 sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        logits = self.net(batch)
        self.log("val_loss", F.cross_entropy(logits, batch["target"]), prog_bar=True, sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == batch["target"]).float().mean(), prog_bar=True, sync_dist=True)

    def configure_optimizers(self):
        settings = SETTINGS["two_inputs"]
        return torch.optim.SGD(self.parameters(), lr=settings["lr"], momentum=settings["momentum"], fused=True)


# --- gan ------------------------------------------------------------------------------------------------------------

class Generator(torch.nn.Module):
    def __init__(self, noise):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(noise, 64), torch.nn.LeakyReLU(0.2), torch.nn.Linear(64, 64),
                                       torch.nn.Tanh())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class Discriminator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LeakyReLU(0.2), torch.nn.Linear(64, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Gan(torch.nn.Module):
    def __init__(self, noise):
        super().__init__()
        self.generator = Generator(noise)
        self.discriminator = Discriminator()

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.discriminator(self.generator(z))


def make_gan(out):
    with gzip.open(DIGITS, "rt") as f:
        rows = [[float(cell) for cell in row] for row in csv.reader(f)]
    images = torch.tensor([row[:64] for row in rows]) / 8.0 - 1.0  # Pixels 0..16 to [-1, 1].
    generator = torch.Generator().manual_seed(7)
    noise = torch.randn(SETTINGS["gan"]["epochs"], len(rows), SETTINGS["gan"]["noise"], generator=generator)
    save_data(f"{out}/data.pt", {"images": images, "noise": noise})
    torch.manual_seed(11)
    torch.jit.script(Gan(SETTINGS["gan"]["noise"])).save(f"{out}/model.pt")


class EpochNoise(Dataset):
    """The digits with the epoch's noise for each image (the same noise Kiln's loader gives)."""

    def __init__(self, images, noise):
        self.images, self.noise, self.epoch = images, noise, 0

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return {"image": self.images[index], "noise": self.noise[self.epoch, index]}


class GanModule(L.LightningModule):
    def __init__(self, out):
        super().__init__()
        self.automatic_optimization = False
        self.gan = torch.jit.load(f"{out}/model.pt")
        data = load_data(f"{out}/data.pt")
        self.rows = EpochNoise(data["images"], data["noise"])

    def train_dataloader(self):
        return DataLoader(self.rows, batch_size=SETTINGS["gan"]["batch_size"], shuffle=False)

    def on_train_epoch_start(self):
        self.rows.epoch = self.current_epoch

    def training_step(self, batch, batch_idx):
        opt_g, opt_d = self.optimizers()
        real, z = batch["image"], batch["noise"]
        ones = torch.ones(real.shape[0], 1)
        zeros = torch.zeros(real.shape[0], 1)
        # The generator: make the discriminator call its images real.
        self.toggle_optimizer(opt_g)
        fake = self.gan.generator(z)
        g_loss = F.binary_cross_entropy_with_logits(self.gan.discriminator(fake), ones)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)
        # The discriminator: tell the digits from the generator's images.
        self.toggle_optimizer(opt_d)
        d_loss = 0.5 * (F.binary_cross_entropy_with_logits(self.gan.discriminator(real), ones) +
                        F.binary_cross_entropy_with_logits(self.gan.discriminator(fake.detach()), zeros))
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        self.log("g_loss", g_loss, prog_bar=True)
        self.log("d_loss", d_loss, prog_bar=True)

    def configure_optimizers(self):
        lr = SETTINGS["gan"]["lr"]
        return (torch.optim.Adam(self.gan.generator.parameters(), lr=lr, betas=(0.5, 0.999), fused=True),
                torch.optim.Adam(self.gan.discriminator.parameters(), lr=lr, betas=(0.5, 0.999), fused=True))


# --- char_gpt -------------------------------------------------------------------------------------------------------

class Block(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attention.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class CharGpt(torch.nn.Module):
    """Causal self-attention over bytes (a vocabulary of 256): embeddings, 2 blocks, a head."""

    def __init__(self, block, width=64, heads=4, layers=2):
        super().__init__()
        self.token = torch.nn.Embedding(256, width)
        self.position = torch.nn.Embedding(block, width)
        self.blocks = torch.nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, 256)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.token(input_ids) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def make_char_gpt(out):
    torch.manual_seed(13)
    torch.jit.script(CharGpt(SETTINGS["char_gpt"]["block"])).save(f"{out}/model.pt")


class TextStream(IterableDataset):
    """The file's bytes as consecutive windows of block + 1 (inputs and the next bytes), read a block at a time."""

    def __init__(self, path, block):
        self.path, self.block = path, block

    def __iter__(self):
        with open(self.path, "rb") as f:
            while True:
                window = f.read(self.block + 1)
                if len(window) < self.block + 1:
                    return
                f.seek(-1, os.SEEK_CUR)
                ids = torch.tensor(list(window), dtype=torch.long)
                yield {"input_ids": ids[:-1], "labels": ids[1:]}


class CharGptModule(L.LightningModule):
    def __init__(self, out):
        super().__init__()
        self.gpt = torch.jit.load(f"{out}/model.pt")

    def train_dataloader(self):
        settings = SETTINGS["char_gpt"]
        return DataLoader(TextStream(settings["text"], settings["block"]), batch_size=settings["batch_size"])

    def training_step(self, batch, batch_idx):
        logits = self.gpt(batch["input_ids"])
        loss = F.cross_entropy(logits.reshape(-1, 256), batch["labels"].reshape(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        # Lightning's mixed-precision plugin refuses to clip a fused optimizer's gradients, for fear of clipping
        # scaled ones; bf16-mixed scales nothing, so the norm is clipped here as Lightning's clip_gradients would.
        torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val)

    def configure_optimizers(self):
        settings = SETTINGS["char_gpt"]
        optimizer = torch.optim.AdamW(self.parameters(), lr=settings["lr"], weight_decay=0.1, fused=True)
        warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, total_iters=settings["warmup"])
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=settings["steps"] - settings["warmup"])
        schedule = torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, cosine], milestones=[settings["warmup"]])
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def train(example, out, devices=1):
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    settings = SETTINGS[example]
    module = {"two_inputs": TwoInputs, "gan": GanModule, "char_gpt": CharGptModule}[example](out)
    extra = {}
    if example == "char_gpt":
        extra = {"max_steps": settings["steps"], "precision": "bf16-mixed", "gradient_clip_val": settings["clip"]}
    else:
        extra = {"max_epochs": settings["epochs"]}
    if devices > 1:
        extra["strategy"] = "ddp_find_unused_parameters_true"
    trainer = L.Trainer(accelerator="cpu", devices=devices, logger=L.pytorch.loggers.CSVLogger(out, name="lightning",
                                                                                          version=0),
                        log_every_n_steps=1, num_sanity_val_steps=0, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, **extra)
    trainer.fit(module)


def main():
    command, example, out = sys.argv[1:4]
    devices = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    if example not in SETTINGS:
        sys.exit(f"unknown example {example!r}; one of {', '.join(SETTINGS)}")
    os.makedirs(out, exist_ok=True)
    if command == "make":
        {"two_inputs": make_two_inputs, "gan": make_gan, "char_gpt": make_char_gpt}[example](out)
    elif command == "train":
        train(example, out, devices)
    else:
        sys.exit(f"unknown command {command!r}; make or train")


if __name__ == "__main__":
    main()
