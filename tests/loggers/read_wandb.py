"""Reads an offline W&B run Kiln wrote back with W&B's own reader (wandb 0.29's wandb.sdk.internal.datastore, the
reader `wandb sync` used, and wandb.proto.wandb_internal_pb2, its Record messages) and compares it with Kiln's CSV
logger's metrics.csv and hparams.yaml of the same run.

    read_wandb.py RUN_DIR METRICS_CSV --hparams_yaml FILE --id ID --project P [--name N] [--prefix P] [--tag T]
                  [--exit_code 0] [--ckpt_dir DIR] [--expect_checkpoints a.ckpt,b.ckpt]

Checks: the run record (id, project, display name, tags); the config, read as JSON, equals hparams.yaml read as YAML;
history rows, one per log_metrics call, in order: _step counts from 0, trainer/global_step is the CSV row's step and
the metrics (less the prefix) are the CSV row's; the summary (the last summary record, and files/wandb-summary.json)
is each key's last value; exactly one exit record, with the exit code; files/config.yaml; with --ckpt_dir, the files
records name files/<name>/v<N>/{model.ckpt,metadata.json}, each model.ckpt the bytes of the checkpoint its metadata
names (the newest version of each) and --expect_checkpoints the original file names logged. Prints what differs
and exits 1, or prints OK.
"""

import argparse
import csv
import json
import math
import os
import sys

import yaml
from wandb.proto import wandb_internal_pb2
from wandb.sdk.internal import datastore


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def key_of(item):
    return item.key if item.key else "/".join(item.nested_key)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("metrics_csv")
    parser.add_argument("--hparams_yaml", required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--name")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--tag", action="append", default=[])
    parser.add_argument("--exit_code", type=int, default=0)
    parser.add_argument("--ckpt_dir")
    parser.add_argument("--expect_checkpoints")
    args = parser.parse_args()

    problems = []
    run_file = os.path.join(args.run_dir, f"run-{args.id}.wandb")
    store = datastore.DataStore()
    store.open_for_scan(run_file)
    records = []
    while True:
        data = store.scan_data()
        if data is None:
            break
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        records.append(record)
    kinds = [record.WhichOneof("record_type") for record in records]
    print(f"{len(records)} records: " + ", ".join(f"{kinds.count(k)} {k}" for k in sorted(set(kinds))))
    if [record.num for record in records] != list(range(1, len(records) + 1)):
        problems.append(f"record numbers {[record.num for record in records][:20]}... do not count from 1")
    if not kinds or kinds[0] != "header":
        problems.append(f"the first record is {kinds[:1]}, not a header")

    runs = [record.run for record in records if record.HasField("run")]
    if len(runs) != 1:
        problems.append(f"{len(runs)} run records, not 1")
    else:
        run = runs[0]
        if run.run_id != args.id:
            problems.append(f"run_id {run.run_id!r} != {args.id!r}")
        if run.project != args.project:
            problems.append(f"project {run.project!r} != {args.project!r}")
        if (args.name or "") != run.display_name:
            problems.append(f"display_name {run.display_name!r} != {args.name!r}")
        if list(run.tags) != args.tag:
            problems.append(f"tags {list(run.tags)} != {args.tag}")
        if run.start_time.seconds == 0:
            problems.append("the run has no start_time")
    if not os.path.basename(os.path.normpath(args.run_dir)).startswith("offline-run-") or not args.run_dir.rstrip(
            "/").endswith("-" + args.id):
        problems.append(f"the run folder {args.run_dir} is not offline-run-<time>-{args.id}")

    # The config: every update, in order, read as JSON.
    config = {}
    for record in records:
        if record.HasField("config"):
            for item in record.config.update:
                config[key_of(item)] = json.loads(item.value_json)
    config.pop("_wandb", None)
    want = yaml.safe_load(open(args.hparams_yaml)) or {}
    if config != want:
        shown = {k: (v if len(str(v)) < 60 else f"<{len(str(v))} characters>") for k, v in config.items()}
        problems.append(f"config {shown} != hparams.yaml's")
    else:
        print(f"config: {len(config)} keys as hparams.yaml, longest value {max(len(str(v)) for v in config.values())}")

    # History: one row per CSV row, in order.
    rows = []
    for record in records:
        if record.HasField("history"):
            rows.append({key_of(item): json.loads(item.value_json) for item in record.history.item})
    with open(args.metrics_csv) as f:
        csv_rows = list(csv.DictReader(f))
    if len(rows) != len(csv_rows):
        problems.append(f"{len(rows)} history rows, {len(csv_rows)} CSV rows")
    for number, (row, csv_row) in enumerate(zip(rows, csv_rows)):
        if row.get("_step") != number:
            problems.append(f"row {number}: _step is {row.get('_step')}")
        if not isinstance(row.get("_timestamp"), float) or not isinstance(row.get("_runtime"), (int, float)):
            problems.append(f"row {number}: _timestamp {row.get('_timestamp')}, _runtime {row.get('_runtime')}")
        if row.get("trainer/global_step") != int(csv_row["step"]):
            problems.append(f"row {number}: trainer/global_step {row.get('trainer/global_step')} != CSV step "
                            f"{csv_row['step']}")
        metrics = {}
        for key, value in row.items():
            if key.startswith("_") or key == "trainer/global_step":
                continue
            if args.prefix:
                if not key.startswith(args.prefix + "-"):
                    problems.append(f"row {number}: {key} lacks the prefix {args.prefix}-")
                key = key[len(args.prefix) + 1:]
            metrics[key] = float(value)
        want_metrics = {k: float(v) for k, v in csv_row.items() if k != "step" and v != ""}
        if metrics.keys() != want_metrics.keys() or not all(same(metrics[k], want_metrics[k]) for k in metrics):
            problems.append(f"row {number} (step {csv_row['step']}): W&B {metrics} != CSV {want_metrics}")
    print(f"history: {len(rows)} rows, {sum(len(r) for r in rows)} values, against {len(csv_rows)} CSV rows")

    # The summary: each key's last value.
    last = {}
    for row in rows:
        last.update(row)
    summaries = [record.summary for record in records if record.HasField("summary")]
    final = {key_of(item): json.loads(item.value_json) for item in summaries[-1].update} if summaries else {}
    if set(final) != set(last) or not all(same(final[k], last[k]) for k in last):
        problems.append(f"the final summary {final} != the last values {last}")
    summary_file = json.load(open(os.path.join(args.run_dir, "files", "wandb-summary.json")))
    summary_file.pop("_wandb", None)
    if set(summary_file) != set(last) or not all(same(summary_file[k], last[k]) for k in last):
        problems.append(f"wandb-summary.json {summary_file} != the last values {last}")
    config_yaml = yaml.safe_load(open(os.path.join(args.run_dir, "files", "config.yaml")))
    if {k: v["value"] for k, v in config_yaml.items() if k != "_wandb"} != want:
        problems.append("files/config.yaml's values are not hparams.yaml's")
    json.load(open(os.path.join(args.run_dir, "files", "wandb-metadata.json")))

    exits = [record.exit for record in records if record.HasField("exit")]
    if len(exits) != 1 or kinds[-1] != "exit":
        problems.append(f"{len(exits)} exit records, the last record a {kinds[-1]}")
    elif exits[0].exit_code != args.exit_code:
        problems.append(f"exit_code {exits[0].exit_code} != {args.exit_code}")

    # Checkpoints, as files of the run.
    paths = [item.path for record in records if record.HasField("files") for item in record.files.files]
    if args.ckpt_dir is None:
        if paths:
            problems.append(f"files records without log_model: {paths}")
    else:
        newest = {}  # Original file name -> (version, folder).
        for path in paths:
            if not os.path.isfile(os.path.join(args.run_dir, "files", path)):
                problems.append(f"files record names {path}, not in files/")
            if path.endswith("/metadata.json"):
                folder = os.path.dirname(path)
                metadata = json.load(open(os.path.join(args.run_dir, "files", path)))
                version = int(os.path.basename(folder)[1:])
                original = metadata["original_filename"]
                if "latest" not in metadata["aliases"] or "ModelCheckpoint" not in metadata:
                    problems.append(f"{path}: {metadata}")
                if original not in newest or newest[original][0] < version:
                    newest[original] = (version, folder)
        for original, (version, folder) in sorted(newest.items()):
            logged = open(os.path.join(args.run_dir, "files", folder, "model.ckpt"), "rb").read()
            on_disk = os.path.join(args.ckpt_dir, original)
            if os.path.exists(on_disk) and open(on_disk, "rb").read() != logged:
                problems.append(f"{folder}/model.ckpt is not the bytes of {on_disk}")
            elif not os.path.exists(on_disk):
                print(f"{original}: logged as {folder}, since removed by ModelCheckpoint")
        print(f"checkpoints: {len(paths) // 2} logged, as {sorted(newest)}")
        if args.expect_checkpoints is not None and sorted(newest) != sorted(args.expect_checkpoints.split(",")):
            problems.append(f"checkpoints logged {sorted(newest)} != {sorted(args.expect_checkpoints.split(','))}")
        if not newest:
            problems.append("no checkpoint was logged")

    for problem in problems:
        print("PROBLEM:", problem)
    if problems:
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
