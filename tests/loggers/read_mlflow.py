"""Reads a run Kiln logged to MLflow back with MLflow's own client and compares it with Kiln's CSV logger's
metrics.csv of the same run.

    read_mlflow.py TRACKING_URI RUN_ID METRICS_CSV [--params k=v,...] [--artifacts] [--run_name NAME]
                   [--tag k=v] [--status FINISHED]

Checks: the run's params are the hyper-parameters given; every metric of metrics.csv has, in MLflow, the history
(step, value) the CSV has for it, and MLflow has no other metric; the tags; the run's status; with --artifacts, every
checkpoint artifact folder holds its .ckpt (the bytes of the file of that name in CKPT_DIR, when given), metadata.yaml
and aliases.txt. Prints what differs and exits 1, or prints OK.
"""

import argparse
import collections
import csv
import math
import os
import sys

from mlflow.tracking import MlflowClient


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tracking_uri")
    parser.add_argument("run_id")
    parser.add_argument("metrics_csv")
    parser.add_argument("--params", default="")
    parser.add_argument("--hparams_yaml", help="the CSV logger's hparams.yaml: the params, read as YAML, equal it")
    parser.add_argument("--tag", action="append", default=[])
    parser.add_argument("--run_name")
    parser.add_argument("--status", default="FINISHED")
    parser.add_argument("--artifacts", action="store_true")
    parser.add_argument("--ckpt_dir")
    parser.add_argument("--expect_artifacts", help="the checkpoints' stems, comma-separated: exactly these folders")
    parser.add_argument("--prefix", default="")
    args = parser.parse_args()

    problems = []
    client = MlflowClient(args.tracking_uri)
    if args.run_id.startswith("newest:"):  # The newest run of an experiment, by name.
        experiment = client.get_experiment_by_name(args.run_id[len("newest:"):])
        runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)
        args.run_id = runs[0].info.run_id
    run = client.get_run(args.run_id)

    want_params = dict(item.split("=", 1) for item in args.params.split(";") if item)
    if args.hparams_yaml:
        import yaml
        want_params = yaml.safe_load(open(args.hparams_yaml)) or {}
        have = {key: yaml.safe_load(value) for key, value in run.data.params.items()}
        if have != want_params:
            problems.append(f"params {have} != hparams.yaml's {want_params}")
    elif run.data.params != want_params:
        problems.append(f"params {run.data.params} != {want_params}")
    for item in args.tag:
        key, value = item.split("=", 1)
        if run.data.tags.get(key) != value:
            problems.append(f"tag {key}: {run.data.tags.get(key)!r} != {value!r}")
    if args.run_name is not None and run.info.run_name != args.run_name:
        problems.append(f"run_name {run.info.run_name!r} != {args.run_name!r}")
    if run.info.status != args.status:
        problems.append(f"status {run.info.status} != {args.status}")
    if run.info.end_time is None:
        problems.append("no end_time")

    # metrics.csv: a step column and one column per metric; an empty cell is a metric not logged in that row.
    want = collections.defaultdict(list)
    with open(args.metrics_csv) as f:
        for row in csv.DictReader(f):
            step = int(row["step"])
            for key, value in row.items():
                if key == "step" or value == "":
                    continue
                name = f"{args.prefix}-{key}" if args.prefix else key
                want[name].append((step, float(value)))
    if not want:
        problems.append("metrics.csv holds no metric")
    have_keys = set(run.data.metrics)
    if have_keys != set(want):
        problems.append(f"metric names {sorted(have_keys)} != metrics.csv's {sorted(want)}")
    points = 0
    for key, rows in want.items():
        history = sorted((m.step, m.value) for m in client.get_metric_history(args.run_id, key))
        rows = sorted(rows)
        points += len(rows)
        if len(history) != len(rows) or not all(h[0] == r[0] and same(h[1], r[1]) for h, r in zip(history, rows)):
            problems.append(f"metric {key}: MLflow {history[:6]}... ({len(history)}) != CSV {rows[:6]}... "
                            f"({len(rows)})")

    artifacts = []
    if args.artifacts:
        top = client.list_artifacts(args.run_id)
        if not top:
            problems.append("no artifacts")
        if args.expect_artifacts and sorted(f.path for f in top) != sorted(args.expect_artifacts.split(",")):
            problems.append(f"artifact folders {sorted(f.path for f in top)} != {sorted(args.expect_artifacts.split(','))}")
        for folder in top:
            if not folder.is_dir:
                problems.append(f"artifact {folder.path} is not a checkpoint's folder")
                continue
            names = sorted(os.path.basename(f.path) for f in client.list_artifacts(args.run_id, folder.path))
            artifacts.append(f"{folder.path}: {names}")
            want_names = sorted([folder.path + ".ckpt", "aliases.txt", "metadata.yaml"])
            if names != want_names:
                problems.append(f"artifact folder {folder.path} holds {names}, not {want_names}")
                continue
            if args.ckpt_dir:
                local = client.download_artifacts(args.run_id, f"{folder.path}/{folder.path}.ckpt",
                                                  dst_path=os.path.join(os.getcwd(), "downloaded"))
                original = os.path.join(args.ckpt_dir, folder.path + ".ckpt")
                if os.path.exists(original) and open(local, "rb").read() != open(original, "rb").read():
                    problems.append(f"artifact {folder.path}.ckpt differs from {original}")
            import yaml
            meta = yaml.safe_load(open(client.download_artifacts(
                args.run_id, f"{folder.path}/metadata.yaml", dst_path=os.path.join(os.getcwd(), "downloaded"))))
            if meta.get("original_filename") != folder.path + ".ckpt" or "Checkpoint" not in meta:
                problems.append(f"{folder.path}/metadata.yaml: {meta}")

    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"OK: {len(want_params)} params, {len(want)} metrics, {points} points equal to metrics.csv"
          + (f"; artifacts {artifacts}" if artifacts else ""))


if __name__ == "__main__":
    main()
