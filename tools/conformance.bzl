"""The accelerator conformance kit: one shared GoogleTest suite, run against any accelerator.

    load("@kiln//tools:conformance.bzl", "kiln_accelerator_conformance_test")

    kiln_accelerator_conformance_test(
        name = "acme_conformance_test",
        accelerator = "acme",      # the name it registers with KILN_REGISTER_ACCELERATOR
        deps = [":acme"],          # the backend's cc_library (alwayslink)
    )

The suite (@kiln//hal:conformance_suite, hal/testing/conformance_suite.cc) takes the accelerator from Kiln's default
registry by name and checks the contract of hal/accelerator.h: that it is registered under that name and its
aliases; that counting, availability and the declarations never throw; that parsing rejects bad `devices` values
with InvalidArgument errors that quote them; that ParallelDevices has one device per parsed index, each one the
accelerator accepts; that set-up and tear-down repeat; that statistics have lower_snake_case keys and finite values
(and that a foreign device is refused); and that a few SGD steps of a small model on the device give the CPU's
numbers, to a tight tolerance, or bit for bit with `bitwise = True`. An accelerator that is not available on the
machine has its hardware tests skipped, with the reason printed; the other checks still run. Beside it, `<name>_fsdp`
trains a small model with `fsdp` on 2 processes and the accelerator's collective backend, and checks that it ends
where `ddp` ends (skipped, saying why, without 2 devices or without all-gather and reduce-scatter).

An accelerator plugin (a shared library implementing hal/plugin/kiln_plugin_c_api.h) is checked the same way, loaded
from its `.so` by Kiln's plugin loader before the suite runs:

    kiln_accelerator_conformance_test(
        name = "acme_plugin_conformance_test",
        accelerator = "acme",                  # the name the plugin's Plugin_Info gives
        plugin = ":libacme_kiln_plugin.so",    # a cc_binary(linkshared = True), or a prebuilt .so file
    )

A vendor's LibTorch PrivateUse1 library as it ships (it registers its device when loaded; docs/collectives.md):

    kiln_accelerator_conformance_test(
        name = "acme_torch_conformance_test",
        accelerator = "acme_npu",              # the device name the library registers
        library = ":libacme_torch.so",
    )
"""

def kiln_accelerator_conformance_test(
        name,
        accelerator,
        deps = [],
        bitwise = False,
        one_rank_per_device = False,
        size = "medium",
        plugin = None,
        library = None,
        **kwargs):
    """A cc_test running the conformance suite against the registered accelerator `accelerator`.

    Args:
      name: the test's name.
      accelerator: the name (or an alias) the accelerator registers under.
      deps: what links it: the backend's cc_library. Empty for a plugin.
      plugin: the label of an accelerator plugin's shared library, loaded at run time before the suite runs.
      library: the label of a vendor's LibTorch PrivateUse1 library (one that registers its device when it is
        loaded), adopted as accelerator `accelerator` (hal/privateuse1_library.h) and loaded when chosen.
      bitwise: require training on the device to equal the CPU's bit for bit (for devices that compute through the
        CPU's kernels); otherwise a relative tolerance of 1e-5 applies.
      one_rank_per_device: the collective backend needs a device per rank (NCCL refuses two ranks on one GPU): the
        collective checks run 2 and 4 processes only where there are that many devices, else one per device.
      size: the size of both tests (their time limit: medium, 300 s). The multi-process checks size their deadlines
        and timeouts as shares of it (hal/testing/rank_runner.h, TestTimeoutSeconds), so a rank that never comes
        fails its check with every rank's output before Bazel stops the test.
      **kwargs: passed to cc_test (tags, env, ...).
    """
    args = ["--accelerator=" + accelerator]
    if bitwise:
        args.append("--bitwise")
    if one_rank_per_device:
        args.append("--one_rank_per_device")
    data = kwargs.pop("data", [])
    if plugin:
        args.append("--accelerator_plugin=$(rootpath %s)" % plugin)
        data = data + [plugin]
    if library:
        args.append("--accelerator_library=%s=$(rootpath %s)" % (accelerator, library))
        data = data + [library]
    if not deps and not plugin and not library:
        fail(("kiln_accelerator_conformance_test(name = '%s'): give deps (a linked backend), plugin (a .so) or " +
              "library (a PrivateUse1 library)") % name)
    native.cc_test(
        name = name,
        size = size,
        args = args,
        data = data,
        # Every backend Kiln's programs link, so that a name the backend shares with one of them fails the suite.
        deps = deps + [Label("//hal:conformance_suite"), Label("//backends:linked")],
        **kwargs
    )

    # The kit's fsdp training: 2 processes of fsdp on the accelerator's collective backend end where ddp ends. It
    # needs the trainer, which the suite (the HAL's) cannot use, hence a test of its own.
    native.cc_test(
        name = name + "_fsdp",
        size = size,
        args = args,
        data = data,
        deps = deps + [Label("//trainer:fsdp_conformance"), Label("//backends:linked")],
        **kwargs
    )
