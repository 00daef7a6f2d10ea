"""Writes the checkpoints whose tensors share storages, for torch_file_test (run with a Python that has torch; the
files in this folder were written by PyTorch 2.11 from ~/.cache/kiln/lightning-venv):

    python make_shared_storage_checkpoints.py <folder>

shared_views.ckpt: what torch.save writes for a state_dict whose tensors are views of one another (a weight, its
transpose, a row, a slice; tied embeddings are the usual case): one storage record, referenced by every view.
shared_views_deflated.ckpt: the same dictionary, with eight views of one 32 MiB storage, and its records deflated
(zipfile, as any zip tool would rewrite it): 32 MiB that a reader must inflate once, not once per view.
shared_containers.ckpt: a tuple that the pickle shares (memo references) 2^22 times over 22 levels, holding a
torch.nn.Parameter: a 1 KB pickle that is 4 million tuples when walked as a tree, not once per container.
"""
import os
import sys
import zipfile

import torch


def main(folder):
    weight = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    state = {
        "weight": weight,
        "weight_t": weight.t(),
        "row": weight[1],
        "tail": weight.view(-1)[10:],
        "other": torch.tensor([1.5, -2.5], dtype=torch.float64),
    }
    torch.save({"state_dict": state, "epoch": 3}, f"{folder}/shared_views.ckpt")

    base = torch.zeros(8 << 20, dtype=torch.float32)  # 32 MiB, compresses to about 32 KiB.
    base[::1 << 20] = torch.arange(8, dtype=torch.float32) + 1
    views = {f"view{i}": base[i:] for i in range(8)}
    views["base"] = base
    plain = f"{folder}/shared_views_deflated.tmp"
    torch.save({"state_dict": views, "epoch": 3}, plain)
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(f"{folder}/shared_views_deflated.ckpt", "w") as out:
        for info in src.infolist():
            out.writestr(info.filename, src.read(info.filename),
                         compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    os.remove(plain)

    parameter = torch.nn.Parameter(torch.ones(2))
    nested = (parameter,)
    for _ in range(22):
        nested = (nested, nested)
    torch.save({"state_dict": {"p": parameter}, "nested": nested}, f"{folder}/shared_containers.ckpt")


if __name__ == "__main__":
    main(sys.argv[1])
