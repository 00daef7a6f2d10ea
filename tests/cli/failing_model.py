"""Writes a TorchScript model that fails at its N-th training forward, for tests/cli/on_exception_test.sh.

  failing_model.py OUT.pt FEATURES CLASSES N raise|nan

raise: the N-th training forward raises (as a user's step that throws); nan: it returns NaN (a non-finite loss, which
fit stops at without an exception). Evaluation forwards never fail.
"""
import sys

import torch


class Net(torch.nn.Module):
    def __init__(self, features: int, classes: int, fail_at: int, nan: bool):
        super().__init__()
        self.body = torch.nn.Linear(features, 8)
        self.head = torch.nn.Linear(8, classes)
        self.calls = 0
        self.fail_at = fail_at
        self.nan = nan

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls == self.fail_at:
                if self.nan:
                    x = x * float("nan")
                else:
                    raise RuntimeError("the step failed on purpose")
        return self.head(torch.tanh(self.body(x)))


if __name__ == "__main__":
    out, features, classes, fail_at, how = sys.argv[1:]
    torch.manual_seed(3)
    torch.jit.script(Net(int(features), int(classes), int(fail_at), how == "nan")).save(out)
