"""Link third-party accelerator backends into Kiln's programs, from a WORKSPACE, with no edit in Kiln's tree.

Kiln's programs (`//trainer:fit`, `//tools:accelerators`, `//tools:resolve`, and any binary built on `//trainer`)
depend on `//backends:linked`, which is the built-in backends plus `@kiln_backends//:backends`. That repository is
whatever the workspace's `kiln_backends` rule lists, so the workspace that builds Kiln decides which third-party
backends are linked:

    load("@kiln//tools:backends.bzl", "kiln_backend_repository", "kiln_backends")

    kiln_backend_repository(name = "acme", path = "third_party/acme")     # a folder with a WORKSPACE file
    kiln_backend_repository(
        name = "npu_vendor",
        urls = ["https://example.com/npu_vendor-1.2.tar.gz"],
        sha256 = "<sha256sum of the archive>",
        strip_prefix = "npu_vendor-1.2",
    )
    kiln_backends(name = "kiln_backends", backends = ["@acme//:acme", "@npu_vendor//:npu"])

`kiln_backends(name = "kiln_backends", backends = [])` links none. A vendor's LibTorch library as it ships (one that
registers its PrivateUse1 device when loaded) is adopted by path, loaded only when its accelerator is chosen:

    kiln_backends(name = "kiln_backends", backends = [], libraries = {"acme_npu": "/opt/acme/lib/libacme_torch.so"})
 The name must be `kiln_backends`: that is the
repository `//backends:linked` refers to.

A backend is a `cc_library` that depends on `@kiln//hal`, registers its accelerator with one
`KILN_REGISTER_ACCELERATOR` line beside its implementation, and sets `alwayslink = True`. Registration runs from a
static initialiser that no code refers to; without alwayslink the linker drops that object file from a static
archive and the accelerator silently goes missing. The generated `@kiln_backends//:backends` is alwayslink too, and
checks at build time that every listed library is (alwayslink_check.bzl), so a forgotten flag fails the
build with a message instead of losing the backend at run time.
"""

load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_archive")

def kiln_backend_repository(name, path = None, urls = None, sha256 = None, strip_prefix = None):
    """Declares the repository of one third-party backend.

    Args:
      name: the repository name; its targets are then `@<name>//...`.
      path: a local folder holding the backend's WORKSPACE and BUILD files: absolute, or relative to the root of
        the workspace whose WORKSPACE file calls this (as for `local_repository`).
      urls: archive URLs (tar.gz, zip, ...) of the backend's repository, tried in order. Needs `sha256`.
      sha256: the archive's SHA-256, so that a changed download fails the build instead of being linked.
      strip_prefix: a folder inside the archive to use as the repository root.
    """
    if (path == None) == (urls == None):
        fail("kiln_backend_repository(name = '%s'): give exactly one of path (a local folder) or urls (an archive)" %
             name)
    if path != None:
        if sha256 != None or strip_prefix != None:
            fail("kiln_backend_repository(name = '%s'): sha256 and strip_prefix apply to urls, not to path" % name)
        native.local_repository(name = name, path = path)
        return
    if type(urls) != "list" or not urls:
        fail("kiln_backend_repository(name = '%s'): urls must be a non-empty list of archive URLs" % name)
    if not sha256:
        fail(("kiln_backend_repository(name = '%s'): urls %s need sha256, so that what is linked is what you " +
              "reviewed; add sha256 = \"<output of sha256sum on the archive>\"") % (name, urls))
    http_archive(name = name, urls = urls, sha256 = sha256, strip_prefix = strip_prefix or "")

def _check_label(rule_name, label):
    if not label.startswith("@") or "//" not in label:
        fail(("kiln_backends(name = '%s'): '%s' is not a label of a backend in another repository; write it " +
              "with its repository, such as \"@acme//:acme\" (\"@//path:target\" for one in the main " +
              "workspace)") % (rule_name, label))

def _library_registrations(ctx):
    """The C++ lines registering each of `libraries`, with workspace-relative paths made absolute."""
    lines = []
    workspace_root = str(ctx.path(Label("@//:WORKSPACE")).dirname)
    for name, path in ctx.attr.libraries.items():
        if not name or not name[0].islower() or not (name.replace("_", "a").isalnum() and name == name.lower()):
            fail(("kiln_backends: libraries: '%s' is not a device name LibTorch takes: a lower-case letter, then " +
                  "lower-case letters, digits and '_' (\"acme_npu\")") % name)
        if path.startswith("@") or path.startswith("//") or ":" in path:
            fail(("kiln_backends: libraries: '%s' for '%s' is a label; give the library's file path (absolute, or " +
                  "relative to this workspace), which Kiln loads when '%s' is chosen") % (path, name, name))
        if not path.startswith("/"):
            path = workspace_root + "/" + path
        lines.append("KILN_REGISTER_PRIVATEUSE1_LIBRARY(%s, %s);" % (json.encode(name), json.encode(path)))
    return lines

def _kiln_backends_impl(ctx):
    if ctx.name != "kiln_backends":
        fail("kiln_backends(name = '%s'): the name must be \"kiln_backends\", the repository Kiln links" % ctx.name)
    registrations = _library_registrations(ctx)
    seen = {}
    for label in ctx.attr.backends:
        _check_label(ctx.name, label)
        if label in seen:
            fail("kiln_backends: '%s' is listed twice" % label)
        seen[label] = True
    check = ctx.attr._alwayslink_check
    check_bzl = "@%s//%s:%s" % (check.workspace_name, check.package, check.name)
    srcs = [":alwayslink_check"]
    deps = list(ctx.attr.backends)
    if registrations:
        ctx.file("libraries.cc", "// Generated by kiln_backends from the WORKSPACE's `libraries`. Do not edit.\n" +
                                 "#include \"hal/privateuse1_library.h\"\n\n" + "\n".join(registrations) + "\n")
        srcs.append("libraries.cc")
        deps.append("@%s//hal:privateuse1_library" % check.workspace_name)
    ctx.file("WORKSPACE", "workspace(name = \"kiln_backends\")\n")
    ctx.file("BUILD.bazel", """# Generated by kiln_backends (@kiln//tools:backends.bzl) from the WORKSPACE. Do not edit.
load("{check_bzl}", "kiln_alwayslink_check")

kiln_alwayslink_check(
    name = "alwayslink_check",
    backends = {backends},
)

# Every third-party backend this workspace links into Kiln's programs.
cc_library(
    name = "backends",
    srcs = {srcs},
    alwayslink = True,
    visibility = ["//visibility:public"],
    deps = {deps},
)
""".format(check_bzl = check_bzl, backends = repr(ctx.attr.backends), srcs = repr(srcs), deps = repr(deps)))

kiln_backends = repository_rule(
    implementation = _kiln_backends_impl,
    attrs = {
        "backends": attr.string_list(
            doc = "Labels of the backends' cc_libraries, each with its repository (\"@acme//:acme\").",
        ),
        "libraries": attr.string_dict(
            doc = ("Vendors' LibTorch PrivateUse1 libraries adopted as accelerators, device name to library path " +
                   "(absolute, or relative to the workspace): {\"acme_npu\": \"/opt/acme/lib/libacme_torch.so\"}. " +
                   "Each is loaded when its accelerator is chosen (hal/privateuse1_library.h)."),
        ),
        "_alwayslink_check": attr.label(default = Label("//tools:alwayslink_check.bzl")),
    },
    doc = "The @kiln_backends repository: one cc_library, //:backends, depending on every listed backend.",
)
