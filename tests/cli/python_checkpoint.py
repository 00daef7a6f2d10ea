"""Python side of python_checkpoint_test.sh, with Debian's python3-torch (1.13: an independent reader of
Kiln's checkpoints, which Kiln writes with LibTorch 2.x).

  python_checkpoint.py check <kiln.ckpt>
      torch.load gives a dictionary with Lightning's keys; its state_dict goes into an equivalent torch.nn module
      (strict), and its optimizer state into torch.optim.Adam over that module's parameters.
  python_checkpoint.py resave <kiln.ckpt> <out.ckpt>
      Writes, with torch.save, the checkpoint a PyTorch program would write for the same model and optimizer: the
      module's own state_dict() (an OrderedDict with _metadata), the optimizer's own state_dict(), the epoch,
      global step and loop progress, and no Kiln section.
"""
import sys

import torch

LIGHTNING_KEYS = {"epoch", "global_step", "pytorch-lightning_version", "state_dict", "loops", "callbacks",
                  "optimizer_states", "lr_schedulers", "hyper_parameters"}


class Mlp(torch.nn.Module):
    """Kiln's MLP (trainer/models/mlp.cc): Linear and ReLU in a Sequential named "net"."""

    def __init__(self, sizes):
        super().__init__()
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
            if i + 2 < len(sizes):
                layers.append(torch.nn.ReLU())
        self.net = torch.nn.Sequential(*layers)


def sizes_of(state_dict):
    weights = [state_dict["net.%d.weight" % i] for i in range(0, 2 * len(state_dict), 2) if "net.%d.weight" % i in state_dict]
    return [weights[0].shape[1]] + [w.shape[0] for w in weights]


def load(path):
    checkpoint = torch.load(path)
    assert isinstance(checkpoint, dict), type(checkpoint)
    missing = LIGHTNING_KEYS - set(checkpoint)
    assert not missing, "missing Lightning keys: %s" % sorted(missing)
    model = Mlp(sizes_of(checkpoint["state_dict"]))
    model.load_state_dict(checkpoint["state_dict"], strict=True)
    optimizer = torch.optim.Adam(model.parameters())
    optimizer.load_state_dict(checkpoint["optimizer_states"][0])
    return checkpoint, model, optimizer


def main():
    checkpoint, model, optimizer = load(sys.argv[2])
    if sys.argv[1] == "check":
        state = optimizer.state_dict()["state"]
        saved = checkpoint["optimizer_states"][0]["state"]
        assert sorted(state) == sorted(saved) == list(range(len(list(model.parameters())))), (sorted(state), sorted(saved))
        for index, parameter in enumerate(model.parameters()):
            assert torch.equal(state[index]["exp_avg"], saved[index]["exp_avg"])
            assert state[index]["exp_avg"].shape == parameter.shape
            assert float(state[index]["step"]) == checkpoint["global_step"], (state[index]["step"], checkpoint["global_step"])
        print("torch.load: %d keys; state_dict of %d tensors loaded into torch.nn (%s); Adam state of %d parameters at "
              "step %d; epoch %d" % (len(checkpoint), len(checkpoint["state_dict"]), "-".join(map(str, sizes_of(checkpoint["state_dict"]))),
                                     len(state), checkpoint["global_step"], checkpoint["epoch"]))
    elif sys.argv[1] == "resave":
        torch.save({
            "epoch": checkpoint["epoch"],
            "global_step": checkpoint["global_step"],
            "pytorch-lightning_version": "2.2.5",
            "state_dict": model.state_dict(),
            "loops": checkpoint["loops"],
            "callbacks": {},
            "optimizer_states": [optimizer.state_dict()],
            "lr_schedulers": [],
            "hparams_name": "kwargs",
            "hyper_parameters": checkpoint["hyper_parameters"],
        }, sys.argv[3])
        print("wrote %s with torch.save" % sys.argv[3])


if __name__ == "__main__":
    main()
