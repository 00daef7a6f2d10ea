#!/usr/bin/env bash
# Builds the vendor library of tests/vendor_stack (acme_torch.cc) as a vendor builds theirs: plain g++ against
# LibTorch's headers and shared libraries, outside Bazel, with the device kit's sources compiled in. It registers its
# device from a static initialiser when it is loaded, and exports one symbol: its c10d backend's creator.
#
#   tests/vendor_stack/build.sh LIBTORCH_DIR OUT_DIR     (writes OUT_DIR/libacme_torch.so; LIBTORCH_DIR holds include/, lib/)
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 LIBTORCH_DIR OUT_DIR" >&2; exit 2; }
kiln=$(dirname "$0")/../..  # The sources: this checkout (or Bazel's execution root).
libtorch=$1
out=$2
lib=$(cd "$libtorch/lib" && pwd -P)
mkdir -p "$out"
flags=(-std=c++17 -fPIC -DUSE_C10D_GLOO -fvisibility=hidden -fvisibility-inlines-hidden -O1 -I"$kiln" -isystem "$libtorch/include"
  -isystem "$libtorch/include/torch/csrc/api/include")
objects=$(mktemp -d)
trap 'rm -rf "$objects"' EXIT
for source in hal/device_kit/device_kit.cc hal/device_kit/kernels.cc tests/vendor_stack/acme_torch.cc; do
  g++ "${flags[@]}" -c "$kiln/$source" -o "$objects/$(basename "$source" .cc).o"
done
printf '{ global: extern "C++" { acme::ProcessGroupACCL::createProcessGroupACCL*; }; local: *; };\n' >"$objects/exports.lds"
g++ -shared -o "$out/libacme_torch.so" "$objects"/*.o -Wl,--version-script="$objects/exports.lds" -Wl,--no-undefined \
  -L"$lib" -Wl,-rpath,"$lib" -ltorch_cpu -lc10
echo "built $out/libacme_torch.so"
