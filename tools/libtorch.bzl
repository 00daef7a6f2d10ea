"""The @libtorch repository: which LibTorch Kiln builds against.

Kiln builds against LibTorch 2.x, 2.8 or newer (MINIMUM_VERSION; docs/libtorch.md says why). KILN_LIBTORCH_FLAVOR
(set for repository rules by .bazelrc's configs) picks the build:

- "cpu" (the default): a LibTorch 2.x folder with include/ and lib/. By default the one `tools/setup.sh` unpacks
  from the pinned PyPI wheel (~/.cache/kiln/torch-2.11.0-cu130/torch); KILN_LIBTORCH=/path points it at any other,
  such as a LibTorch zip from pytorch.org (cxx11 ABI). Kiln links libtorch_cpu and libc10 only, so a CPU build needs
  none of LibTorch's CUDA libraries (//third_party:libtorch.BUILD.tpl).
- "cuda" (--config=cuda): the same folder, which must then be a CUDA build of LibTorch, plus the CUDA toolkit in
  KILN_CUDA_HOME (default /usr/local/cuda). `@libtorch//:torch` is the same as under "cpu", so the two configs
  share every compiled file but the CUDA backend's; `@libtorch//:torch_cuda` adds the toolkit's headers and links
  libtorch_cuda, libc10_cuda and libcudart.
- "torch2" (--config=torch2, from the releases that defaulted to Debian's LibTorch 1.13): the same as "cpu", kept
  so that scripts and workspaces that pass it keep building for a release.

A missing or wrong folder, or a LibTorch older than MINIMUM_VERSION, stops the build with a message that names the
variable (or the version found), what was expected and the fix.
"""

# The LibTorch 2.x that third_party/libtorch2/requirements.txt pins; change them together.
TORCH2_VERSION = "2.11.0"
TORCH2_DEFAULT_FOLDER = ".cache/kiln/torch-2.11.0-cu130/torch"  # below $HOME, as tools/setup.sh unpacks it

# The oldest LibTorch Kiln builds against; hal/compat/version.h states the same, with the reason.
MINIMUM_VERSION = (2, 8)

def _fail_unless_exists(ctx, folder, relative, variable, what):
    if not ctx.path(folder + "/" + relative).exists:
        fail("%s=%s has no %s; point it at %s" % (variable, folder, relative, what))

def _version_of(ctx, libtorch):
    """(major, minor, patch) of the LibTorch in `libtorch`, from its torch/version.h, or None."""
    found = {}
    for relative in ["include/torch/headeronly/version.h", "include/torch/csrc/api/include/torch/version.h"]:
        path = ctx.path(libtorch + "/" + relative)
        if not path.exists:
            continue
        for line in ctx.read(path).splitlines():
            words = [word for word in line.replace("\t", " ").split(" ") if word]
            if len(words) == 3 and words[0] == "#define" and words[1] in ["TORCH_VERSION_MAJOR", "TORCH_VERSION_MINOR",
                                                                           "TORCH_VERSION_PATCH"] and words[2].isdigit():
                found[words[1]] = int(words[2])
    if "TORCH_VERSION_MAJOR" not in found or "TORCH_VERSION_MINOR" not in found:
        return None
    return (found["TORCH_VERSION_MAJOR"], found["TORCH_VERSION_MINOR"], found.get("TORCH_VERSION_PATCH", 0))

def _libtorch_repository_impl(ctx):
    flavor = ctx.os.environ.get("KILN_LIBTORCH_FLAVOR", "cpu") or "cpu"
    if flavor == "torch2":
        flavor = "cpu"
    if flavor == "system":
        fail("KILN_LIBTORCH_FLAVOR='system' (Debian's LibTorch 1.13) is no longer supported: Kiln builds against " +
             "LibTorch %d.%d or newer. Run `tools/setup.sh` (it fetches the pinned LibTorch %s) and build with no " %
             (MINIMUM_VERSION[0], MINIMUM_VERSION[1], TORCH2_VERSION) + "--config, or set KILN_LIBTORCH to a LibTorch 2.x folder")
    if flavor not in ["cpu", "cuda"]:
        fail(("KILN_LIBTORCH_FLAVOR='%s' is not known; expected 'cpu' (the default), 'cuda' (set by --config=cuda) " +
              "or 'torch2' (the same as 'cpu')") % flavor)

    libtorch = ctx.os.environ.get("KILN_LIBTORCH", "")
    variable = "KILN_LIBTORCH"
    if not libtorch:
        libtorch = ctx.os.environ.get("HOME", "") + "/" + TORCH2_DEFAULT_FOLDER
        variable = "the default LibTorch 2.x folder (KILN_LIBTORCH unset)"
        if not ctx.path(libtorch).exists:
            fail(("Kiln builds against LibTorch %s, which is not unpacked at %s yet: run `tools/setup.sh%s`, or " +
                  "set KILN_LIBTORCH to a LibTorch 2.x folder (with include/ and lib/)") %
                 (TORCH2_VERSION, libtorch, " --cuda" if flavor == "cuda" else ""))
    what = "a LibTorch 2.x folder (with include/ and lib/, e.g. the torch/ folder of a torch wheel)"
    for relative in ["include/torch/csrc/api/include/torch/torch.h", "include/ATen/ATen.h", "lib/libtorch_cpu.so",
                     "lib/libc10.so"]:
        _fail_unless_exists(ctx, libtorch, relative, variable, what)
    version = _version_of(ctx, libtorch)
    if version == None:
        fail("%s=%s has no torch/version.h that says its version; point it at %s" % (variable, libtorch, what))
    if (version[0], version[1]) < MINIMUM_VERSION:
        fail(("%s=%s holds LibTorch %d.%d.%d, but Kiln needs LibTorch %d.%d or newer (docs/libtorch.md); run " +
              "`tools/setup.sh` for the pinned %s, or point KILN_LIBTORCH at a newer LibTorch") %
             (variable, libtorch, version[0], version[1], version[2], MINIMUM_VERSION[0], MINIMUM_VERSION[1],
              TORCH2_VERSION))
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
        ctx.file("cuda_include/README", "A CPU build has no CUDA toolkit; --config=cuda adds it here.\n")

    ctx.template("BUILD.bazel", ctx.attr.build_file_template, {
        "%{LIBTORCH_LIB}": lib,
        "%{CUDA_LIB}": cuda_home + "/lib64" if cuda_home else "",
    })

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["KILN_LIBTORCH_FLAVOR", "KILN_LIBTORCH", "KILN_CUDA_HOME", "HOME"],
    local = True,
    attrs = {
        # Label(): Kiln's own files, also when Kiln is an external repository (tools/workspace.bzl).
        "build_file_template": attr.label(default = Label("//third_party:libtorch.BUILD.tpl"), allow_single_file = True),
    },
)
