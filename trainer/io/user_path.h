// The path a user typed, as they meant it.
#ifndef KILN_TRAINER_IO_USER_PATH_H_
#define KILN_TRAINER_IO_USER_PATH_H_

#include <string>

namespace kiln {

// `path` relative to the folder `bazel run` was started in (BUILD_WORKING_DIRECTORY), when there is one, since
// `bazel run` starts programs in their runfiles; absolute and empty paths, and every path outside `bazel run`, stay
// as they are. (A plain function, not one with a default argument: callers pass it where a path is resolved.)
std::string UserPath(const std::string& path);

// UserPath, except that a name without a slash stays bare too (the plugin loader refuses bare names rather than
// look for them).
std::string UserPathKeepingBareNames(const std::string& path);

}  // namespace kiln

#endif  // KILN_TRAINER_IO_USER_PATH_H_
