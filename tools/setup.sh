#!/usr/bin/env bash
# Installs what Kiln's build and tests need, when it is missing: Debian 12 packages (through apt-get, as root or
# through sudo) and LibTorch 2.x, the pinned PyPI torch wheel (third_party/libtorch2/requirements.txt; pip checks its
# SHA-256), unpacked as pip would lay it out under ~/.cache/kiln/torch-2.11.0-cu130, where tools/libtorch.bzl looks
# (KILN_LIBTORCH points the build at another LibTorch folder instead). Idempotent, and quick when everything is
# already there (it only asks dpkg and reads a marker). The build itself fetches nothing.
#
#   tools/setup.sh && bazel run //trainer:fit
#   tools/setup.sh && bazel test //...
#
# --cuda also fetches what --config=cuda links beyond the CUDA toolkit (requirements-cuda.txt).
#
# It also installs the real Lightning from PyPI (third_party/lightning/requirements.txt, every hash checked) into
# a virtual environment of Debian's Python at ~/.cache/kiln/lightning-venv, where tests/lightning finds it (a first
# time about 1.5 GB and a minute here); --no-lightning leaves it out, and those tests then say they did not run.
#
# And MLflow and W&B from PyPI (third_party/tracking/requirements.txt, every hash checked) into ~/.cache/kiln/mlflow-venv,
# where tests/loggers finds them (MLflow's own client reads back what Kiln's MLFlowLogger wrote, `mlflow server` is the
# tracking server its test starts; wandb 0.29's reader of run files reads Kiln's WandbLogger's offline runs);
# --no-tracking leaves them out, and those tests then say they did not run.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: tools/setup.sh [--cuda] [--help]

Installs what Kiln's build and tests need, when it is missing:
  - Debian 12 packages: Bazel 4.2.3, g++, Abseil, glog, GoogleTest, Google Benchmark, Gloo's headers, OpenBLAS,
    zlib, OpenSSL, nlohmann/json, yaml-cpp, Boost, Protocol Buffers, and what the end-to-end tests use;
  - LibTorch 2.11.0, the pinned PyPI torch wheel (SHA-256 checked), unpacked under ~/.cache/kiln. Kiln builds
    against LibTorch 2.x (2.8 or newer) only: PyTorch's own DDP reducer, c10d's device backends, fused optimizer
    kernels, autocast and named out-of-tree devices are 2.x (docs/libtorch.md). KILN_LIBTORCH=/path/to/libtorch
    builds against another LibTorch folder instead.

  - Lightning 2.6 and PyTorch 2.11 from PyPI (SHA-256 checked), in a virtual environment at
    ~/.cache/kiln/lightning-venv, for the tests that run the real Lightning on Kiln's files (tests/lightning).

  --cuda          also fetch what `bazel build --config=cuda` links beyond the CUDA toolkit (cuSPARSELt, NVSHMEM,
                  cuFile)
  - MLflow 3.17 and wandb 0.29 from PyPI (SHA-256 checked), in a virtual environment at
    ~/.cache/kiln/mlflow-venv, for the tests of Kiln's MLflow and W&B loggers (tests/loggers).

  --no-lightning  leave Lightning out (tests/lightning then say they did not run, and why)
  --no-tracking   leave MLflow and wandb out (tests/loggers then say they did not run, and why)
  --help          print this
USAGE
}

cuda=false
lightning=true
tracking=true
for argument in "$@"; do
  case "$argument" in
    --torch2) ;;  # LibTorch 2.x is always fetched now; kept so that older scripts keep working.
    --cuda) cuda=true ;;
    --no-lightning) lightning=false ;;
    --no-tracking) tracking=false ;;
    --help | -h)
      usage
      exit 0
      ;;
    *)
      echo "tools/setup.sh: unknown option '$argument'; accepted: --cuda (the CUDA libraries for --config=cuda)," \
        "--no-lightning (no Lightning for tests/lightning), --no-tracking (no MLflow or wandb for tests/loggers), --help" >&2
      exit 2
      ;;
  esac
done

packages=(
  bazel-bootstrap          # Bazel 4.2.3; Kiln's WORKSPACE makes it build with no network at all.
  build-essential          # g++ 12.
  libopenblas0-openmp      # Fast BLAS for the Python tests' Debian PyTorch; netlib's reference BLAS is much slower.
  libgloo-dev              # Gloo headers, for c10d's ProcessGroupGloo (LibTorch's own Gloo is linked).
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
  libprotobuf-dev          # Protocol Buffers 3.21: TensorBoard's event messages,
  protobuf-compiler        #   compiled by its protoc; also the test reader's protoc, with python3-protobuf.
  python3-pip              # pip download: fetches the pinned LibTorch wheels and checks their hashes.
  python3-venv             # The virtual environment that holds Lightning from PyPI, for tests/lightning.
  unzip                    # Unpacks them.
  # For //trainer:fit's data and its end-to-end tests (tests/cli):
  python3-sklearn          # The UCI digits (--data=digits); ~26 MB with python3-sklearn-lib.
  python3-torch            # Python's side of the tests: exports TorchScript models, reads Kiln's checkpoints with
                           # torch.load (Debian's PyTorch 1.13: an independent reader, not what Kiln links).
  python3-protobuf         # An independent reader of TensorBoard event files (with protoc and struct.proto); ~1 MB.
  python3-crcmod           # CRC-32C for that reader.
  chromium                 # Renders report.html headless in the report test; ~390 MB installed, 117 MB download.
  # For the launcher tests (tests/ddp:launchers_test): torchrun comes with python3-torch.
  openmpi-bin              # mpirun; ~10 MB download.
  iproute2                 # ip netns: two hosts made of network namespaces.
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

# Debian's PyTorch (the tests' Python side) loads the generic libblas.so.3: make sure it is OpenBLAS, not the
# reference BLAS. (Kiln's LibTorch, the wheel's, brings its own BLAS.)
blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | sed -n 's/^Value: //p')
if [[ "$blas" != *openblas* ]]; then
  echo "tools/setup.sh: warning: libblas.so.3 points to '${blas:-nothing}', not OpenBLAS; Python's PyTorch will be" \
    "slow. Fix: update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2
fi

# LibTorch 2.x (see the top of this file).
{
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
}

# Lightning from PyPI, for tests/lightning (see the top of this file). Done once per requirements file: the marker
# holds its hash, written last, so an interrupted install is redone from scratch.
if $lightning; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  requirements=$here/third_party/lightning/requirements.txt
  venv=$HOME/.cache/kiln/lightning-venv
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [[ ! -f "$venv/.kiln-lightning" || "$(cat "$venv/.kiln-lightning")" != "$want" ]]; then
    echo "tools/setup.sh: installing Lightning and PyTorch from PyPI into $venv" >&2
    rm -rf "$venv"
    # Debian's Python 3.11: the wheels are built for it.
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --require-hashes --find-links "$HOME/.cache/kiln/wheels" -r "$requirements"
    echo "$want" >"$venv/.kiln-lightning"
  fi
  echo "tools/setup.sh: Lightning $("$venv/bin/python" -c 'import lightning; print(lightning.__version__)' \
    2>/dev/null || echo '(not importable)') in $venv" >&2
fi

# MLflow from PyPI, for tests/loggers (see the top of this file); done once per requirements file, like Lightning.
if $tracking; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  requirements=$here/third_party/tracking/requirements.txt
  venv=$HOME/.cache/kiln/mlflow-venv
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [[ ! -f "$venv/.kiln-tracking" || "$(cat "$venv/.kiln-tracking")" != "$want" ]]; then
    echo "tools/setup.sh: installing MLflow and wandb from PyPI into $venv" >&2
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --require-hashes -r "$requirements"
    echo "$want" >"$venv/.kiln-tracking"
  fi
  echo "tools/setup.sh: MLflow and wandb $("$venv/bin/python" -c \
    'import mlflow, wandb; print(mlflow.__version__, wandb.__version__)' 2>/dev/null || echo '(not importable)')" \
    "in $venv" >&2
fi
