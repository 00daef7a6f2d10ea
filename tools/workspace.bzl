"""Kiln's external repositories, for a workspace that uses Kiln as an external repository.

Kiln's own WORKSPACE calls it as well. A project that brings Kiln in (to link its own accelerator backend
into Kiln's programs without editing Kiln) writes, in *its* WORKSPACE:

    local_repository(name = "kiln", path = "/path/to/kiln")  # or an http_archive with a sha256

    load("@kiln//tools:workspace.bzl", "kiln_dependencies")

    kiln_dependencies()

    load("@kiln//tools:backends.bzl", "kiln_backend_repository", "kiln_backends")

    kiln_backend_repository(name = "acme", path = "acme")
    kiln_backends(name = "kiln_backends", backends = ["@acme//:acme"])

and builds with C++17 (`build --cxxopt=-std=c++17 --host_cxxopt=-std=c++17` in its .bazelrc, as Kiln's has). Then
`bazel run @kiln//trainer:fit -- --accelerator=acme` trains on it. docs/accelerators.md, "Your workspace", has the
complete files (WORKSPACE, .bazelrc, a BUILD and a program), which CI builds as written
(tools/user_workspace_check.sh).

`kiln_dependencies()` declares what Kiln's BUILD files refer to: the offline stand-ins for the repositories Bazel
4.2.3 fetches by itself (rules_cc, rules_java, remote_coverage_tools; third_party/README.md), LibTorch
(tools/libtorch.bzl) and the Debian system libraries (abseil, glog, googletest, benchmark, gloo, zlib, openssl,
nlohmann_json, yaml_cpp, boost, protobuf). Kiln's own WORKSPACE calls it too, so a user's workspace gets exactly
what Kiln builds with. A repository the workspace has already declared under one of these names is left alone.
"""

load("//tools:libtorch.bzl", "libtorch_repository")
load("//tools:system_library.bzl", "system_library")

def _kiln_stand_in_impl(ctx):
    # The stand-ins are folders with their own WORKSPACE files, hence no package of Kiln's: find them beside a file
    # that is in one.
    folder = ctx.path(ctx.attr._third_party_readme).dirname.get_child(ctx.attr.folder)
    if not folder.exists:
        fail("Kiln's stand-in %s is missing; is @kiln a complete copy of Kiln?" % folder)
    for child in folder.readdir():
        ctx.symlink(child, child.basename)

_kiln_stand_in = repository_rule(
    implementation = _kiln_stand_in_impl,
    attrs = {
        "folder": attr.string(mandatory = True),
        "_third_party_readme": attr.label(default = Label("//third_party:README.md"), allow_single_file = True),
    },
)

def kiln_dependencies():
    """Declares every external repository Kiln's BUILD files use, unless the workspace already has it."""
    for name in ["rules_cc", "rules_java", "remote_coverage_tools"]:
        if not native.existing_rule(name):
            _kiln_stand_in(name = name, folder = name)
    if not native.existing_rule("libtorch"):
        libtorch_repository(name = "libtorch")
    for name in [
        "abseil",
        "glog",
        "googletest",
        "benchmark",
        "gloo",
        "zlib",
        "openssl",
        "nlohmann_json",
        "yaml_cpp",
        "boost",
        "protobuf",
    ]:
        if not native.existing_rule(name):
            system_library(name = name)
