#!/usr/bin/env bash
# Drives //tools:new_backend as a user runs it: what it writes for good names, and how it refuses bad flags without
# writing anything. That the written repositories build and pass their conformance tests is checked by
# @acme//:acme_conformance_test and @acme_npu//:acme_npu_conformance_test, which the same script generates at fetch
# time (generated_backend.bzl); that the --device one trains data-parallel, by :device_ddp_test.
set -uo pipefail
new_backend=tools/new_backend
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

# A relative --out is taken from the directory `bazel run` started in.
out=$(cd "$tmp" && BUILD_WORKING_DIRECTORY="$tmp" "$OLDPWD/$new_backend" --name=my_npu --out=gen/my_npu 2>&1)
status=$?
echo "$out"
[[ $status -eq 0 ]] || fail "generating my_npu exited $status"
dir=$tmp/gen/my_npu
for file in WORKSPACE BUILD my_npu_accelerator.h my_npu_accelerator.cc WORKSPACE.snippet README.md; do
  [[ -s "$dir/$file" ]] || fail "$file was not written"
done
grep -qx 'workspace(name = "my_npu")' "$dir/WORKSPACE" || fail "WORKSPACE does not name the repository my_npu"
grep -q 'alwayslink = True' "$dir/BUILD" || fail "the library is not alwayslink"
grep -q 'load("@kiln//tools:conformance.bzl", "kiln_accelerator_conformance_test")' "$dir/BUILD" ||
  fail "BUILD does not load the conformance macro from @kiln"
# Every label the README gives is one Bazel takes: a repository's label starts with '@'.
if grep -nE '(^|[^@a-z_])(kiln|my_npu)//' "$dir/README.md"; then fail "README.md gives a label without '@' (above)"; fi
grep -qF 'bazel run @kiln//tools:accelerators' "$dir/README.md" || fail "README.md does not list the accelerators"
grep -qF 'kiln_dependencies()' "$dir/README.md" || fail "README.md does not say what the rest of the WORKSPACE needs"
grep -q 'accelerator = "my_npu",' "$dir/BUILD" || fail "the conformance test does not check my_npu"
grep -q 'class MyNpuAccelerator final : public kiln::Accelerator' "$dir/my_npu_accelerator.h" ||
  fail "no MyNpuAccelerator class in the header"
for file in my_npu_accelerator.h my_npu_accelerator.cc; do
  grep -q "^namespace my_npu_backend {" "$dir/$file" || fail "$file is not in namespace my_npu_backend"
done
grep -q '^KILN_REGISTER_ACCELERATOR({' "$dir/my_npu_accelerator.cc" || fail "no registration line"
grep -q '\.name = "my_npu",' "$dir/my_npu_accelerator.cc" || fail "it does not register as my_npu"
grep -qF "path = \"$dir\"," "$dir/WORKSPACE.snippet" || fail "the snippet does not point at $dir"
grep -qF 'backends = ["@my_npu//:my_npu"],' "$dir/WORKSPACE.snippet" || fail "the snippet does not list @my_npu"
if grep -rn '@[A-Z]*@' "$dir"; then fail "placeholders were left in the output"; fi

# --device: an out-of-tree LibTorch device, whose device-specific part is one marked block.
"$new_backend" --name=acme_npu --out="$tmp/device" --device >/dev/null 2>&1 || fail "--device failed"
for file in WORKSPACE BUILD acme_npu_device.h acme_npu_device.cc acme_npu_accelerator.h acme_npu_accelerator.cc \
  WORKSPACE.snippet README.md; do
  [[ -s "$tmp/device/$file" ]] || fail "--device did not write $file"
done
grep -q '"@kiln//hal/device_kit",' "$tmp/device/BUILD" || fail "the device backend does not use the device kit"
grep -q 'bitwise = True,' "$tmp/device/BUILD" || fail "the device backend's conformance test is not bitwise"
grep -q 'class AcmeNpuDevice final : public kiln::device_kit::Device' "$tmp/device/acme_npu_device.cc" ||
  fail "no AcmeNpuDevice in acme_npu_device.cc"
[[ $(grep -c '==== DEVICE-SPECIFIC' "$tmp/device/acme_npu_device.cc") -eq 1 &&
  $(grep -c '==== end of DEVICE-SPECIFIC' "$tmp/device/acme_npu_device.cc") -eq 1 ]] ||
  fail "the device's runtime is not one marked block"
block=$(sed -n '/==== DEVICE-SPECIFIC/,/==== end of DEVICE-SPECIFIC/p' "$tmp/device/acme_npu_device.cc" | wc -l)
((block <= 40)) || fail "the device-specific block is $block lines, not small"
grep -q 'return "acme_npu_ccl"' "$tmp/device/acme_npu_accelerator.h" || fail "no acme_npu_ccl collective backend"
if grep -rn '@[A-Z_]*@' "$tmp/device"; then fail "placeholders were left in the --device output"; fi

# Another Kiln repository name reaches every label.
"$new_backend" --name=acme --out="$tmp/other" --kiln_repository=kiln_src >/dev/null 2>&1 || fail "--kiln_repository failed"
grep -q '"@kiln_src//hal"' "$tmp/other/BUILD" || fail "--kiln_repository=kiln_src is not used in BUILD"
if grep -q '@kiln/' "$tmp/other/BUILD" "$tmp/other/WORKSPACE.snippet"; then fail "@kiln is left in the output"; fi

expect_refusal() {  # expect_refusal <stderr fragment> <flags>...
  local fragment=$1
  shift
  local err code
  err=$("$new_backend" "$@" 2>&1 >/dev/null)
  code=$?
  [[ $code -eq 2 ]] || { fail "new_backend $* exited $code, wanted 2"; return; }
  grep -q "^error: " <<<"$err" || fail "new_backend $*: no 'error: ' line in: $err"
  grep -qF -- "$fragment" <<<"$err" || fail "new_backend $*: '$fragment' not in: $err"
}
expect_refusal "--out='$dir' is not empty" --name=my_npu --out="$dir"
expect_refusal "--name='Acme' is not valid" --name=Acme --out="$tmp/bad1"
expect_refusal "--name='1npu' is not valid" --name=1npu --out="$tmp/bad1"
expect_refusal "--name='cpu' is taken by Kiln" --name=cpu --out="$tmp/bad1"
expect_refusal "--name='auto' is taken by Kiln" --name=auto --out="$tmp/bad1"
expect_refusal "--name='xpu' is one of LibTorch's own device types" --name=xpu --device --out="$tmp/bad1"
expect_refusal "--name is required" --out="$tmp/bad1"
expect_refusal "--out is required" --name=acme
expect_refusal "unknown argument '--nme=acme'" --nme=acme
[[ ! -e "$tmp/bad1" ]] || fail "a refused run wrote $tmp/bad1"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "new_backend checks passed"
