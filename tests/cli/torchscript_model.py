"""Python side of torchscript_test.sh, with Debian's python3-torch (1.13: an independent Python;
Kiln's LibTorch is 2.x, which loads the module 1.13 exports).

  torchscript_model.py make <model.pt> <features> <classes>
      Saves torch.jit.script(Net) and prints the SHA-256 of its parameters in registration order (what Kiln's
      params_sha256 hashes).
  torchscript_model.py predict <model.pt> <checkpoint.ckpt> <rows.csv> <out.csv>
      Loads Kiln's trained parameters and buffers from its checkpoint (torch.load, load_state_dict) into the
      scripted module, in Python, and
      writes its class probabilities for rows.csv, one row per line.
"""
import hashlib
import sys

import torch


class Net(torch.nn.Module):
    def __init__(self, features: int, classes: int):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(features, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1))
        self.norm = torch.nn.BatchNorm1d(32)
        self.head = torch.nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.norm(self.body(x)))


def params_sha256(module):
    digest = hashlib.sha256()
    for parameter in module.parameters():
        digest.update(parameter.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main():
    if sys.argv[1] == "make":
        torch.manual_seed(0)
        model = torch.jit.script(Net(int(sys.argv[3]), int(sys.argv[4])))
        model.save(sys.argv[2])
        print(params_sha256(model))
    elif sys.argv[1] == "predict":
        model = torch.jit.load(sys.argv[2])
        # A Kiln checkpoint is a torch.save dictionary with Lightning's keys: load_state_dict takes its state_dict.
        checkpoint = torch.load(sys.argv[3])
        model.load_state_dict(checkpoint["state_dict"])
        model.eval()
        rows = [[float(cell) for cell in line.split(",")] for line in open(sys.argv[4]).read().split("\n")[1:] if line]
        with torch.no_grad():
            probabilities = model(torch.tensor(rows, dtype=torch.float32)).softmax(1)
        with open(sys.argv[5], "w") as out:
            for row in probabilities.tolist():
                out.write(",".join(repr(p) for p in row) + "\n")
        print(params_sha256(model))


if __name__ == "__main__":
    main()
