#include "trainer/io/user_path.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kiln {

std::string UserPath(const std::string& path) {
  const char* base = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || base == nullptr || *base == '\0') return path;
  return absl::StrCat(base, "/", path);
}

std::string UserPathKeepingBareNames(const std::string& path) {
  return absl::StrContains(path, '/') ? UserPath(path) : path;
}

}  // namespace kiln
