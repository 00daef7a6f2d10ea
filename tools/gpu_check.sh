#!/usr/bin/env bash
# Packs, here, everything a check of Kiln's CUDA build on a GPU machine needs, so that the check runs there in one
# command with no Bazel and no network:
#
#   tools/setup.sh --cuda && tools/gpu_check.sh          # builds with --config=cuda, packs into gpu_pack/
#   bash gpu_pack/run.sh                                  # on the GPU machine (tools/gpu_check_run.sh)
#
# The pack holds the --config=cuda programs and test binaries (fit, accelerators, the CUDA conformance suite, the
# GPU trainer test) and the shared libraries they need other than LibTorch and CUDA (Abseil, glog, gflags,
# GoogleTest, Kiln's own libraries of the test binaries); run.sh finds LibTorch and CUDA in the GPU machine's
# Python (`import torch`), which must have the LibTorch version the pack was built with (fit checks it). The pack
# must stay under 60 MiB (the GPU machine receives it with the working tree); this script refuses a larger one.
#
#   tools/gpu_check.sh [PACK_FOLDER]    default: gpu_pack in the workspace (git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
pack=${1:-gpu_pack}
limit_mib=60

binaries=(
  trainer/cli/fit
  tools/accelerators
  tests/conformance/cuda_conformance_test
  tests/gpu/cuda_device_test
)
targets=()
for binary in "${binaries[@]}"; do targets+=("//${binary%/*}:${binary##*/}"); done
bazel build --config=cuda "${targets[@]}"
bin=$(bazel info --config=cuda bazel-bin)

rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib"
for binary in "${binaries[@]}"; do cp "$bin/$binary" "$pack/bin/"; done
cp tools/gpu_check_run.sh "$pack/run.sh"
git rev-parse HEAD >"$pack/COMMIT" 2>/dev/null || echo unknown >"$pack/COMMIT"

# Each binary's shared libraries, as the loader resolves them from bazel-bin (where the test binaries' RUNPATH finds
# Kiln's own libraries). LibTorch's own (libtorch*, libc10*, its libgomp), CUDA's (libcu*, libnv*, libnccl, libcudnn*)
# and the C and C++ runtimes come from the GPU machine.
provided='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libtorch|libc10|libgomp|libcu|libnv|libnccl|libcaffe2)'
for binary in "${binaries[@]/#/$bin/}"; do
  while read -r name path; do
    [[ "$name" =~ $provided ]] && continue
    if [[ "$path" == "not found" || ! -f "$path" ]]; then
      echo "tools/gpu_check.sh: $(basename "$binary") needs $name, which the loader does not find here" >&2
      exit 1
    fi
    cp -L -n "$path" "$pack/lib/$name"
  done < <(ldd "$binary" | sed -n -E 's/^[[:space:]]*([^ ]+) => ([^ ]+( found)?).*/\1 \2/p')
done
chmod -R u+w "$pack"
# Without their static symbol tables (the loader, and glog's stack traces through the dynamic symbols, need none of
# them): the unoptimised test binaries and Kiln's libraries shrink by about a third, which keeps the pack under the
# limit.
for file in "$pack"/bin/* "$pack"/lib/*; do
  if [[ $(head -c 4 "$file") == $'\x7fELF' ]]; then strip --strip-unneeded "$file"; fi
done

# The programs and libraries travel gzip-compressed (a third of their size; run.sh unpacks them beside itself): the
# unoptimised binaries alone passed the limit when #60's callbacks, loggers and profilers landed (69 MiB unpacked).
tar -C "$pack" -czf "$pack/payload.tar.gz" bin lib
size_kib=$(du -sk "$pack/payload.tar.gz" "$pack/run.sh" "$pack/COMMIT" | awk '{s += $1} END {print s}')
if ((size_kib > limit_mib * 1024)); then
  echo "tools/gpu_check.sh: the pack is $((size_kib / 1024)) MiB, over the ${limit_mib} MiB limit:" >&2
  du -sh "$pack"/bin/* "$pack"/lib/* | sort -h | tail -n 8 >&2
  exit 1
fi
rm -rf "$pack/bin" "$pack/lib"
echo "tools/gpu_check.sh: packed ${#binaries[@]} programs and their libraries" \
  "($((size_kib / 1024)) MiB) into $pack; on a GPU machine run: bash $pack/run.sh" >&2
