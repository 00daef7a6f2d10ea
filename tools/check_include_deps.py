#!/usr/bin/env python3
"""Checks that every Kiln header a target includes belongs to the target itself or to one of its direct deps.

    tools/check_include_deps.py            # from the workspace; runs `bazel query`, prints each miss, exits 1 on any

GCC does not enforce it (Bazel's layering_check needs clang's modules), so a target could include a header of a
target it reaches only through another dependency, and break when that one's deps change. Only includes written as
"package/path.h" that some target of the workspace lists in its `hdrs` are checked; LibTorch's, Abseil's and the
system's are not. .ci/run runs it before the tests.
"""
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

UNIVERSE = "//hal/... + //connector/... + //backends/... + //trainer/... + //tools/... + //tests/... + //examples/..."
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def path_of(label):
    """//pkg:file -> pkg/file; None for labels outside the main repository."""
    if not label.startswith("//"):
        return None
    package, _, name = label[2:].partition(":")
    return f"{package}/{name}" if package else name


def main():
    query = subprocess.run(
        ["bazel", "query", f'kind("cc_(library|test|binary) rule", {UNIVERSE})', "--output=xml"],
        check=True, capture_output=True, text=True)
    rules = {}
    owners = {}
    for rule in ET.fromstring(query.stdout).findall("rule"):
        lists = {item.get("name"): [label.get("value") for label in item.findall("label")]
                 for item in rule.findall("list")}
        rules[rule.get("name")] = lists
        for header in lists.get("hdrs", []):
            if path_of(header):
                owners.setdefault(path_of(header), []).append(rule.get("name"))
    misses = []
    for name, lists in sorted(rules.items()):
        files = [path_of(label) for label in lists.get("srcs", []) + lists.get("hdrs", [])]
        own = set(files)
        deps = set(lists.get("deps", []))
        for path in files:
            if not path or not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as source:
                for include in INCLUDE.findall(source.read()):
                    found = owners.get(include)
                    if include in own or not found or name in found or deps.intersection(found):
                        continue
                    misses.append(f"{name}: {path} includes {include}, which {' or '.join(found)} provides; "
                                  f"add it to {name}'s deps")
    for miss in misses:
        print(miss)
    if misses:
        print(f"tools/check_include_deps.py: {len(misses)} include(s) of a target not in deps", file=sys.stderr)
        return 1
    print(f"tools/check_include_deps.py: every Kiln header included is the target's own or a direct dep's "
          f"({len(rules)} targets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
