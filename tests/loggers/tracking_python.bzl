"""The Python that has MLflow and W&B, for tests/loggers: `@tracking_python//:python` runs it.

It is $KILN_TRACKING_PYTHON when set, else the virtual environment tools/setup.sh makes
(~/.cache/kiln/mlflow-venv/bin/python, from third_party/tracking/requirements.txt). The repository only names it:
whether it is there, and has MLflow and W&B, is found out when a test runs, and a test without it says so.
"""

def _tracking_python_impl(ctx):
    python = ctx.os.environ.get("KILN_TRACKING_PYTHON", "") or (
        ctx.os.environ.get("HOME", "") + "/.cache/kiln/mlflow-venv/bin/python"
    )
    ctx.file("python", "#!/bin/sh\n# The Python with MLflow and W&B (tests/loggers/tracking_python.bzl).\n" +
                       "exec '{}' \"$@\"\n".format(python), executable = True)
    ctx.file("where.txt", python + "\n")
    ctx.file("BUILD.bazel", 'exports_files(["python", "where.txt"])\n')

tracking_python = repository_rule(
    implementation = _tracking_python_impl,
    environ = ["KILN_TRACKING_PYTHON", "HOME"],
    local = True,
)
