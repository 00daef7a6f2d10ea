"""A repository rule for a library that a Debian package installed under /usr.

The BUILD file of each such library is kept in //third_party as `<name>.BUILD`, so what Kiln takes from the system is
reviewed in one place.
"""

def system_library(name, path = "/usr"):
    native.new_local_repository(
        name = name,
        path = path,
        build_file = "//third_party:%s.BUILD" % name,
    )
