"""CI only: a backend repository written by //tools:new_backend when Bazel fetches it.

`bazel test //...` cannot run a second Bazel inside its sandbox (it would need its own output base, server and
network-free set-up, nested in the outer sandbox), so the scaffold is proven the other way round: this repository
rule runs the generator script itself, unchanged, into the repository's folder, and Kiln's WORKSPACE brings the
result in like any other backend repository. What CI then builds and tests (`@<name>//:<name>_conformance_test`,
through tests/conformance:third_party_conformance) is exactly what `bazel run //tools:new_backend` writes: its
BUILD file with the conformance macro, its WORKSPACE, its sources. The repository is written again whenever the
generator changes, because the script is read through its label.
"""

def _generated_backend_repository_impl(ctx):
    script = ctx.path(Label("//tools:new_backend.sh"))
    bash = ctx.which("bash")
    if bash == None:
        fail("generated_backend_repository needs bash on the PATH to run %s" % script)
    args = [bash, str(script), "--name=" + ctx.attr.backend, "--out=" + str(ctx.path("."))]
    if ctx.attr.device:
        args.append("--device")
    result = ctx.execute(args)
    if result.return_code != 0:
        fail("//tools:new_backend --name=%s failed (exit %d):\n%s%s" %
             (ctx.attr.backend, result.return_code, result.stdout, result.stderr))

generated_backend_repository = repository_rule(
    implementation = _generated_backend_repository_impl,
    attrs = {
        "backend": attr.string(mandatory = True, doc = "The --name passed to the generator."),
        "device": attr.bool(default = False, doc = "Whether to pass --device (an out-of-tree LibTorch device)."),
    },
)
