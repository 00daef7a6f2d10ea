"""The @libtorch repository: which LibTorch Kiln builds against.

KILN_LIBTORCH_FLAVOR (set for repository rules by .bazelrc's configs) picks it:

- "system" (the default): Debian 12's CPU-only LibTorch 1.13.1 from libtorch-dev, headers under /usr/include
  (//third_party:libtorch.BUILD).
- "torch2" (--config=torch2): a LibTorch 2.x folder with include/ and lib/. By default the one `tools/setup.sh
  --torch2` unpacks from the pinned PyPI wheel (~/.cache/kiln/torch-2.11.0-cu130/torch); KILN_LIBTORCH=/path points
  it at any other, such as a LibTorch zip from pytorch.org (cxx11 ABI). Kiln links libtorch_cpu and libc10 only, so a
  CPU build needs none of LibTorch's CUDA libraries (//third_party:libtorch2.BUILD.tpl).
- "cuda" (--config=cuda): the same folder, which must then be a CUDA build of LibTorch, plus the CUDA toolkit in
  KILN_CUDA_HOME (default /usr/local/cuda). `@libtorch//:torch` is the same as under "torch2", so the two configs
  share every compiled file but the CUDA backend's; `@libtorch//:torch_cuda` adds the toolkit's headers and links
  libtorch_cuda, libc10_cuda and libcudart.

A missing or wrong folder stops the build with a message that names the variable, what was expected and the fix.
"""

# The LibTorch 2.x that third_party/libtorch2/requirements.txt pins; change them together.
TORCH2_VERSION = "2.11.0"
TORCH2_DEFAULT_FOLDER = ".cache/kiln/torch-2.11.0-cu130/torch"  # below $HOME, as tools/setup.sh unpacks it

def _fail_unless_exists(ctx, folder, relative, variable, what):
    if not ctx.path(folder + "/" + relative).exists:
        fail("%s=%s has no %s; point it at %s" % (variable, folder, relative, what))

def _libtorch_repository_impl(ctx):
    flavor = ctx.os.environ.get("KILN_LIBTORCH_FLAVOR", "system") or "system"
    if flavor == "system":
        ctx.symlink("/usr/include", "include")
        ctx.symlink(ctx.attr.system_build_file, "BUILD.bazel")
        return
    if flavor not in ["torch2", "cuda"]:
        fail(("KILN_LIBTORCH_FLAVOR='%s' is not known; expected 'system' (the default: Debian's LibTorch 1.13), " +
              "'torch2' (set by --config=torch2) or 'cuda' (set by --config=cuda)") % flavor)

    libtorch = ctx.os.environ.get("KILN_LIBTORCH", "")
    variable = "KILN_LIBTORCH"
    if not libtorch:
        libtorch = ctx.os.environ.get("HOME", "") + "/" + TORCH2_DEFAULT_FOLDER
        variable = "the default LibTorch 2.x folder (KILN_LIBTORCH unset)"
        if not ctx.path(libtorch).exists:
            fail(("--config=%s builds against LibTorch %s, which is not unpacked at %s yet: run `tools/setup.sh " +
                  "--%s`, or set KILN_LIBTORCH to a LibTorch folder (with include/ and lib/)") %
                 (flavor, TORCH2_VERSION, libtorch, "cuda" if flavor == "cuda" else "torch2"))
    what = "a LibTorch 2.x folder (with include/ and lib/, e.g. the torch/ folder of a torch wheel)"
    for relative in ["include/torch/csrc/api/include/torch/torch.h", "include/ATen/ATen.h", "lib/libtorch_cpu.so",
                     "lib/libc10.so"]:
        _fail_unless_exists(ctx, libtorch, relative, variable, what)
    ctx.symlink(libtorch + "/include", "include")
    lib = str(ctx.path(libtorch + "/lib").realpath)
    ctx.symlink(lib, "lib")

    cuda_home = ""
    if flavor == "cuda":
        what = "a CUDA-enabled LibTorch 2.x (`tools/setup.sh --cuda` unpacks one)"
        for relative in ["include/c10/cuda/CUDACachingAllocator.h", "include/c10/core/CachingDeviceAllocator.h",
                         "lib/libtorch_cuda.so", "lib/libc10_cuda.so"]:
            _fail_unless_exists(ctx, libtorch, relative, variable, what)
        cuda_home = ctx.os.environ.get("KILN_CUDA_HOME", "") or "/usr/local/cuda"
        what = "the CUDA toolkit (its include/ and lib64/), whose headers LibTorch's c10/cuda headers include"
        for relative in ["include/cuda_runtime_api.h", "lib64/libcudart.so"]:
            _fail_unless_exists(ctx, cuda_home, relative, "KILN_CUDA_HOME", what)
        ctx.symlink(cuda_home + "/include", "cuda_include")
        cuda_home = str(ctx.path(cuda_home).realpath)
    else:
        ctx.file("cuda_include/README", "--config=torch2 has no CUDA toolkit; --config=cuda adds it here.\n")

    ctx.template("BUILD.bazel", ctx.attr.torch2_build_file, {
        "%{LIBTORCH_LIB}": lib,
        "%{CUDA_LIB}": cuda_home + "/lib64" if cuda_home else "",
    })

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["KILN_LIBTORCH_FLAVOR", "KILN_LIBTORCH", "KILN_CUDA_HOME", "HOME"],
    local = True,
    attrs = {
        # Label(): Kiln's own files, also when Kiln is an external repository (tools/workspace.bzl).
        "system_build_file": attr.label(default = Label("//third_party:libtorch.BUILD"), allow_single_file = True),
        "torch2_build_file": attr.label(default = Label("//third_party:libtorch2.BUILD.tpl"), allow_single_file = True),
    },
)
