"""Checks a profiler's output against what the program counted (tests/profilers/profilers_test.sh).

    check_report.py simple REPORT COUNTS        Lightning's SimpleProfiler table: every hook, with its calls
    check_report.py advanced REPORT COUNTS      the per-action statistics
    check_report.py trace TRACE COUNTS [DEVICE] the Chrome trace: valid JSON, the hooks' ranges, the device's events
    check_report.py custom REPORT COUNTS        the program's own profiler object's report (profile_program.cc's
                                                TallyProfiler): every hook's starts, every stop matched
"""
import json
import re
import sys


def counts(path):
    return dict(line.split(" ", 1) for line in open(path).read().splitlines())


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def expected_calls(c):
    steps = int(c["training_step"])
    epochs = int(c["epochs"])
    model, strategy = "[LightningModule]" + c["class"], "[Strategy]" + c["strategy"]
    # Each count is the run's, as the module counted it; the trainer's own actions follow from them.
    return {
        strategy + ".training_step": steps,
        strategy + ".backward": steps,
        strategy + ".optimizer_step": int(c["global_step"]),
        strategy + ".validation_step": int(c["validation_step"]),
        "run_training_batch": steps,
        "run_training_epoch": epochs,
        "[_TrainingEpochLoop].train_dataloader_next": steps,
        model + ".on_train_epoch_start": int(c["on_train_epoch_start"]),
        model + ".on_after_backward": int(c["on_after_backward"]),
        model + ".on_train_batch_start": steps,
        model + ".on_fit_start": 1,
        model + ".on_fit_end": 1,
        model + ".configure_optimizers": 1,
        model + ".setup": 1,
        model + ".teardown": 1,
    }


def check_simple(report, c):
    text = open(report).read()
    if not text.startswith("FIT Profiler Report"):
        fail(f"{report} does not start with Lightning's title: {text[:80]!r}")
    header = [cell.strip() for cell in text.splitlines()[3].split("|")[1:-1]]
    if header != ["Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %"]:
        fail(f"the columns are {header}")
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 5 and cells[0] not in ("Action",):
            rows[cells[0]] = int(cells[2])
    for action, calls in expected_calls(c).items():
        if action not in rows:
            fail(f"{action} is not in the table; it has {sorted(rows)}")
        if rows[action] != calls:
            fail(f"{action} was called {rows[action]} times by the table, {calls} by the run")
    callbacks = [a for a in rows if a.startswith("[Callback]ModelCheckpoint")]
    if not any(a.endswith(".on_train_epoch_end") for a in callbacks):
        fail(f"the ModelCheckpoint's hooks are missing: {callbacks}")
    total = sum(calls for action, calls in rows.items() if action != "Total")
    if rows["Total"] != total:
        fail(f"Total says {rows['Total']} calls, the rows {total}")
    print(f"ok: {report}: {len(rows) - 1} actions, calls as the run counted them")


def check_advanced(report, c):
    text = open(report).read()
    if not text.startswith("FIT Profiler Report\nProfile stats for: "):
        fail(f"{report} is not in Lightning's AdvancedProfiler layout: {text[:80]!r}")
    steps = int(c["training_step"])
    block = text.split("Profile stats for: run_training_batch")[1].split("Profile stats for:")[0]
    nested = re.findall(r"^\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+ (\S.*)$", block, re.M)
    calls = {name: int(n) for n, name in nested}
    strategy = "[Strategy]" + c["strategy"]
    for action in ("run_training_batch", strategy + ".training_step", strategy + ".backward"):
        if calls.get(action) != steps:
            fail(f"run_training_batch's table gives {action} {calls.get(action)} calls, the run {steps}: {calls}")
    print(f"ok: {report}: run_training_batch and its nested actions, {steps} calls each")


def check_trace(trace, c, device=None):
    events = json.load(open(trace))["traceEvents"]
    names = {}
    for event in events:
        names[event.get("name")] = names.get(event.get("name"), 0) + 1
    for action, calls in expected_calls(c).items():
        if names.get("[pl][profile]" + action) != calls:
            fail(f"the trace has {names.get('[pl][profile]' + action)} ranges of {action}, the run {calls}")
    if not any(name and name.startswith("aten::") for name in names):
        fail("the trace has no LibTorch operator")
    if device:
        copies = [e for e in events if e.get("args", {}).get("device", "").startswith(device) and e.get("ph") == "X"]
        if not copies:
            fail(f"no event of {device} in the trace")
        print(f"ok: {len(copies)} events of {device}'s own ({sorted({e['name'] for e in copies})})")
    print(f"ok: {trace}: valid JSON, {len(events)} events, every hook's range as often as the run called it")


def check_custom(report, c):
    lines = open(report).read().splitlines()
    if lines[:1] != ["TALLY fit"]:
        fail(f"{report} is not the program's profiler's report (its summary, for the stage fit): {lines[:1]}")
    if lines[-1] != "0 unmatched":
        fail(f"the trainer stopped actions it had not started, or left some running: {lines[-1]}")
    rows = {line.split(" ", 1)[1]: int(line.split(" ", 1)[0]) for line in lines[1:-1]}
    for action, calls in expected_calls(c).items():
        if rows.get(action) != calls:
            fail(f"the program's profiler saw {action} start {rows.get(action)} times, the run called it {calls}")
    print(f"ok: {report}: the program's own profiler saw {len(rows)} actions, as often as the run called them")


if __name__ == "__main__":
    kind, path, count_file = sys.argv[1:4]
    c = counts(count_file)
    if kind == "simple":
        check_simple(path, c)
    elif kind == "advanced":
        check_advanced(path, c)
    elif kind == "custom":
        check_custom(path, c)
    else:
        check_trace(path, c, sys.argv[4] if len(sys.argv) > 4 else None)
