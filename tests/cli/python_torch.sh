# Sourced by tests/cli's tests that read fit's files back with Debian's python3-torch, from the runfiles root: $fit,
# $python (/usr/bin/python3), a work folder ($work) it enters, fail() (counted in $failures), and field FILE KEY (a
# value of a summary JSON). Fails the test when python3-torch is missing (tools/setup.sh installs it).
fit=$PWD/trainer/cli/fit
python=/usr/bin/python3
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
field() { sed -n -E "s/.*\"$2\": \"?([^\",}]*)\"?.*/\1/p" "$1"; }
if ! $python -c "import torch" 2>/dev/null; then
  echo "FAIL: python3-torch is not installed (tools/setup.sh installs it)"
  exit 1
fi
