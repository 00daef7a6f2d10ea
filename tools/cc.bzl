"""Kiln's C++ rules: cc_library, cc_test and cc_binary with LibTorch's headers precompiled.

Parsing LibTorch 2.x's headers is most of the work of compiling a Kiln file: about 20 of the 22 seconds of a typical
trainer file on Kiln's 2-core machine (docs/build-notes.md). A target that includes LibTorch compiles against one
precompiled header instead (GCC's PCH: `-include` of a header with its `.gch` beside it), built once per
configuration by `torch_pch` with exactly the flags of that configuration, so that GCC accepts it (it checks them and
falls back to the plain header if they differ: a mismatch costs time, never correctness).

The three macros take the native rules' arguments and one more, `torch_pch`: True to compile against the
precompiled header (the target then depends on LibTorch), False not to; by default True when `deps` lists
`@libtorch//:torch` or `@libtorch//:c10d` directly. Targets whose sources include LibTorch only through other Kiln
headers say `torch_pch = True`. A target that must never see LibTorch's headers keeps the default.

BUILD files load them under the native names:
    load("//tools:cc.bzl", "cc_binary", "cc_library", "cc_test")
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")
load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

# What the flag names: the header `torch_pch` writes into its package's output folder, found through the quote
# include path (`bazel-out/<config>/bin`, or `.../bin/external/kiln` when Kiln is an external repository).
_PCH_TARGET = Label("//third_party:torch_pch")
_PCH_INCLUDE = "third_party/kiln_torch_pch.h"

def _torch_pch_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    deps = cc_common.merge_cc_infos(cc_infos = [dep[CcInfo] for dep in ctx.attr.deps])
    deps_context = deps.compilation_context

    header = ctx.actions.declare_file("kiln_torch_pch.h")
    ctx.actions.expand_template(template = ctx.file.header, output = header, substitutions = {})
    outputs = [header]

    # Clang reads GCC's .gch files as errors, not as headers to skip: under clang (--config=fuzz) the header is
    # included as it is.
    if cc_toolchain.compiler != "clang":
        gch = ctx.actions.declare_file("kiln_torch_pch.h.gch")
        variables = cc_common.create_compile_variables(
            feature_configuration = feature_configuration,
            cc_toolchain = cc_toolchain,
            user_compile_flags = ctx.fragments.cpp.copts + ctx.fragments.cpp.cxxopts,
            source_file = header.path,
            output_file = gch.path,
            include_directories = deps_context.includes,
            quote_include_directories = deps_context.quote_includes,
            system_include_directories = deps_context.system_includes,
            framework_include_directories = deps_context.framework_includes,
            preprocessor_defines = deps_context.defines,
            # As the configuration compiles the objects that binaries link (Bazel's rule): position-independent code
            # except under -c opt, where Debian's GCC compiles them as -fPIE. A header precompiled the other way is
            # refused (-Winvalid-pch, "different settings of -fpie"): under -c opt, the shared objects that tests
            # link parse the plain header.
            use_pic = ctx.var["COMPILATION_MODE"] != "opt",
        )
        command_line = cc_common.get_memory_inefficient_command_line(
            feature_configuration = feature_configuration,
            action_name = ACTION_NAMES.cpp_compile,
            variables = variables,
        )
        environment = cc_common.get_environment_variables(
            feature_configuration = feature_configuration,
            action_name = ACTION_NAMES.cpp_compile,
            variables = variables,
        )
        compiler = cc_common.get_tool_for_action(
            feature_configuration = feature_configuration,
            action_name = ACTION_NAMES.cpp_compile,
        )
        ctx.actions.run(
            executable = compiler,
            arguments = ["-x", "c++-header"] + command_line,
            env = environment,
            inputs = depset([header], transitive = [deps_context.headers, cc_toolchain.all_files]),
            outputs = [gch],
            mnemonic = "CppPrecompileHeader",
            progress_message = "Precompiling LibTorch's headers (%s)" % ctx.label,
        )
        outputs.append(gch)

    own = CcInfo(compilation_context = cc_common.create_compilation_context(headers = depset(outputs)))
    return [
        DefaultInfo(files = depset(outputs)),
        cc_common.merge_cc_infos(direct_cc_infos = [own], cc_infos = [deps]),
    ]

torch_pch = rule(
    implementation = _torch_pch_impl,
    doc = "A precompiled header of `header`, compiled as the configuration compiles C++ (see the file's comment).",
    attrs = {
        "header": attr.label(allow_single_file = [".h"], mandatory = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)

def _wants_pch(kwargs):
    wanted = kwargs.pop("torch_pch", None)
    if wanted != None:
        return wanted
    deps = kwargs.get("deps", [])
    if type(deps) != "list":
        return False  # A select(): the target says torch_pch = True itself if it includes LibTorch.
    for dep in deps:
        if type(dep) == "string" and (dep.startswith("@libtorch//:torch") or dep.startswith("@libtorch//:c10d")):
            return True
    return False

def _with_pch(kwargs):
    if _wants_pch(kwargs):
        kwargs["deps"] = kwargs.get("deps", []) + [_PCH_TARGET]
        kwargs["copts"] = ["-include", _PCH_INCLUDE, "-Winvalid-pch"] + kwargs.get("copts", [])
    return kwargs

def cc_library(**kwargs):
    native.cc_library(**_with_pch(kwargs))

def cc_test(**kwargs):
    native.cc_test(**_with_pch(kwargs))

def cc_binary(**kwargs):
    native.cc_binary(**_with_pch(kwargs))
