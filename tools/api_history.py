"""The public headers of a Kiln commit and the labels that provided them, from that commit's own BUILD files.

    tools/api_history.py COMMIT LABEL_PATTERN...

Prints one `LABEL HEADER` line for each header in the `hdrs` of a cc_library that is public (visibility
//visibility:public, not testonly) and whose label matches one of the fnmatch patterns (the labels the release's
README told users to depend on). It reads the commit with git and evaluates each BUILD file with stand-ins for the
rules it does not care about, so it needs neither Bazel nor a checkout of that commit. tests/api/releases.bzl was
written with it, one list per release; //tests/api:old_labels_* build a program through each of them.
"""
import fnmatch
import subprocess
import sys


def public_headers(builds, files, read):
    """(label, header) for each header in the hdrs of a public, not testonly cc_library of the BUILD files `builds`
    (paths), whose text read(path) gives; `files` lists the tree's files, for glob()."""
    pairs = []
    for build in builds:
        pkg = build[:-len("/BUILD")] if "/" in build else ""
        state = {"default_visibility": []}

        def package(**kw):
            state["default_visibility"] = kw.get("default_visibility", [])

        def glob(include, exclude=[], **kw):
            out = []
            for f in files:
                if not f.startswith(pkg + "/" if pkg else ""):
                    continue
                rel = f[len(pkg) + 1:] if pkg else f
                if any(fnmatch.fnmatch(rel, p) for p in include) and not any(fnmatch.fnmatch(rel, p) for p in exclude):
                    out.append(rel)
            return out

        def cc_library(name, hdrs=[], visibility=None, testonly=False, **kw):
            vis = visibility if visibility is not None else state["default_visibility"]
            if testonly or "//visibility:public" not in vis:
                return
            for h in hdrs:
                if isinstance(h, str) and not h.startswith(":") and not h.startswith("//") and h.endswith(".h"):
                    pairs.append((f"//{pkg}:{name}", f"{pkg}/{h}" if pkg else h))

        class Anything:
            def __call__(self, *a, **k): return None
            def __getattr__(self, n): return Anything()
        env = {"package": package, "glob": glob, "cc_library": cc_library, "load": lambda *a, **k: None,
               "select": lambda d, **k: list(d.values())[0], "Label": lambda x: x, "True": True, "False": False,
               "None": None}

        class Env(dict):
            def __missing__(self, key):
                return Anything()
        try:
            exec(compile(read(build), build, "exec"), Env(env))
        except Exception as e:
            print(f"# {build} could not be read: {e}", file=sys.stderr)
    return sorted(set(pairs))


def main():
    commit = sys.argv[1]
    patterns = sys.argv[2:] or ["*"]
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit], capture_output=True, text=True,
                           check=True).stdout.split()
    builds = [f for f in files if f == "BUILD" or f.endswith("/BUILD")]

    def read(path):
        return subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True, check=True).stdout

    for label, header in public_headers(builds, files, read):
        if any(fnmatch.fnmatch(label, pattern) for pattern in patterns):
            print(label, header)


if __name__ == "__main__":
    main()
