"""A repository rule for a library that a Debian package installed under /usr.

The BUILD file of each such library is kept in //third_party as `<name>.BUILD`, so what Kiln takes from the system is
reviewed in one place.
"""

def system_library(name, path = "/usr"):
    native.new_local_repository(
        name = name,
        path = path,
        # A label of Kiln's repository, also when Kiln is an external repository (tools/workspace.bzl).
        build_file = str(Label("//third_party:%s.BUILD" % name)),
    )
