"""A Python from PyPI that some tests run Kiln's files through: `@<name>//:python` runs it, `where.txt` names it.

It is the interpreter the environment variable `variable` names when set, else the virtual environment tools/setup.sh
makes, ~/.cache/kiln/<venv>/bin/python. The repository only names it: whether it is there, and has what the tests
need, is found out when a test runs (so installing it later needs no refetch), and a test without it says so.
WORKSPACE makes two: @lightning_python (the real Lightning, for tests/lightning) and @tracking_python (MLflow and
W&B, for tests/loggers).
"""

def _venv_python_impl(ctx):
    python = ctx.os.environ.get(ctx.attr.variable, "") or (
        ctx.os.environ.get("HOME", "") + "/.cache/kiln/" + ctx.attr.venv + "/bin/python"
    )
    ctx.file("python", "#!/bin/sh\n# The Python with {} (tools/venv_python.bzl).\n".format(ctx.attr.has) +
                       "exec '{}' \"$@\"\n".format(python), executable = True)
    ctx.file("where.txt", python + "\n")
    ctx.file("BUILD.bazel", 'exports_files(["python", "where.txt"])\n')

venv_python = repository_rule(
    implementation = _venv_python_impl,
    attrs = {
        "variable": attr.string(mandatory = True, doc = "The environment variable that names another Python."),
        "venv": attr.string(mandatory = True, doc = "tools/setup.sh's virtual environment under ~/.cache/kiln."),
        "has": attr.string(mandatory = True, doc = "What the Python has, for its script's comment."),
    },
    # Every variable a venv_python reads (a repository rule's list is fixed): changing one refetches both, cheaply.
    environ = ["KILN_LIGHTNING_PYTHON", "KILN_TRACKING_PYTHON", "HOME"],
    local = True,
)
