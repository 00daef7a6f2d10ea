# LibTorch 2.x, for the default build and --config=cuda (see //tools:libtorch.bzl, which fills in %{...}).
package(default_visibility = ["//visibility:public"])

# The CPU parts alone: libtorch_cpu and libc10 (libtorch.so would pull in libtorch_cuda). Under --config=cuda this
# target is unchanged, so the two configs share every compiled file that does not include CUDA headers.
cc_library(
    name = "torch",
    hdrs = glob(["include/**"]),
    includes = [
        "include",
        "include/torch/csrc/api/include",
    ],
    linkopts = [
        "-L%{LIBTORCH_LIB}",
        "-Wl,-rpath,%{LIBTORCH_LIB}",
        "-ltorch_cpu",
        "-lc10",
        "-pthread",
    ],
)

# torch.distributed's C++ core (c10d), inside libtorch_cpu with its own copy of Gloo: only Gloo's headers (Debian's
# libgloo-dev, in /usr/include) are needed to compile c10d's ProcessGroupGloo header, and Debian's libgloo is not
# linked (it would be a second Gloo in the process).
cc_library(
    name = "c10d",
    defines = ["USE_C10D_GLOO"],
    deps = [":torch"],
)

# CUDA: the toolkit's headers (LibTorch's c10/cuda headers include them) and LibTorch's CUDA libraries. Only
# --config=cuda fills it; the CUDA backend depends on it under that config alone.
cc_library(
    name = "torch_cuda",
    hdrs = glob(["cuda_include/**"]),
    includes = ["cuda_include"],
    linkopts = [
        "-L%{CUDA_LIB}",
        "-Wl,-rpath,%{CUDA_LIB}",
        # libtorch_cuda registers LibTorch's CUDA hooks, kernels and device guard from static initialisers; nothing
        # refers to it by symbol, so keep it even where the linker drops unreferenced libraries.
        "-Wl,--push-state,--no-as-needed",
        "-ltorch_cuda",
        "-Wl,--pop-state",
        "-lc10_cuda",
        "-lcudart",
    ],
    deps = [":torch"],
)

# What identifies this LibTorch to a rule that builds against it outside Bazel's C++ rules (examples/device_plugin's
# genrule runs a vendor's plain g++ script): its version header and libc10.so, inputs whose change rebuilds the rule,
# and whose resolved paths lead to the include/ and lib/ folders.
filegroup(
    name = "version_header",
    srcs = glob([
        "include/torch/headeronly/version.h",
        "include/torch/csrc/api/include/torch/version.h",
    ]),
)

exports_files(["lib/libc10.so"])
