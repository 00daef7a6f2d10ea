"""Lightning's side of tests/lightning/hook_order_test: the hooks the real Lightning 2.x (PyPI) calls, in order.

  hook_order.py HOOKS_FILE [--manual]
      Runs what tests/lightning/hook_order.cc runs in Kiln (fit: one epoch of 2 training batches, 2 sanity and 2
      validation batches, the epoch's checkpoint; validate from that checkpoint; test; predict; 2 batches each, a
      Linear(4, 1) on the same four rows), recording each hook that HOOKS_FILE names (Kiln's list, from
      `hook_order --hooks`: "<hook>" for the module's, "Callback.<hook>" for a callback's) as Kiln's program prints
      them: one per line, ":<stage>" after setup and teardown, "== <entry point>" before each entry point. With
      --manual, under manual optimization (automatic_optimization = False), as `hook_order --manual` runs it.
"""
import sys
import warnings

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

CALLS = []


def recording(name, method):
    staged = name.split(".")[-1] in ("setup", "teardown")

    def record(self, *args, **kwargs):
        stage = kwargs.get("stage", args[-1] if args else None)
        stage = getattr(stage, "value", stage)
        CALLS.append(f"{name}:{stage}" if staged else name)
        return method(self, *args, **kwargs)

    return record


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        if self.automatic_optimization:
            return loss
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def predict_step(self, batch, batch_idx):
        return self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def loader(self):
        inputs = torch.arange(16, dtype=torch.float32).reshape(4, 4) / 16
        return DataLoader(TensorDataset(inputs, inputs.sum(1, keepdim=True)), batch_size=2)

    def train_dataloader(self):
        return self.loader()

    val_dataloader = test_dataloader = predict_dataloader = train_dataloader


class Recorder(L.Callback):
    pass


def main():
    hooks = open(sys.argv[1]).read().split()
    manual = sys.argv[2:] == ["--manual"]
    for hook in hooks:
        if hook.startswith("Callback."):
            name = hook[len("Callback."):]
            setattr(Recorder, name, recording(hook, getattr(L.Callback, name)))
        else:
            setattr(Module, hook, recording(hook, getattr(L.LightningModule, hook)))
    warnings.filterwarnings("ignore")
    model = Module()
    model.automatic_optimization = not manual
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, limit_train_batches=2, limit_val_batches=2,
                        limit_test_batches=2, limit_predict_batches=2, callbacks=[Recorder()], logger=False,
                        enable_progress_bar=False, enable_model_summary=False)
    CALLS.append("== fit")
    trainer.fit(model)
    CALLS.append("== validate")
    trainer.validate(model, ckpt_path=trainer.checkpoint_callback.best_model_path, verbose=False)
    CALLS.append("== test")
    trainer.test(model, verbose=False)
    CALLS.append("== predict")
    trainer.predict(model)
    print("\n".join(CALLS))


if __name__ == "__main__":
    main()
