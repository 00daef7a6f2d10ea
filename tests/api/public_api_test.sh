#!/usr/bin/env bash
# //tests/api:public_api_test: tests/api/public_api_test.py over the runfiles (the workspace's own paths), with its
# self-test. The programs it reads are the test's arguments (tests/api/BUILD).
set -euo pipefail
exec python3 tests/api/public_api_test.py tests/api/public_api.bzl --self_test "$@"
