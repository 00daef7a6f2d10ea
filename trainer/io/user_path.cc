#include "trainer/io/user_path.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kiln {

std::string UserPath(const std::string& path) {
  const char* base = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || base == nullptr || *base == '\0') return path;
  // "." and a leading "./" name the folder itself: "/home/me/work", not "/home/me/work/.", in what runs print.
  absl::string_view rest = path;
  while (absl::ConsumePrefix(&rest, "./")) {
  }
  if (rest.empty() || rest == ".") return base;
  return absl::StrCat(base, "/", rest);
}

std::string UserPathKeepingBareNames(const std::string& path) {
  return absl::StrContains(path, '/') ? UserPath(path) : path;
}

}  // namespace kiln
