# Sourced by tests/loggers' tests, from the runfiles root: $fit, $program (a user's program, logger_program.cc),
# $python (the Python with MLflow and W&B, @tracking_python), a work folder it enters, fail(), finish(). Exits 0,
# saying SKIPPED and why, when that Python cannot import $tracking_modules (tools/setup.sh installs them); the test
# then did not run.
fit=$PWD/trainer/cli/fit
program=$PWD/tests/loggers/logger_program
here=$PWD/tests/loggers
python=$PWD/../tracking_python/python
where=$(cat "$PWD/../tracking_python/where.txt")
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
if ! "$python" -c "import ${tracking_modules:-mlflow}" >python.err 2>&1; then
  echo "SKIPPED: ${tracking_modules:-mlflow} is not installed at $where (tools/setup.sh installs it from" \
    "third_party/tracking/requirements.txt; KILN_TRACKING_PYTHON names another Python that has it): $(tail -1 python.err)"
  exit 0
fi
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
# The end of a test: its failures, or PASS with `$1`.
finish() {
  if ((failures > 0)); then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "PASS: $*"
}
