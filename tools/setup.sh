#!/usr/bin/env bash
# Installs the Debian 12 packages that Kiln's build and tests need, when they are missing. Idempotent, and quick
# when everything is already there (it only asks dpkg). Runs apt-get as root, or through sudo.
#
#   tools/setup.sh && bazel run //trainer:fit
#   tools/setup.sh && bazel test //...
#
# --torch2 also fetches the LibTorch 2.x of --config=torch2: the pinned PyPI torch wheel (third_party/libtorch2/
# requirements.txt; pip checks its SHA-256), unpacked as pip would lay it out under ~/.cache/kiln/torch-2.11.0-cu130,
# where tools/libtorch.bzl looks (KILN_LIBTORCH points the build at another LibTorch folder instead). --cuda does that and adds what --config=cuda
# links beyond the CUDA toolkit (requirements-cuda.txt). Both are quick once done. The build itself fetches nothing.
#
#   tools/setup.sh --torch2 && bazel test --config=torch2 //...
set -euo pipefail

torch2=false
cuda=false
for argument in "$@"; do
  case "$argument" in
    --torch2) torch2=true ;;
    --cuda) torch2=true cuda=true ;;
    *)
      echo "tools/setup.sh: unknown option '$argument'; accepted: --torch2 (LibTorch 2.x for --config=torch2)," \
        "--cuda (and the CUDA libraries for --config=cuda)" >&2
      exit 2
      ;;
  esac
done

packages=(
  bazel-bootstrap          # Bazel 4.2.3; Kiln's WORKSPACE makes it build with no network at all.
  build-essential          # g++ 12.
  libtorch-dev             # LibTorch 1.13.1 (CPU), with c10d.
  libopenblas0-openmp      # Fast BLAS for LibTorch; netlib's reference BLAS is several times slower.
  libgloo-dev              # Gloo headers, for c10d's ProcessGroupGloo.
  libabsl-dev              # Abseil: flags, strings, status, time, containers.
  libgoogle-glog-dev       # glog (and gflags).
  libgtest-dev             # GoogleTest.
  libgmock-dev             # GoogleMock.
  libbenchmark-dev         # Google Benchmark.
  zlib1g-dev               # zlib: gzip CSV files (bazel-bootstrap already pulls it in).
  libssl-dev               # OpenSSL's libcrypto: SHA-256 of the parameters (params_sha256).
  nlohmann-json3-dev       # nlohmann/json (header-only): the plan and --summary_json.
  libyaml-cpp-dev          # yaml-cpp: writes hparams.yaml.
  libboost-dev             # Boost.CRC (header-only): CRC-32C of TFRecord files. python3-sklearn pulls it in too.
  libprotobuf-dev          # Protocol Buffers 3.21: TensorBoard's event messages (libtorch-dev pulls it in too),
  protobuf-compiler        #   compiled by its protoc; also the test reader's protoc, with python3-protobuf.
  # For //trainer:fit's data and its end-to-end tests (tests/cli):
  python3-sklearn          # The UCI digits (--data=digits); ~26 MB with python3-sklearn-lib.
  python3-torch            # Exports the TorchScript model the tests train; ~136 MB installed, 21 MB download.
  python3-protobuf         # An independent reader of TensorBoard event files (with protoc and struct.proto); ~1 MB.
  python3-crcmod           # CRC-32C for that reader.
  chromium                 # Renders report.html headless in the report test; ~390 MB installed, 117 MB download.
  # For the launcher tests (tests/ddp:launchers_test): torchrun comes with python3-torch.
  openmpi-bin              # mpirun; ~10 MB download.
  iproute2                 # ip netns: two hosts made of network namespaces.
)
if $torch2; then
  packages+=(
    python3-pip            # pip download: fetches the pinned wheels and checks their hashes.
    unzip                  # Unpacks them.
  )
fi

missing=()
for package in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    sudo=()
  elif command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "tools/setup.sh: missing packages (${missing[*]}), and this is not root and there is no sudo;" \
      "run it as root" >&2
    exit 1
  fi
  echo "tools/setup.sh: installing ${missing[*]}" >&2
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# LibTorch loads the generic libblas.so.3: make sure it is OpenBLAS (OpenMP build), not the reference BLAS.
blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | sed -n 's/^Value: //p')
if [[ "$blas" != *openblas* ]]; then
  echo "tools/setup.sh: warning: libblas.so.3 points to '${blas:-nothing}', not OpenBLAS; LibTorch will be slow." \
    "Fix: update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2
fi

# LibTorch 2.x for --config=torch2 / --config=cuda (see the top of this file).
if $torch2; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  target=$HOME/.cache/kiln/torch-2.11.0-cu130  # tools/libtorch.bzl's TORCH2_DEFAULT_FOLDER, less its torch/
  wheels=$HOME/.cache/kiln/wheels
  # Unpacks the wheels of one requirements file, once: the marker holds that file's hash, written last.
  unpack() {
    local requirements=$1 marker=$2
    local want
    want=$(sha256sum "$requirements" | cut -d' ' -f1)
    if [[ -f "$target/$marker" && "$(cat "$target/$marker")" == "$want" ]]; then return 0; fi
    echo "tools/setup.sh: fetching $(grep -cE '^[a-z]' "$requirements") wheel(s) of ${requirements#"$here"/}" >&2
    mkdir -p "$wheels" "$target"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes --python-version 3.12 \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -r "$requirements" -d "$wheels"
    local project version wheel
    while read -r project version; do
      # A wheel's file name spells its project with underscores.
      wheel=$(ls "$wheels/${project//-/_}-$version"-*.whl)
      # The shared libraries and headers; not LibTorch's Python parts.
      if [[ "$project" == torch ]]; then
        unzip -q -o "$wheel" 'torch/include/*' 'torch/lib/*' 'torch/share/*' torch/version.py \
          -x torch/lib/libtorch_python.so -d "$target"
      else
        unzip -q -o "$wheel" 'nvidia/*/lib/*' -d "$target"
      fi
    done < <(sed -n -E 's/^([A-Za-z0-9_.-]+)==([^ ]+) .*/\1 \2/p' "$requirements")
    echo "$want" >"$target/$marker"
  }
  unpack "$here/third_party/libtorch2/requirements.txt" .kiln-torch2
  if $cuda; then unpack "$here/third_party/libtorch2/requirements-cuda.txt" .kiln-cuda; fi
  echo "tools/setup.sh: LibTorch $(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$target/torch/version.py" 2>/dev/null ||
    echo 2.x) in $target/torch" >&2
fi
