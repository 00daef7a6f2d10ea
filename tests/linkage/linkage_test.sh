#!/usr/bin/env bash
# What //trainer:fit links, read from the binary itself (readelf -d, ldd) and checked against the build it says it
# is (fit --version):
# - a CPU build (the default) needs libtorch_cpu and libc10 and none of LibTorch's
#   CUDA libraries nor any CUDA library of its own, and loads nothing from a CUDA toolkit: it runs on a machine
#   without CUDA. (The PyPI wheel's libtorch_cpu itself needs libcudart and libcupti; they come from their own pinned
#   wheels beside it, third_party/libtorch2/requirements.txt, never from the toolkit.)
# - a --config=cuda build needs libtorch_cuda, libc10_cuda and libcudart, and says which CUDA it was built for.
set -uo pipefail
fit=$PWD/trainer/cli/fit
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

version=$($fit --version) || fail "fit --version failed"
echo "$version"
needed=$(readelf -d "$fit" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED: $(tr '\n' ' ' <<<"$needed")"
resolved=$(ldd "$fit")
has() { grep -qE "^$1" <<<"$needed"; }

for library in libtorch_cpu.so libc10.so; do has "$library" || fail "fit does not link $library"; done
grep -q 'not found' <<<"$resolved" && fail "the loader finds not every library: $(grep 'not found' <<<"$resolved")"

if grep -q '^CUDA: built for CUDA ' <<<"$version"; then
  for library in libtorch_cuda.so libc10_cuda.so libcudart.so; do
    has "$library" || fail "the CUDA build does not link $library"
  done
else
  for library in libtorch_cuda libc10_cuda libcudart libcublas libcudnn libnccl libcupti; do
    has "$library" && fail "a CPU build links $library: $(grep "^$library" <<<"$needed")"
  done
  # Nor through another library (the wheel's libtorch.so would bring libtorch_cuda).
  cuda_parts=$(grep -E 'libtorch_cuda|libc10_cuda|libcublas|libcudnn|libnccl' <<<"$resolved")
  [[ -z "$cuda_parts" ]] || fail "a CPU build loads LibTorch's CUDA parts: $cuda_parts"
  toolkit=$(grep -E '=> /usr/local/cuda' <<<"$resolved")
  [[ -z "$toolkit" ]] || fail "a CPU build loads libraries from the CUDA toolkit: $toolkit"
  if grep -q '^LibTorch: built against 2\.' <<<"$version"; then
    # The wheel's libtorch_cpu needs the CUDA runtime and CUPTI: from the unpacked wheels, laid out as pip would.
    for library in libcudart.so.13 libcupti.so.13; do
      grep -qE "$library => .*/nvidia/cu13/lib/$library" <<<"$resolved" ||
        fail "$library does not come from the unpacked nvidia wheel: $(grep "$library" <<<"$resolved")"
    done
  fi
fi

if [[ $failures -eq 0 ]]; then echo "PASS"; else echo "$failures failure(s)"; fi
[[ $failures -eq 0 ]]
