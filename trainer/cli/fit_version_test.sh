#!/usr/bin/env bash
# `fit --version`: exit 0, one line each for Kiln's version, the LibTorch fit was built against and runs with, and the
# plugin C API's version, each equal to what its one source says (hal/version.h's KILN_VERSION_* macros,
# hal/plugin/kiln_plugin_c_api.h's KILN_PLUGIN_API_*); and `fit --help` names --version.
set -uo pipefail
fit=$PWD/trainer/cli/fit
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
# The value of `#define NAME VALUE` in a header.
macro() { sed -n -E "s/^#define $2 ([0-9]+)\$/\\1/p" "$1"; }

version_h=hal/version.h
plugin_h=hal/plugin/kiln_plugin_c_api.h
kiln="$(macro $version_h KILN_VERSION_MAJOR).$(macro $version_h KILN_VERSION_MINOR)"
kiln+=".$(macro $version_h KILN_VERSION_PATCH)"
plugin="$(macro $plugin_h KILN_PLUGIN_API_MAJOR).$(macro $plugin_h KILN_PLUGIN_API_MINOR)"
[[ $kiln =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "hal/version.h does not define KILN_VERSION_MAJOR/MINOR/PATCH: '$kiln'"
[[ $plugin =~ ^[0-9]+\.[0-9]+$ ]] || fail "kiln_plugin_c_api.h does not define KILN_PLUGIN_API_MAJOR/MINOR: '$plugin'"

version=$($fit --version)
status=$?
echo "$version"
[[ $status -eq 0 ]] || fail "--version exited $status"
[[ $(head -n 1 <<<"$version") == "Kiln: $kiln" ]] || fail "--version's first line is not 'Kiln: $kiln'"
[[ $(grep -c '^Kiln: ' <<<"$version") == 1 ]] || fail "--version says Kiln's version other than once"
grep -qE '^LibTorch: built against [0-9]+\.[0-9]+\.[0-9]+, running with [0-9]' <<<"$version" ||
  fail "--version has no line 'LibTorch: built against X, running with Y'"
grep -qE "^Plugin C API: ${plugin//./\\.} " <<<"$version" || fail "--version has no line 'Plugin C API: $plugin ...'"

help=$($fit --help) || fail "--help did not exit 0"
grep -qE -- '--version +# Kiln' <<<"$help" || fail "--help does not name --version and what it prints"

if ((failures > 0)); then echo "$failures check(s) failed"; exit 1; fi
echo "PASS: fit --version says Kiln $kiln, its LibTorch and plugin C API $plugin"
