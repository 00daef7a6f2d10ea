"""Writes inflating_model.pt, the fixture of torchscript_module_test's memory test: a TorchScript module (one
trainable 4x2 weight) with a 32 MiB buffer of zeros whose record is deflated, so that the 33 KB file inflates to
32 MiB when LibTorch reads it. torch.jit.save stores its records; the archive is rewritten with that one record
deflated (zipfile), its other records as they were.

  ~/.cache/kiln/lightning-venv/bin/python trainer/models/testdata/make_inflating_torchscript.py trainer/models/testdata
"""
import os
import sys
import zipfile

import torch


class Inflating(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4, 2))
        self.register_buffer("zeros", torch.zeros(8 << 20))  # 32 MiB of float32.

    def forward(self, x):
        return x @ self.weight + self.zeros[0]


def main():
    stored = os.path.join(sys.argv[1], "stored_model.pt.tmp")
    torch.jit.script(Inflating()).save(stored)
    with zipfile.ZipFile(stored) as source:
        infos = source.infolist()
        largest = max(infos, key=lambda info: info.file_size).filename
        out_path = os.path.join(sys.argv[1], "inflating_model.pt")
        with zipfile.ZipFile(out_path, "w") as out:
            for info in infos:
                compress = zipfile.ZIP_DEFLATED if info.filename == largest else zipfile.ZIP_STORED
                out.writestr(zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0)), source.read(info),
                             compress_type=compress, compresslevel=9)
    os.remove(stored)
    loaded = torch.jit.load(out_path)
    assert loaded.zeros.numel() == 8 << 20
    print(out_path, os.path.getsize(out_path), "bytes; deflated:", largest)


if __name__ == "__main__":
    main()
