"""A shared library built outside Bazel's C++ rules, as a vendor builds theirs: a script runs the machine's g++
against LibTorch, which it finds through @libtorch.

    load("//tools:outside_build.bzl", "libtorch_script_library")

    libtorch_script_library(
        name = "plugins",
        script = "build.sh",                 # run as: build.sh LIBTORCH_DIR OUT_DIR ARGS...
        srcs = ["device_plugin.cc", ...],
        outs = ["libalpha_npu_plugin.so"],
        args = ["alpha_npu"],
    )

The script gets a folder holding `include/` and `lib/` links to the LibTorch Bazel builds against (the resolved paths
of its version header and libc10.so, which @libtorch links to the LibTorch folder outside the sandbox), the output
folder, and `args`. Those two files are inputs beside `srcs` and the script, so that a change to any of them, or
another LibTorch, rebuilds the library. The compiler is the machine's g++ (Bazel's strict action environment leaves
CXX unset); it is not part of the cache key.
"""

def libtorch_script_library(name, script, srcs, outs, args = [], message = None, **kwargs):
    native.genrule(
        name = name,
        srcs = srcs + [
            "@libtorch//:version_header",
            "@libtorch//:lib/libc10.so",
        ],
        outs = outs,
        cmd = """
            set -euo pipefail
            headers=($(execpaths @libtorch//:version_header))
            include=$$(readlink -f $${headers[0]} | sed -E 's#/torch/(headeronly|csrc/api/include/torch)/version[.]h$$##')
            lib=$$(dirname $$(readlink -f $(execpath @libtorch//:lib/libc10.so)))
            libtorch=$$(mktemp -d)
            trap 'rm -rf "$$libtorch"' EXIT
            ln -s "$$include" "$$libtorch/include"
            ln -s "$$lib" "$$libtorch/lib"
            $(execpath %s) "$$libtorch" $(@D) %s > /dev/null
        """ % (script, " ".join(args)),
        message = message or "Building %s with %s" % (", ".join(outs), script),
        tools = [script],
        **kwargs
    )
