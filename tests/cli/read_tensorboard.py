"""Reads a run's TensorBoard event file with Google's protobuf runtime and checks it against the run's metrics.csv
and hparams.yaml. Usage: read_tensorboard.py <protos folder> <build folder> <CSV logger's folder> <TensorBoard
logger's folder> (each logger has a version folder of its own, as Lightning's do).

Checks: TFRecord framing with valid masked CRC-32C (crcmod) on every length and payload, nothing left over; the first
event is the file version; every record decodes completely (re-serialising gives the same bytes, so no field was
left unknown); every metrics.csv cell is a scalar with that tag, step and float32 value, and there is no other
scalar but Lightning's hp_metric = -1 at step 0; the HParams plugin's experiment lists every hyper-parameter with
its type and hp_metric as the metric; its session start holds hparams.yaml's values with their types (the same
hparams.yaml in both folders); the session ends with STATUS_SUCCESS. Prints a short account and exits 1 on the first failure.
"""
import csv
import glob
import importlib
import os
import struct
import subprocess
import sys

import crcmod.predefined

protos, build, csv_run, run = sys.argv[1:5]
sources = [os.path.relpath(p, protos) for p in glob.glob(os.path.join(protos, "tensorboard", "**", "*.proto"),
                                                         recursive=True)]
os.makedirs(build, exist_ok=True)
subprocess.run(["protoc", "-I", protos, "-I", "/usr/include", "--python_out", build] + sources, check=True)
sys.path.insert(0, build)
event_pb2 = importlib.import_module("tensorboard.compat.proto.event_pb2")
plugin_data_pb2 = importlib.import_module("tensorboard.plugins.hparams.plugin_data_pb2")
api_pb2 = importlib.import_module("tensorboard.plugins.hparams.api_pb2")

crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def masked(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


files = glob.glob(os.path.join(run, "events.out.tfevents.*"))
if len(files) != 1:
    fail("expected one event file in %s, found %s" % (run, files))
blob = open(files[0], "rb").read()
records = []
at = 0
while at < len(blob):
    if len(blob) - at < 12:
        fail("%d stray bytes at the end" % (len(blob) - at))
    header = blob[at:at + 8]
    (length,) = struct.unpack("<Q", header)
    (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
    if length_crc != masked(header):
        fail("bad length CRC in the record at byte %d" % at)
    data = blob[at + 12:at + 12 + length]
    (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
    if len(data) != length or data_crc != masked(data):
        fail("bad data CRC (or truncated record) at byte %d" % at)
    records.append(data)
    at += 16 + length

scalars = {}
hparams = None
experiment = None
end_status = None
for index, data in enumerate(records):
    event = event_pb2.Event()
    event.ParseFromString(data)
    if event.SerializeToString(deterministic=True) != data:
        fail("record %d did not decode completely (re-serialised bytes differ)" % index)
    if index == 0:
        if event.WhichOneof("what") != "file_version" or event.file_version != "brain.Event:2":
            fail("the first event is not the file version: %s" % event)
        continue
    if event.wall_time < 1e9:
        fail("record %d has no wall time" % index)
    if event.WhichOneof("what") != "summary":
        fail("record %d is not a summary: %s" % (index, event))
    for value in event.summary.value:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            key = (value.tag, event.step)
            if key in scalars:
                fail("scalar %s at step %d written twice" % key)
            scalars[key] = value.simple_value
        elif value.metadata.plugin_data.plugin_name == "hparams":
            content = plugin_data_pb2.HParamsPluginData()
            content.ParseFromString(value.metadata.plugin_data.content)
            which = content.WhichOneof("data")
            if which == "experiment" and value.tag == "_hparams_/experiment":
                experiment = content.experiment
            elif which == "session_start_info" and value.tag == "_hparams_/session_start_info":
                hparams = content.session_start_info.hparams
            elif which == "session_end_info" and value.tag == "_hparams_/session_end_info":
                end_status = content.session_end_info.status
            else:
                fail("unexpected hparams summary %s (%s)" % (value.tag, which))
        else:
            fail("unexpected summary value %s" % value)

# Lightning's placeholder for the HParams dashboard's metric column: hp_metric = -1 at step 0, declared by the
# experiment, which lists every hyper-parameter with its type.
if scalars.pop(("hp_metric", 0), None) != -1:
    fail("no hp_metric = -1 at step 0")
if experiment is None:
    fail("no _hparams_/experiment summary")
if [m.name.tag for m in experiment.metric_infos] != ["hp_metric"]:
    fail("the experiment's metrics are %s, not hp_metric" % [m.name.tag for m in experiment.metric_infos])

# Every metrics.csv cell is a scalar, and nothing else is.
expected = {}
with open(os.path.join(csv_run, "metrics.csv")) as f:
    for row in csv.DictReader(f):
        step = int(row.pop("step"))
        for tag, cell in row.items():
            if cell != "":
                expected[(tag, step)] = struct.unpack("f", struct.pack("f", float(cell)))[0]
if set(expected) != set(scalars):
    fail("scalars differ from metrics.csv: only in the events %s, only in the CSV %s" %
         (sorted(set(scalars) - set(expected))[:5], sorted(set(expected) - set(scalars))[:5]))
for key, value in expected.items():
    if scalars[key] != value:
        fail("%s at step %d: %r in the events, %r in metrics.csv" % (key[0], key[1], scalars[key], value))

# Hyper-parameters: hparams.yaml's, with numbers as number_value and other text as string_value.
if hparams is None:
    fail("no session_start_info")
yaml = {}
if open(os.path.join(csv_run, "hparams.yaml")).read() != open(os.path.join(run, "hparams.yaml")).read():
    fail("the two loggers' hparams.yaml differ")
for line in open(os.path.join(run, "hparams.yaml")):
    key, _, text = line.rstrip("\n").partition(": ")
    yaml[key] = text[1:-1] if text.startswith('"') else text
if sorted(hparams) != sorted(yaml):
    fail("hparams keys %s differ from hparams.yaml's %s" % (sorted(hparams), sorted(yaml)))
for key, text in yaml.items():
    value = hparams[key]
    kind = value.WhichOneof("kind")
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None and not (kind == "number_value" and value.number_value == number):
        fail("hparam %s: %s, expected the number %s" % (key, value, text))
    if number is None and not (kind == "string_value" and value.string_value == text):
        fail("hparam %s: %s, expected the text %r" % (key, value, text))
types = {info.name: api_pb2.DataType.Name(info.type) for info in experiment.hparam_infos}
for key, value in hparams.items():
    want = {"number_value": "DATA_TYPE_FLOAT64", "string_value": "DATA_TYPE_STRING",
            "bool_value": "DATA_TYPE_BOOL"}[value.WhichOneof("kind")]
    if types.get(key) != want:
        fail("the experiment lists hparam %s as %s, its value is a %s" % (key, types.get(key), want))
if sorted(types) != sorted(hparams):
    fail("the experiment lists %s, the session %s" % (sorted(types), sorted(hparams)))
if end_status != api_pb2.STATUS_SUCCESS:
    fail("the session ended with status %s, not STATUS_SUCCESS" % end_status)

print("%d records, %d scalars matching metrics.csv, %d hyper-parameters, session ended %s" %
      (len(records), len(scalars), len(hparams), api_pb2.Status.Name(end_status)))
