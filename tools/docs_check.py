#!/usr/bin/env python3
"""Checks Kiln's Markdown: links, tables, the names a page gives in code, and where its measured figures come from.

    tools/docs_check.py [--root=DIR] [FILE.md ...]      (default: every tracked *.md file of the checkout)

- Links: a relative link ([text](docs/fit.md), [text](../README.md#the-library-api), [text](#gpu-check)) must name a
  file or folder that exists, taken from the folder of the file that holds the link; a #fragment into a Markdown
  file must name one of its headings, spelt as GitHub makes anchors of them. Links with a scheme (https:, mailto:)
  and links inside code blocks or code spans are not checked.
- Tables: a table must have its separator row, every row as many cells as its header, and no blank line inside it (a
  renderer shows the rows after a blank line as loose text).
- Names (check_names): every repository path, Bazel label of this repository and fit flag that a code span or code
  block names must exist (the rules are above check_names).
- Figures (check_dated_figures): a measured figure names its date or the program that produces it (docs/README.md).

--root checks the pages against another tree (tools/docs_check_test.sh gives it a small one).
Exit status: 0 when everything holds, 1 otherwise (each problem printed as FILE:LINE: what).
"""
import glob
import os
import re
import subprocess
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def anchors(path, cache={}):
    """The anchors GitHub gives the headings of the Markdown file at path."""
    if path not in cache:
        found, seen, fence = set(), {}, False
        for line in open(path, encoding="utf-8"):
            if line.lstrip().startswith("```"):
                fence = not fence
            if fence or not line.startswith("#"):
                continue
            text = line.lstrip("#").strip()
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
        cache[path] = found
    return cache[path]


def check(path):
    problems = []
    lines = open(path, encoding="utf-8").read().split("\n")
    fence, cols = False, None
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    "):
            continue
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            file_part, _, fragment = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(resolved):
                problems.append(f"{path}:{number}: link to {target}: {resolved} does not exist")
            elif fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
                problems.append(f"{path}:{number}: link to {target}: {resolved} has no heading #{fragment}")
        if line.startswith("|"):
            cells = len(re.findall(r"(?<!\\)\|", line)) - 1  # a pipe in a code span splits a cell too (GFM)
            previous = lines[number - 2] if number >= 2 else ""
            if not previous.startswith("|"):
                cols = cells
                if number < len(lines) and not lines[number].startswith("| ---"):
                    if previous == "" and number >= 3 and lines[number - 3].startswith("|"):
                        problems.append(f"{path}:{number}: a table split by a blank line")
                    else:
                        problems.append(f"{path}:{number}: a table without its separator row")
            elif cells != cols:
                problems.append(f"{path}:{number}: a row of {cells} cells in a table of {cols}")
    return problems


# ---------------------------------------------------------------------------------------------------------------------
# Names a page gives in code: repository paths, Bazel labels, fit's flags.
#
# A path is checked when its first component is one of the repository's top-level folders (`trainer/cli/fit_main.cc`,
# `tools/setup.sh`, `hal/plugin/`); a name outside them (`acme/BUILD`, `lightning_logs/version_0`) is the reader's own
# and is not. `<name>` and `*` are wildcards (at least one file must match); `{a,b}` lists names that must each exist.
# A path written `pkg:name` is a label without its `//` and is checked as one.
#
# A label is checked when it is this repository's: `//pkg:name`, `//pkg` or `@kiln//pkg:name` (`@acme//...` and
# other repositories are not). The package needs a BUILD file; the name must be declared in it (`name = "x"`, a
# genrule's `outs`), be a file of the package, or be a name one of the macros in MACROS makes. `//pkg/...`, `:all`
# and `:*` need the package alone; `<release>` and `*` in a name are wildcards.
#
# A flag is checked as fit's when it follows a fit command on the same line (`bazel run //trainer:fit -- --x`,
# `fit --x`, `bazel-bin/trainer/cli/fit --x`), or when a code span is a flag alone (`--max_epochs=3`) and no other
# program of the repository (ABSL_FLAG, a shell script's case arm, argparse) nor Bazel (BAZEL_OPTIONS) nor one of
# OTHER_PROGRAMS_FLAGS has that flag. fit's flags are the ABSL_FLAGs of trainer/ (trainer/cli/*_flags.cc,
# trainer/accelerator_plugins.cc), the option table's rows (trainer/trainer_options.inc) and the command line's own
# (FIT_COMMAND_LINE_FLAGS); LightningCLI's dotted spellings (`--trainer.max_epochs`) are not checked here (the config
# file's tests hold them).
#
# Pages that record the past (HISTORY_PAGES: the changelogs) name what existed then, and are not checked for names.
# ---------------------------------------------------------------------------------------------------------------------

HISTORY_PAGES = {"CHANGELOG.md", "hal/plugin/CHANGELOG.md"}

# Names Kiln's macros make besides the one a BUILD file declares ("{name}" is that one). old_label_programs makes one
# test per release of tests/api/releases.bzl ("{release}").
MACROS = {
    "kiln_accelerator_conformance_test": ["{name}", "{name}_fsdp"],
    "kiln_fuzz_target": ["{name}_target", "{name}_corpus_test", "{name}_fuzzer"],
    "old_label_programs": ["{name}_{release}_test"],
}

# fit's flags that its command line handles itself rather than an ABSL_FLAG: trainer/cli/command_line.cc (undefok is
# refused there, by name), versions.cc, and LightningCLI's --seed_everything (lightning_cli.cc).
FIT_COMMAND_LINE_FLAGS = {"help", "helpfull", "helpshort", "version", "flagfile", "fromenv", "tryfromenv", "undefok",
                          "seed_everything"}

# Flags of programs outside the repository that the pages name in code spans of their own: torchrun's, srun's.
OTHER_PROGRAMS_FLAGS = {"standalone", "rdzv_backend", "no_python", "ntasks"}

# Names that look like this repository's but are not, each with its page and why (a page that needs one more entry
# should first try to say the name unambiguously).
NOT_OURS = {
    ("trainer/README.md", "trainer/connectors/checkpoint_connector.py"): "Lightning's file, in the Lightning column",
    ("docs/accelerators.md", "//:train"): "the user's own workspace's target, in \"Your workspace\"",
    ("docs/fit.md", "trainer/global_step"): "Lightning's step metric in a W&B run, in \"Weights & Biases\"",
}

# Bazel's own options that the pages name in code spans of their own.
BAZEL_OPTIONS = {"config", "cache_test_results", "disk_cache", "incompatible_strict_action_env", "repo_env"}

CODE_SPAN_TEXT = re.compile(r"`([^`]+)`")
PATH_CANDIDATE = re.compile(r"(?<![\w@/.:$~+-])(\.?[A-Za-z_][\w.-]*/(?:\{[^}\s`]*\}|[^\s`'\"()\[\];|,{])*)")
LABEL = re.compile(r"(?<![\w:/])(@[\w.-]+)?//([\w./+-]*)(?::([\w./*<>+-]+))?")
FLAG = re.compile(r"(?<![\w-])--([A-Za-z][\w.-]*)")
FIT_COMMAND = re.compile(r"(?:(?:@kiln)?//trainer(?:/cli)?:fit\b|\bbazel-bin/trainer/cli/fit\b"
                         r"|(?<![\w/.$-])fit(?= --))")


class Repository:
    """What the pages' names are checked against: the files under root, its BUILD files and fit's flags."""

    def __init__(self, root):
        self.root = root
        self.top = {entry for entry in os.listdir(root)
                    if os.path.isdir(os.path.join(root, entry)) and not os.path.islink(os.path.join(root, entry))
                    and entry not in (".git",) and not entry.startswith("bazel-")}
        self._names = {}
        self.fit_flags = self._fit_flags()
        self.other_flags = self._other_flags() | BAZEL_OPTIONS | OTHER_PROGRAMS_FLAGS

    def _read(self, *parts):
        with open(os.path.join(self.root, *parts), encoding="utf-8", errors="replace") as file:
            return file.read()

    def _fit_flags(self):
        flags = set(FIT_COMMAND_LINE_FLAGS)
        for path in glob.glob(os.path.join(self.root, "trainer/**/*.cc"), recursive=True):
            if path.endswith("_test.cc"):
                continue
            flags |= set(re.findall(r"ABSL_FLAG\(\s*[^,]+,\s*(\w+)\s*,", open(path, encoding="utf-8").read()))
        # The option table, and the strategies' tables it includes (a strategy's row is (type, flag, ...)).
        pending, seen = ["trainer/trainer_options.inc"], set()
        while pending:
            table = os.path.join(self.root, pending.pop())
            if table in seen or not os.path.exists(table):
                continue
            seen.add(table)
            text = open(table, encoding="utf-8").read()
            flags |= set(re.findall(r"^KILN_TRAINER_OPTION\(\s*\w+\s*,\s*[^,]+,\s*(\w+)\s*,", text, re.M))
            flags |= set(re.findall(r"^KILN_(?!TRAINER_)\w+_OPTION\(\s*[^,]+,\s*(\w+)\s*,", text, re.M))
            pending += re.findall(r'^\s*#\s*include\s+"([^"]+\.inc)"', text, re.M)
        return flags

    def _other_flags(self):
        flags = set()
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if d != ".git" and not d.startswith("bazel-")]
            for name in files:
                path = os.path.join(folder, name)
                if name.endswith((".cc", ".h")):
                    flags |= set(re.findall(r"ABSL_FLAG\(\s*[^,]+,\s*(\w+)\s*,", open(path, errors="replace").read()))
                elif name.endswith(".sh"):
                    for line in open(path, errors="replace"):
                        if re.match(r"^\s*[-\w|\s=*]*--[-\w|\s=*]*\)", line):  # a case arm: --cuda) or -h | --help)
                            flags |= set(re.findall(r"--([\w-]+)", line.split(")")[0]))
                elif name.endswith(".py"):
                    flags |= set(re.findall(r"add_argument\(\s*\"--([\w-]+)\"", open(path, errors="replace").read()))
        return flags

    def path_exists(self, path):
        """Whether the repository path names a file or folder: with wildcards (<x>, *) at least one, and with
        alternatives ({a,b}) each of them."""
        path = re.sub(r":\d+$", "", path.rstrip(".,:;"))
        if "$" in path or "..." in path:
            return True  # a shell variable or an elision: not a name to check
        pattern = re.sub(r"<[^>]*>", "*", path)
        alternatives = [pattern]
        while any("{" in p for p in alternatives):
            expanded = []
            for p in alternatives:
                match = re.search(r"\{([^{}]*)\}", p)
                if not match:
                    expanded.append(p.replace("{", "").replace("}", ""))
                    continue
                expanded += [p[:match.start()] + choice + p[match.end():] for choice in match.group(1).split(",")]
            alternatives = expanded
        return all(glob.glob(os.path.join(self.root, p)) for p in alternatives)

    def package_names(self, package):
        """The names the package's BUILD file declares, and those its macros make; None when there is no BUILD file."""
        if package not in self._names:
            names = None
            for build in ("BUILD", "BUILD.bazel"):
                path = os.path.join(self.root, package, build)
                if os.path.exists(path):
                    text = open(path, encoding="utf-8").read()
                    names = set(re.findall(r"\bname\s*=\s*\"([^\"]+)\"", text))
                    for outs in re.findall(r"\bouts?\s*=\s*(\[[^\]]*\]|\"[^\"]*\")", text):
                        names |= set(re.findall(r"\"([^\"]+)\"", outs))
                    for exported in re.findall(r"exports_files\(\s*\[([^\]]*)\]", text):
                        names |= set(re.findall(r"\"([^\"]+)\"", exported))
                    for macro, name in re.findall(r"^(\w+)\(\s*name\s*=\s*\"([^\"]+)\"", text, re.M):
                        for made in MACROS.get(macro, []):
                            for release in self._releases() if "{release}" in made else [""]:
                                names.add(made.format(name=name, release=release))
                    break
            self._names[package] = names
        return self._names[package]

    def _releases(self):
        path = os.path.join(self.root, "tests/api/releases.bzl")
        if not os.path.exists(path):
            return []
        return re.findall(r"^    \"(\w+)\": \[", open(path).read(), re.M)

    def label_problem(self, package, name):
        """What is wrong with the label //package:name (name None: the package alone), or None."""
        if package in ("visibility", "conditions"):
            return None  # Bazel's own pseudo-packages (//visibility:public, //conditions:default)
        if package.endswith("/...") or package == "...":
            folder = package[:-4] if package != "..." else ""
            return None if os.path.isdir(os.path.join(self.root, folder)) else f"there is no folder {folder}"
        names = self.package_names(package)
        if names is None:
            return f"there is no package {package or '(root)'} (no BUILD file)"
        if name is None or name in ("all", "*", "all-targets"):
            return None
        if "<" in name or "*" in name:
            pattern = re.compile("^" + re.sub(r"<[^>]*>|\\\*", ".+", re.escape(name)) + "$")
            return None if any(pattern.match(n) for n in names) else f"no name in {package}/BUILD matches {name}"
        if name in names or os.path.isfile(os.path.join(self.root, package, name)):
            return None
        return f"{package or '(root)'}/BUILD declares no {name}"


def code_lines(lines):
    """(line number, code text) for each fenced or indented code line and each code span of the page."""
    fence = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    "):
            yield number, line, True
        else:
            for span in CODE_SPAN_TEXT.findall(line):
                yield number, span, False


def check_names(path, lines, repository):
    problems = []
    if path in HISTORY_PAGES:
        return problems
    for number, code, in_block in code_lines(lines):
        for match in LABEL.finditer(code):
            repo, package, name = match.group(1), match.group(2).rstrip("/"), match.group(3)
            if repo not in (None, "@kiln") or match.start() > 0 and code[match.start() - 1] == ":":
                continue
            if package == "" and name is None:
                continue  # `//...` or a bare `//`
            name = name.rstrip(".,:;") if name else None
            problem = repository.label_problem(package, name)
            if problem and (path, match.group(0).rstrip(".,:;")) not in NOT_OURS:
                problems.append(f"{path}:{number}: label {match.group(0)}: {problem}")
        for match in PATH_CANDIDATE.finditer(LABEL.sub(" ", code)):
            candidate = match.group(1)
            if candidate.split("/")[0] not in repository.top or "://" in candidate:
                continue
            if (path, candidate.rstrip(".,:;")) in NOT_OURS:
                continue
            label = re.fullmatch(r"([\w./-]+):([\w./*<>+-]+?)[.,:;]*", candidate)
            if label:  # a label written without its // (tests/ddp:ddp_test)
                problem = repository.label_problem(label.group(1), label.group(2))
                if problem:
                    problems.append(f"{path}:{number}: label {candidate}: {problem}")
            elif not repository.path_exists(candidate):
                problems.append(f"{path}:{number}: path {candidate.rstrip('.,:;')} does not exist")
        fit = FIT_COMMAND.search(code)
        flags = FLAG.finditer(code[fit.end():]) if fit else []
        for match in flags:
            flag = match.group(1)
            if "." in flag or flag in repository.fit_flags:
                continue  # a LightningCLI spelling, or fit's
            if flag.startswith("no") and flag[2:] in repository.fit_flags:
                continue  # Abseil's --noNAME for a boolean
            problems.append(f"{path}:{number}: fit has no flag --{flag}")
        if not fit and not in_block:
            alone = re.fullmatch(r"--([A-Za-z][\w-]*)(=\S*)?", code.strip())
            if alone and alone.group(1) not in repository.fit_flags | repository.other_flags:
                problems.append(f"{path}:{number}: --{alone.group(1)} is a flag of neither fit nor another program "
                                "here")
    return problems


# ---------------------------------------------------------------------------------------------------------------------
# Dated figures. A measured figure (a number with a unit of time, size or a percentage, in a paragraph or table that
# says it was measured: MEASURED) names where it comes from in the same paragraph, or for a table in the table or the
# paragraph just above it: a date (2026-12-05), a Bazel label or script of the repository that produces it
# (`//tests/bench:ddp_step_bench`, `tools/bench_report.py`, `.ci/run`), or it sits between tools/bench_report.py's
# markers (`<!-- bench_report:NAME begin -->` to `end`), which regenerate it. A limit or a default (`4 MiB`,
# Bazel's 300 s) is not a measurement and needs none. docs/README.md states the rule for writers; pages that record
# the past (the changelogs) are dated by their release headings and are not checked.
# ---------------------------------------------------------------------------------------------------------------------

FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|µs|us|ns|minutes|min|hours|MB|MiB|GB|GiB|KB|KiB|%)"
                    r"(?![\w/])")
MEASURED = re.compile(r"\b(?:measured|measurement|measurements|took|peak|peaks|faster|slower|times as)\b", re.I)
SOURCE = re.compile(r"\b20\d\d-\d\d-\d\d\b|//[\w/.-]*:[\w.-]+|\b(?:tools|tests)/[\w/.-]+\.(?:py|sh)\b|\.ci/run")
GENERATED = re.compile(r"<!-- bench_report:\w+ (begin|end) -->")


def check_dated_figures(path, lines):
    """Each measured figure's paragraph (or table and its caption) names a date or the program that produced it."""
    if path in HISTORY_PAGES:
        return []
    problems, block, caption, fence, generated = [], [], "", False, False

    def flush():
        nonlocal block, caption
        if block:
            text = "\n".join(line for _, line in block)
            table = block[0][1].startswith("|")
            context = text + ("\n" + caption if table else "")
            figures = FIGURE.findall(text)
            if figures and not generated and MEASURED.search(context) and not SOURCE.search(context):
                problems.append(f"{path}:{block[0][0]}: {', '.join(figures[:3])}: a measured figure that names neither "
                                "its date nor the program that produces it (docs/README.md, \"Figures\")")
            caption = "" if table else text
        block = []

    for number, line in enumerate(lines, 1):
        marker = GENERATED.search(line)
        if marker:
            flush()
            generated = marker.group(1) == "begin"
            continue
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence:
            continue
        if line.startswith("#") or not line.strip():
            flush()
            if line.startswith("#"):
                caption = ""
            continue
        if block and block[-1][1].startswith("|") != line.startswith("|"):
            flush()  # a table right after its caption, or a paragraph right after a table
        block.append((number, line))
    flush()
    return problems


def main(argv):
    args = argv[1:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args and args[0].startswith("--root="):
        root = args.pop(0)[len("--root="):]
    os.chdir(root)
    files = args or subprocess.run(["git", "ls-files", "*.md"], check=True, capture_output=True,
                                   text=True).stdout.split()
    repository = Repository(".")
    problems = []
    for path in files:
        problems += check(path)
        lines = open(path, encoding="utf-8").read().split("\n")
        problems += check_names(path, lines, repository)
        problems += check_dated_figures(path, lines)
    for problem in problems:
        print(problem)
    print(f"{len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
