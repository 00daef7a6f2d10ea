"""Lightning's side of tests/lightning/fsdp_mixed_precision_test: the run tests/fsdp/mixed_precision.cc makes in Kiln.

  fsdp_mixed_precision.py OUT PARAM_DTYPE REDUCE_DTYPE BUFFER_DTYPE

Lightning's FSDPStrategy(mixed_precision=MixedPrecision(...), auto_wrap_policy={Linear}), FULL_SHARD, on 2 CPU
processes over Gloo, precision 32-true (so that nothing but the MixedPrecision casts), with the same module (a Sequential "net" of Linear(6, 8), Tanh,
Linear(8, 3), each parameter filled with 0.5 * sin(1.3 * k + 0.7 * p), a buffer "scale" of ones(3) multiplying the
output), mean squared error against the targets cast to the output's type, SGD(lr=0.1, momentum=0.9), the same 64 rows
in batches of 8 in order (a DistributedSampler without shuffling, as Kiln shards), 2 epochs. Rank 0 writes the whole parameters (the shards gathered in their own type, by summon_full_params) and
buffers (in buffer_dtype, as PyTorch's FSDP leaves them after a forward) as Kiln's program does ("name dtype v v ...", hexadecimal floating point), then the global step.

One shim, stated: Lightning refuses FSDP on a CPU accelerator by type (its connector checks
`type(strategy) is FSDPStrategy`; a subclass passes), and passes FullyShardedDataParallel device_id=None there, which
PyTorch 2.11 refuses without an accelerator ("FSDP needs a non-CPU accelerator device"). CpuFSDPStrategy wraps the
model as Lightning's _setup_model does, with device_id=cpu; everything else (the loops, the precision plugin, the
mixed-precision config, the optimizer, the sampler, the state dict) is Lightning's and PyTorch's.
"""
import sys
import warnings

import lightning as L
import torch
from lightning.pytorch.strategies import FSDPStrategy
from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "none": None}


class CpuFSDPStrategy(FSDPStrategy):
    def _setup_model(self, model):
        return FullyShardedDataParallel(module=model, cpu_offload=self.cpu_offload,
                                        mixed_precision=self.mixed_precision_config,
                                        sharding_strategy=self.sharding_strategy, device_id=torch.device("cpu"),
                                        **self.kwargs)


def rows(n):
    inputs = torch.sin(torch.arange(n * 6, dtype=torch.float32) * 0.37).reshape(n, 6)
    targets = torch.cos(torch.arange(n * 3, dtype=torch.float32) * 0.21).reshape(n, 3)
    return TensorDataset(inputs, targets)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        self.register_buffer("scale", torch.ones(3))
        with torch.no_grad():
            for p, parameter in enumerate(self.parameters()):
                k = torch.arange(parameter.numel(), dtype=torch.float32)
                parameter.copy_((torch.sin(k * 1.3 + 0.7 * p) * 0.5).reshape(parameter.shape))

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.net(x) * self.scale
        return torch.nn.functional.mse_loss(out, y.to(out.dtype))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def train_dataloader(self):
        # In order: rank r takes rows r, r + 2, ... (Kiln's sharding; Lightning's own sampler here would shuffle).
        sampler = DistributedSampler(rows(64), num_replicas=self.trainer.world_size, rank=self.global_rank,
                                     shuffle=False)
        return DataLoader(rows(64), batch_size=8, sampler=sampler)


def main():
    warnings.filterwarnings("ignore")
    out, param, reduce, buffer = sys.argv[1:5]
    mixed = MixedPrecision(param_dtype=DTYPES[param], reduce_dtype=DTYPES[reduce], buffer_dtype=DTYPES[buffer])
    strategy = CpuFSDPStrategy(mixed_precision=mixed, auto_wrap_policy={torch.nn.Linear},
                               sharding_strategy="FULL_SHARD", process_group_backend="gloo")
    net = Net()
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, precision="32-true", max_epochs=2,
                        use_distributed_sampler=False, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(net)
    # The whole model in the shards' own type (a collective: every rank calls it). Not Lightning's
    # lightning_module_state_dict(): its full state dict crashes PyTorch 2.11's FSDP on a CPU (a segmentation fault).
    with FullyShardedDataParallel.summon_full_params(trainer.strategy.model, writeback=False):
        state = {name.replace("_fsdp_wrapped_module.", ""): tensor.detach().clone()
                 for name, tensor in list(net.named_parameters()) + list(net.named_buffers())}
    if trainer.global_rank != 0:
        return
    with open(out, "w") as file:
        for name, tensor in state.items():
            dtype = {torch.float32: "Float", torch.bfloat16: "BFloat16", torch.float16: "Half"}[tensor.dtype]
            values = tensor.detach().double().flatten().tolist()
            file.write(name + " " + dtype + "".join(" " + float(v).hex() for v in values) + "\n")
        file.write(f"global_step {trainer.global_step}\n")


if __name__ == "__main__":
    main()
