"""A build-time check that every backend listed in kiln_backends keeps its registration when linked.

Used by the @kiln_backends repository that `kiln_backends` (backends.bzl) generates. A backend registers from a
static initialiser; a library that is not `alwayslink` loses it whenever the linker takes it from a static archive,
because nothing refers to that object file. This rule fails the build, naming the library and the fix, when a
listed backend's own library (or, for a library with no sources that only gathers others, every library of the
backend's repository) is not alwayslink. Its output is an empty C++ source, so it can sit in a cc_library's srcs.
"""

def _libraries_of(target):
    """The (owner label, LibraryToLink) pairs that `target` links, with object code."""
    pairs = []
    for linker_input in target[CcInfo].linking_context.linker_inputs.to_list():
        for library in linker_input.libraries:
            if library.objects or library.pic_objects or library.static_library or library.pic_static_library:
                pairs.append((linker_input.owner, library))
    return pairs

def _kiln_alwayslink_check_impl(ctx):
    for backend in ctx.attr.backends:
        pairs = _libraries_of(backend)
        own = [(owner, library) for owner, library in pairs if owner == backend.label]
        if not own:
            own = [(owner, library) for owner, library in pairs if owner.workspace_name == backend.label.workspace_name]
        if not own:
            fail("kiln_backends: %s links no compiled code of its own; list the cc_library that holds the " %
                 backend.label + "accelerator and its KILN_REGISTER_ACCELERATOR line")
        for owner, library in own:
            if not library.alwayslink:
                fail(("kiln_backends: %s is not alwayslink, so its KILN_REGISTER_ACCELERATOR line would be dropped " +
                      "by the linker and the accelerator would be missing at run time; set alwayslink = True on " +
                      "that cc_library") % owner)
    out = ctx.actions.declare_file(ctx.label.name + ".cc")
    ctx.actions.write(out, "// kiln_backends: every listed backend is alwayslink (%d checked).\n" %
                           len(ctx.attr.backends))
    return [DefaultInfo(files = depset([out]))]

kiln_alwayslink_check = rule(
    implementation = _kiln_alwayslink_check_impl,
    attrs = {"backends": attr.label_list(providers = [CcInfo])},
)
