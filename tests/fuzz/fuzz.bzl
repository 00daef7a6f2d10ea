"""Fuzz targets for Kiln's parsers of outside input, built two ways from one source file.

    load("//tests/fuzz:fuzz.bzl", "kiln_fuzz_target")

    kiln_fuzz_target(
        name = "devices",              # corpus/devices/ holds its seed corpus
        srcs = ["devices_fuzzer.cc"],  # defines extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t)
        deps = ["//hal"],
    )

makes:
  - `<name>_corpus_test`: a cc_test that replays every file of corpus/<name>/ through the target once, built with
    the default toolchain (gcc), so that `bazel test //...` catches a regression on any seed or past finding;
  - `<name>_fuzzer`: with `--config=fuzz` (clang, libFuzzer, ASan and UBSan; run through tools/fuzz.sh) the real
    fuzzer; with the default toolchain the same replay program, handy for `bazel run` on one input.

Adding a target is a source file, a corpus folder, this macro call, and a line in tools/fuzz.sh's list.
"""

load("//tools:cc.bzl", "cc_library")

def kiln_fuzz_target(name, srcs, deps = [], data = [], size = "small", torch_pch = False, **kwargs):
    """A fuzz target, its replay test and its libFuzzer binary (see above).

    Args:
      name: the target's name; its seed corpus lives in corpus/<name>/.
      srcs: sources; one of them defines LLVMFuzzerTestOneInput.
      deps: what the sources need.
      data: files the target reads at run time (a plugin it loads), given to both the replay test and the fuzzer.
      size: the replay test's size.
      torch_pch: True when the source includes LibTorch (through Kiln's headers): the target compiles against the
        precompiled LibTorch headers (tools/cc.bzl).
      **kwargs: passed to the replay test (tags, timeout, ...).
    """
    cc_library(
        name = name + "_target",
        torch_pch = torch_pch,
        testonly = True,
        srcs = srcs,
        deps = deps,
        # LLVMFuzzerTestOneInput is found by the entry point alone (libFuzzer's main or replay_main).
        alwayslink = True,
    )
    corpus = native.glob(["corpus/%s/**" % name])
    native.cc_test(
        name = name + "_corpus_test",
        size = size,
        args = [native.package_name() + "/corpus/" + name],
        data = corpus + data,
        deps = [
            ":" + name + "_target",
            "//tests/fuzz:replay_main",
        ],
        **kwargs
    )
    native.cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        data = data,
        linkopts = select({
            "//tests/fuzz:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = [":" + name + "_target"] + select({
            "//tests/fuzz:libfuzzer": [],
            "//conditions:default": ["//tests/fuzz:replay_main"],
        }),
    )
