#!/usr/bin/env bash
# Installs the Debian 12 packages that Kiln's build and tests need, when they are missing. Idempotent, and quick
# when everything is already there (it only asks dpkg). Runs apt-get as root, or through sudo.
#
#   tools/setup.sh && bazel run //trainer:fit
#   tools/setup.sh && bazel test //...
set -euo pipefail

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
  # For //trainer:fit's data and its end-to-end tests (tests/cli):
  python3-sklearn          # The UCI digits (--data=digits); ~26 MB with python3-sklearn-lib.
  python3-torch            # Exports the TorchScript model the tests train; ~136 MB installed, 21 MB download.
  protobuf-compiler        # protoc and python3-protobuf: an independent reader of TensorBoard event files
  python3-protobuf         #   (with libprotobuf-dev's struct.proto, which libtorch-dev already pulls in); ~1 MB.
  python3-crcmod           # CRC-32C for that reader.
  chromium                 # Renders report.html headless in the report test; ~390 MB installed, 117 MB download.
)

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
