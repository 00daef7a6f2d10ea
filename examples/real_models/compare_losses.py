"""Compares per-step training losses that Kiln and Lightning logged (CSV loggers' metrics.csv, one row a step).

  compare_losses.py KILN_CSV LIGHTNING_CSV COLUMN[,COLUMN...] MIN_STEPS [--table N]

Every row of both files that has a value in COLUMN is one step, in order. The two must have as many steps, at least
MIN_STEPS, and every pair must agree to 1e-4 relative (issue #35's bound). Prints the largest relative difference
per column; --table N also prints a Markdown table of every N-th step's values (the curves the docs show). Exits 1,
saying where, when they disagree. Standard library only.
"""
import csv
import sys

TOLERANCE = 1e-4


def steps(path, column):
    with open(path, newline="") as f:
        return [float(row[column]) for row in csv.DictReader(f) if row.get(column, "") != ""]


def main():
    args = sys.argv[1:]
    table_every = 0
    if "--table" in args:
        index = args.index("--table")
        table_every = int(args[index + 1])
        del args[index:index + 2]
    kiln_csv, lightning_csv, columns, min_steps = args[0], args[1], args[2].split(","), int(args[3])
    failures = 0
    curves = {}
    for column in columns:
        kiln, lightning = steps(kiln_csv, column), steps(lightning_csv, column)
        curves[column] = (kiln, lightning)
        if len(kiln) != len(lightning) or len(kiln) < min_steps:
            print(f"FAIL: {column}: Kiln logged {len(kiln)} steps, Lightning {len(lightning)} (at least {min_steps} "
                  "needed, as many on both sides)")
            failures += 1
            continue
        worst, where = 0.0, 0
        for step, (a, b) in enumerate(zip(kiln, lightning)):
            relative = abs(a - b) / max(abs(b), 1e-12)
            if relative > worst:
                worst, where = relative, step
        status = "ok" if worst <= TOLERANCE else "FAIL"
        print(f"{status}: {column}: {len(kiln)} steps, largest relative difference {worst:.2e} at step {where} "
              f"(Kiln {kiln[where]:.7g}, Lightning {lightning[where]:.7g}; bound {TOLERANCE:g})")
        failures += worst > TOLERANCE
    if table_every:
        names = [column for column in columns if len(curves[column][0]) == len(curves[column][1])]
        print("\n| step | " + " | ".join(f"{name} (Kiln) | {name} (Lightning)" for name in names) + " |")
        print("| " + " | ".join(["---:"] * (1 + 2 * len(names))) + " |")
        length = min(len(curves[name][0]) for name in names)
        for step in list(range(0, length, table_every)) + ([length - 1] if (length - 1) % table_every else []):
            cells = " | ".join(f"{curves[name][0][step]:.4f} | {curves[name][1][step]:.4f}" for name in names)
            print(f"| {step} | {cells} |")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
