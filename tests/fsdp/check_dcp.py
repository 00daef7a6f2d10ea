"""Reads a sharded checkpoint Kiln wrote with PyTorch's own torch.distributed.checkpoint, and checks it against the
full checkpoint of the same run (torch.load): the same model, the same optimizer state and settings.

Usage: check_dcp.py SHARDED_FOLDER FULL_CKPT
Exits non-zero, saying what differs, when they disagree or PyTorch cannot read the folder.
"""
import os
import sys
import tempfile

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save


def main(folder, full_path):
    full = torch.load(full_path, map_location="cpu", weights_only=True)
    failures = []

    # 1. The standard way: dcp.load into tensors of the right shapes (PyTorch plans the reads from .metadata and
    #    reads each piece from its rank's file).
    model = {name: torch.empty_like(tensor) for name, tensor in full["state_dict"].items()}
    dcp.load({"model": model}, checkpoint_id=folder)
    for name, tensor in full["state_dict"].items():
        if not torch.equal(model[name], tensor):
            failures.append(f"dcp.load: model.{name} differs from the full checkpoint's")

    # 2. Everything in the folder, as PyTorch's converter to a torch.save file sees it (.metadata's planner data
    #    nests the keys again; the values are the byte records).
    with tempfile.TemporaryDirectory() as scratch:
        converted_path = os.path.join(scratch, "converted.pt")
        dcp_to_torch_save(folder, converted_path)
        converted = torch.load(converted_path, map_location="cpu", weights_only=False)
    if set(converted["model"]) != set(full["state_dict"]):
        failures.append(f"the model's names differ: {sorted(converted['model'])} against {sorted(full['state_dict'])}")
    for index, optimizer in enumerate(full.get("optimizer_states", [])):
        sharded = converted.get(f"optimizer_{index}")
        if sharded is None:
            failures.append(f"optimizer_{index} is missing")
            continue
        names = [name for group in sharded["param_groups"] for name in group["params"]]
        for number, state in optimizer["state"].items():
            for key, value in state.items():
                theirs = sharded["state"].get(names[number], {}).get(key)
                same = torch.equal(theirs, value) if torch.is_tensor(value) else theirs == value
                if not same:
                    failures.append(f"optimizer_{index}: state {key} of {names[number]} (parameter {number}) differs")
        for group, their_group in zip(optimizer["param_groups"], sharded["param_groups"]):
            for key, value in group.items():
                if key == "params":
                    if [names.index(name) for name in their_group["params"]] != value:
                        failures.append(f"optimizer_{index}: a group's parameters differ")
                elif their_group.get(key) != value:
                    failures.append(f"optimizer_{index}: a group's {key} is {their_group.get(key)}, not {value}")
    for failure in failures:
        print("FAIL:", failure)
    tensors = sum(1 for _ in full["state_dict"]) + sum(
        len(state) for optimizer in full.get("optimizer_states", []) for state in optimizer["state"].values())
    print(f"torch.distributed.checkpoint {torch.__version__} read {folder}: {tensors} tensors "
          f"{'differ' if failures else 'equal the full checkpoint'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
