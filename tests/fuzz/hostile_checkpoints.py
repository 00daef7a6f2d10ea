#!/usr/bin/env python3
"""Writes the hostile checkpoints of issue #39 into the checkpoint_reader fuzz corpus (raw inputs: 'r' + the file).

Each is a zip archive whose CRCs are right (Python's zipfile writes them), laid out as torch.save lays out its files
(archive/data.pkl, archive/data/<key>, archive/version), with a pickle spelt opcode by opcode as protocol 2 writes
it. Every one of them crashed Kiln, or had it read memory it does not own, before the reader's checks
(trainer/checkpoint/format/torch_file.cc, zip_checksums.cc); the corpus replays run them under AddressSanitizer in CI.

    tests/fuzz/hostile_checkpoints.py tests/fuzz/corpus/checkpoint_reader
"""
import io
import struct
import sys
import zipfile


def unicode(text):
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def glob(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def long(value):
    return b"\x8a\x08" + struct.pack("<q", value)


def tensor(key, numel, offset, sizes, strides):
    """A float tensor as torch.save pickles one: _rebuild_tensor_v2 of storage archive/data/<key>."""
    out = glob("torch._utils", "_rebuild_tensor_v2") + b"((" + unicode("storage") + glob("torch", "FloatStorage")
    out += unicode(key) + unicode("cpu") + long(numel) + b"tQ" + long(offset) + b"("
    out += b"".join(long(size) for size in sizes) + b"t("
    out += b"".join(long(stride) for stride in strides)
    return out + b"t\x89" + glob("collections", "OrderedDict") + b")RtR"


def checkpoint(value_pickle):
    """{'state_dict': {'w': <value>}} as a pickle, so that it reaches the restore if it is read."""
    return (b"\x80\x02}(" + unicode("state_dict") + b"}(" + unicode("w") + value_pickle + b"uu.")


def add(zip_file, name, data, compression=zipfile.ZIP_STORED):
    """A record with a fixed date, so that the files come out the same on every run."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = compression
    zip_file.writestr(info, data)


def archive(pickle, records):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zip_file:
        add(zip_file, "archive/data.pkl", pickle)
        for name, data in records:
            add(zip_file, "archive/" + name, data)
        add(zip_file, "archive/version", b"3\n")
    return b"r" + buffer.getvalue()


FLOATS_8 = struct.pack("<8f", *range(8))


def cases():
    yield "hostile-storage-past-record", archive(checkpoint(tensor("0", 32, 0, [32], [1])),
                                                 [("data/0", struct.pack("<f", 1.0))])
    yield "hostile-offset-2-40", archive(checkpoint(tensor("0", 8, 1 << 40, [1], [1])), [("data/0", FLOATS_8)])
    yield "hostile-negative-offset", archive(checkpoint(tensor("0", 8, -(1 << 40), [1], [1])), [("data/0", FLOATS_8)])
    yield "hostile-stride-2-36", archive(checkpoint(tensor("0", 8, 0, [2, 2], [1 << 36, 1])), [("data/0", FLOATS_8)])
    # LibTorch builds a negative stride as the contiguous one: values from another layout than the file declares.
    yield "hostile-negative-stride", archive(checkpoint(tensor("0", 8, 0, [2, 4], [4, -1])), [("data/0", FLOATS_8)])
    yield "hostile-offset-past-short-record", archive(checkpoint(tensor("0", 1, 1000, [1], [1])),
                                                      [("data/0", struct.pack("<f", 1.0))])
    # Two records whose names differ in case only: which one LibTorch reads is its search's choice.
    with_duplicate = io.BytesIO()
    with zipfile.ZipFile(with_duplicate, "w") as zip_file:
        add(zip_file, "archive/data.pkl", checkpoint(tensor("0", 8, 0, [8], [1])))
        add(zip_file, "archive/data/0", struct.pack("<f", 1.0))
        add(zip_file, "archive/DATA/0", FLOATS_8)
        add(zip_file, "archive/version", b"3\n")
    yield "hostile-duplicate-record", b"r" + with_duplicate.getvalue()
    deep = 200000
    yield "hostile-nested-200000-lists", archive(b"\x80\x02" + b"(" * deep + b"l" * deep + b".", [])
    yield "hostile-nested-200000-appends", archive(b"\x80\x02" + b"]" * deep + b"a" * (deep - 1) + b".", [])
    # Lists linked through the memo after they were stored: deeper than the rewrite's count sees.
    lists = 200
    pickle = b"\x80\x02]"
    for i in range(lists):
        pickle += b"]r" + struct.pack("<I", i) + b"a"
    for i in range(lists - 1):
        pickle += b"j" + struct.pack("<I", i) + b"j" + struct.pack("<I", i + 1) + b"aa"
    yield "hostile-memo-hidden-depth", archive(pickle + b".", [])
    yield "hostile-list-holds-itself", archive(b"\x80\x02]q\x00h\x00a.", [])
    # A deflated data.pkl whose directory says it inflates to 3.75 GiB (a deflate bomb's claim; this one's stream is
    # small): LibTorch would allocate all of it to read the record.
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w") as zip_file:
        add(zip_file, "archive/data.pkl", b"\x80\x02N.", zipfile.ZIP_DEFLATED)
        add(zip_file, "archive/version", b"3\n")
    data = bytearray(bomb.getvalue())
    claimed = struct.pack("<I", 0xF0000000)
    local = data.find(b"PK\x03\x04")
    data[local + 22:local + 26] = claimed
    central = data.find(b"PK\x01\x02")
    data[central + 24:central + 28] = claimed
    yield "hostile-deflate-claims-3.75-gib", b"r" + bytes(data)


def main():
    folder = sys.argv[1]
    for name, data in cases():
        with open(f"{folder}/{name}", "wb") as out:
            out.write(data)
        print(f"{folder}/{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
