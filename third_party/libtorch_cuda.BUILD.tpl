# A CUDA-enabled LibTorch 1.13 from $KILN_CUDA_LIBTORCH, for `bazel build --config=cuda` (see //tools:libtorch.bzl).
# The same targets as libtorch.BUILD, so nothing else in Kiln changes. %{LIBTORCH_LIB} is filled in by the rule.
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "torch",
    hdrs = glob([
        "include/**/*.h",
        "include/**/*.hpp",
        "include/**/*.cuh",
        "cuda_include/**/*.h",
        "cuda_include/**/*.hpp",
    ]),
    includes = [
        "cuda_include",
        "include",
        "include/torch/csrc/api/include",
    ],
    linkopts = [
        "-L%{LIBTORCH_LIB}",
        "-Wl,-rpath,%{LIBTORCH_LIB}",
        # libtorch_cuda registers LibTorch's CUDA hooks, kernels and device guard from static initialisers; nothing
        # refers to it by symbol, so keep it even where the linker drops unreferenced libraries.
        "-Wl,--push-state,--no-as-needed",
        "-ltorch_cuda",
        "-lc10_cuda",
        "-Wl,--pop-state",
        "-ltorch",
        "-ltorch_cpu",
        "-lc10",
        "-pthread",
    ],
)

# torch.distributed's C++ core (c10d), as in libtorch.BUILD.
cc_library(
    name = "c10d",
    defines = ["USE_C10D_GLOO"],
    deps = [
        ":torch",
        "@gloo",
    ],
)
