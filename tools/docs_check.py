#!/usr/bin/env python3
"""Checks Kiln's Markdown: every relative link leads somewhere, and every table renders as one table.

    tools/docs_check.py [FILE.md ...]      (default: every tracked *.md file)

A relative link ([text](docs/fit.md), [text](../README.md#the-library-api), [text](#gpu-check)) must name a file or
folder that exists, taken from the folder of the file that holds the link; a #fragment into a Markdown file must
name one of its headings, spelt as GitHub makes anchors of them. Links with a scheme (https:, mailto:) and links
inside code blocks or code spans are not checked. A table must have its separator row, every row as many cells as
its header, and no blank line inside it (a renderer shows the rows after a blank line as loose text).

Exit status: 0 when everything holds, 1 otherwise (each problem printed as FILE:LINE: what).
"""
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


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    files = argv[1:] or subprocess.run(["git", "ls-files", "*.md"], check=True, capture_output=True,
                                       text=True).stdout.split()
    problems = [problem for path in files for problem in check(path)]
    for problem in problems:
        print(problem)
    print(f"{len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
