#include "trainer/loggers/log_dir.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

std::string Parent(const std::string& save_dir, const std::string& name) {
  return name.empty() ? save_dir : absl::StrCat(save_dir, "/", name);
}

}  // namespace

int64_t NextVersion(const std::string& save_dir, const std::string& name) {
  int64_t next = 0;
  std::error_code error;
  for (auto it = fs::directory_iterator(Parent(save_dir, name), error); !error && it != fs::directory_iterator();
       it.increment(error)) {
    if (!it->is_directory(error)) continue;
    const std::string name_text = it->path().filename().native();  // filename() is a temporary.
    absl::string_view folder = name_text;
    int64_t version = 0;
    if (absl::ConsumePrefix(&folder, "version_") && absl::SimpleAtoi(folder, &version) && version >= 0) {
      next = std::max(next, version + 1);
    }
  }
  return next;
}

std::string VersionDir(const LogDirOptions& options) {
  const int64_t version = options.version.has_value() ? *options.version : NextVersion(options.save_dir, options.name);
  return absl::StrCat(Parent(options.save_dir, options.name), "/version_", version);
}

}  // namespace kiln
