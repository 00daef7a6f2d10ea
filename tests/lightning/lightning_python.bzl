"""The Python that has the real Lightning, for tests/lightning: `@lightning_python//:python` runs it.

It is $KILN_LIGHTNING_PYTHON when set, else the virtual environment tools/setup.sh makes
(~/.cache/kiln/lightning-venv/bin/python). The repository only names it: whether it is there, and has Lightning, is
found out when a test runs (so installing it later needs no refetch), and a test without it says so.
"""

def _lightning_python_impl(ctx):
    python = ctx.os.environ.get("KILN_LIGHTNING_PYTHON", "") or (
        ctx.os.environ.get("HOME", "") + "/.cache/kiln/lightning-venv/bin/python"
    )
    ctx.file("python", "#!/bin/sh\n# The Python with Lightning (tests/lightning/lightning_python.bzl).\n" +
                       "exec '{}' \"$@\"\n".format(python), executable = True)
    ctx.file("where.txt", python + "\n")
    ctx.file("BUILD.bazel", 'exports_files(["python", "where.txt"])\n')

lightning_python = repository_rule(
    implementation = _lightning_python_impl,
    environ = ["KILN_LIGHTNING_PYTHON", "HOME"],
    local = True,
)
