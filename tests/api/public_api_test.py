#!/usr/bin/env python3
"""Holds Kiln's tree to its one list of public headers and labels (tests/api/public_api.bzl).

    public_api_test.py PUBLIC_API_BZL [PROGRAM ...]

Run from the workspace root (a test's runfiles): the BUILD files of public_api.bzl's KILN_PACKAGES and the listed
headers are read where they are. PROGRAMs are what users are shown or given to copy: Markdown pages (their fenced
code) and the examples' sources. Prints each problem on a line and exits 1 when there is any:
  - a listed header that is not in the hdrs of its label, or whose label is not public;
  - a public library of Kiln's packages that provides no listed header and is not a PUBLIC_TARGET;
  - a listed header that includes a header of Kiln's that is not listed (the public API reaching into Kiln's own);
  - a program that includes a header of Kiln's that is not listed;
  - a PUBLIC_TARGET that its package does not declare.
With --self_test it also checks, on made-up input, that each of those is found.
"""
import importlib.util
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
KILN_DIRS = ("hal/", "connector/", "backends/", "trainer/")


def load_list(path):
    scope = {}
    exec(compile(open(path).read(), path, "exec"), scope)
    return scope["PUBLIC_HEADERS"], scope["PUBLIC_TARGETS"], scope["KILN_PACKAGES"]


def api_history():
    spec = importlib.util.spec_from_file_location("api_history", "tools/api_history.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kiln_includes(text):
    return [h for h in INCLUDE.findall(text) if h.startswith(KILN_DIRS)]


def program_includes(path):
    text = open(path, encoding="utf-8").read()
    if not path.endswith(".md"):
        return kiln_includes(text)
    # A page's programs are its fenced blocks.
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    return [h for block in blocks for h in kiln_includes(block)]


def problems(headers, targets, packages, programs, read=lambda p: open(p).read()):
    found = []
    builds = [f"{package}/BUILD" for package in packages]
    public = set(api_history().public_headers(builds, [], read))
    listed = {header for _, header, _ in headers}
    providing = {label for label, _, _ in headers}
    for label, header, _ in headers:
        if (label, header) not in public:
            found.append(f"{header}: listed as public through {label}, but it is not in the hdrs of that label, or the "
                         "label is not public; fix the list or the BUILD file")
    for label in sorted({label for label, _ in public} - providing - set(targets)):
        found.append(f"{label}: public in its BUILD file, but public_api.bzl lists none of its headers; list them, "
                     "or make it visible only to Kiln's own packages")
    for target in targets:
        package, name = target[2:].split(":")
        try:
            build = read(f"{package}/BUILD")
        except OSError:
            build = ""
        if f'name = "{name}"' not in build and not os.path.exists(f"{package}/{name}"):
            found.append(f"{target}: a public target, but {package}/BUILD declares no such name and no such file exists")
    for header in sorted(listed):
        try:
            text = read(header)
        except OSError:
            found.append(f"{header}: listed as public, but there is no such file")
            continue
        for included in kiln_includes(text):
            if included not in listed and not included.endswith(".inc"):  # A textual include is the header's own.
                found.append(f"{header}: a public header includes {included}, which is not public; list it, or "
                             "keep it out of the public header")
    for program in programs:
        for included in program_includes(program):
            if included not in listed:
                found.append(f"{program}: includes {included}, which is not in Kiln's public API "
                             "(tests/api/public_api.bzl); use a public header")
    return found


def self_test(headers, targets, packages):
    """Each check finds what it is for, on made-up input beside the real tree."""
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        program = os.path.join(scratch, "program.md")
        with open(program, "w") as f:
            f.write('Text.\n```cpp\n#include "trainer/loops/fit_loop.h"\n```\n')
        cases = {
            "a program that includes a header of Kiln's own": (headers, targets, [program], "which is not in Kiln's"),
            "a listed header its label does not provide": (
                headers + [("//trainer/core:core", "trainer/trainer.h", "")], targets, [], "is not in the hdrs"),
            "a public label with no listed header": (
                [h for h in headers if h[0] != "//trainer/optim:optim"], targets, [], "lists none of its headers"),
            "a public target that does not exist": (headers, targets + ["//trainer:no_such_target"], [], "declares no such"),
            "a public header that includes one that is not": (
                [h for h in headers if h[1] != "trainer/core/batch.h"], targets, [], "which is not public"),
        }
        for name, (case_headers, case_targets, case_programs, expected) in cases.items():
            found = problems(case_headers, case_targets, packages, case_programs)
            if not any(expected in line for line in found):
                failures.append(f"self-test: {name} was not found (expected a line with '{expected}')")
    return failures


def main(argv):
    checking_itself = "--self_test" in argv
    argv = [a for a in argv if a != "--self_test"]
    headers, targets, packages = load_list(argv[1])
    found = problems(headers, targets, packages, argv[2:])
    if checking_itself:
        found += self_test(headers, targets, packages)
    for line in found:
        print(line)
    print(f"public_api_test: {len(headers)} public headers, {len(targets)} public targets, {len(argv) - 2} programs, "
          f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
