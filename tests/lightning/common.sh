# Sourced by tests/lightning's tests, from the runfiles root: $fit, $python (the Python with the real Lightning,
# @lightning_python), a work folder it enters, fail(), and lightning SCRIPT ARGS... (runs SCRIPT in that Python,
# showing the end of its standard error when it fails). Exits 0, saying why, when that Python cannot import
# $lightning_modules (tools/setup.sh installs them); the test then did not run.
fit=$PWD/trainer/cli/fit
python=$PWD/../lightning_python/python
where=$(cat "$PWD/../lightning_python/where.txt")
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
if ! "$python" -c "import ${lightning_modules:-lightning}" >python.err 2>&1; then
  echo "SKIPPED: the real Lightning ($lightning_modules) is not installed at $where (tools/setup.sh installs it;" \
    "KILN_LIGHTNING_PYTHON names another Python that has it): $(tail -1 python.err)"
  exit 0
fi
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
lightning() {
  local script=$1
  shift
  "$python" "$script" "$@" 2>lightning.err || { grep -v "^💡" lightning.err | tail -15; return 1; }
}
# The end of a test: its failures, or PASS with `$1`.
finish() {
  if ((failures > 0)); then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "PASS: $*"
}
