"""The @libtorch repository: Debian's CPU-only LibTorch by default, or a CUDA-enabled LibTorch for --config=cuda.

By default (KILN_LIBTORCH_FLAVOR unset or "system") this is exactly what `system_library(name = "libtorch")` gave:
the headers of Debian's libtorch-dev under /usr/include, with //third_party:libtorch.BUILD.

`--config=cuda` (.bazelrc) sets KILN_LIBTORCH_FLAVOR=cuda for repository rules. The repository then points at the
LibTorch in $KILN_CUDA_LIBTORCH (a folder with include/ and lib/, such as the cxx11-ABI LibTorch 1.13 download), and
at the CUDA toolkit's headers in $KILN_CUDA_HOME/include (default /usr/local/cuda), which LibTorch's c10/cuda
headers include. The BUILD file comes from //third_party:libtorch_cuda.BUILD.tpl. A missing or wrong folder stops
the build with a message that names the variable and what was expected.
"""

def _fail_unless_exists(ctx, folder, relative, variable, what):
    if not ctx.path(folder + "/" + relative).exists:
        fail("%s=%s has no %s; point it at %s" % (variable, folder, relative, what))

def _libtorch_repository_impl(ctx):
    flavor = ctx.os.environ.get("KILN_LIBTORCH_FLAVOR", "system") or "system"
    if flavor == "system":
        ctx.symlink("/usr/include", "include")
        ctx.symlink(ctx.attr.system_build_file, "BUILD.bazel")
        return
    if flavor != "cuda":
        fail("KILN_LIBTORCH_FLAVOR='%s' is not known; expected 'system' (the default) or 'cuda' (set by --config=cuda)" %
             flavor)

    libtorch = ctx.os.environ.get("KILN_CUDA_LIBTORCH", "")
    if not libtorch:
        fail("--config=cuda needs KILN_CUDA_LIBTORCH, the folder of a CUDA-enabled LibTorch 1.13 (with include/ " +
             "and lib/), e.g. KILN_CUDA_LIBTORCH=/opt/libtorch bazel build --config=cuda //...")
    what = "a CUDA-enabled LibTorch 1.13 (the cxx11-ABI download)"
    for relative in ["include/c10/cuda/CUDACachingAllocator.h", "lib/libtorch_cuda.so", "lib/libc10_cuda.so"]:
        _fail_unless_exists(ctx, libtorch, relative, "KILN_CUDA_LIBTORCH", what)
    cuda_home = ctx.os.environ.get("KILN_CUDA_HOME", "") or "/usr/local/cuda"
    _fail_unless_exists(ctx, cuda_home, "include/cuda_runtime_api.h", "KILN_CUDA_HOME",
                        "the CUDA toolkit whose headers LibTorch's c10/cuda headers include")

    ctx.symlink(libtorch + "/include", "include")
    ctx.symlink(libtorch + "/lib", "lib")
    ctx.symlink(cuda_home + "/include", "cuda_include")
    ctx.template("BUILD.bazel", ctx.attr.cuda_build_file, {"%{LIBTORCH_LIB}": str(ctx.path(libtorch + "/lib"))})

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["KILN_LIBTORCH_FLAVOR", "KILN_CUDA_LIBTORCH", "KILN_CUDA_HOME"],
    local = True,
    attrs = {
        # Label(): Kiln's own files, also when Kiln is an external repository (tools/workspace.bzl).
        "system_build_file": attr.label(default = Label("//third_party:libtorch.BUILD"), allow_single_file = True),
        "cuda_build_file": attr.label(default = Label("//third_party:libtorch_cuda.BUILD.tpl"), allow_single_file = True),
    },
)
