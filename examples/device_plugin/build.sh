#!/usr/bin/env bash
# Builds the sample device plugin outside Bazel, as a vendor builds theirs: plain g++ over the plugin's source, Kiln's
# plugin C header and the device kit's sources, against LibTorch's headers and shared libraries alone. Bazel runs this
# same script (examples/device_plugin/BUILD), so the commands below are the ones Kiln's CI checks.
#
#   examples/device_plugin/build.sh LIBTORCH_DIR OUT_DIR DEVICE_NAME [DEVICE_NAME...]
#
#   LIBTORCH_DIR  the LibTorch of the Kiln that will load the plugin (`fit --version` prints its version), with
#                 include/ and lib/: the torch/ folder of the pinned wheel (~/.cache/kiln/torch-2.11.0-cu130/torch) or
#                 an unpacked LibTorch zip
#   OUT_DIR       where lib<DEVICE_NAME>_plugin.so is written (made if missing)
#   DEVICE_NAME   the accelerator's and its device's name: a lower-case letter, then lower-case letters, digits and
#                 '_'. Several names build several plugins from the one source, compiling the kit once.
#
# The environment may set CXX (default g++) and CXXFLAGS (default -O2). Exit status: 0 built, 1 a command failed,
# 2 bad arguments.
set -euo pipefail

usage() {
  echo "usage: $0 LIBTORCH_DIR OUT_DIR DEVICE_NAME [DEVICE_NAME...]" >&2
  exit 2
}
[[ $# -ge 3 ]] || usage
libtorch=$1
out=$2
shift 2

# The Kiln source tree this script sits in: hal/plugin and hal/device_kit are all of Kiln a device plugin compiles.
kiln=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for need in include/ATen/ATen.h include/torch/library.h lib/libtorch_cpu.so lib/libc10.so; do
  if [[ ! -e "$libtorch/$need" ]]; then
    echo "$0: LIBTORCH_DIR '$libtorch' has no $need; pass the LibTorch folder (with include/ and lib/) of the Kiln" \
      "that will load the plugin" >&2
    exit 2
  fi
done
for name in "$@"; do
  if [[ ! "$name" =~ ^[a-z][a-z0-9_]*$ ]]; then
    echo "$0: device name '$name' is not a lower-case letter followed by lower-case letters, digits and '_';" \
      "pass one such as acme_npu" >&2
    exit 2
  fi
done

cxx=${CXX:-g++}
# Where the plugin finds LibTorch when it is loaded: the real folder, so that the rpath outlives any symlink to it.
lib=$(cd "$libtorch/lib" && pwd -P)
mkdir -p "$out"
objects=$(mktemp -d)
trap 'rm -rf "$objects"' EXIT

# -fvisibility=hidden, with the linker version script below: the plugin exports KILN_GetPluginApi alone, so that its
# copy of the kit never binds to Kiln's copy or another plugin's. LibTorch's headers are system headers here (their
# own warnings are LibTorch's).
read -r -a optimise <<< "${CXXFLAGS:--O2}"
flags=(-std=c++17 -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -Wall "${optimise[@]}" -I"$kiln"
  -isystem "$libtorch/include" -isystem "$libtorch/include/torch/csrc/api/include")

# The kit's two files include LibTorch's headers and take most of the time; every plugin built here shares them.
for source in device_kit kernels; do
  "$cxx" "${flags[@]}" -c "$kiln/hal/device_kit/$source.cc" -o "$objects/kit_$source.o"
done
for name in "$@"; do
  "$cxx" "${flags[@]}" -DDEVICE_PLUGIN_NAME="$name" -c "$kiln/examples/device_plugin/device_plugin.cc" \
    -o "$objects/$name.o"
  # LibTorch's CPU library and c10, the two Kiln itself links. Not libtorch.so: in a CUDA build of LibTorch (the pinned
  # wheel is one) it needs libtorch_cuda, which would load CUDA's libraries, and register CUDA, in every process that
  # loads the plugin. --no-undefined: a symbol missing from these fails here, not when Kiln loads the plugin.
  "$cxx" -shared -o "$out/lib${name}_plugin.so" "$objects/$name.o" "$objects/kit_device_kit.o" \
    "$objects/kit_kernels.o" -Wl,--version-script="$kiln/hal/plugin/kiln_plugin_exports.lds" -Wl,--no-undefined \
    -L"$lib" -Wl,-rpath,"$lib" -ltorch_cpu -lc10
  echo "built $out/lib${name}_plugin.so"
done
