#!/usr/bin/env python3
"""Writes the benchmarks' figures into docs/performance.md, between its bench_report markers (issue #41).

    tools/bench_report.py [--only step,checkpoint,python,instructions] [--save DIR]   # runs them (minutes)
    tools/bench_report.py --from DIR [--only ...]                                    # reads what --save kept

Sources, each optional (--only picks some; the default is all four):

  step          bazel-out/k8-opt/bin/tests/bench/step_bench --benchmark_format=json (--step-bench PATH)
  checkpoint    bazel-out/k8-opt/bin/tests/bench/checkpoint_bench --benchmark_format=json (--checkpoint-bench PATH)
  python        tests/bench/python_step.py in the Python with Lightning (--python PATH; default $KILN_LIGHTNING_PYTHON,
                else ~/.cache/kiln/lightning-venv/bin/python); without that Python its block says it was skipped
  instructions  tools/bench_instructions.sh, callgrind's counts (~25 minutes; --step-instructions PATH)

Build the programs first: `bazel build -c opt //tests/bench:step_bench //tests/bench:checkpoint_bench
//tests/bench:step_instructions`. Each source's block in the page (`<!-- bench_report:NAME begin -->` to
`<!-- bench_report:NAME end -->`) is replaced whole and stamped with the date, the machine (CPU model, cores, load
average at the start), the LibTorch version, Kiln's build mode and the exact command; everything outside the blocks is
left as it is. The step table puts Python's loops and Lightning (the python source of the same report) beside Kiln's
figures. Issue #41's targets (TARGETS) are judged met or missed from the figures.

Outputs are kept in a folder (--save DIR, else a new temporary one, printed), as step_bench.json,
checkpoint_bench.json, python_step.txt and bench_instructions.txt (each with a .err beside it), and meta.json (when,
where and how each was run); --from DIR reads such a folder instead of running anything, so a page can be rewritten
without running the benchmarks again. A file there without a meta.json entry is stamped "not recorded", and its
comment lines (`# ...`, in the text outputs) are quoted in the page.

--smoke runs every program in its short smoke mode (KILN_BENCH_SMOKE=1 and --benchmark_min_time=0.01, as
tests/bench/run_all.sh does; python_step.py --steps=20 --rounds=1) to try the tool; its blocks say the figures are
not measurements.

Exit status: 0 when every chosen source ran (or was read, or skipped for a missing Python) and its block was written;
1 when a program failed or its output could not be read (the other blocks are still written); 2 for bad arguments or
a page without a chosen source's markers.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
from typing import NamedTuple, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("step", "checkpoint", "python", "instructions")
FILES = {
    "step": "step_bench.json",
    "checkpoint": "checkpoint_bench.json",
    "python": "python_step.txt",
    "instructions": "bench_instructions.txt",
}
META = "meta.json"
TITLES = {
    "step": "Step time",
    "checkpoint": "Checkpoint throughput",
    "python": "PyTorch's Python loops and Lightning",
    "instructions": "Instructions per step (callgrind)",
}
SMOKE_BENCHMARK_ARGS = ["--benchmark_min_time=0.01"]  # tests/bench/run_all.sh's, with KILN_BENCH_SMOKE=1.
SMOKE_PYTHON_ARGS = ["--steps=20", "--rounds=1"]  # tests/bench/python_step_smoke_test.sh's.


class ReportError(Exception):
    """A source's output that cannot be read, or a page that cannot be written; the message says which and why."""


# Issue #41's targets. Each is judged from the figures of the report that shows it, never written by hand.
class Target(NamedTuple):
    text: str  # As the page shows it.
    at_most: Optional[float] = None
    at_least: Optional[float] = None

    def judge(self, value):
        if value is None:
            return "no figure"
        if self.at_most is not None and value > self.at_most:
            return "**missed**"
        if self.at_least is not None and value < self.at_least:
            return "**missed**"
        return "met"


TARGETS = {
    # Kiln's lean step (callbacks off, Kiln's fused optimizers) against the fused hand-written loop.
    "lean_step_time": Target("<= 1.05", at_most=1.05),
    "lean_step_instructions": Target("<= 1.01", at_most=1.01),
    # Kiln's checkpoint write and read against torch.save's and torch.load's ways in LibTorch, in throughput.
    "checkpoint_throughput": Target(">= 1.0", at_least=1.0),
    # A CSV logger with 50 metrics logged per step over none, and a checkpoint every 10 steps over none, every
    # thread's instructions counted.
    "metrics_50": Target("<= 1.01 (+1%)", at_most=1.01),
    "checkpoint_every_10": Target("<= 1.03 (+3%)", at_most=1.03),
}


# ---- Reading each program's output.


def benchmark_counters(text, what):
    """{family: (counters, rounds)} from Google Benchmark's JSON: a family is the name before the first '/'
    (BM_TinyDefaults/2000/5/manual_time: BM_TinyDefaults). With --benchmark_repetitions, the median aggregate's
    counters when there is one, else each counter's median over the repetitions."""
    try:
        data = json.loads(text)
        entries = data["benchmarks"]
    except (ValueError, KeyError, TypeError) as error:
        raise ReportError(f"{what}: not Google Benchmark's JSON ({error})") from None
    iterations, medians = {}, {}
    for entry in entries:
        family = entry.get("run_name", entry.get("name", "")).split("/")[0]
        if entry.get("error_occurred"):
            raise ReportError(f"{what}: {family} failed: {entry.get('error_message', 'no message')}")
        if entry.get("run_type") == "aggregate":
            if entry.get("aggregate_name") == "median":
                medians[family] = entry
        else:
            iterations.setdefault(family, []).append(entry)
    result = {}
    for family in list(iterations) + [family for family in medians if family not in iterations]:
        runs = iterations.get(family, [])
        # Rounds: the iterations of every repetition (unknown with --benchmark_report_aggregates_only).
        rounds = sum(int(run.get("iterations", 0)) for run in runs) if runs else "?"
        source = medians.get(family)
        if source is not None:
            counters = {key: value for key, value in source.items() if isinstance(value, (int, float))}
        else:
            keys = set.intersection(*(set(run) for run in runs))
            counters = {key: statistics.median(run[key] for run in runs) for key in keys
                        if all(isinstance(run[key], (int, float)) and not isinstance(run[key], bool) for run in runs)}
        result[family] = (counters, rounds)
    return result


def python_lines(text, what):
    """({(workload, mode): fields}, {workload: fingerprint fields}) from python_step.py's output."""
    figures, fingerprints = {}, {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] not in ("python_step", "python_step_fingerprint"):
            # Not python_step's own: a library's message on standard output, which says nothing about the figures.
            print(f"bench_report: {what}:{number}: not a python_step line, left out: {line!r}", file=sys.stderr)
            continue
        fields = dict(word.split("=", 1) for word in words[1:] if "=" in word)
        try:
            if words[0] == "python_step":
                figures[(fields["workload"], fields["mode"])] = {
                    "us_per_step": float(fields["us_per_step"]), "final_loss": float(fields["final_loss"]),
                    "rounds": int(fields["rounds"]), "steps": int(fields["steps"]), "epochs": int(fields["epochs"])}
            else:
                fingerprints[fields["workload"]] = {
                    "init_param_sum": float(fields["init_param_sum"]),
                    "first_input_sum": float(fields["first_input_sum"])}
        except (KeyError, ValueError) as error:
            raise ReportError(f"{what}:{number}: {error} in {line!r}") from None
    if not figures:
        raise ReportError(f"{what}: no python_step line")
    return figures, fingerprints


INSTRUCTION_COUNT = re.compile(r"^(\w+) (instructions_per_step|training_thread_instructions_per_step) (\d+)$")
INSTRUCTION_RATIO = re.compile(r"^(\w+) ([0-9]+(?:\.[0-9]+)?)$")


def instruction_lines(text, what):
    """({(name, kind): count}, {ratio name: ratio}) from tools/bench_instructions.sh's output."""
    counts, ratios = {}, {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = INSTRUCTION_COUNT.match(line)
        if match:
            counts[(match.group(1), match.group(2))] = int(match.group(3))
            continue
        match = INSTRUCTION_RATIO.match(line)
        if not match:
            raise ReportError(f"{what}:{number}: not '<name> instructions_per_step <N>' nor '<ratio> <value>': "
                              f"{line!r}")
        ratios[match.group(1)] = float(match.group(2))
    if not counts and not ratios:
        raise ReportError(f"{what}: no figure")
    return counts, ratios


def comment_lines(text):
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


# ---- Formatting.


def us(value):
    """Microseconds per step: 72.1, 3,052."""
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def ratio(value, digits=3):
    return "-" if value is None else f"{value:.{digits}f}"


def count(value):
    return "-" if value is None else f"{value:,}"


def divide(a, b):
    return None if a is None or b is None or b == 0 else a / b


def multiply(a, b):
    return None if a is None or b is None else a * b


def prose(lines):
    """Lines of Markdown with each paragraph wrapped at the page's 120 columns (tables and blank lines as they are)."""
    wrapped = []
    for line in lines:
        if not line or line.startswith("|"):
            wrapped.append(line)
        else:
            wrapped += textwrap.wrap(line, width=118, break_long_words=False, break_on_hyphens=False)
    return wrapped


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def stamp(title, meta, report_command, from_dir):
    """The block's first lines: what it is, and when, where and how its figures were made."""
    lines = []
    if meta.get("smoke"):
        lines += ["**Smoke run** (each program's short smoke mode, a few steps): these figures show that the tools "
                  "work; they are not measurements.", ""]
    if meta.get("skipped"):
        said = f"not run ({meta.get('date', 'date not recorded')})."
    elif meta.get("date") or meta.get("machine") or meta.get("command"):
        when = f"measured {meta.get('date', 'at a time not recorded')}"
        machine = meta.get("machine")
        if machine:
            when += f" on {machine.get('cpu') or 'an unknown CPU'} ({machine.get('cores') or '?'} cores"
            if machine.get("load_average") is not None:
                when += f", load average {machine['load_average']:.2f} at the start"
            when += ")"
        facts = [when]
        for key, prefix in (("libtorch", "LibTorch "), ("versions", ""), ("build", "Kiln built ")):
            if meta.get(key):
                facts.append(prefix + meta[key])
        facts.append(f"by `{meta['command']}`" if meta.get("command") else "by a command not recorded")
        said = "; ".join(facts) + "."
    else:
        said = "when, where and how these figures were made was not recorded (no entry in the saved meta.json)."
    lines.append(f"**{title}**: {said}")
    written = f"Written by `{report_command}`"
    lines.append(written + (" from the saved output." if from_dir else "."))
    if meta.get("file_notes"):
        lines.append("The saved output says: " + " ".join(meta["file_notes"]))
    return lines


# ---- The blocks.

WORKLOADS = (("tiny", "Tiny", "tiny MLP"), ("medium", "Medium", "medium MLP"), ("many", "Many", "24-layer MLP"))
STEP_CONFIGURATIONS = (
    ("CallbacksOff", "callbacks off (Kiln's fused optimizer)", True),
    ("Defaults", "Kiln's defaults", False),
    ("Defaults50Metrics", "Kiln's defaults, 50 metrics logged a step", False),
    ("TorchOptim", "callbacks off, `torch::optim` in Kiln too", False),
)
PYTHON_MODES = ("for_loop", "foreach", "fused", "lightning")


def step_block(step, python):
    """The step table: step_bench's three sides per workload and configuration, Python's beside them."""
    benchmarks = step["data"]
    python_figures, python_fingerprints = python["data"] if python and "data" in python else ({}, {})
    header = ["measurement", "Kiln (us/step)", "`torch::optim` loop", "fused loop", "Python for_loop",
              "Python foreach", "Python fused", "Lightning", "Kiln / fused loop", "Kiln / Python fused",
              "issue #41 target", "judged", "rounds"]
    rows, shown = [], set()
    for workload, prefix, label in WORKLOADS:
        python_us = {mode: python_figures.get((workload, mode), {}).get("us_per_step") for mode in PYTHON_MODES}
        for configuration, what, lean in STEP_CONFIGURATIONS:
            family = f"BM_{prefix}{configuration}"
            if family not in benchmarks:
                continue
            shown.add(family)
            counters, rounds = benchmarks[family]
            kiln = counters.get("kiln_us_per_step")
            over_fused = counters.get("kiln_over_fused_raw", divide(kiln, counters.get("fused_raw_us_per_step")))
            target = TARGETS["lean_step_time"] if lean else None
            rows.append([f"{label}, {what}", us(kiln), us(counters.get("raw_us_per_step")),
                         us(counters.get("fused_raw_us_per_step"))] +
                        [us(python_us[mode]) for mode in PYTHON_MODES] +
                        [ratio(over_fused), ratio(divide(kiln, python_us["fused"])),
                         target.text if target else "", target.judge(over_fused) if target else "", str(rounds)])
    if not rows:
        raise ReportError("step_bench: none of its benchmarks is in the output")
    lines = table(header, rows)
    lines += ["", "Microseconds per training step. The loops are step_bench's: `torch::optim`'s, and the fused one "
              "that calls LibTorch's fused kernel itself (the fastest the step can be); Kiln / fused loop is step_bench's "
              "`kiln_over_fused_raw`, from the same rounds. Python's figures are tests/bench/python_step.py's on the "
              "same workloads (one per workload, repeated on each of its rows), from another process and time, so "
              "Kiln / Python fused moves with the machine's load more than the in-process ratios do."]
    if python is None:
        lines += ["", "Python's figures were not part of this report (`--only`)."]
    elif "skipped" in python:
        lines += ["", f"Python's figures: skipped ({python['skipped']})."]
    else:
        lines += ["", fingerprint_note(benchmarks, python_fingerprints)]
    unknown = sorted(set(benchmarks) - shown)
    if unknown:
        lines += ["", "Not in the table (bench_report.py does not know them yet): " +
                  ", ".join(f"`{name}`" for name in unknown) + "."]
    return lines


def fingerprint_note(benchmarks, fingerprints):
    """Whether python_step started every workload from step_bench's parameters and first batch."""
    same, differ = [], []
    for workload, prefix, label in WORKLOADS:
        counters = benchmarks.get(f"BM_{prefix}CallbacksOff", ({}, 0))[0]
        theirs = fingerprints.get(workload)
        if theirs is None or "init_param_sum" not in counters:
            continue
        ok = all(abs(counters[key] - theirs[key]) <= 1e-6 * max(1.0, abs(counters[key])) for key in theirs)
        (same if ok else differ).append(label)
    if differ:
        return ("**The sides did not start from the same model or data** on the " + ", ".join(differ) +
                ": python_step.py's fingerprint (initial parameters' and first batch's sums) differs from "
                "step_bench's `init_param_sum` and `first_input_sum`.")
    if same:
        return ("Python's loops started from step_bench's initial parameters and first batch (their sums agree) on the "
                + ", ".join(same) + ".")
    return "No fingerprint to compare with step_bench's."


def checkpoint_block(checkpoint):
    benchmarks = checkpoint["data"]
    rows = []
    header = ["measurement", "Kiln (MB/s)", "baseline (MB/s)", "Kiln / baseline", "issue #41 target", "judged",
              "rounds"]
    for family, what, baseline in (
            ("BM_CheckpointWrite", "checkpoint write, durable (fsync)", "torch.save's writer, no fsync"),
            ("BM_CheckpointRead", "checkpoint read, validated", "torch.load's reader, no check")):
        if family in benchmarks:
            counters, rounds = benchmarks[family]
            value = counters.get("kiln_over_raw_throughput")
            target = TARGETS["checkpoint_throughput"]
            rows.append([what, count_mb(counters.get("kiln_MB_per_s")),
                         f"{count_mb(counters.get('raw_MB_per_s'))} ({baseline})", ratio(value, 2), target.text,
                         target.judge(value), str(rounds)])
    if "BM_CheckpointWrite" in benchmarks and "raw_fsync_MB_per_s" in benchmarks["BM_CheckpointWrite"][0]:
        counters, rounds = benchmarks["BM_CheckpointWrite"]
        rows.append(["checkpoint write, durable (fsync), against a durable baseline",
                     count_mb(counters.get("kiln_MB_per_s")),
                     f"{count_mb(counters.get('raw_fsync_MB_per_s'))} (torch.save's writer and fsync)",
                     ratio(counters.get("kiln_over_raw_fsync_throughput"), 2), "", "", str(rounds)])
    if "kiln_with_removal_over_raw_throughput" in benchmarks.get("BM_CheckpointWrite", ({},))[0]:
        counters, rounds = benchmarks["BM_CheckpointWrite"]
        with_removal = counters["kiln_with_removal_over_raw_throughput"]
        rows.append(["checkpoint write, durable (fsync), with the removal of the checkpoint it replaced",
                     count_mb(multiply(counters.get("raw_MB_per_s"), with_removal)),
                     f"{count_mb(counters.get('raw_MB_per_s'))} (torch.save's writer, no fsync)",
                     ratio(with_removal, 2), "", "", str(rounds)])
    if "BM_CheckpointWriteDurableAndAsync" in benchmarks:
        counters, rounds = benchmarks["BM_CheckpointWriteDurableAndAsync"]
        wait, raw = counters.get("trainer_wait_MB_per_s"), counters.get("raw_fsync_MB_per_s")
        rows.append(["checkpoint write, as the training loop waits for it", count_mb(wait),
                     f"{count_mb(raw)} (torch.save's writer and fsync)", ratio(divide(wait, raw), 2), "", "", str(rounds)])
    if not rows:
        raise ReportError("checkpoint_bench: none of its benchmarks is in the output")
    return table(header, rows) + [
        "", "Throughput of the medium MLP's parameters and Adam state (about 6.4 MB), Kiln's checkpoint files against "
        "LibTorch's own way to write and read the same format, interleaved in one process, each read starting from memory "
        "the process has not touched, as a resume's does (tests/bench/checkpoint_bench.cc)."]


def count_mb(value):
    return "-" if value is None else f"{value:,.0f}"


def python_block(python):
    if "skipped" in python:
        return [f"Skipped: {python['skipped']}."]
    figures, _ = python["data"]
    header = ["workload", "mode", "us/step", "over Python fused", "final loss", "steps x epochs", "rounds"]
    rows = []
    for workload, _, label in WORKLOADS:
        fused = figures.get((workload, "fused"), {}).get("us_per_step")
        for mode in PYTHON_MODES:
            figure = figures.get((workload, mode))
            if figure is None:
                continue
            rows.append([label, mode, us(figure["us_per_step"]), ratio(divide(figure["us_per_step"], fused)),
                         f"{figure['final_loss']:.9g}", f"{figure['steps']} x {figure['epochs']}",
                         str(figure["rounds"])])
    if not rows:
        raise ReportError("python_step: none of the workloads the report knows is in the output")
    return table(header, rows) + [
        "", "tests/bench/python_step.py: PyTorch's own loop with the optimizer's default (for_loop), foreach=True and "
        "fused=True, and Lightning's Trainer.fit with callbacks off and the fused optimizer, on step_bench's "
        "workloads; the median of interleaved rounds. Equal final losses show that every mode trained the same model "
        "on the same batches."]


# (label, Kiln's count, the baseline's count, the script's ratio name, target), instructions_per_step unless the
# name says otherwise.
INSTRUCTION_ROWS = (
    ("tiny MLP, `kiln::FusedSGD`, against the fused loop", "kiln_fused", "fused_raw",
     "kiln_fused_over_fused_raw_instructions", "lean_step_instructions"),
    ("tiny MLP, `kiln::FusedSGD`, against the `torch::optim` loop", "kiln_fused", "raw",
     "kiln_fused_over_raw_instructions", None),
    ("tiny MLP, `torch::optim` on both sides", "kiln", "raw", "kiln_over_raw_instructions", None),
    ("medium MLP, `kiln::FusedAdam`, against the fused loop", "kiln_medium", "fused_raw_medium",
     "kiln_medium_over_fused_raw_instructions", "lean_step_instructions"),
    ("medium MLP, `kiln::FusedAdam`, against the `torch::optim` loop", "kiln_medium", "raw_medium",
     "kiln_medium_over_raw_instructions", None),
    ("24-layer MLP, `kiln::FusedAdam`, against the fused loop", "kiln_many", "fused_raw_many",
     "kiln_many_over_fused_raw_instructions", "lean_step_instructions"),
    ("24-layer MLP, `kiln::FusedAdam`, against the `torch::optim` loop", "kiln_many", "raw_many",
     "kiln_many_over_raw_instructions", None),
    ("tiny MLP, a CSV logger and 50 metrics (names made once) over none", "kiln_metrics_50_made", "kiln_metrics_0",
     "metrics_50_made_over_0_instructions", "metrics_50"),
    ("the same, names passed as literals", "kiln_metrics_50_literal", "kiln_metrics_0",
     "metrics_50_literal_over_0_instructions", "metrics_50"),
    ("the same, names built in each call (the program's string building counted in)", "kiln_metrics_50_built",
     "kiln_metrics_0", "metrics_50_built_over_0_instructions", None),
    ("the same, names built in each call, over the same names built and not logged", "kiln_metrics_50_built",
     "kiln_metrics_50_built_unlogged", "metrics_50_built_over_built_unlogged_instructions", "metrics_50"),
    ("tiny MLP, a checkpoint every 10 steps over none, every thread", "kiln_checkpoint_10", "kiln_checkpoint_0",
     "checkpoint_10_over_0_instructions", "checkpoint_every_10"),
    ("the same, the training thread alone", "kiln_checkpoint_10/training_thread", "kiln_checkpoint_0/training_thread",
     "checkpoint_10_over_0_training_thread_instructions", None),
)


def instructions_block(instructions):
    counts, ratios = instructions["data"]

    def counted(name):
        name, _, thread = name.partition("/")
        kind = "training_thread_instructions_per_step" if thread else "instructions_per_step"
        return counts.get((name, kind))

    header = ["measurement", "Kiln", "baseline", "ratio", "issue #41 target", "judged"]
    rows, shown = [], set()
    for label, kiln_name, baseline_name, ratio_name, target_name in INSTRUCTION_ROWS:
        kiln, baseline = counted(kiln_name), counted(baseline_name)
        # From the counts where both are there (the script prints its ratios to 4 decimals), else the script's.
        value = divide(kiln, baseline) if kiln is not None and baseline is not None else ratios.get(ratio_name)
        if value is None:
            continue
        shown.add(ratio_name)
        target = TARGETS[target_name] if target_name else None
        rows.append([label, count(kiln), count(baseline), ratio(value, 4), target.text if target else "",
                     target.judge(value) if target else ""])
    if not rows:
        raise ReportError("bench_instructions: none of the figures the report knows is in the output")
    lines = table(header, rows) + [
        "", "Instructions per training step, every thread's unless the row says otherwise: callgrind's count of a "
        "run of 400 steps less one of 200, over 200 (10 and 20 steps on the medium and 24-layer MLPs; 1000 less 200 "
        "for the checkpoint rows, whose two threads' interleaving moves a count); repeatable to about 0.3%. The "
        "names built in each call cost the program about 200 instructions each (to_string and a concatenation) "
        "before Kiln sees them: the row over the same names built and not logged is Kiln's part."]
    unknown = sorted(set(ratios) - shown)
    if unknown:
        lines += ["", "Not in the table (bench_report.py does not know them yet): " +
                  ", ".join(f"`{name}`" for name in unknown) + "."]
    return lines


# ---- Running the programs, or reading what they printed.


def machine():
    cpu = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"cpu": cpu or "an unknown CPU", "cores": os.cpu_count(), "load_average": load}


def libtorch_version(binary):
    """The version of the LibTorch the binary loads: ldd names its libtorch_cpu.so, whose folder's parent holds
    version.py (a wheel's torch/) or include/torch/.../version.h (any LibTorch). None when neither says."""
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"libtorch_cpu\.so => (\S+)", out)
    if not match:
        return None
    top = os.path.dirname(os.path.dirname(os.path.realpath(match.group(1))))
    try:
        with open(os.path.join(top, "version.py"), encoding="utf-8") as version:
            found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", version.read(), re.M)
            if found:
                return found.group(1)
    except OSError:
        pass
    for relative in ("include/torch/headeronly/version.h", "include/torch/csrc/api/include/torch/version.h"):
        try:
            with open(os.path.join(top, relative), encoding="utf-8") as header:
                parts = dict(re.findall(r"#define TORCH_VERSION_(MAJOR|MINOR|PATCH) (\d+)", header.read()))
        except OSError:
            continue
        if "MAJOR" in parts and "MINOR" in parts:
            return f"{parts['MAJOR']}.{parts['MINOR']}.{parts.get('PATCH', '0')}"
    return None


def build_mode(binary):
    """`-c opt` when Bazel's output path says so (bazel-out/k8-opt/...), else what it says."""
    match = re.search(r"/bazel-out/[^/]*-(opt|fastbuild|dbg)/", os.path.realpath(binary))
    return f"`-c {match.group(1)}`" if match else None


def program(given, default):
    """A program's path: as given on the command line (from the current folder), else the default below the
    repository's root."""
    return os.path.abspath(given) if given else os.path.join(ROOT, default)


def run_program(name, argv, env_extra, out_dir, smoke, binary=None):
    """Runs one program in the repository's root (argv as the page shows it; `binary`, when given, the path run as
    argv[0]); saves its standard output and error; returns its meta entry."""
    meta = {"date": now(), "machine": machine(), "command": shell_join(
        [f"{key}={value}" for key, value in env_extra.items()] + argv), "smoke": smoke}
    print(f"bench_report: running {meta['command']}", file=sys.stderr, flush=True)
    env = dict(os.environ, **env_extra)
    argv = [binary or argv[0]] + argv[1:]
    with open(os.path.join(out_dir, FILES[name]), "w", encoding="utf-8") as out, \
            open(os.path.join(out_dir, FILES[name] + ".err"), "w", encoding="utf-8") as err:
        try:
            status = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=err).returncode
        except OSError as error:
            status = f"could not start: {error}"
    meta["exit_status"] = status
    return meta


def shell_join(words):
    """The words as a shell line, with a leading ~/ left for the shell to expand (the default Python's path)."""
    return " ".join("~/" + shlex.quote(word[2:]) if word.startswith("~/") else shlex.quote(word) for word in words)


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def run_sources(args, chosen, out_dir):
    metas = {}
    smoke_env = {"KILN_BENCH_SMOKE": "1"} if args.smoke else {}
    benchmark_args = SMOKE_BENCHMARK_ARGS if args.smoke else []
    for name, given, default in (("step", args.step_bench, STEP_BENCH),
                                 ("checkpoint", args.checkpoint_bench, CHECKPOINT_BENCH)):
        if name not in chosen:
            continue
        binary = program(given, default)
        if not os.access(binary, os.X_OK):
            metas[name] = {"error": f"{binary} is not built: bazel build -c opt //tests/bench:{name}_bench"}
            continue
        metas[name] = run_program(name, [given or default, "--benchmark_format=json"] + benchmark_args +
                                  shlex.split(args.benchmark_args), smoke_env, out_dir, args.smoke, binary)
        metas[name]["libtorch"] = libtorch_version(binary)
        metas[name]["build"] = build_mode(binary)
    if "python" in chosen:
        python = os.path.expanduser(args.python)
        if not os.access(python, os.X_OK):
            metas["python"] = {"date": now(), "skipped": f"no Python with Lightning at {python} (tools/setup.sh "
                                                         "installs it; --python or KILN_LIGHTNING_PYTHON names another)"}
        else:
            try:
                versions = subprocess.run(
                    [python, "-c", "import torch, lightning; print(f'PyTorch {torch.__version__}, "
                     "Lightning {lightning.__version__}')"], capture_output=True, text=True, timeout=300)
                versions = versions.stdout.strip() if versions.returncode == 0 else None
            except (OSError, subprocess.SubprocessError):
                versions = None
            python_args = (SMOKE_PYTHON_ARGS if args.smoke else []) + shlex.split(args.python_args)
            metas["python"] = run_program("python", [args.python, "tests/bench/python_step.py"] + python_args, {},
                                          out_dir, args.smoke, python)
            if versions:
                metas["python"]["versions"] = versions
    if "instructions" in chosen:
        binary = program(args.step_instructions, STEP_INSTRUCTIONS)
        if not os.access(binary, os.X_OK):
            metas["instructions"] = {"error": f"{binary} is not built: bazel build -c opt "
                                              "//tests/bench:step_instructions"}
        else:
            env_extra = {"KILN_STEP_INSTRUCTIONS": binary}
            metas["instructions"] = run_program("instructions", ["tools/bench_instructions.sh"] +
                                                shlex.split(args.instructions_args), env_extra, out_dir, False)
            metas["instructions"]["libtorch"] = libtorch_version(binary)
            metas["instructions"]["build"] = build_mode(binary)
    with open(os.path.join(out_dir, META), "w", encoding="utf-8") as out:
        json.dump(metas, out, indent=2, sort_keys=True)
        out.write("\n")
    return metas


def read_source(name, text, what):
    if name in ("step", "checkpoint"):
        return benchmark_counters(text, what)
    if name == "python":
        return python_lines(text, what)
    return instruction_lines(text, what)


def collect(args, chosen):
    """{source: {"data": ..., "meta": ...} or {"skipped": why, "meta": ...}}, and the errors, one line each."""
    if args.from_dir:
        folder = args.from_dir
        try:
            with open(os.path.join(folder, META), encoding="utf-8") as meta_file:
                metas = json.load(meta_file)
        except FileNotFoundError:
            metas = {}
        except ValueError as error:
            return {}, [f"{os.path.join(folder, META)}: not JSON ({error})"]
    else:
        folder = args.save or tempfile.mkdtemp(prefix="bench_report.")
        os.makedirs(folder, exist_ok=True)
        metas = run_sources(args, chosen, folder)
        print(f"bench_report: the outputs are in {folder} (tools/bench_report.py --from {folder} reads them again)",
              file=sys.stderr)
    results, errors = {}, []
    for name in chosen:
        meta = metas.get(name, {})
        path = os.path.join(folder, FILES[name])
        if "skipped" in meta:
            results[name] = {"skipped": meta["skipped"], "meta": meta}
            continue
        if "error" in meta:
            errors.append(f"{name}: {meta['error']}")
            continue
        if meta.get("exit_status", 0) != 0:
            errors.append(f"{name}: `{meta.get('command')}` exited {meta['exit_status']}; its output is in {path} "
                          f"and {path}.err")
            continue
        try:
            with open(path, encoding="utf-8") as source:
                text = source.read()
        except FileNotFoundError:
            if args.from_dir and not args.only:
                print(f"bench_report: no {FILES[name]} in {folder}; the {name} block is left as it was",
                      file=sys.stderr)
            else:
                errors.append(f"{name}: no {FILES[name]} in {folder}")
            continue
        try:
            data = read_source(name, text, path)
        except ReportError as error:
            errors.append(f"{name}: {error}")
            continue
        meta = dict(meta)
        if name in ("python", "instructions"):
            meta["file_notes"] = comment_lines(text)
        results[name] = {"data": data, "meta": meta}
    return results, errors


# ---- The page.


def marker(name, end):
    return f"<!-- bench_report:{name} {'end' if end else 'begin'} -->"


def replace_block(page, name, lines, path):
    begin, end = marker(name, False), marker(name, True)
    if page.count(begin) != 1 or page.count(end) != 1 or page.index(begin) > page.index(end):
        raise ReportError(f"{path} needs one '{begin}' line and, after it, one '{end}' line for the {name} figures "
                          "(docs/performance.md has them under \"Generated figures\")")
    start = page.index(begin) + len(begin)
    stop = page.index(end)
    body = "\n<!-- Written by tools/bench_report.py: edits here are overwritten. -->\n" + "\n".join(lines) + "\n"
    return page[:start] + body + page[stop:]


def block_lines(name, results, report_command, from_dir):
    result = results[name]
    if name == "step":
        body = step_block(result, results.get("python"))
    elif name == "checkpoint":
        body = checkpoint_block(result)
    elif name == "python":
        body = python_block(result)
    else:
        body = instructions_block(result)
    return prose(stamp(TITLES[name], result["meta"], report_command, from_dir) + [""] + body)


# The `-c opt` outputs: bazel-bin follows whichever configuration built last (a plain `bazel test` makes it fastbuild).
OPT_BIN = "bazel-out/k8-opt/bin"
STEP_BENCH = f"{OPT_BIN}/tests/bench/step_bench"
CHECKPOINT_BENCH = f"{OPT_BIN}/tests/bench/checkpoint_bench"
STEP_INSTRUCTIONS = f"{OPT_BIN}/tests/bench/step_instructions"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--only", help="comma-separated sources: " + ",".join(SOURCES) + " (default: all)")
    parser.add_argument("--from", dest="from_dir", metavar="DIR", help="read the outputs that --save kept in DIR")
    parser.add_argument("--save", metavar="DIR", help="keep the outputs in DIR (default: a new temporary folder)")
    parser.add_argument("--page", default=os.path.join(ROOT, "docs", "performance.md"),
                        help="the page to write into (default: docs/performance.md)")
    parser.add_argument("--smoke", action="store_true", help="each program's short smoke mode, to try the tool")
    parser.add_argument("--step-bench", metavar="PATH", help=f"default: {STEP_BENCH} in the repository")
    parser.add_argument("--checkpoint-bench", metavar="PATH", help=f"default: {CHECKPOINT_BENCH} in the repository")
    parser.add_argument("--step-instructions", metavar="PATH", help="given to tools/bench_instructions.sh as "
                        f"KILN_STEP_INSTRUCTIONS; default: {STEP_INSTRUCTIONS} in the repository")
    parser.add_argument("--python", default=os.environ.get("KILN_LIGHTNING_PYTHON") or
                        "~/.cache/kiln/lightning-venv/bin/python", help="the Python with Lightning for python_step.py")
    parser.add_argument("--benchmark-args", default="", help="more arguments for both benchmarks (one string)")
    parser.add_argument("--python-args", default="", help="more arguments for python_step.py (one string)")
    parser.add_argument("--instructions-args", default="",
                        help="arguments for tools/bench_instructions.sh (overhead or optimizers)")
    args = parser.parse_args(argv)
    if args.only:
        chosen = [name for name in args.only.split(",") if name]
        unknown = [name for name in chosen if name not in SOURCES]
        if unknown or not chosen:
            parser.error(f"--only: unknown source {','.join(unknown) or '(none)'}; expected some of {','.join(SOURCES)}")
    else:
        chosen = list(SOURCES)
    if args.from_dir and args.save:
        parser.error("--from reads saved outputs and --save keeps new ones: give one of them")
    if args.from_dir and not os.path.isdir(args.from_dir):
        parser.error(f"--from {args.from_dir}: no such folder")
    return args, chosen


def main(argv):
    args, chosen = parse_args(argv)
    try:
        with open(args.page, encoding="utf-8") as page_file:
            page = page_file.read()
        for name in chosen:  # Refuse a page without its markers before running minutes of benchmarks.
            replace_block(page, name, [], args.page)
    except (OSError, ReportError) as error:
        print(f"bench_report: {error}", file=sys.stderr)
        return 2
    results, errors = collect(args, chosen)
    if not results and not errors:
        print(f"bench_report: no output of {', '.join(chosen)} to write", file=sys.stderr)
        return 1
    report_command = shell_join(["tools/bench_report.py"] + argv)
    written = []
    # Read again: the page may have been edited while the benchmarks ran (minutes), and only the blocks are ours.
    try:
        with open(args.page, encoding="utf-8") as page_file:
            page = page_file.read()
    except OSError as error:
        print(f"bench_report: {error}", file=sys.stderr)
        return 2
    for name in chosen:
        if name not in results:
            continue
        try:
            page = replace_block(page, name, block_lines(name, results, report_command, args.from_dir), args.page)
            written.append(name)
        except ReportError as error:
            errors.append(f"{name}: {error}")
    if written:
        temporary = args.page + ".bench_report.tmp"
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(page)
        os.replace(temporary, args.page)
        print(f"bench_report: wrote the {', '.join(written)} figures into {args.page}", file=sys.stderr)
    for error in errors:
        print(f"bench_report: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
